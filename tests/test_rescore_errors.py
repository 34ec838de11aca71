"""A run's outputs/ re-scored with `boilerbench score` gives the run's table: pages that
errored in the run are errors again (empty output, counted and named by reason), not
empty answers; prediction files of other tools, with articleBody only, read as before."""

from __future__ import annotations

import asyncio
import csv
import json
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.predictions import read_predictions
from orchestrator.runner import Outcome, RunSpec, create_run, execute_run, folder_source
from orchestrator.store import Store
from tests.helpers import SAMPLE

FAILING = {"de-wanderung", "list-packing", "table-tide-times"}


class _Extractor:
    """bte that times out on FAILING's pages and keeps every other page's markup text."""

    async def start(self) -> None:
        return None

    async def extract(self, row: str, html: str, options: dict[str, Any]) -> Outcome:
        page = next((p for p in FAILING if f"<!--{p}-->" in html), None)
        if page is not None:
            return Outcome(error="timeout: no answer in 30 s")
        return Outcome(text=" ".join(html.split()), elapsed_ms=1.0, extract_ms=1.0)

    async def aclose(self) -> None:
        return None


def _sample_with_marks(folder: Path) -> Path:
    """The sample set, each page's HTML marked with its id (the extractor sees the HTML
    only)."""
    for sub in ("html", "content"):
        (folder / sub).mkdir(parents=True)
    for path in sorted((SAMPLE / "html").glob("*.html")):
        (folder / "html" / path.name).write_bytes(
            path.read_bytes() + f"<!--{path.stem}-->".encode())
        gold = SAMPLE / "content" / f"{path.stem}.txt"
        (folder / "content" / gold.name).write_bytes(gold.read_bytes())
    return folder


def _table(out_dir: Path) -> list[dict[str, str]]:
    """results.csv less what tells a file from a service (flags, block F1 and time)."""
    with (out_dir / "tables" / "results.csv").open(encoding="utf-8") as handle:
        return [{k: v for k, v in row.items() if k != "flags"} for row in csv.DictReader(handle)]


def _reasons(out_dir: Path) -> list[object]:
    summary = json.loads((out_dir / "results.json").read_text(encoding="utf-8"))["summary"]
    return [(row["service"], row["errors"], row["error_reasons"], row["empty"])
            for row in summary["services"]]


def test_rescoring_a_runs_outputs_counts_its_errors_as_the_run_did(tmp_path: Path) -> None:
    dataset = _sample_with_marks(tmp_path / "sample")
    store = Store(tmp_path / "store.sqlite")
    try:
        spec = RunSpec(datasets=[], services=["bte"], scoring_processes=1,
                       output_folder=str(tmp_path / "out"))
        run_id = create_run(store, spec, [folder_source("sample", dataset / "html",
                                                        dataset / "content", None)])
        results = asyncio.run(execute_run(store, run_id, extractor=_Extractor()))
    finally:
        store.close()
    assert {r.page_id for r in results if r.status == "error"} == FAILING
    out_dir = tmp_path / "out" / run_id
    written = json.loads((out_dir / "outputs" / "bte.json").read_text(encoding="utf-8"))
    assert {key for key, entry in written.items() if entry.get("error")} == FAILING
    assert all("articleBody" in entry for entry in written.values())

    done = CliRunner().invoke(app, [
        "score", "--predictions", str(out_dir / "outputs"), "--dataset", str(dataset),
        "--output", str(tmp_path / "rescored"), "--store", str(tmp_path / "store.sqlite")])
    assert done.exit_code == 0, done.output
    (rescored,) = (tmp_path / "rescored").iterdir()
    assert _table(rescored) == _table(out_dir)
    assert _table(out_dir)[0]["errors"] == str(len(FAILING))
    assert _reasons(rescored) == _reasons(out_dir)


def test_a_prediction_file_with_article_bodies_only_reads_as_before(tmp_path: Path) -> None:
    path = tmp_path / "tool.json"
    path.write_text(json.dumps({"a": {"articleBody": "One."}, "b": {"articleBody": None},
                                "c": "Three."}), encoding="utf-8")
    assert read_predictions(path) == {"a": "One.", "b": "", "c": "Three."}
