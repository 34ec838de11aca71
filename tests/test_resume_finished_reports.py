"""`run --resume` of a finished run writes a report that was deleted on its own again,
as it does when the whole output folder is gone."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.models import PageResult
from orchestrator.runner import Outcome, RunSpec, create_run, execute_run
from orchestrator.store import Store
from orchestrator.testsets import LabelledPage, in_memory

GOLD = "The harbour bridge opened again today."


class _GoldExtractor:
    """An extractor double that answers every page with its gold text at once."""

    async def start(self) -> None:
        return None

    async def extract(self, row: str, html: str, options: dict[str, object]) -> Outcome:
        return Outcome(text=GOLD, elapsed_ms=1.0, extract_ms=1.0)

    async def aclose(self) -> None:
        return None


def _finished_run(tmp_path: Path) -> tuple[Path, str, Path]:
    store = tmp_path / "runs.sqlite"
    db = Store(store)
    pages = [LabelledPage("set", f"p{i}", f"<p>Menu</p><p>{GOLD}</p>", GOLD) for i in range(2)]
    run_id = create_run(db, RunSpec(datasets=[], services=["bte"], local=True,
                                    scoring_processes=1, output_folder=str(tmp_path / "out")),
                        memory=[in_memory("set", pages)])
    asyncio.run(execute_run(db, run_id, extractor=_GoldExtractor()))
    db.close()
    return store, run_id, tmp_path / "out" / run_id


@pytest.mark.parametrize("gone", ["report.html", "summary.md", "pages.csv", "tables"])
def test_resuming_a_finished_run_writes_a_deleted_report_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, gone: str) -> None:
    store, run_id, reports = _finished_run(tmp_path)
    before = {path.relative_to(reports): path.read_bytes()
              for path in reports.rglob("*") if path.is_file()}
    target = reports / gone
    if target.is_dir():
        for path in target.iterdir():
            path.unlink()
        target.rmdir()
    else:
        target.unlink()

    def never(*args: object, **kwargs: object) -> list[PageResult]:
        raise AssertionError("a finished run was run again")

    monkeypatch.setattr("orchestrator.runner.execute_run", never)
    result = CliRunner().invoke(app, ["run", "--resume", run_id, "--store", str(store)],
                                terminal_width=200)
    assert result.exit_code == 0, result.output
    assert target.exists()
    after = {path.relative_to(reports): path.read_bytes()
             for path in reports.rglob("*") if path.is_file()}
    assert after == before
    assert f"{gone}: {target}" in " ".join(result.output.split())
