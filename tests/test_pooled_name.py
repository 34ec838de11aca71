"""A run of several test sets adds rows named `(all)` over their pages pooled, so a
test set of that name beside others is refused rather than mixed into those rows."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.runner import RunSpec, create_run
from orchestrator.statistics import ALL_DATASETS
from orchestrator.store import Store
from orchestrator.testsets import LabelledPage, in_memory

GOLD = "The harbour bridge opened again today."


def _set(name: str) -> list[LabelledPage]:
    return [LabelledPage(name, f"p{i}", f"<p>Menu</p><p>{GOLD}</p>", GOLD) for i in range(2)]


def test_a_test_set_named_like_the_pooled_rows_is_refused_beside_others(
        tmp_path: Path) -> None:
    db = Store(tmp_path / "runs.sqlite")
    try:
        with pytest.raises(ValueError, match=r"\(all\)"):
            create_run(db, RunSpec(datasets=[], services=["bte"]),
                       memory=[in_memory(ALL_DATASETS, _set(ALL_DATASETS)),
                               in_memory("news", _set("news"))])
        assert db.runs() == []
        # alone it pools nothing, and keeps its name
        assert create_run(db, RunSpec(datasets=[], services=["bte"]),
                          memory=[in_memory(ALL_DATASETS, _set(ALL_DATASETS))])
    finally:
        db.close()


def test_run_refuses_a_folder_named_like_the_pooled_rows(tmp_path: Path) -> None:
    for name in (ALL_DATASETS, "news"):
        for sub, text in (("html", f"<p>Menu</p><p>{GOLD}</p>"), ("content", GOLD)):
            folder = tmp_path / name / sub
            folder.mkdir(parents=True)
            (folder / ("p.html" if sub == "html" else "p.txt")).write_text(text)
    result = CliRunner().invoke(app, [
        "run", "--in-process", "--services", "bte", "--store", str(tmp_path / "runs.sqlite"),
        "--out", str(tmp_path / "out"), "--dataset", str(tmp_path / ALL_DATASETS),
        "--dataset", str(tmp_path / "news")], terminal_width=200)
    assert result.exit_code == 2, result.output
    assert "(all)" in result.output
