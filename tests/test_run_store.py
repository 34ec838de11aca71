"""Runs and their store: one store per user in the platform's data folder, runs whose
process died shown as interrupted, and `--resume` saying which store holds a run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.config import default_store_path, load_config
from orchestrator.models import RunInfo
from orchestrator.store import Store


def test_the_default_store_is_in_the_users_data_folder(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    assert default_store_path() == tmp_path / "data" / "boilerbench" / "runs.sqlite"
    assert load_config().store_path == default_store_path()
    monkeypatch.setenv("BOILERBENCH_STORE", str(tmp_path / "mine.sqlite"))
    assert load_config().store_path == tmp_path / "mine.sqlite"


def _new_run(path: Path, run_id: str) -> None:
    store = Store(path)
    store.create_run(RunInfo(id=run_id, services=["justext"]), {"total": 0}, [])
    store.close()


def test_a_run_whose_process_died_is_shown_interrupted(tmp_path: Path) -> None:
    path = tmp_path / "runs.sqlite"
    _new_run(path, "gone")
    _new_run(path, "mine")
    subprocess.run([sys.executable, "-c", "import sys; from orchestrator.store import Store; "
                    "Store(sys.argv[1]).set_status('gone', 'running')", str(path)],
                   check=True, timeout=60)
    store = Store(path)
    store.set_status("mine", "running")
    try:
        gone, mine = store.run("gone"), store.run("mine")
        assert gone is not None
        assert gone.status == "interrupted"
        assert mine is not None
        assert mine.status == "running"
        assert {r.id: r.status for r in store.runs()} == {"gone": "interrupted",
                                                         "mine": "running"}
        assert {r.id for r in store.unfinished_runs()} == {"gone", "mine"}
    finally:
        store.close()


def test_resume_names_the_store_that_holds_the_run(tmp_path: Path) -> None:
    _new_run(tmp_path / "results" / "boilerbench.sqlite", "old")
    done = subprocess.run(
        [sys.executable, "-c", "from orchestrator.cli import app; app()", "run", "--resume",
         "old", "--store", str(tmp_path / "other.sqlite")],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 2
    assert "add --store results/boilerbench.sqlite" in " ".join(done.stderr.split())


def test_a_store_under_the_home_folder_from_the_environment(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No shell expands `~` in an env file or a unit: it is still the home folder."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("BOILERBENCH_STORE", "~/runs.sqlite")
    assert load_config().store_path == tmp_path / "runs.sqlite"


def test_serve_names_a_store_it_cannot_use_in_one_line(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from orchestrator.cli import app

    path = tmp_path / "notes.sqlite"
    path.write_text("not a store")
    done = CliRunner().invoke(app, ["serve", "--store", str(path)])
    assert done.exit_code == 2
    assert "is not an SQLite database" in done.output
    assert not isinstance(done.exception, SystemExit) or done.exception.code == 2
