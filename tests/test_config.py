"""The `key:value;` configuration: parsing, precedence, and errors that name the key."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from orchestrator.config import (
    ConfigError,
    default_store_path,
    load_config,
    parse_config_text,
    read_config_file,
)
from orchestrator.runner import default_scoring_processes

EXAMPLE = Path(__file__).resolve().parent.parent / "orchestrator" / "examples" / "config.txt"


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in ("SERVICES", "CONCURRENCY", "URLS", "OPTIONS", "MODE", "STORE", "DATASET",
                "OUTPUT_FOLDER", "TIMEOUT_S", "RETRIES", "SCORING_PROCESSES", "HTML_FOLDER",
                "CONTENT_FOLDER", "FEEDS_FOLDER", "DATASET_NAME"):
        monkeypatch.delenv(f"BOILERBENCH_{key}", raising=False)


def test_datasets_named_as_files_are_kept_apart_from_folders(tmp_path: Path) -> None:
    pages = tmp_path / "pages.json"
    pages.write_text('[{"id": "a", "html": "<p>a</p>", "gold": "a"}]', encoding="utf-8")
    folder = tmp_path / "set"
    folder.mkdir()
    config = load_config(file_values={"dataset": f"{pages},{folder}"})
    assert config.dataset_files() == [pages]
    assert [name for name, *_ in config.dataset_folders()] == ["set"]


def test_example_file_loads_and_names_the_sample_set() -> None:
    config = load_config(EXAMPLE)
    assert config.services == ["justext", "boilerpipe", "bte", "cetd", "density", "rss"]
    assert config.options["justext"] == {"language": "English"}
    (name, html, content, feeds), = config.dataset_folders()
    assert name == "sample"
    assert html.resolve() == (EXAMPLE.parent.parent / "sample" / "html").resolve()
    assert len(list(html.iterdir())) == len(list(content.iterdir()))
    assert feeds is not None
    assert (feeds / "news-harbour-ferry.xml").is_file()


def test_entries_several_per_line_json_with_semicolons_and_missing_final_semicolon() -> None:
    text = (
        "# a comment\n"
        "services:justext,bte; concurrency:3;\n"
        'service.justext.options:{"language": "Ger;man",\n  "x": [1, 2]};\n'
        "service.bte.url:http://127.0.0.1:9/\n"  # no semicolon: the line end closes it
        "timeout_s:2.5"
    )
    values = parse_config_text(text)
    assert values["services"] == ["justext", "bte"]
    assert values["options"] == {"justext": {"language": "Ger;man", "x": [1, 2]}}
    assert values["urls"] == {"bte": "http://127.0.0.1:9/"}
    config = load_config(file_values=values)
    assert config.concurrency == 3
    assert config.timeout_s == 2.5
    assert config.urls == {"bte": "http://127.0.0.1:9"}


def test_relative_paths_are_taken_from_the_file_folder(tmp_path: Path) -> None:
    (tmp_path / "conf").mkdir()
    file = tmp_path / "conf" / "config.txt"
    file.write_text("html_folder:pages; content_folder:/abs/gold; output_folder:../out;")
    values = read_config_file(file)
    assert values["html_folder"] == tmp_path / "conf" / "pages"
    assert values["content_folder"] == Path("/abs/gold")
    assert load_config(file).output_folder == tmp_path / "conf" / ".." / "out"


@pytest.mark.parametrize(("text", "message"), [
    ("concurrenc:3;", "unknown key 'concurrenc' (did you mean 'concurrency'?)"),
    ("mode:;", "key 'mode' has no value"),
    ("just some words;", "'just some words' is not a key:value entry"),
    ("services:a;\nservices:b;", "key 'services' is given twice (first on line 1)"),
    ("service.nosuch.url:http://x;", "unknown service 'nosuch'"),
    ("service.justext.colour:red;", "unknown key 'service.justext.colour'"),
    ("service.justext.options:[1];", "must be a JSON object"),
    ("service.justext.options:{bad json};", "the value is not JSON"),
    ('service.justext.options:{"a": "b";', "unterminated JSON value"),
    ("service.justext@german.url:http://x;", "give it for 'justext'"),
    ("service.nosuch@german.options:{};", "unknown service 'nosuch'"),
])
def test_file_errors_name_the_key_and_line(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config_text(text, source="my.txt")
    assert message in str(caught.value)


@pytest.mark.parametrize(("values", "message"), [
    ({"concurrency": "many"}, "key 'concurrency': Input should be a valid integer"),
    ({"concurrency": "0"}, "key 'concurrency'"),
    ({"services": ["justext", "nosuch"]}, "unknown service 'nosuch'"),
    ({"services": ["justext", "nosuch@x"]}, "unknown service 'nosuch'"),
    ({"services": ["justext@"]}, "a setting's label"),
    ({"services": ["justext@a.b"]}, "a setting's label"),
    ({"options": {"justext@": {}}}, "a setting's label"),
    ({"mode": "cloud"}, "key 'mode'"),
    ({"urls": {"justext": "ftp://x"}}, "is not an http(s) URL"),
    ({"urls": {"nosuch": "http://x"}}, "unknown service 'nosuch'"),
    ({"urls": {"justext@german": "http://x"}}, "give it for 'justext'"),
])
def test_validation_errors_name_the_key(values: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(file_values=values)
    assert message in str(caught.value)


def test_precedence_cli_over_environment_over_file(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    file = tmp_path / "config.txt"
    file.write_text("concurrency:2; retries:1; timeout_s:5; services:justext;\n"
                    "service.justext.url:http://file:1; service.bte.url:http://file:2;")
    monkeypatch.setenv("BOILERBENCH_CONCURRENCY", "7")
    monkeypatch.setenv("BOILERBENCH_RETRIES", "4")
    monkeypatch.setenv("BOILERBENCH_SERVICES", "justext,bte")
    monkeypatch.setenv("BOILERBENCH_URLS", '{"bte": "http://env:2"}')
    config = load_config(file, cli={"retries": 9, "timeout_s": None,
                                    "urls": {"cetd": "http://cli:3"}})
    assert config.concurrency == 7  # environment over file
    assert config.retries == 9  # CLI over environment
    assert config.timeout_s == 5  # a flag not given (None) leaves the file's value
    assert config.services == ["justext", "bte"]  # comma list from the environment
    # per-service maps merge service by service
    assert config.urls == {"justext": "http://file:1", "bte": "http://env:2",
                           "cetd": "http://cli:3"}


def test_scoring_processes_reach_the_run_and_default_to_the_cores() -> None:
    configured = load_config(file_values=parse_config_text("scoring_processes:3;"))
    assert configured.run_spec().scoring_processes == 3
    assert load_config().run_spec().scoring_processes == default_scoring_processes()
    assert 1 <= default_scoring_processes() <= min(os.cpu_count() or 1, 8)
    with pytest.raises(ConfigError, match="scoring_processes"):
        load_config(file_values=parse_config_text("scoring_processes:0;"))


def test_defaults_without_any_source() -> None:
    config = load_config()
    assert config.mode == "local"
    assert config.services == ["justext", "boilerpipe", "bte", "cetd", "density"]
    assert config.store_path == default_store_path()
    assert config.dataset_folders() == []


def test_html_folder_without_content_folder_is_an_error() -> None:
    config = load_config(file_values={"html_folder": Path("x")})
    with pytest.raises(ConfigError, match="html_folder and content_folder"):
        config.dataset_folders()


def test_all_names_every_registered_service() -> None:
    from shared.registry import SERVICES

    assert load_config(cli={"services": "all"}).services == list(SERVICES)


def test_a_setting_of_a_service_is_a_row_with_its_own_options(tmp_path: Path) -> None:
    """`<service>@<label>` rows: their own options, the service's URL, one service each."""
    file = tmp_path / "config.txt"
    file.write_text("services:justext,justext@german;\n"
                    "service.justext.url:http://host:1;\n"
                    'service.justext@german.options:{"language": "German"};')
    config = load_config(file)
    assert config.services == ["justext", "justext@german"]
    assert config.options == {"justext@german": {"language": "German"}}
    spec = config.run_spec()
    assert spec.url("justext@german") == spec.url("justext") == "http://host:1"
    assert spec.called_services == ["justext"]


def test_a_configuration_file_that_is_not_utf8_is_a_configuration_error(tmp_path: Path) -> None:
    path = tmp_path / "config.txt"
    path.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(ConfigError, match="not UTF-8 text"):
        read_config_file(path)


def test_file_options_for_rows_the_run_does_not_call_are_one_warning_not_a_refusal(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One file serves runs that narrow --services: its options for the rows left out
    are named in one warning line and the run goes ahead, while --option for a row the
    run does not call is still refused."""
    import typer
    from typer.testing import CliRunner

    from orchestrator.cli import app

    file = tmp_path / "config.txt"
    file.write_text("services:justext,bte;\n"
                    'service.justext.options:{"language": "English"};\n'
                    "service.bte.options:{};\n"
                    "service.bte@plian.options:{};\n", encoding="utf-8")
    started: list[bool] = []

    def new_run(*args: object, **kwargs: object) -> None:
        started.append(True)
        raise typer.Exit(3)

    monkeypatch.setattr("orchestrator.commands_run._new_run", new_run)
    store = ["--store", str(tmp_path / "runs.sqlite")]

    def run(*args: str) -> tuple[int, list[str]]:
        result = CliRunner().invoke(app, ["run", "--config", str(file), *store, *args],
                                    terminal_width=200)
        return result.exit_code, [line for line in result.output.splitlines()
                                  if "warning" in line]

    assert run("--services", "bte") == (3, [
        "warning: the configuration gives options for justext, bte@plian, which this run "
        "does not call (its rows: bte); they are not used"])
    assert run("--services", "bte,bte@plian,justext") == (3, [])
    assert started == [True, True]
    code, _ = run("--services", "bte", "--option", 'cetd={"x": 1}')
    assert code == 2
    assert started == [True, True]


def _test_set(folder: Path) -> Path:
    for sub in ("html", "content"):
        (folder / sub).mkdir(parents=True)
    return folder


def test_the_test_sets_come_from_the_highest_source_that_names_any(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A flag's test set replaces the environment's and the file's, the environment's
    the file's: `--config my.txt --dataset other` scores `other` alone."""
    env_set, flag_set = (_test_set(tmp_path / name) for name in ("envset", "flagset"))
    for name in ("fileset", "extra"):
        _test_set(tmp_path / name)
    file = tmp_path / "config.txt"
    file.write_text("html_folder:fileset/html; content_folder:fileset/content;\n"
                    "feeds_folder:fileset/html; dataset_name:mine; dataset:extra;\n"
                    "concurrency:3;")

    def names(cli: dict[str, object] | None = None) -> list[str]:
        config = load_config(file, cli=cli)
        assert config.concurrency == 3  # the file's other keys stay
        return [name for name, *_ in config.dataset_folders()]

    assert names() == ["mine", "extra"]  # one source: html_folder and dataset combine
    assert names({"dataset": [flag_set]}) == ["flagset"]
    monkeypatch.setenv("BOILERBENCH_DATASET", str(env_set))
    assert names() == ["envset"]
    assert names({"dataset": [flag_set]}) == ["flagset"]
    monkeypatch.delenv("BOILERBENCH_DATASET")
    monkeypatch.setenv("BOILERBENCH_HTML_FOLDER", str(env_set / "html"))
    monkeypatch.setenv("BOILERBENCH_CONTENT_FOLDER", str(env_set / "content"))
    config = load_config(file)
    assert [name for name, *_ in config.dataset_folders()] == ["envset"]
    assert config.feeds_folder is None  # the file's feeds belong to the file's set
    assert names({"dataset": [flag_set]}) == ["flagset"]
    monkeypatch.setenv("BOILERBENCH_FEEDS_FOLDER", str(env_set / "html"))  # names no set
    monkeypatch.delenv("BOILERBENCH_HTML_FOLDER")
    monkeypatch.delenv("BOILERBENCH_CONTENT_FOLDER")
    config = load_config(file)
    assert [name for name, *_ in config.dataset_folders()] == ["mine", "extra"]
    assert config.feeds_folder == env_set / "html"


@pytest.mark.parametrize(("source", "message"), [
    ("flag", "--services: unknown service 'nosuch'"),
    ("environment", "BOILERBENCH_SERVICES: unknown service 'nosuch'"),
    ("file", "line 2: key 'services': unknown service 'nosuch'"),
])
def test_a_refused_value_names_where_it_came_from(
        source: str, message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from orchestrator.cli import app

    file = tmp_path / "config.txt"
    file.write_text("concurrency:2;\n" + ("services:bte,nosuch;" if source == "file" else ""))
    flags = ["--services", "bte,nosuch"] if source == "flag" else []
    if source == "environment":
        monkeypatch.setenv("BOILERBENCH_SERVICES", "bte,nosuch")
    result = CliRunner().invoke(app, ["run", "--config", str(file), *flags,
                                      "--store", str(tmp_path / "runs.sqlite")],
                                terminal_width=300)
    assert result.exit_code == 2, result.output
    assert result.output.startswith("configuration error: "), result.output
    assert message in result.output
    if source == "file":
        assert f"{file}, line 2: " in result.output


@pytest.mark.parametrize(("where", "message"), [
    ("flag", "--url for bte: 'ftp://x' is not an http(s) URL"),
    ("environment", "BOILERBENCH_URLS for bte: 'ftp://x' is not an http(s) URL"),
    ("file", "line 2: key 'service.bte.url': 'ftp://x' is not an http(s) URL"),
])
def test_a_refused_url_names_its_service_and_where_it_came_from(
        where: str, message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    file = tmp_path / "config.txt"
    file.write_text("service.cetd.url:http://host:4;\n"
                    + ("service.bte.url:ftp://x;" if where == "file" else ""))
    if where == "environment":
        monkeypatch.setenv("BOILERBENCH_URLS", '{"bte": "ftp://x"}')
    cli = {"urls": {"bte": "ftp://x"}} if where == "flag" else None
    with pytest.raises(ConfigError) as caught:
        load_config(file, cli=cli)
    assert message in str(caught.value)


def test_a_dataset_name_is_looked_for_under_the_datasets_folder(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`--dataset NAME` from any folder: as given where it exists, else the folder of
    that name under BOILERBENCH_DATASETS, as the API resolves names; where neither
    exists the error names both places."""
    root = tmp_path / "datasets"
    _test_set(root / "myset")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.setenv("BOILERBENCH_DATASETS", str(root))
    monkeypatch.chdir(elsewhere)
    (name, html, content, _), = load_config(cli={"dataset": [Path("myset")]}).dataset_folders()
    assert (name, html, content) == ("myset", root / "myset" / "html", root / "myset" / "content")
    _test_set(elsewhere / "myset")  # a folder of that name here is what it names
    (_, html, _, _), = load_config(cli={"dataset": [Path("myset")]}).dataset_folders()
    assert html.resolve() == elsewhere / "myset" / "html"
    with pytest.raises(ConfigError) as caught:
        load_config(cli={"dataset": [Path("nosuch")]}).dataset_folders()
    assert str(elsewhere / "nosuch") in str(caught.value)
    assert str(root / "nosuch") in str(caught.value)
    with pytest.raises(ConfigError, match=r"no such file or folder; looked for /nosuch/set$"):
        load_config(cli={"dataset": [Path("/nosuch/set")]}).dataset_files()
