"""In-sample flags match a run's test pages to a learned model's training pages by the
digests of their HTML bytes, not by the test set's name (orchestrator.insample)."""

from __future__ import annotations

import csv
import hashlib
import json
import shutil
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from orchestrator import insample
from orchestrator.models import Counts, PageResult, PageScores
from orchestrator.report import table_rows
from orchestrator.runner import RunSpec, create_run, folder_source, open_source, run_summary
from orchestrator.statistics import ALL_DATASETS, Summary, summarize
from orchestrator.store import Store
from orchestrator.testsets import Dataset, open_dataset_file
from shared.decoding import decode_html
from shared.modelfile import PAGE_DIGESTS, page_digest
from shared.registry import SERVICES
from shared.service import create_service_app
from shared.settings import ServiceSettings
from tests.helpers import write_test_set
from tests.servers import serve_app, serve_process

LEARNED = ("fusion", "density", "ensemble")
OWN = {f"own-{i}": (f"<html><body><p>A page of our own, number {i}.</p></body></html>",
                    f"A page of our own, number {i}.") for i in range(2)}


def scored(row: str, dataset: str, page_id: str) -> PageResult:
    counts = Counts(tp=1, fp=0, fn=0, tn=0)
    return PageResult(run_id="r", dataset=dataset, page_id=page_id, service=row, status="ok",
                      scores=PageScores(word=counts, word_bag=counts))


def run(tmp_path: Path, services: Sequence[str], folders: Sequence[Path],
        memory: Sequence[Dataset] = (), options: dict[str, dict[str, Any]] | None = None
        ) -> Summary:
    """A run created on the test sets as the CLI and the API create one, every row
    scoring every page, summarised as its tables are. Its extractors run in this
    process's workers (embedded), so this environment's model files decide the flags."""
    store = Store(tmp_path / "store.sqlite")
    spec = RunSpec(datasets=[], services=list(services), options=options or {},
                   backend="embedded")
    run_id = create_run(store, spec, [folder_source(f.name, f / "html", f / "content", None)
                                      for f in folders], memory)
    spec = RunSpec.model_validate(store.spec(run_id))
    sets = [open_source(source, store, run_id) for source in spec.datasets]
    return run_summary([scored(row, d.name, page_id) for d in sets for page_id in d.ids
                        for row in spec.rows], spec)


def flags(summary: Summary) -> dict[tuple[str, str], str]:
    header, rows = table_rows(summary)
    row, dataset, flag = (header.index(h) for h in ("row", "dataset", "flags"))
    return {(cells[row], cells[dataset]): cells[flag] for cells in rows}


def copy_pages(source: Path, ids: Sequence[str], target: Path, own: bool = True) -> Path:
    """A test set of the pages `ids` of `source` (and, with `own`, OWN)."""
    write_test_set(target, OWN if own else {})
    for page_id in ids:
        shutil.copy(source / "html" / f"{page_id}.html", target / "html")
        shutil.copy(source / "content" / f"{page_id}.txt", target / "content")
    return target


@pytest.mark.dataset
def test_a_renamed_subset_of_a_training_set_is_in_sample_on_its_training_pages(
        cleaneval: Path, tmp_path: Path) -> None:
    """Three cleaneval pages among pages of our own, under another name: the learned rows
    are in-sample on those three. A JSON test set's page matches when its text is the
    training file's UTF-8; one decoded from another encoding is not recognised."""
    sample = copy_pages(cleaneval, ["dev-10", "dev-11", "dev-12"], tmp_path / "ce-sample")
    seen = copy_pages(cleaneval, ["dev-13", "dev-14"], tmp_path / "seen", own=False)
    utf8 = (cleaneval / "html" / "dev-16.html").read_bytes()
    latin = (cleaneval / "html" / "dev-1.html").read_bytes()
    with pytest.raises(UnicodeDecodeError):
        latin.decode("utf-8")
    pages = [{"id": "utf8", "html": utf8.decode("utf-8"), "gold": "gold"},
             {"id": "latin", "html": decode_html(latin), "gold": "gold"}]
    (tmp_path / "mine.json").write_text(json.dumps(pages), encoding="utf-8")
    memory = open_dataset_file(tmp_path / "mine.json")

    rows = [*LEARNED, "density@fixed", "readability"]
    summary = run(tmp_path, rows, [sample, seen], memory,
                  {"density@fixed": {"threshold": "fixed"}})
    for service in LEARNED:
        counts = {d: summary.get(service, d).in_sample_pages
                  for d in ("ce-sample", "seen", "mine", ALL_DATASETS)}
        assert counts == {"ce-sample": 3, "seen": 2, "mine": 1, ALL_DATASETS: 6}, service
    for row in ("density@fixed", "readability"):
        assert not any(r.in_sample for r in summary.services if r.service == row)
    shown = flags(summary)
    assert shown["fusion", "ce-sample"] == "in-sample (3 of 5 pages)"
    assert shown["ensemble", "seen"] == "in-sample"
    assert shown["density", "mine"] == "in-sample (1 of 2 pages)"
    assert shown["fusion", ALL_DATASETS] == "in-sample (6 of 9 pages)"
    assert shown["readability", "ce-sample"] == ""


def test_a_set_named_like_a_training_set_is_not_in_sample(tmp_path: Path) -> None:
    """Pages of our own in folders named chaos and cleaneval were never trained on."""
    folders = [write_test_set(tmp_path / name, OWN) for name in ("chaos", "cleaneval")]
    summary = run(tmp_path, LEARNED, folders)
    assert [(r.service, r.dataset) for r in summary.services if r.in_sample] == []
    assert set(flags(summary).values()) == {""}


def test_a_model_file_without_digests_falls_back_to_names(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An older model file lists no pages: every page of a test set named as one it was
    trained on counts. Beside it, a file with digests matches by content alone; a run
    recorded before pages were matched goes by names for both."""
    trained = "<html><body><p>The one page the new model saw.</p></body></html>"
    model = tmp_path / "services" / "fusion" / "model"
    model.mkdir(parents=True)
    (model / "new.json").write_text(json.dumps({"metadata": {
        "trained_on": ["set-a"], PAGE_DIGESTS: [page_digest(trained.encode())]}}))
    (model / "old.json").write_text(json.dumps({"metadata": {"datasets": [{"name": "set-b"}]}}))
    monkeypatch.setattr(insample, "SERVICES_DIR", tmp_path / "services")
    folders = [write_test_set(tmp_path / "sets" / name, OWN) for name in ("set-a", "set-b")]
    copy = write_test_set(tmp_path / "sets" / "copy", {**OWN, "seen": (trained, "words")})

    summary = run(tmp_path, ["fusion"], [*folders, copy])
    counts = {r.dataset: r.in_sample_pages for r in summary.services}
    assert counts == {"set-a": 0, "set-b": 2, "copy": 1, ALL_DATASETS: 3}
    results = [scored("fusion", "set-a", "p"), scored("fusion", "set-b", "p")]
    by_name = summarize(results)
    assert by_name.get("fusion", "set-a").in_sample
    assert by_name.get("fusion", "set-b").in_sample


@pytest.mark.dataset
@pytest.mark.parametrize("service", LEARNED)
def test_a_shipped_model_lists_every_page_it_was_trained_on(
        service: str, four_datasets: list[Path]) -> None:
    """The four development datasets' pages, each once (two chaos pages are the same
    file), by the digest of their HTML bytes."""
    data = json.loads(next((insample.SERVICES_DIR / service / "model").glob("*.json"))
                      .read_text(encoding="utf-8"))
    pages = {page_digest(path.read_bytes())
             for folder in four_datasets for path in (folder / "html").glob("*.html")}
    assert data["metadata"][PAGE_DIGESTS] == sorted(pages)


@pytest.mark.dataset
def test_a_model_file_of_ones_own_decides_the_flags_of_its_service(
        cleaneval: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """fusion loading the file BOILERBENCH_FUSION_MODEL names is in-sample on that file's
    training pages and no longer on the shipped model's; density keeps its shipped one."""
    own = write_test_set(tmp_path / "own", OWN)
    shipped = copy_pages(cleaneval, ["dev-10", "dev-11"], tmp_path / "ce", own=False)
    model = tmp_path / "fusion-mine.json"
    model.write_text(json.dumps({"metadata": {
        "trained_on": ["own"], PAGE_DIGESTS: [page_digest(OWN["own-0"][0].encode())]}}))
    monkeypatch.setenv("BOILERBENCH_FUSION_MODEL", str(model))
    shown = flags(run(tmp_path, ["fusion", "density"], [own, shipped]))
    assert shown["fusion", "own"] == "in-sample (1 of 2 pages)"
    assert shown["fusion", "ce"] == ""
    assert shown["density", "own"] == ""
    assert shown["density", "ce"] == "in-sample"


def run_over_http(tmp_path: Path, url: str, dataset: Path, model: Path | None
                  ) -> tuple[str, dict[str, str]]:
    """`boilerbench run --http` of fusion at `url` on `dataset`, with
    BOILERBENCH_FUSION_MODEL set to `model` (None: unset) in the orchestrator's own
    environment: its output and the fusion row's flags in results.csv."""
    from typer.testing import CliRunner

    from orchestrator.cli import app

    out = tmp_path / f"out-{len(list(tmp_path.glob('out-*')))}"
    result = CliRunner().invoke(
        app, ["run", "--http", "--url", f"fusion={url}", "--services", "fusion",
              "--dataset", str(dataset), "--store", str(tmp_path / "runs.sqlite"),
              "--out", str(out), "--scoring-processes", "1"],
        env={"BOILERBENCH_FUSION_MODEL": None if model is None else str(model),
             "COLUMNS": "300"})
    assert result.exit_code == 0, result.output
    (run_dir,) = out.iterdir()
    with (run_dir / "tables" / "results.csv").open(encoding="utf-8") as handle:
        return result.output, {row["row"]: row["flags"] for row in csv.DictReader(handle)}


@pytest.mark.dataset
def test_a_run_over_http_flags_by_the_model_the_service_reports(
        cleaneval: Path, tmp_path: Path) -> None:
    """Real fusion processes: the flags follow the model file each names in /info, not
    BOILERBENCH_FUSION_MODEL in the orchestrator's environment. dev-11 was trained on by
    both the shipped model and tests/data/fusion-limit4.json, dev-13 by the shipped one
    alone. A service loading a file the orchestrator has not got is flagged in-sample
    unknown, with a warning, rather than judged by the orchestrator's own file."""
    own_model = Path(__file__).parent / "data" / "fusion-limit4.json"
    dataset = copy_pages(cleaneval, ["dev-11", "dev-13"], tmp_path / "mixed")
    with serve_process("services.fusion.app:app",
                       {"BOILERBENCH_FUSION_MODEL": str(own_model)}) as (url, _):
        output, flags = run_over_http(tmp_path, url, dataset, own_model)
        assert flags["fusion"] == "in-sample (1 of 4 pages)", output
        output, flags = run_over_http(tmp_path, url, dataset, None)
        assert flags["fusion"] == "in-sample unknown", output
        warning = (f"fusion at {url} loads the model file 'fusion-limit4.json' (sha256 "
                   f"{hashlib.sha256(own_model.read_bytes()).hexdigest()[:12]}...)")
        assert " ".join(output.split()).count(warning) == 1, output
    with serve_process("services.fusion.app:app", {"BOILERBENCH_FUSION_MODEL": ""}) as (url, _):
        output, flags = run_over_http(tmp_path, url, dataset, own_model)
        assert flags["fusion"] == "in-sample (2 of 4 pages)", output
        assert "in-sample unknown" not in output, output


@contextmanager
def counted_service(name: str) -> Iterator[tuple[str, list[str]]]:
    """Service `name`'s real app on a free port, and the requests it receives
    ("GET /info", ...), from when it is ready until the block ends."""
    service = create_service_app(SERVICES[name].algorithm(), ServiceSettings())
    asked: list[str] = []

    async def counting(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            asked.append(f"{scope['method']} {scope['path']}")
        await service(scope, receive, send)

    with serve_app(counting) as url:
        asked.clear()  # serve_app's own readiness checks
        yield url, asked


def test_a_run_asks_each_service_for_its_info_once(tmp_path: Path) -> None:
    """`boilerbench run`'s check that fusion answers as fusion and its in-sample flags
    read the same /info reply."""
    from typer.testing import CliRunner

    from orchestrator.cli import app

    dataset = write_test_set(tmp_path / "own", OWN)
    with counted_service("fusion") as (url, asked):
        result = CliRunner().invoke(
            app, ["run", "--http", "--url", f"fusion={url}", "--services", "fusion",
                  "--dataset", str(dataset), "--store", str(tmp_path / "runs.sqlite"),
                  "--out", str(tmp_path / "out"), "--scoring-processes", "1"])
    assert result.exit_code == 0, result.output
    assert sorted(asked) == ["GET /info", *["POST /extract"] * len(OWN)], asked


def test_a_run_posted_to_the_api_asks_each_service_for_its_info_once(tmp_path: Path) -> None:
    from fastapi.testclient import TestClient

    from orchestrator.api import ApiSettings, create_app
    from orchestrator.config import RunConfig

    pages = [{"id": page_id, "html": html, "gold": gold} for page_id, (html, gold) in OWN.items()]
    with counted_service("fusion") as (url, asked):
        config = RunConfig(store=tmp_path / "store.sqlite", output_folder=tmp_path / "out",
                           services=["fusion"], urls={"fusion": url}, mode="http")
        with TestClient(create_app(ApiSettings(resume=False), config)) as client:
            posted = client.post("/runs", json={"pages": pages, "backend": "http"})
            assert posted.status_code == 202, posted.text
        assert asked.count("GET /info") == 1, asked
