"""A stop signal while `boilerbench run` prints its results table ends the command as a
stop at any other moment of the run does: exit status 130 and the resume hint, whose
command prints the stored results again."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO, resume_hint

CLI = [sys.executable, "-m", "orchestrator.cli"]


def _stop_while_the_table_prints(folder: Path) -> dict[str, str]:
    """An environment in which `boilerbench run` sends itself SIGTERM as rich starts to
    render the results table (titled "Run <id>"; the progress bar is a table too), by a
    sitecustomize on the PYTHONPATH."""
    folder.mkdir()
    (folder / "sitecustomize.py").write_text(
        "import os, signal, sys\n"
        "if 'orchestrator.cli' in sys.orig_argv:\n"
        "    from rich.table import Table\n"
        "    render = Table.__rich_console__\n"
        "    def render_and_stop(self, console, options):\n"
        "        if str(self.title).startswith('Run ') and not hasattr(Table, 'stopped'):\n"
        "            Table.stopped = True\n"
        "            os.kill(os.getpid(), signal.SIGTERM)\n"
        "        yield from render(self, console, options)\n"
        "    Table.__rich_console__ = render_and_stop\n")
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(folder), str(REPO)])}


@pytest.mark.e2e
def test_sigterm_while_the_results_table_prints_ends_as_any_stop(tmp_path: Path) -> None:
    store = tmp_path / "runs.sqlite"
    stopped = subprocess.run(
        [*CLI, "run", "--in-process", "--services", "bte", "--store", str(store),
         "--output", str(tmp_path / "out")],
        cwd=REPO, env=_stop_while_the_table_prints(tmp_path / "stop"),
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=180, check=False)
    assert stopped.returncode == 130, (stopped.returncode, stopped.stderr[-3000:])
    assert "Traceback" not in stopped.stderr, stopped.stderr[-3000:]
    hint = resume_hint(stopped.stderr, store)
    resumed = subprocess.run([*CLI, "run", *hint], cwd=REPO, capture_output=True,
                             text=True, timeout=120, check=False)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "already finished" in resumed.stderr
    assert "bte" in resumed.stdout
