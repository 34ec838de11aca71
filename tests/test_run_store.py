"""Runs and their store: one store per user in the platform's data folder, runs whose
process died shown as interrupted, `--resume` saying which store holds a run, and a
deleted run leaving none of its files behind, whichever way it was deleted."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from orchestrator.api import ApiSettings, create_app
from orchestrator.cli import app as cli_app
from orchestrator.config import RunConfig, default_store_path, load_config
from orchestrator.models import RunInfo
from orchestrator.runner import RunSpec, create_run, folder_source
from orchestrator.store import RunBusyError, Store, run_owner_alive
from tests.helpers import set_run_owner, tar_bytes, write_test_set


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


def _record_owner(path: Path, run_id: str, owner: str) -> None:
    """Write a run's owner as it is in the store's row, leaving the rest as it is."""
    with sqlite3.connect(path) as db:
        (info,) = db.execute("SELECT info FROM runs WHERE id = ?", (run_id,)).fetchone()
        db.execute("UPDATE runs SET info = ? WHERE id = ?",
                   (json.dumps(json.loads(info) | {"owner": owner}), run_id))


def _recorded_owner(path: Path, run_id: str) -> str:
    with sqlite3.connect(path) as db:
        (info,) = db.execute("SELECT info FROM runs WHERE id = ?", (run_id,)).fetchone()
    owner: str = json.loads(info)["owner"]
    return owner


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")
def test_a_pid_taken_again_after_a_crash_is_not_the_owner_of_its_runs(tmp_path: Path) -> None:
    """There is no heartbeat: a run's owner is its process's pid and start time, so a
    crashed owner whose pid another process has taken since shows as interrupted, can
    be deleted and resumed, while a live owner still holds its run."""
    path = tmp_path / "runs.sqlite"
    for run_id in ("crashed", "held"):
        _new_run(path, run_id)
    record = ("import sys, time; from orchestrator.store import Store; "
              "Store(sys.argv[1]).set_status(sys.argv[2], 'running'); "
              "time.sleep(float(sys.argv[3]))")
    subprocess.run([sys.executable, "-c", record, str(path), "crashed", "0"], check=True,
                   timeout=60)
    holder = subprocess.Popen([sys.executable, "-c", record, str(path), "held", "60"])
    try:
        deadline = time.monotonic() + 60
        while Store(path).status("held") != "running":
            assert time.monotonic() < deadline
            time.sleep(0.05)
        # The crashed owner's pid, now another live process's (the holder's).
        host, _, rest = _recorded_owner(path, "crashed").partition(":")
        _, _, start = rest.partition(":")
        _record_owner(path, "crashed", ":".join(filter(None, (host, str(holder.pid), start))))
        store = Store(path)
        try:
            crashed, held = store.run("crashed"), store.run("held")
            assert crashed is not None
            assert held is not None
            assert (crashed.status, held.status) == ("interrupted", "running")
            assert not run_owner_alive(crashed)
            assert run_owner_alive(held)
            with pytest.raises(RunBusyError):
                store.delete_run("held")
            assert store.delete_run("crashed")
        finally:
            store.close()
    finally:
        holder.kill()
        holder.wait()


def test_owners_recorded_as_host_and_pid_are_still_read(tmp_path: Path) -> None:
    """Stores written before owners carried a start time name them `host:pid`: such a
    live owner still holds its run, and a dead one's run is interrupted."""
    path = tmp_path / "runs.sqlite"
    for run_id in ("alive", "dead"):
        _new_run(path, run_id)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        set_run_owner(path, "alive", sleeper.pid)
        set_run_owner(path, "dead", dead.pid)
        store = Store(path)
        try:
            shown = {r.id: r.status for r in store.runs()}
            assert shown == {"alive": "running", "dead": "interrupted"}
            alive = store.run("alive")
            assert alive is not None
            assert run_owner_alive(alive)
        finally:
            store.close()
    finally:
        sleeper.kill()
        sleeper.wait()


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")
def test_an_owner_that_exited_unreaped_has_ended(tmp_path: Path) -> None:
    """A zombie (exited, its parent not yet told) still has its pid, but runs nothing."""
    path = tmp_path / "runs.sqlite"
    _new_run(path, "zombie")
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        deadline = time.monotonic() + 60
        while Path(f"/proc/{child.pid}/stat").read_bytes().rpartition(b")")[2].split()[0] \
                != b"Z":
            assert time.monotonic() < deadline
            time.sleep(0.05)
        set_run_owner(path, "zombie", child.pid)
        store = Store(path)
        try:
            info = store.run("zombie")
            assert info is not None
            assert info.status == "interrupted"
            assert not run_owner_alive(info)
        finally:
            store.close()
    finally:
        child.wait()


def test_a_queued_run_whose_process_died_is_shown_interrupted(tmp_path: Path) -> None:
    """A run queued (pending) in a server that died is taken up by no one until it is
    resumed: it is not shown as waiting."""
    path = tmp_path / "runs.sqlite"
    subprocess.run([sys.executable, "-c", "import sys; from orchestrator.models import RunInfo;"
                    " from orchestrator.store import Store; Store(sys.argv[1]).create_run("
                    "RunInfo(id='queued'), {'total': 0}, [])", str(path)],
                   check=True, timeout=60)
    store = Store(path)
    try:
        assert store.status("queued") == "pending"
        info = store.run("queued")
        assert info is not None
        assert info.status == "interrupted"
        assert [r.id for r in store.unfinished_runs()] == ["queued"]
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


PAGE = "<html><body><p>The river rose overnight and the bridge was closed.</p></body></html>"
GOLD = "The river rose overnight and the bridge was closed."


def _delete(run_id: str, store: Path, *flags: str) -> str:
    done = CliRunner().invoke(cli_app, ["runs", "delete", run_id, *flags, "--store", str(store)])
    assert done.exit_code == 0, done.output
    return done.output


def test_runs_delete_removes_the_upload_of_a_run_posted_to_the_api(tmp_path: Path) -> None:
    """An archive posted to `serve` is unpacked into a folder of its run; `runs delete`
    removes it as DELETE /runs/{id} does, and nothing of another run."""
    store, uploads, out = tmp_path / "runs.sqlite", tmp_path / "uploads", tmp_path / "out"
    config = RunConfig(store=store, output_folder=out, services=["bte"], retries=0,
                       mode="embedded")
    archive = tar_bytes([("set/html/p1.html", PAGE.encode()),
                         ("set/content/p1.txt", GOLD.encode())])
    with TestClient(create_app(ApiSettings(resume=False, uploads=uploads), config)) as client:
        ids = []
        for _ in range(2):
            reply = client.post("/runs", files={"archive": ("set.tar.gz", archive,
                                                            "application/octet-stream")})
            assert reply.status_code == 202, reply.text
            ids.append(reply.json()["id"])
        deadline = time.monotonic() + 60
        while {client.get(f"/runs/{i}").json()["status"] for i in ids} != {"finished"}:
            assert time.monotonic() < deadline, [client.get(f"/runs/{i}").json() for i in ids]
            time.sleep(0.1)
    deleted, other = ids
    assert (uploads / deleted / "set" / "html" / "p1.html").is_file()
    assert (out / deleted).is_dir()
    _delete(deleted, store)
    assert not (uploads / deleted).exists()
    assert not (out / deleted).exists()
    assert (uploads / other / "set" / "html" / "p1.html").is_file()
    assert (out / other).is_dir()
    runs = Store(store)
    assert [r.id for r in runs.runs()] == [other]
    runs.close()
    assert "its outputs stay in" in _delete(other, store, "--keep-outputs")
    assert not (uploads / other).exists()  # the upload goes; the outputs were asked to stay
    assert (out / other).is_dir()


def test_deleting_a_run_removes_no_folder_it_does_not_own(tmp_path: Path) -> None:
    """Only a folder named after the run is its upload: a stored spec that says a test
    set in a shared folder is the run's own has that folder kept."""
    shared = write_test_set(tmp_path / "datasets" / "set", {"p1": (PAGE, GOLD)})
    store = Store(tmp_path / "runs.sqlite")
    spec = RunSpec(datasets=[], services=["bte"], output_folder=str(tmp_path / "out"))
    source = folder_source("set", shared / "html", shared / "content", None,
                           roots=[shared.parent], owned=True)
    run_id = create_run(store, spec, [source])
    store.close()
    (tmp_path / "out" / run_id).mkdir(parents=True)
    _delete(run_id, tmp_path / "runs.sqlite")
    assert (shared / "html" / "p1.html").is_file()
    assert not (tmp_path / "out" / run_id).exists()
