"""Run configuration: the specification's `key:value;` file, the environment, CLI flags.

The file format (Rolli, "Evaluation of different content extraction algorithms",
HSLU 2014, appendix B, feature f1) is a list of `key:value;` entries::

    # lines starting with '#' are comments
    html_folder:data/html;
    content_folder:data/content;
    output_folder:results;
    services:justext,boilerpipe,bte;
    service.justext.url:http://127.0.0.1:8001;
    service.justext.options:{"language": "German"};
    concurrency:4; timeout_s:30;

Rules, chosen so that mistakes are reported rather than guessed around:

- An entry is `key:value`; the key ends at the first `:` (values may hold `:`, as
  URLs and Windows paths do). Several entries may share a line.
- An entry ends at `;`. A missing `;` at the end of a line is tolerated: the line
  end closes the entry. A `;` inside a JSON value (quoted or in braces) does not.
- Unknown keys, repeated keys, entries without `:` and empty values are errors
  naming the key and the line; a misspelt key gets a suggestion.
- Relative paths in the file are relative to the file's own folder.

Keys (file key; environment variable `BOILERBENCH_<KEY>`; CLI flag), default in brackets:

- html_folder, content_folder: folders of `<id>.html` pages and `<id>.txt` gold texts,
  paired by file name: one test set (f2). feeds_folder: optional `<id>.xml` RSS/Atom
  feeds for the rss service. dataset_name: the test set's name in the results
  [the html folder's parent folder name].
- dataset: comma list of dataset folders in the `html/`, `content/` (`feeds/`) layout,
  JSON test sets (`[{"id", "html", "gold", "feed"}]` or `{"name", "pages": [...]}`)
  and zip/tar archives of such folders; may be combined with html_folder. A relative
  path of the flag or of BOILERBENCH_DATASET that does not exist from the working
  folder but as a folder under the development datasets' folder (shared/datasets.py:
  BOILERBENCH_DATASETS, else ../shared/datasets beside the repository) is that folder:
  `--dataset scrapinghub` works from any folder, as the API resolves names (the file's
  paths are taken from its own folder).
- output_folder: one sub-folder per run with results.json, pages.csv, summary.md,
  report.html [results].
- store: SQLite file of runs and page results, one per user [the platform's data
  folder: `$XDG_DATA_HOME/boilerbench/runs.sqlite` (`~/.local/share/...`) on Linux,
  `~/Library/Application Support/boilerbench/runs.sqlite` on macOS,
  `%LOCALAPPDATA%\\boilerbench\\runs.sqlite` on Windows].
- services: comma list of service names, or `all` for every registered service
  [justext,boilerpipe,bte,cetd,density]. `<name>@<label>` is a row of its own that
  calls the service with its own options, so two settings of one service are scored
  side by side (`trafilatura,trafilatura@no-comments`).
- service.<name>.url: base URL of that service (it is then called over HTTP).
- service.<name>.options: JSON object of that service's options [{}]; `<name>` may be
  `<service>@<label>` (those options are that row's alone). Options of a row the run
  does not call are not used, with a warning naming it (one file serves runs that
  narrow `--services`).
- mode: `local` (start the services as local processes; services given a URL are
  called there), `http` (call URLs; default http://127.0.0.1:<registry port>), or
  `embedded` or `in-process` (extractors in a pool of worker processes, no HTTP) [local].
- port_base: in `http` mode, the services without a URL are on the ports of a stack
  started by `boilerbench up --port-base N`: N + (registry port - first registry
  port) [none: the registry ports].
- concurrency: requests in flight per service [4]. workers: processes of the
  embedded pool [2]. scoring_processes: processes that score the results [the
  cores, up to 8]. timeout_s: time limit of one request [60]. retries: further
  attempts after connection errors and 5xx replies [3]. backoff_s: first pause
  before a retry, doubled each time [0.5]. service_token: bearer token sent to the
  services [none].

In the environment, `services`/`dataset` are comma lists and the per-service maps
are JSON: `BOILERBENCH_URLS='{"justext": "http://host:8001"}'`,
`BOILERBENCH_OPTIONS='{"justext": {"language": "German"}}'`.

Precedence, highest first: CLI flags, environment (`BOILERBENCH_*`), the
configuration file, the defaults above. Per-service maps are merged key by key in
the same order (a URL given on the command line for one service keeps the file's
URLs of the others).

The test sets are not merged: they all come from the highest source that names any
(html_folder, content_folder or dataset). A `--dataset` flag replaces the test sets
of the environment and the file (their html_folder, content_folder, feeds_folder,
dataset_name and dataset alike), and BOILERBENCH_DATASET (or BOILERBENCH_HTML_FOLDER
and BOILERBENCH_CONTENT_FOLDER) replaces the file's; so `--config my.txt --dataset
other` scores `other` alone. Within one source, html_folder and dataset combine.

A value that fails validation is reported with where it came from: the flag, the
environment variable, or the file's key and line.
"""

from __future__ import annotations

import difflib
import json
import os
import sys
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import AfterValidator, BeforeValidator, Field, ValidationError, field_validator
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from orchestrator.launcher import service_port
from shared.datasets import dataset_places, named_dataset
from shared.registry import SERVICES, SETTING_MARK, check_row, service_of

if TYPE_CHECKING:
    from orchestrator.runner import Backend, RunSpec

Mode = Literal["embedded", "http", "local"]

DEFAULT_SERVICES = ["justext", "boilerpipe", "bte", "cetd", "density"]
ENV_PREFIX = "BOILERBENCH_"

# Keys whose values are paths (resolved against the configuration file's folder).
_PATH_KEYS = {"html_folder", "content_folder", "feeds_folder", "output_folder", "store"}
_LIST_KEYS = {"services", "dataset"}
# Environment variables that mean something else elsewhere in the project
# (shared/datasets.py reads BOILERBENCH_DATASETS; the services read HOST, PORT, TOKEN).
_SIMPLE_KEYS = (
    "html_folder", "content_folder", "feeds_folder", "dataset_name", "dataset", "output_folder",
    "store", "services", "mode", "concurrency", "workers", "scoring_processes", "timeout_s",
    "retries", "backoff_s", "service_token", "port_base",
)
# The keys of the test sets, which come from one source (module docstring), and those
# of them that name a test set (feeds_folder and dataset_name only qualify html_folder's).
_TEST_SET_KEYS = ("html_folder", "content_folder", "feeds_folder", "dataset_name", "dataset")
_TEST_SET_NAMES = ("html_folder", "content_folder", "dataset")
# The CLI flag of each key whose flag is not `--<key>` (underscores as dashes).
_FLAGS = {"output_folder": "--output", "timeout_s": "--timeout", "urls": "--url",
          "options": "--option", "mode": "--local/--http/--in-process"}


class ConfigError(ValueError):
    """A configuration problem, with a message naming the key (and line) at fault."""


_FILE_VALUES: ContextVar[dict[str, Any]] = ContextVar("boilerbench_config_file")


class _ConfigFileSource(PydanticBaseSettingsSource):
    """The values of the `key:value;` file being loaded (see load_config)."""

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return _FILE_VALUES.get({}).get(field_name), field_name, False

    def __call__(self) -> dict[str, Any]:
        return dict(_FILE_VALUES.get({}))


def _check_url_owner(name: str) -> None:
    """A URL belongs to a service: every setting of it (`service@label`) calls that one
    URL, so a setting's URL is refused, naming the service to give it for."""
    check_row(name)
    if SETTING_MARK in name:
        raise ValueError(f"{name!r}: a URL belongs to the service, not to a setting; "
                         f"give it for {service_of(name)!r}")


def _url_owner(name: str) -> str:
    _check_url_owner(name)
    return name


def _row(name: str) -> str:
    check_row(name)
    return name


def _http_url(url: str) -> str:
    """A service's base URL, without the trailing slash that would make //extract."""
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"{url!r} is not an http(s) URL")
    return url.rstrip("/")


# Per-service map keys and values, each checked alone, so that an error's location
# names the service and so the line or flag that gave it (describe_errors).
UrlOwner = Annotated[str, AfterValidator(_url_owner)]
Row = Annotated[str, AfterValidator(_row)]
HttpUrl = Annotated[str, AfterValidator(_http_url)]


def _comma_list(value: Any) -> Any:
    return [item.strip() for item in value.split(",") if item.strip()] if isinstance(
        value, str) else value


class RunConfig(BaseSettings):
    """Validated settings of one evaluation run (see the module docstring).

    Constructor arguments are the CLI layer; the environment and the file being
    loaded by load_config come under them.
    """

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="forbid")

    html_folder: Path | None = None
    content_folder: Path | None = None
    feeds_folder: Path | None = None
    dataset_name: str | None = None
    dataset: Annotated[list[Path], NoDecode, BeforeValidator(_comma_list)] = Field(
        default_factory=list)
    output_folder: Path = Path("results")
    store: Path | None = None
    services: Annotated[list[str], NoDecode, BeforeValidator(_comma_list)] = Field(
        default_factory=lambda: list(DEFAULT_SERVICES), min_length=1)
    urls: dict[UrlOwner, HttpUrl] = Field(default_factory=dict)
    options: dict[Row, dict[str, Any]] = Field(default_factory=dict)
    mode: Mode = "local"
    port_base: int | None = Field(None, ge=1, le=65535)
    concurrency: int = Field(4, ge=1, le=256)
    workers: int = Field(2, ge=1, le=64)
    scoring_processes: int | None = Field(None, ge=1, le=64)
    timeout_s: float = Field(60.0, gt=0)
    retries: int = Field(3, ge=0, le=20)
    backoff_s: float = Field(0.5, ge=0)
    service_token: str | None = None

    @classmethod
    def settings_customise_sources(
        cls, settings_cls: type[BaseSettings], init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource, dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # Highest first: CLI flags (constructor), environment, configuration file.
        return init_settings, env_settings, _ConfigFileSource(settings_cls)

    @field_validator("services")
    @classmethod
    def _known_services(cls, names: list[str]) -> list[str]:
        if names == ["all"]:  # every service of the registry
            return list(SERVICES)
        for name in names:
            check_row(name)
        if len(set(names)) != len(names):
            raise ValueError("a service is named twice")
        return names

    @field_validator(*sorted(_PATH_KEYS), "dataset")
    @classmethod
    def _home(cls, value: Path | list[Path] | None) -> Path | list[Path] | None:
        """`~` is the home folder wherever a path is given, as in the configuration file:
        from the environment (BOILERBENCH_STORE=~/runs.sqlite in a unit or an env file,
        where no shell expands it) it would otherwise name a folder `~` in the working
        directory."""
        if isinstance(value, list):
            return [path.expanduser() for path in value]
        return value.expanduser() if value is not None else None

    @field_validator("mode", mode="before")
    @classmethod
    def _mode_alias(cls, mode: Any) -> Any:
        """`in-process` as the CLI's --in-process says it (the same as `embedded`)."""
        return "embedded" if isinstance(mode, str) and mode.strip() == "in-process" else mode

    @property
    def service_urls(self) -> dict[str, str]:
        """The URLs given and, in `http` mode with a port_base, every registry service's
        on the port of that stack."""
        if self.mode != "http" or self.port_base is None:
            return dict(self.urls)
        return {name: f"http://127.0.0.1:{service_port(name, self.port_base)}"
                for name in SERVICES} | self.urls

    def called_urls(self, spec: RunSpec, local: bool) -> dict[str, str]:
        """The services `spec` calls over HTTP at an address the run does not start
        them on, by name: every service it calls, or with `local` (the run starts the
        others) those given a URL. Worth a look at their /info before a run: another
        service there would be scored as the one named, and none would fail every page."""
        if spec.backend != "http":
            return {}
        return {name: spec.url(name) for name in spec.called_services
                if not local or name in self.urls}

    @property
    def store_path(self) -> Path:
        return self.store if self.store is not None else default_store_path()

    def dataset_folders(self) -> list[tuple[str, Path, Path, Path | None]]:
        """(name, html folder, content folder, feeds folder or None) of every test set."""
        sets: list[tuple[str, Path, Path, Path | None]] = []
        if (self.html_folder is None) != (self.content_folder is None):
            raise ConfigError("html_folder and content_folder must be given together")
        if self.html_folder is not None and self.content_folder is not None:
            name = self.dataset_name or self.html_folder.resolve().parent.name or "dataset"
            sets.append((name, self.html_folder, self.content_folder, self.feeds_folder))
        for folder in self.dataset_paths():
            if folder.is_file():
                continue  # a JSON test set or an archive: dataset_files
            feeds = folder / "feeds"
            sets.append((folder.resolve().name, folder / "html", folder / "content",
                         feeds if feeds.is_dir() else None))
        return sets

    def dataset_files(self) -> list[Path]:
        """The test sets named as files: JSON test sets and zip/tar archives of folders
        (testsets.open_dataset_file reads them)."""
        return [path for path in self.dataset_paths() if path.is_file()]

    def dataset_paths(self) -> list[Path]:
        """Each entry of `dataset` where it is: as given, else the development dataset
        of that name (module docstring); ConfigError naming every place looked in where
        there is none."""
        found = []
        for path in self.dataset:
            named = named_dataset(path)
            if named is None:
                given, *under_root = dataset_places(path)
                elsewhere = (f" and {under_root[0]} (under the datasets folder, "
                             "BOILERBENCH_DATASETS)" if under_root else "")
                raise ConfigError(f"dataset {str(path)!r}: no such file or folder; looked "
                                  f"for {given}{elsewhere}")
            found.append(named)
        return found

    def run_spec(self, *, services: list[str] | None = None,
                 options: Mapping[str, dict[str, Any]] | None = None,
                 backend: Backend | None = None, predictions: dict[str, str] | None = None,
                 rank_by: str = "f1", local: bool = False) -> RunSpec:
        """The run these settings describe, before its test sets are added (the CLI and
        the API both start runs from it). `services` replaces the configured ones,
        `options` are merged over the configured ones per service, `backend` overrides
        the mode's; `local`: the URLs are of a stack started for this run."""
        # Imported here: the runner pulls in the HTTP client, which reading a
        # configuration does not need.
        from orchestrator.runner import RunSpec

        return RunSpec(
            datasets=[], services=self.services if services is None else services,
            predictions=predictions or {}, rank_by=rank_by,
            options={**self.options, **(options or {})},
            backend=backend or ("embedded" if self.mode == "embedded" else "http"),
            urls=self.service_urls, local=local, concurrency=self.concurrency,
            workers=self.workers,
            **({} if self.scoring_processes is None
               else {"scoring_processes": self.scoring_processes}),
            timeout_s=self.timeout_s, retries=self.retries, backoff_s=self.backoff_s,
            service_token=self.service_token, output_folder=str(self.output_folder.resolve()),
        )


def default_store_path() -> Path:
    """The user's store of runs in the platform's data folder (module docstring), so
    runs are found from any working directory and none leaves files there."""
    if sys.platform == "win32":
        base = Path(os.environ.get("LOCALAPPDATA") or Path.home() / "AppData" / "Local")
    elif sys.platform == "darwin":
        base = Path.home() / "Library" / "Application Support"
    else:
        base = Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")
    return base / "boilerbench" / "runs.sqlite"


LEGACY_STORE = "boilerbench.sqlite"
"""The store's file name inside an output folder, where earlier versions kept it."""


def _key_names() -> list[str]:
    return [*_SIMPLE_KEYS, "service.<name>.url", "service.<name>.options"]


def _split_entries(text: str) -> list[tuple[int, str]]:
    """The raw `key:value` entries of a file with their line numbers.

    Splits at `;` and at line ends, except inside a JSON value (braces, brackets or a
    double-quoted string), so `{"a": "x;y"}` stays whole and may span lines.
    """
    entries: list[tuple[int, str]] = []
    current: list[str] = []
    start_line = line = 1
    depth = 0
    in_string = escaped = False
    at_line_start = True
    i = 0
    while i < len(text):
        char = text[i]
        if at_line_start and depth == 0 and not "".join(current).strip() and char == "#":
            end = text.find("\n", i)
            i = len(text) if end < 0 else end
            continue
        at_line_start = False
        if in_string:
            current.append(char)
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
            elif char == "\n":
                line += 1
        elif char == '"' and ":" in "".join(current):
            in_string = True
            current.append(char)
        elif char in "{[" and ":" in "".join(current):
            depth += 1
            current.append(char)
        elif char in "}]" and depth > 0:
            depth -= 1
            current.append(char)
        elif depth == 0 and char in ";\n":
            if "".join(current).strip():
                entries.append((start_line, "".join(current).strip()))
            current = []
            if char == "\n":
                line += 1
                at_line_start = True
            start_line = line
        else:
            if char == "\n":
                line += 1
            if not "".join(current).strip():
                start_line = line
            current.append(char)
        i += 1
    if "".join(current).strip():
        if in_string or depth:
            raise ConfigError(f"line {start_line}: unterminated JSON value in "
                              f"{''.join(current).strip()[:60]!r}")
        entries.append((start_line, "".join(current).strip()))
    return entries


def _suggest(key: str) -> str:
    candidates = [*_SIMPLE_KEYS, "service.justext.url", "service.justext.options"]
    close = difflib.get_close_matches(key, candidates, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def parse_config_text(text: str, base: Path | None = None,
                      source: str = "config") -> dict[str, Any]:
    """Parse `key:value;` text into RunConfig field values (not yet validated).

    Raises ConfigError naming the source, line and key of the first problem.
    """
    return _parse_config(text, base, source)[0]


def _parse_config(text: str, base: Path | None, source: str
                  ) -> tuple[dict[str, Any], dict[str, str]]:
    """parse_config_text's values, and where each key was given ("source, line N"), by
    the key as the file names it, so that a value refused later is named by its line."""
    values: dict[str, Any] = {}
    seen: dict[str, int] = {}
    for line, entry in _split_entries(text):
        where = f"{source}, line {line}"
        if ":" not in entry:
            raise ConfigError(f"{where}: {entry[:60]!r} is not a key:value entry")
        key, value = (part.strip() for part in entry.split(":", 1))
        if not key:
            raise ConfigError(f"{where}: an entry has no key")
        if key in seen:
            raise ConfigError(f"{where}: key {key!r} is given twice (first on line {seen[key]})")
        seen[key] = line
        if not value:
            raise ConfigError(f"{where}: key {key!r} has no value")
        if key.startswith("service."):
            parts = key.split(".")
            if len(parts) != 3 or parts[2] not in ("url", "options"):
                raise ConfigError(f"{where}: unknown key {key!r}; per-service keys are "
                                  "service.<name>.url and service.<name>.options")
            name = parts[1]
            try:
                (_check_url_owner if parts[2] == "url" else check_row)(name)
            except ValueError as exc:
                raise ConfigError(f"{where}: key {key!r}: {exc}") from None
            if parts[2] == "url":
                values.setdefault("urls", {})[name] = value
            else:
                try:
                    options = json.loads(value)
                except json.JSONDecodeError as exc:
                    raise ConfigError(
                        f"{where}: key {key!r}: the value is not JSON: {exc}") from None
                if not isinstance(options, dict):
                    raise ConfigError(f"{where}: key {key!r}: the value must be a JSON object")
                values.setdefault("options", {})[name] = options
            continue
        if key not in _SIMPLE_KEYS:
            raise ConfigError(f"{where}: unknown key {key!r}{_suggest(key)}; "
                              f"known keys: {', '.join(_key_names())}")
        if key in _LIST_KEYS:
            items = [item.strip() for item in value.split(",") if item.strip()]
            values[key] = [_resolve(Path(p), base) for p in items] if key == "dataset" else items
        elif key in _PATH_KEYS:
            values[key] = _resolve(Path(value), base)
        else:
            values[key] = value
    return values, {key: f"{source}, line {line}" for key, line in seen.items()}


def _resolve(path: Path, base: Path | None) -> Path:
    path = path.expanduser()
    return path if base is None or path.is_absolute() else base / path


def read_config_file(path: Path) -> dict[str, Any]:
    """Parse a configuration file; relative paths are taken from the file's folder."""
    return _read_config_file(path)[0]


def _read_config_file(path: Path) -> tuple[dict[str, Any], dict[str, str]]:
    """read_config_file's values and the line of each key (_parse_config)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read the configuration file {path}: {exc}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"the configuration file {path} is not UTF-8 text (byte "
                          f"{exc.start})") from None
    return _parse_config(text, path.resolve().parent, str(path))


def _field_to_key(loc: tuple[int | str, ...]) -> str:
    """The user-facing key of a validation error location."""
    if len(loc) >= 2 and loc[0] in ("urls", "options"):
        return f"service.{loc[1]}.{'url' if loc[0] == 'urls' else 'options'}"
    return str(loc[0]) if loc else "(config)"


def describe_errors(exc: ValidationError,
                    origin: Callable[[tuple[int | str, ...]], str] | None = None) -> str:
    """pydantic errors as one line naming each configuration key, or where its value
    came from as `origin` tells (a flag, a variable, a file's line)."""
    problems = []
    for err in exc.errors():
        loc = tuple(err["loc"])
        key = _field_to_key(loc)
        if err["type"] == "extra_forbidden":
            problems.append(f"unknown key {key!r}")
            continue
        # A validator's own ValueError reads as its message, without pydantic's prefix.
        message = str(err["ctx"]["error"]) if err["type"] == "value_error" else err["msg"]
        given = err.get("input")
        shown = (f" (got {given!r})" if isinstance(given, str | int | float)
                 and repr(given) not in message else "")
        where = origin(loc) if origin is not None else f"key {key!r}"
        problems.append(f"{where}: {message}{shown}")
    return "; ".join(problems)


def _environment(field: str) -> str | None:
    """The value of BOILERBENCH_<FIELD>, its name matched regardless of case as
    pydantic-settings matches it."""
    name = f"{ENV_PREFIX}{field}".upper()
    return next((value for variable, value in os.environ.items()
                 if variable.upper() == name), None)


def _gives(value: Any, name: str | None) -> bool:
    """Whether a source's value is given, and for a per-service map (a dict, or the
    environment's JSON of one) whether it names `name`."""
    if value is None:
        return False
    if name is None:
        return True
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            return True  # the variable is what is wrong
    return isinstance(value, dict) and name in value


def _origin_of(cli: Mapping[str, Any], places: Mapping[str, str]
               ) -> Callable[[tuple[int | str, ...]], str]:
    """Where the value at a validation error's location came from, highest source
    first: the flag, the environment variable, the configuration file's key and line."""
    def origin(loc: tuple[int | str, ...]) -> str:
        field = str(loc[0]) if loc else ""
        name = str(loc[1]) if len(loc) >= 2 and field in ("urls", "options") else None
        key = _field_to_key(loc)
        service = "" if name is None else f" for {name}"
        if _gives(cli.get(field), name):
            return _FLAGS.get(field, f"--{field.replace('_', '-')}") + service
        if _gives(_environment(field), name):
            return f"{ENV_PREFIX}{field.upper()}{service}"
        return f"{places[key]}: key {key!r}" if key in places else f"key {key!r}"

    return origin


def _names_test_set(values: Mapping[str, Any]) -> bool:
    return any(values.get(key) for key in _TEST_SET_NAMES)


def load_config(config_file: Path | None = None, cli: Mapping[str, Any] | None = None,
                file_values: Mapping[str, Any] | None = None) -> RunConfig:
    """The run configuration: defaults < file < environment (BOILERBENCH_*) < CLI flags,
    the test sets from the highest of them that names any (module docstring).

    `cli` holds only the flags actually given (None values are dropped);
    `file_values` stands for a parsed file (the API's per-run settings).
    """
    values = dict(file_values or {})
    places: dict[str, str] = {}
    if config_file is not None:
        parsed, places = _read_config_file(config_file)
        values.update(parsed)
    flags = {key: value for key, value in (cli or {}).items() if value is not None}
    in_environment = any((_environment(key) or "").strip() for key in _TEST_SET_NAMES)
    if _names_test_set(flags) or in_environment:
        for key in _TEST_SET_KEYS:
            values.pop(key, None)
    init = dict(flags)
    if _names_test_set(flags):  # the environment's test sets go too
        init = {**{key: [] if key == "dataset" else None for key in _TEST_SET_KEYS}, **flags}
    token = _FILE_VALUES.set(values)
    try:
        return RunConfig(**init)
    except ValidationError as exc:
        raise ConfigError(describe_errors(exc, _origin_of(flags, places))) from None
    finally:
        _FILE_VALUES.reset(token)
