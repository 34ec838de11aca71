"""`boilerbench run`, `serve`, `runs list/show` and `datasets download`: the evaluation commands.

`boilerbench run` evaluates services on test sets with a progress bar and prints
the results table. Where the services come from (see orchestrator/config.py):

- `--local` (the default): starts the named services as local processes on free
  ports for this run and stops them at the end; services given `--url` are
  called there instead;
- `--http`: calls running services (`--url name=URL`, the configuration's
  `service.<name>.url`, else http://127.0.0.1:<registry port>, or the port `boilerbench
  up --port-base N` gave it with `--port-base N`);
- `--in-process` (`--embedded`): no HTTP; the extractors run in a pool of worker
  processes (`--workers`, default 2).

A service the run calls over HTTP without starting it (at a URL given, or on an
assumed port) is used only once its /info names it: before the run is recorded,
one line says what answers there instead (or that nothing does), and the command
exits 1, as `extract` refuses another service's reply.

Without any dataset named, it runs on the sample set shipped in orchestrator/sample;
`--dataset NAME` that is no path from here is the development dataset of that name
(shared/datasets.py).

`--predictions DIR` adds each `<name>.json` of DIR (extracted texts per page, the
article-extraction benchmark's layout, orchestrator/predictions.py) as a row scored
beside the services; `boilerbench score` scores such files alone, without
extracting. Options are checked against each service's options model before
anything starts (exit 2), and a run in which a service failed every page exits 1.
`--resume` of a finished run starts nothing: it prints the run's results as recorded.

The runner, the store and the statistics are imported inside the commands that use
them, so the other commands (and `--help`) load neither aiohttp nor SciPy.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import sys
import threading
from collections.abc import Coroutine, Iterator
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, TypeVar

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from orchestrator.config import (
    LEGACY_STORE,
    ConfigError,
    RunConfig,
    default_store_path,
    load_config,
)
from orchestrator.launcher import (
    MAX_PORT_BASE,
    LocalStack,
    StackError,
    check_services,
    free_port,
    up_command,
)
from orchestrator.models import RANK_KEYS
from orchestrator.service_options import (
    OptionsError,
    check_called,
    check_options,
    unused_options,
)
from orchestrator.terminal import escape, print_error
from orchestrator.testsets import (
    SAMPLE_DIR,
    SCRAPINGHUB_URL,
    DatasetError,
    download_scrapinghub,
    open_dataset_file,
)

if TYPE_CHECKING:
    from orchestrator.models import PageResult, RunInfo
    from orchestrator.runner import RunSpec
    from orchestrator.store import Store

console = Console(stderr=True)

out = Console()
if not out.is_terminal:  # logs and pipes: keep the results table readable
    out = Console(width=200)

T = TypeVar("T")

app = typer.Typer()
datasets_app = typer.Typer(help="Fetch public test sets.", no_args_is_help=True)
runs_app = typer.Typer(help="Runs recorded in the store.", no_args_is_help=True)


def _default(field: str) -> Any:
    """A run setting's default, for the help (the configuration file and BOILERBENCH_*
    variables may set another)."""
    return RunConfig.model_fields[field].get_default(call_default_factory=True)


def _store_help() -> str:
    """--store's help, naming the default store: its folder apart and the home folder as
    `~`, so that the help's narrow column wraps it rather than cutting it off."""
    try:
        default = default_store_path()
        folder = default.parent
        if folder.is_relative_to(Path.home()):
            folder = Path("~") / folder.relative_to(Path.home())
    except RuntimeError:  # no home folder to be found (Path.home)
        return "SQLite store of runs (BOILERBENCH_STORE; default: in the user's data folder)."
    return f"SQLite store of runs (BOILERBENCH_STORE; default {default.name} in {folder})."


StoreOption = Annotated[Path | None, typer.Option(help=_store_help())]
StoreConfigOption = Annotated[Path | None, typer.Option(
    "--config", exists=True, dir_okay=False,
    help="A key:value; configuration file: its `store` names the store.")]


def _pairs(values: list[str] | None, flag: str) -> dict[str, str]:
    pairs: dict[str, str] = {}
    for value in values or []:
        name, sep, rest = value.partition("=")
        if not sep or not name.strip() or not rest.strip():
            raise typer.BadParameter(f"{flag} takes name=value, got {value!r}")
        pairs[name.strip()] = rest.strip()
    return pairs


def _config(config_file: Path | None, cli: dict[str, Any]) -> RunConfig:
    try:
        config = load_config(config_file, cli)
    except ConfigError as exc:
        _error(f"configuration error: {exc}")
        raise typer.Exit(2) from None
    return config


@app.command()
def run(
    config_file: Annotated[Path | None, typer.Option(
        "--config", exists=True, dir_okay=False, help="A key:value; configuration file.")] = None,
    dataset: Annotated[list[Path] | None, typer.Option(
        help="A dataset folder (html/, content/, feeds/), a JSON test set, a zip/tar of "
             "such folders, or the name of a folder under BOILERBENCH_DATASETS; "
             "repeatable; replaces the configuration's test sets. Default: the sample.")
    ] = None,
    services: Annotated[str | None, typer.Option(
        help="Comma-separated service names, or all; name@label is another row of that "
             "service, with its own --option (default "
             f"{', '.join(_default('services'))}).")] = None,
    output: Annotated[Path | None, typer.Option(
        "--output", "--out",
        help=f"Output folder, a sub-folder per run (default {_default('output_folder')}).")
    ] = None,
    url: Annotated[list[str] | None, typer.Option(
        help="name=URL of a running service; repeatable.")] = None,
    url_map: Annotated[str | None, typer.Option(
        help='Service URLs as JSON, e.g. {"justext": "http://host:8001"}.')] = None,
    option: Annotated[list[str] | None, typer.Option(
        help='name=JSON options of a service, e.g. justext=\'{"language": "German"}\'.')] = None,
    local: Annotated[bool, typer.Option(
        "--local", help="Start the services as local processes (default).")] = False,
    http: Annotated[bool, typer.Option("--http", help="Call running services.")] = False,
    port_base: Annotated[int | None, typer.Option(
        metavar="N", min=1, max=MAX_PORT_BASE,
        help="With --http: the services without --url run on the ports "
             "`boilerbench up --port-base N` gave them (BOILERBENCH_PORT_BASE).")] = None,
    in_process: Annotated[bool, typer.Option(
        "--in-process", "--embedded", help="Run the extractors without HTTP.")] = False,
    concurrency: Annotated[int | None, typer.Option(
        help=f"Requests in flight per service (default {_default('concurrency')}).")] = None,
    workers: Annotated[int | None, typer.Option(
        help=f"Processes of the in-process pool (default {_default('workers')}).")] = None,
    scoring_processes: Annotated[int | None, typer.Option(
        help="Processes that score the results (default: the cores, up to 8).")] = None,
    timeout: Annotated[float | None, typer.Option(
        help=f"Seconds per request (default {_default('timeout_s'):g}).")] = None,
    retries: Annotated[int | None, typer.Option(
        help=f"Retries on connection errors/5xx (default {_default('retries')}).")] = None,
    store: StoreOption = None,
    resume: Annotated[str | None, typer.Option(
        help="Resume this unfinished run id (a finished one: print its results).")] = None,
    predictions: Annotated[Path | None, typer.Option(
        help="A prediction file (<name>.json: {page id: {\"articleBody\": text}}) or a folder"
             " of them, each scored as a row beside the services.")] = None,
    rank_by: Annotated[str, typer.Option(
        help=f"The figure the tables rank by: {', '.join(RANK_KEYS)}.")] = "f1",
) -> None:
    """Evaluate services on test sets; print the results table and write the reports."""
    _check_rank_by(rank_by)
    if sum((local, http, in_process)) > 1:
        raise typer.BadParameter("choose one of --local, --http, --in-process")
    urls = _pairs(url, "--url")
    if url_map:
        try:
            mapped = json.loads(url_map)
        except json.JSONDecodeError as exc:
            raise typer.BadParameter(f"--url-map is not JSON: {exc}") from None
        if not isinstance(mapped, dict) or not all(isinstance(v, str) for v in mapped.values()):
            raise typer.BadParameter('--url-map takes a JSON object of URLs, '
                                     '{"name": "http://host:port"}')
        urls = {**mapped, **urls}
    options: dict[str, Any] = {}
    for name, raw in _pairs(option, "--option").items():
        try:
            options[name] = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise typer.BadParameter(f"--option {name}: not JSON: {exc}") from None
    mode = "local" if local else "http" if http else "embedded" if in_process else None
    cli: dict[str, Any] = {
        "dataset": dataset or None, "services": services, "output_folder": output,
        "urls": urls or None, "options": options or None, "mode": mode,
        "concurrency": concurrency, "workers": workers,
        "scoring_processes": scoring_processes, "timeout_s": timeout,
        "retries": retries, "store": store, "port_base": port_base,
    }
    config = _config(config_file, cli)
    try:
        check_called(options, config.services, "--option")
    except OptionsError as exc:
        raise typer.BadParameter(str(exc)) from None
    if port_base is not None and config.mode != "http":
        raise typer.BadParameter("--port-base goes with --http (calling running services)")
    try:
        check_options(config.options)
    except OptionsError as exc:
        _error(f"invalid options: {exc}")
        raise typer.Exit(2) from None
    unused = None if resume else unused_options(config.options, config.services)
    if unused:
        console.print(f"[yellow]warning: {escape(unused)}", highlight=False, soft_wrap=True)
    from orchestrator.predictions import PredictionsError, prediction_rows
    from orchestrator.runner import RunSpec

    rows: dict[str, str] = {}
    if predictions is not None and not resume:
        try:
            rows = prediction_rows(predictions, config.services)
        except PredictionsError as exc:
            _error(str(exc))
            raise typer.Exit(2) from None
    if resume:
        given = {"--dataset": dataset, "--services": services, "--out": output,
                 "--option": option, "--predictions": predictions,
                 "--rank-by": rank_by if rank_by != "f1" else None}
        stored = [flag for flag, value in given.items() if value]
        if stored:
            raise typer.BadParameter(f"--resume runs the run as it was recorded: drop "
                                     f"{', '.join(stored)}")
    if resume and not config.store_path.exists():
        _error(f"no run {resume!r}: there is no store at {config.store_path}"
               + _store_hint(resume, config))
        raise typer.Exit(2)
    db = _open_store(config.store_path)
    with _store_failures(db):
        if resume:
            run_id = resume
            info = db.run(run_id)
            if info is None:
                _error(f"no run {run_id!r} in {config.store_path}" + _store_hint(run_id, config))
                raise typer.Exit(2)
            if db.run_owner_alive(info):
                _held_elsewhere(info)
            spec = RunSpec.model_validate(db.spec(run_id))
            finished = info.status == "finished"
            if not finished:
                _check_called_services(spec, config)
                finished = _claim(db, info)
        else:
            spec, run_id = _new_run(db, config, rows, rank_by)
            finished = False
        with _stop_signals(run_id, config.store_path) as stop:
            results = (_finished_results(db, run_id, spec) if finished
                       else _execute(db, run_id, spec, config, stop))
            warnings = db.details(run_id)["warnings"]
            _print_results(results, run_id, Path(spec.output_folder), spec, warnings)


@app.command()
def score(
    predictions: Annotated[Path, typer.Option(
        help="A prediction file (<name>.json: {page id: {\"articleBody\": text}}) or a folder"
             " of them, e.g. a run's outputs/ folder.")],
    dataset: Annotated[list[Path], typer.Option(
        help="The test set the predictions are for (a folder of html/ and content/, a JSON "
             "test set or an archive); repeatable.")],
    output: Annotated[Path | None, typer.Option(
        "--output", "--out",
        help=f"Output folder, a sub-folder per run (default {_default('output_folder')}).")
    ] = None,
    store: StoreOption = None,
    rank_by: Annotated[str, typer.Option(
        help=f"The figure the tables rank by: {', '.join(RANK_KEYS)}.")] = "f1",
    config_file: Annotated[Path | None, typer.Option(
        "--config", exists=True, dir_okay=False, help="A key:value; configuration file.")] = None,
) -> None:
    """Score prediction files against a test set, without extracting.

    The same figures, tables and reports as `run`, one row per file."""
    from orchestrator.predictions import PredictionsError, prediction_rows

    _check_rank_by(rank_by)
    config = _config(config_file, {"dataset": dataset, "output_folder": output, "store": store})
    try:
        rows = prediction_rows(predictions)
    except PredictionsError as exc:
        _error(str(exc))
        raise typer.Exit(2) from None
    db = _open_store(config.store_path)
    with _store_failures(db):
        spec, run_id = _new_run(db, config, rows, rank_by, services=[])
        with _stop_signals(run_id, config.store_path) as stop:
            results = _execute(db, run_id, spec, config, stop)
            warnings = db.details(run_id)["warnings"]
            _print_results(results, run_id, Path(spec.output_folder), spec, warnings)


def _held_elsewhere(info: RunInfo) -> NoReturn:
    """Exit 1: another live process holds the run, which must not run twice."""
    from orchestrator.store import held_state

    _error(f"run {info.id} is {held_state(info)} in another process ({info.owner}), which "
           f"holds it: wait for it, or stop it with `boilerbench runs cancel {info.id}`")
    raise typer.Exit(1)


def _claim(db: Store, info: RunInfo) -> bool:
    """Take the resumed run over to execute it, in the transaction that checks no other
    process holds it (two resuming it at once would both execute it); whether it has
    finished since it was read (nothing to run). Exit 1 where another process holds it
    now, or it was cancelled; exit 2 where it was deleted."""
    try:
        holder = db.claim_run(info.id, "running", info)
    except KeyError:
        _error(f"run {info.id} was deleted")
        raise typer.Exit(2) from None
    if holder is None or holder.status == "finished":
        return holder is not None
    if holder.status == "cancelled":
        console.print(f"[yellow]run {info.id} was cancelled")
        raise typer.Exit(1)
    _held_elsewhere(holder)


def _store_hint(run_id: str, config: RunConfig) -> str:
    """Where else the run is (stores that earlier versions kept in output folders)."""
    from orchestrator.store import Store, StoreError

    for candidate in dict.fromkeys([config.output_folder / LEGACY_STORE,
                                    Path("results") / LEGACY_STORE]):
        if candidate.is_file() and candidate.resolve() != config.store_path.resolve():
            try:
                other = Store(candidate)
            except StoreError:
                continue
            try:
                if other.run(run_id) is not None:
                    return f"; it is in {candidate}: add --store {candidate}"
            except StoreError:
                continue
            finally:
                other.close()
    return "; name its store with --store PATH (or BOILERBENCH_STORE)"


def _error(text: str) -> None:
    """One line in red on standard error, as it is (orchestrator.terminal)."""
    print_error(console, text)


def _check_rank_by(rank_by: str) -> None:
    if rank_by not in RANK_KEYS:
        raise typer.BadParameter(f"--rank-by takes one of {', '.join(RANK_KEYS)}")


def _new_run(db: Store, config: RunConfig, predictions: dict[str, str] | None = None,
             rank_by: str = "f1", services: list[str] | None = None) -> tuple[RunSpec, str]:
    from orchestrator.runner import RunSpec, create_run, folder_source

    try:
        sets = config.dataset_folders()
        memory = [found for path in config.dataset_files() for found in open_dataset_file(path)]
    except ConfigError as exc:
        _error(f"configuration error: {exc}")
        raise typer.Exit(2) from None
    except DatasetError as exc:
        _error(str(exc))
        raise typer.Exit(2) from None
    if not sets and not memory:
        sets = [("sample", SAMPLE_DIR / "html", SAMPLE_DIR / "content", SAMPLE_DIR / "feeds")]
    spec = config.run_spec(services=services, predictions=predictions, rank_by=rank_by,
                           local=config.mode == "local")
    infos = _check_called_services(spec, config)
    if spec.backend == "embedded" or _local(spec, config):
        _check_model_files(spec.called_services)
    try:  # now, not after every page is done
        config.output_folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        _error(f"cannot write the reports to {config.output_folder}: {exc.strerror or exc}")
        raise typer.Exit(2) from None
    try:
        run_id = create_run(db, spec, [folder_source(*s) for s in sets], memory,
                            infos=infos)
    except (DatasetError, ValueError) as exc:  # PredictionsError is a ValueError
        _error(str(exc))
        raise typer.Exit(2) from None
    return RunSpec.model_validate(db.spec(run_id)), run_id


class _StopSignals:
    """Ctrl-C (SIGINT), SIGTERM (`kill`, a container or job stopped) and SIGHUP (its
    terminal closed) end a run alike: the services it started, in sessions of their own
    that no signal to the run reaches, are stopped, and the resume hint is printed.

    While the run's event loop runs (run()), the first of them cancels the run's task,
    so the run ends through its own clean-up (lanes awaited, workers stopped). Raised
    as KeyboardInterrupt wherever the loop was, it would leave tasks pending and print
    their tracebacks; asyncio cancels on its own only for Ctrl-C, and not where SIGINT
    is ignored (a background job of a script). Outside the loop (services starting),
    and at a second signal, a signal raises KeyboardInterrupt."""

    def __init__(self) -> None:
        self.task: asyncio.Task[Any] | None = None
        self.stopping = False

    def __call__(self, _signum: int, _frame: FrameType | None) -> None:
        task = self.task
        if task is None or task.done() or self.stopping:
            raise KeyboardInterrupt
        self.stopping = True
        task.cancel()
        task.get_loop().call_soon_threadsafe(lambda: None)  # wakes a loop waiting for I/O

    def run(self, work: Coroutine[Any, Any, T]) -> T:
        """`work` to its end in an event loop of its own; KeyboardInterrupt where a
        signal ended it."""
        async def main() -> T:
            self.task = asyncio.current_task()
            try:
                return await work
            finally:
                self.task = None

        try:
            return asyncio.run(main())
        except asyncio.CancelledError:
            if self.stopping:
                raise KeyboardInterrupt from None
            raise


@contextlib.contextmanager
def _stop_signals(run_id: str, store_path: Path) -> Iterator[_StopSignals]:
    """_StopSignals handling SIGINT, SIGTERM and SIGHUP meanwhile; a signal ignored
    (SIGHUP under nohup, SIGINT in a background job) stays ignored. The one place a
    stop ends the command: whatever it interrupted (services starting, the run, the
    results table), what was stored stays and the command exits as _interrupted says."""
    stop = _StopSignals()
    previous = {}
    if threading.current_thread() is threading.main_thread():  # signal handlers' thread
        previous = {sig: signal.signal(sig, stop)
                    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
                    if signal.getsignal(sig) != signal.SIG_IGN}
    try:
        yield stop
    except KeyboardInterrupt:
        _interrupted(run_id, store_path)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _interrupted(run_id: str, store_path: Path) -> NoReturn:
    """Exit 130 with the command that resumes the run: how a stop signal ends `run` and
    `score`, whenever it comes (while the results table prints, the run is finished and
    that command prints them again)."""
    console.print(f"[yellow]interrupted; resume with --resume {run_id} --store {store_path}",
                  soft_wrap=True)
    raise typer.Exit(130) from None


def _local(spec: RunSpec, config: RunConfig) -> bool:
    """Whether the run starts its services (those without a URL given) itself."""
    return spec.local or config.mode == "local"


def _check_called_services(spec: RunSpec, config: RunConfig) -> dict[str, dict[str, Any]]:
    """Before a run calls services over HTTP at addresses it does not start them on
    (--url, the configuration's URLs, a registry or --port-base port), make sure each
    is the service named there (its /info), as `extract` does: another service's replies
    would be scored as the one named, and where nothing answers every page would be
    recorded as an error. Each one's /info by name (the run's in-sample flags read it)."""
    try:
        return check_services(config.called_urls(spec, _local(spec, config)), spec.service_token)
    except StackError as exc:
        _error(f"{exc}{_service_hint(exc, config)}")
        raise typer.Exit(1) from None


def _check_model_files(services: list[str]) -> None:
    """Load each model file of one's own (BOILERBENCH_<NAME>_MODEL) of a service this
    run starts, before it does: in process, every page would otherwise fail on a file
    that does not load, and a local service would not start."""
    from pydantic import ValidationError

    from shared.modelfile import configured_model
    from shared.registry import SERVICES
    from shared.settings import invalid_settings

    for name in services:
        if configured_model(name) is not None:
            try:
                SERVICES[name].algorithm().model()
            except ValidationError as exc:
                _error(invalid_settings(exc, "BOILERBENCH_"))
                raise typer.Exit(2) from None


def _service_hint(exc: StackError, config: RunConfig) -> str:
    """What would help after a failed check of a service (for a token the message says)."""
    name = exc.service or ""
    if exc.cause == "token":
        return ""
    if name in config.urls:
        return (f"; check the URL given for {name} (--url {name}=URL, the configuration's "
                f"service.{name}.url or BOILERBENCH_URLS)")
    start = (f"start it with `{up_command(name, config.port_base)}` or "
             if exc.cause == "absent" else "")
    return f"; {start}give its URL with --url {name}=URL"


def _execute(db: Store, run_id: str, spec: RunSpec, config: RunConfig,
             stop: _StopSignals) -> list[PageResult]:
    from orchestrator.predictions import PredictionsError
    from orchestrator.runner import RunCancelledError, execute_run
    from orchestrator.store import StoreError

    stack: LocalStack | None = None
    urls: dict[str, str] | None = None
    if spec.services and spec.backend == "http" and _local(spec, config):
        names = [n for n in spec.called_services if n not in config.urls]
        if names:
            stack = LocalStack(names, ports={n: free_port() for n in names})
            console.print(f"starting local services: {', '.join(names)} ...")
            try:
                urls = stack.start(timeout=180.0)
            except StackError as exc:
                _error(f"could not start the services: {exc}")
                raise typer.Exit(1) from None
    done = len(db.done_keys(run_id))
    errors = 0
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("{task.fields[errors]} errors"), TimeElapsedColumn(),
                  console=console) as progress:
        task = progress.add_task(f"run {run_id}", total=spec.total, completed=done, errors=0)

        def advance(result: PageResult) -> None:
            nonlocal errors
            errors += result.status == "error"
            progress.update(task, advance=1, errors=errors)

        try:
            return stop.run(execute_run(db, run_id, advance, urls=urls))
        except (DatasetError, PredictionsError) as exc:  # its input files gone or unreadable
            _error(str(exc))
            raise typer.Exit(2) from None
        except RunCancelledError as exc:
            console.print(f"[yellow]{exc}")
            raise typer.Exit(1) from None
        except StoreError as exc:  # what was stored stays: the run resumes from there
            _error(f"{exc}; resume with --resume {run_id} --store {config.store_path}")
            raise typer.Exit(1) from None
        finally:
            if stack is not None:
                stack.stop()


# What a finished run's output folder holds, in the order the paths are printed.
_REPORTS = ("results.json", "pages.csv", "summary.md", "report.html", "outputs", "tables",
            "plots")


def _finished_results(db: Store, run_id: str, spec: RunSpec) -> list[PageResult]:
    """The stored results of a run resumed after it finished: there is nothing left to
    extract or score, so no service is started and the reports are kept as they are
    (written again from the stored scores where any of them is gone: the scores give
    the same bytes, so the ones still there do not change)."""
    from orchestrator.runner import run_output_dir, write_run_outputs

    console.print(f"run {run_id} is already finished: nothing to resume; its results as "
                  "recorded", highlight=False, soft_wrap=True)
    results = db.results(run_id)
    output_folder = Path(spec.output_folder)
    out_dir = run_output_dir(output_folder, run_id)
    if not all((out_dir / name).exists() for name in _REPORTS):
        try:
            write_run_outputs(db, run_id, output_folder, results)
        except OSError as exc:
            console.print(f"[yellow]its reports are gone and cannot be written again to "
                          f"{output_folder}: {exc.strerror or exc}", soft_wrap=True)
    return results


def _print_results(results: list[PageResult], run_id: str, output_folder: Path,
                   spec: RunSpec, warnings: list[str] | None = None) -> None:
    """Print the ranked table, the rows' error reasons and the output paths; exit 1
    when a live service failed every page it was given."""
    from orchestrator.report import detail_rows, render_table
    from orchestrator.runner import run_output_dir, run_summary

    summary = run_summary(results, spec)
    out.print(render_table(summary, title=f"Run {run_id}", width=out.width))
    for cells in detail_rows(summary)[1]:
        if cells[-1] != "–":
            console.print(f"[yellow]{escape(f'{cells[0]} on {cells[1]}: {cells[-1]}')}",
                          soft_wrap=True)
    for warning in warnings or []:
        console.print(f"[yellow]warning: {escape(warning)}", soft_wrap=True)
    errors = [r for r in results if r.status == "error"]
    if errors:
        by_service: dict[str, int] = {}
        for r in errors:
            by_service[r.service] = by_service.get(r.service, 0) + 1
        console.print("[yellow]errors (scored as empty output): " + escape(", ".join(
            f"{s}: {n}" for s, n in sorted(by_service.items()))), soft_wrap=True)
        first = errors[0]
        console.print("[yellow]  e.g. " + escape(f"{first.service} on {first.dataset}/"
                                                  f"{first.page_id}: {first.error}"),
                      soft_wrap=True)
    out_dir = run_output_dir(output_folder, run_id)
    for name in _REPORTS:
        if (out_dir / name).exists():  # an unfinished run has none yet
            out.print(escape(f"{name}: {out_dir / name}"), soft_wrap=True)
    failed = [row.service for row in summary.services
              if row.source == "service" and row.pages and row.errors == row.pages]
    if failed:
        console.print(f"[red]{escape(', '.join(sorted(set(failed))))} failed every page")
        raise typer.Exit(1)


@app.command()
def serve(
    host: Annotated[str | None, typer.Option(help="Bind address (BOILERBENCH_API_HOST).")] = None,
    port: Annotated[int | None, typer.Option(help="Port (BOILERBENCH_API_PORT, 8000).")] = None,
    config_file: Annotated[Path | None, typer.Option(
        "--config", exists=True, dir_okay=False, help="Run defaults (key:value; file).")] = None,
    store: StoreOption = None,
) -> None:
    """Run the orchestrator API (POST /runs, GET /runs/{id}, ...)."""
    from pydantic import ValidationError

    from orchestrator.api import ApiSettings, create_app
    from shared.serving import serve as serve_app
    from shared.settings import HttpLimits, invalid_settings

    overrides: dict[str, Any] = {"host": host, "port": port, "config": config_file}
    try:
        settings = ApiSettings(**{k: v for k, v in overrides.items() if v is not None})
        limits = HttpLimits(_env_prefix="BOILERBENCH_API_")
    except ValidationError as exc:
        _error(invalid_settings(exc, "BOILERBENCH_API_"))
        raise typer.Exit(2) from None
    config = _config(settings.config, {"store": store})
    # A store that cannot be used is one line here: from the server's startup it would
    # be a traceback of the server's own.
    db = _open_store(config.store_path)
    with _store_failures(db):
        db.runs()

    def listening(url: str) -> None:
        console.print(f"boilerbench API listening on {url} (Ctrl-C stops it)", highlight=False,
                      soft_wrap=True)

    serve_app(create_app(settings, config), settings.host, settings.port, limits,
              on_listening=listening)


@runs_app.command("list")
def runs_list(
    store: StoreOption = None,
    config_file: StoreConfigOption = None,
) -> None:
    """List the runs of the store with their progress."""
    config, db = _existing_store(config_file, store)
    rows: list[tuple[str, ...]] = []
    with _store_failures(db):
        for info in db.runs():
            counts = db.counts(info.id)
            rows.append((info.id, info.created.strftime("%Y-%m-%d %H:%M"), info.status,
                         ", ".join(info.datasets), ", ".join(info.services),
                         f"{counts['done']}/{counts.get('total', 0)}", str(counts["error"])))
    if out.width < _RUNS_TABLE_WIDTH:
        _print_runs_as_blocks(config.store_path, rows)
        return
    table = Table(title=f"runs in {config.store_path}")
    # The id is what `--resume` and `runs cancel` take: never cut; lists wrap instead.
    table.add_column("id", no_wrap=True, min_width=12)
    table.add_column("created", no_wrap=True)
    table.add_column("status", no_wrap=True)
    table.add_column("datasets", overflow="fold")
    table.add_column("services", overflow="fold")
    table.add_column("done", no_wrap=True, justify="right")
    table.add_column("errors", no_wrap=True, justify="right")
    for row in rows:
        table.add_row(*(escape(cell) for cell in row))
    out.print(table)


# Below this terminal width the table's list columns would wrap a few characters a line.
_RUNS_TABLE_WIDTH = 110


def _print_runs_as_blocks(store_path: Path, rows: list[tuple[str, ...]]) -> None:
    """`runs list` for a narrow terminal: a run a block, its lists on lines of their own."""
    out.print(f"runs in {store_path}", highlight=False)
    for run_id, created, status, datasets, services, done, errors in rows:
        out.print(f"\n[bold]{run_id}[/]  {created}  {status}  {done} done, {errors} errors",
                  highlight=False)
        out.print(f"  datasets: {escape(datasets)}", highlight=False)
        out.print(f"  services: {escape(services)}", highlight=False)


def _open_store(path: Path, *, existing: bool = False) -> Store:
    """The store at `path`, or one line saying why it cannot be used (exit 2).

    `existing`: for commands that only read or change recorded runs, a missing store
    is an error rather than a new empty file left behind (a mistyped --store)."""
    from orchestrator.store import Store, StoreError

    if existing and not path.exists():
        _error(f"there is no store at {path}: no run was recorded there; name the store "
               "with --store PATH (or BOILERBENCH_STORE)")
        raise typer.Exit(2)
    try:
        return Store(path)
    except StoreError as exc:
        _error(str(exc))
        raise typer.Exit(2) from None


@contextlib.contextmanager
def _store_failures(db: Store) -> Iterator[None]:
    """Close the store at the end; a store that fails while read or written (a damaged
    page, a full disk) is one line and exit 1."""
    from orchestrator.store import StoreError

    try:
        yield
    except StoreError as exc:
        _error(str(exc))
        raise typer.Exit(1) from None
    finally:
        db.close()


def _existing_store(config_file: Path | None, store: Path | None) -> tuple[RunConfig, Store]:
    """The configuration and the store the `runs` commands read (it must exist)."""
    config = _config(config_file, {"store": store})
    return config, _open_store(config.store_path, existing=True)


def _unknown_run(run_id: str, config: RunConfig) -> typer.Exit:
    """Say that the store holds no such run; the exit to raise (a usage error)."""
    _error(f"no run {run_id!r} in {config.store_path}")
    return typer.Exit(2)


@runs_app.command("cancel")
def runs_cancel(
    run_id: Annotated[str, typer.Argument(help="The run id.")],
    store: StoreOption = None,
    config_file: StoreConfigOption = None,
) -> None:
    """Cancel an unfinished run: it is never resumed.

    A process running it (a `boilerbench run` or `serve` on the same store) stops
    within a page."""
    from orchestrator.store import UNFINISHED

    config, db = _existing_store(config_file, store)
    with _store_failures(db):
        status = db.status(run_id)
        if status is None:
            raise _unknown_run(run_id, config)
        if status not in UNFINISHED:
            console.print(f"[yellow]run {run_id} is already {status}; nothing to cancel")
            raise typer.Exit(1)
        db.set_status(run_id, "cancelled")
    out.print(f"run {run_id}: cancelled")


@runs_app.command("delete")
def runs_delete(
    run_id: Annotated[str, typer.Argument(help="The run id.")],
    keep_outputs: Annotated[bool, typer.Option(
        help="Keep the run's output folder (results.json, reports, outputs/).")] = False,
    store: StoreOption = None,
    config_file: StoreConfigOption = None,
) -> None:
    """Delete a run from the store with its output folder and the archives uploaded for it.

    Its stored pages and results go, and so does the folder an archive posted to `serve`
    for it was unpacked into. A run that another live process has queued or is running
    (a `serve`, a `run`) is refused: `runs cancel` it, or end that process, first. An
    interrupted run may be deleted."""
    from orchestrator.store import RunBusyError, delete_run_with_folders

    config, db = _existing_store(config_file, store)
    with _store_failures(db):
        if db.status(run_id) is None:
            raise _unknown_run(run_id, config)
        try:
            folders = delete_run_with_folders(db, run_id, keep_output=keep_outputs)
        except RunBusyError as exc:
            _error(str(exc))
            raise typer.Exit(1) from None
    if folders is None:  # deleted by another process in the meantime
        raise _unknown_run(run_id, config)
    output = folders.output
    kept = (f"; its outputs stay in {output}"
            if keep_outputs and output is not None and output.is_dir() else "")
    out.print(escape(f"run {run_id}: deleted{kept}"), soft_wrap=True)


def _progress(counts: dict[str, int]) -> str:
    """A run's counts (Store.counts) as words: `13/13 done: 7 ok, 5 errors, 1 skipped`."""
    errors = counts.get("error", 0)
    return (f"{counts.get('done', 0)}/{counts.get('total', 0)} done: {counts.get('ok', 0)} ok, "
            f"{errors} error{'' if errors == 1 else 's'}, {counts.get('skipped', 0)} skipped")


@runs_app.command("show")
def runs_show(
    run_id: Annotated[str, typer.Argument(help="The run id.")],
    store: StoreOption = None,
    config_file: StoreConfigOption = None,
) -> None:
    """Print a run's status and results table."""
    from orchestrator.runner import RunSpec
    from orchestrator.store import resume_hint

    config, db = _existing_store(config_file, store)
    with _store_failures(db):
        info = db.run(run_id)
        if info is None:
            raise _unknown_run(run_id, config)
        out.print(f"run {run_id}: {info.status}, {_progress(info.counts)}", highlight=False)
        if info.status == "interrupted":
            console.print(f"[yellow]{escape(resume_hint(run_id, config.store_path))}",
                          soft_wrap=True)
        for warning in db.details(run_id)["warnings"]:
            console.print(f"[yellow]warning: {escape(warning)}", soft_wrap=True)
        results = db.results(run_id)
        spec = RunSpec.model_validate(db.spec(run_id))
    if results:
        _print_results(results, run_id, Path(spec.output_folder), spec)


@datasets_app.command("download")
def datasets_download(
    name: Annotated[str, typer.Argument(help="The test set: scrapinghub.")],
    to: Annotated[Path | None, typer.Option(help="Target folder (default: ./datasets/NAME).")
                  ] = None,
    source_url: Annotated[str, typer.Option(
        help="Base URL of the upstream tree (ground-truth.json, html/<id>.html.gz).")
    ] = SCRAPINGHUB_URL,
) -> None:
    """Fetch a public test set into the html/ + content/ layout."""
    # A failure (no network, a name that does not resolve, an HTTP error) is one line
    # naming it; the pages fetched so far stay, and a new run fetches only the rest.
    if name != "scrapinghub":
        raise typer.BadParameter(f"unknown test set {name!r}; known: scrapinghub")
    target = to or Path("datasets") / name
    try:
        with Progress(TextColumn("[bold]scrapinghub"), BarColumn(), MofNCompleteColumn(),
                      console=console, transient=True,
                      disable=not console.is_terminal) as progress:
            task = progress.add_task("download", total=None)

            def advance(done: int, total: int) -> None:
                progress.update(task, completed=done, total=total)

            count = asyncio.run(download_scrapinghub(target, source_url, progress=advance))
    except (DatasetError, OSError) as exc:
        console.print(f"[red]download failed: {escape(str(exc))}", highlight=False,
                      soft_wrap=True)
        raise typer.Exit(1) from None
    out.print(f"{count} pages in {target}")
    sys.stdout.flush()
