"""`boilerbench train ...` reproduces a model file byte for byte.

The shipped models take minutes to train on the four datasets, so this runs the same
commands on the first pages of each dataset and compares the files with reference
files written by those commands (tests/data/*-limit4.json, regenerated with the
commands in REFERENCES when the training code changes on purpose). The full commands
(without --limit) reproduce the shipped model files the same way: see README.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from orchestrator.cli import app
from tests.helpers import write_test_set

DATA = Path(__file__).parent / "data"
LIMIT = 4
REFERENCES = {
    "density": DATA / f"density-limit{LIMIT}.json",
    "fusion": DATA / f"fusion-limit{LIMIT}.json",
}


def train_command(service: str, datasets: list[Path], out: Path) -> list[str]:
    return ["train", service, *(arg for d in datasets for arg in ("--dataset", str(d))),
            "--limit", str(LIMIT), "--workers", "1", "--out", str(out)]


@pytest.mark.dataset
@pytest.mark.parametrize("service", sorted(REFERENCES))
def test_train_command_reproduces_its_reference_file(service: str, four_datasets: list[Path],
                                                     tmp_path: Path) -> None:
    out = tmp_path / f"{service}.json"
    result = CliRunner().invoke(app, train_command(service, four_datasets, out))
    assert result.exit_code == 0, result.output
    assert out.read_bytes() == REFERENCES[service].read_bytes()


@pytest.mark.parametrize("service", ["density", "fusion", "ensemble"])
def test_train_refuses_what_it_cannot_train_on(service: str, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")  # usage errors in one line
    page = "<html><body><p>Some words of a page.</p></body></html>"
    one = write_test_set(tmp_path / "one", {"a": (page, "Some words")})
    two = write_test_set(tmp_path / "two", {"b": (page, "Some words")})
    gold_missing = write_test_set(tmp_path / "three", {"c": (page, "Some words")})
    (gold_missing / "html" / "d.html").write_text(page, encoding="utf-8")
    cases = {"at least two datasets": [one],
             "named twice": [one, one],
             "1 pages without gold text": [one, two, gold_missing]}
    for message, folders in cases.items():
        args = ["train", service, *(a for d in folders for a in ("--dataset", str(d))),
                "--out", str(tmp_path / "model.json")]
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 2, result.output
        assert message in result.output, result.output
    assert not (tmp_path / "model.json").exists()
