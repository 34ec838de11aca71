"""The ensemble's training warns, as density's and fusion's do (tests/test_train_command.py),
when two datasets hold the same pages: leaving either out still trains on its pages."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from orchestrator.cli import app
from tests.helpers import write_test_set

WORDS = "Some words of a page about its subject."
PAGE = f"<html><body><p>{WORDS}</p><p>Menu Home</p></body></html>"
OTHER = "<html><body><p>Some words of a page.</p></body></html>"


def test_ensemble_training_warns_when_two_datasets_hold_the_same_pages(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "300")
    monkeypatch.setenv("BOILERBENCH_CACHE_DIR", str(tmp_path / "cache"))
    sets = [write_test_set(tmp_path / "one", {"a": (PAGE, WORDS), "b": (OTHER, WORDS)}),
            write_test_set(tmp_path / "two", {"renamed": (PAGE, WORDS)}),
            write_test_set(tmp_path / "three", {"c": (OTHER + " ", WORDS)})]
    args = ["train", "ensemble", *(a for d in sets for a in ("--dataset", str(d))),
            "--workers", "1", "--out", str(tmp_path / "model.json")]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "one and two hold 1 of the same pages" in result.output, result.output
    assert result.output.count("of the same pages") == 1, result.output  # not three's
