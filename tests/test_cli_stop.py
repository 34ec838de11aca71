"""A stop signal ends `boilerbench score` as it ends `run`: what was stored stays, the
command exits 130 with the resume hint, and the hint's command finishes the run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.store import Store
from tests.helpers import REPO, SAMPLE

CLI = [sys.executable, "-m", "orchestrator.cli"]


def _stop_after_first_result(folder: Path) -> dict[str, str]:
    """An environment in which the CLI sends itself SIGTERM as it stores its first
    result (a sitecustomize on the PYTHONPATH)."""
    folder.mkdir()
    (folder / "sitecustomize.py").write_text(
        "import os, signal, sys\n"
        "if 'orchestrator.cli' in sys.orig_argv:\n"
        "    from orchestrator.store import Store\n"
        "    add_result = Store.add_result\n"
        "    def add_and_stop(self, result):\n"
        "        added = add_result(self, result)\n"
        "        if not getattr(Store, 'stopped', False):\n"
        "            Store.stopped = True\n"
        "            os.kill(os.getpid(), signal.SIGTERM)\n"
        "        return added\n"
        "    Store.add_result = add_and_stop\n")
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(folder), str(REPO)])}


@pytest.mark.e2e
def test_sigterm_ends_score_with_the_resume_hint(tmp_path: Path) -> None:
    predictions = tmp_path / "predictions"
    predictions.mkdir()
    texts = {path.stem: {"articleBody": path.read_text(encoding="utf-8")}
             for path in (SAMPLE / "content").glob("*.txt")}
    (predictions / "gold.json").write_text(json.dumps(texts), encoding="utf-8")
    store = tmp_path / "runs.sqlite"
    stopped = subprocess.run(
        [*CLI, "score", "--predictions", str(predictions), "--dataset", str(SAMPLE),
         "--store", str(store), "--output", str(tmp_path / "out")],
        cwd=REPO, env=_stop_after_first_result(tmp_path / "stop"), stdin=subprocess.DEVNULL,
        capture_output=True, text=True, timeout=180, check=False)
    assert stopped.returncode == 130, stopped.stderr[-3000:]
    assert "Traceback" not in stopped.stderr, stopped.stderr[-3000:]
    hint = stopped.stderr[stopped.stderr.index("resume with ") + len("resume with "):].split()
    assert hint[0] == "--resume"
    assert hint[2:4] == ["--store", str(store)]
    db = Store(store)
    assert 0 < db.counts(hint[1])["done"] < len(texts)
    db.close()
    resumed = subprocess.run([*CLI, "run", *hint[:4]], cwd=REPO, capture_output=True,
                             text=True, timeout=180, check=False)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    db = Store(store)
    counts = db.counts(hint[1])
    db.close()
    assert counts["done"] == counts["total"] == len(texts)
