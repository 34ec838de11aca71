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
