"""Owners on another host: a process that owns runs or uploads in a store beats in it,
so servers of two hosts sharing a store neither run one run twice nor wait a day to
remove a dead one's uploads. "Another host" is a child process whose hostname is
another, or an owner string of another host with a heartbeat row the test writes."""

from __future__ import annotations

import logging
import sqlite3
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from orchestrator import store as store_module
from orchestrator.api import ApiSettings, create_app
from orchestrator.cli import app as cli_app
from orchestrator.config import RunConfig
from orchestrator.models import RunInfo
from orchestrator.store import HEARTBEAT_STALE_S, RunBusyError, Store
from tests.helpers import REPO, one_page_runs, set_run_owner

OTHER_HOST = """
import socket, sys
from pathlib import Path
socket.gethostname = lambda: "otherhost"
from orchestrator import store as store_module
store_module.HEARTBEAT_S = float(sys.argv[2])
store = store_module.Store(sys.argv[1])
if sys.argv[3] == "run":
    store.set_status(sys.argv[4], "running")
else:
    store.reserve_upload(sys.argv[4], Path(sys.argv[5]))
print("ready", flush=True)
sys.stdin.readline()
store.close()
"""
"""A server of another host that takes a run over, or reserves an upload, and keeps
the store open until a line comes (then closes it cleanly) or it is killed."""


def _other_host(path: Path, *args: str, beat_s: float = 5.0) -> subprocess.Popen[bytes]:
    process = subprocess.Popen([sys.executable, "-c", OTHER_HOST, str(path), str(beat_s),
                                *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=REPO)
    assert process.stdout is not None
    assert process.stdout.readline().strip() == b"ready"
    return process


def _beats(path: Path) -> dict[str, float]:
    with sqlite3.connect(path) as db:
        return dict(db.execute("SELECT owner, beat FROM heartbeats").fetchall())


def _set_beat(path: Path, owner: str, age_s: float) -> None:
    """Record `owner`'s last heartbeat as `age_s` old."""
    with sqlite3.connect(path) as db:
        db.execute("INSERT OR REPLACE INTO heartbeats (owner, beat) VALUES (?, ?)",
                   (owner, time.time() - age_s))


def _new_run(path: Path, run_id: str) -> None:
    store = Store(path)
    store.create_run(RunInfo(id=run_id, services=["justext"]), {"total": 0}, [])
    store.close()


def test_a_run_another_hosts_live_server_holds_is_taken_once_its_heartbeat_is_stale(
        tmp_path: Path) -> None:
    """Another host's server runs the run: this host may neither take it over nor
    delete it. Killed, it beats no more; once its last beat is stale the run shows
    interrupted and is taken."""
    path = tmp_path / "runs.sqlite"
    _new_run(path, "r")
    other = _other_host(path, "run", "r")
    try:
        store = Store(path)
        try:
            seen = store.run("r")
            assert seen is not None
            assert seen.status == "running"
            assert (seen.owner or "").startswith("otherhost:")
            assert store.run_owner_alive(seen)
            holder = store.claim_run("r", "pending", seen)
            assert holder is not None
            assert holder.owner == seen.owner
            with pytest.raises(RunBusyError):
                store.delete_run("r")
            other.kill()
            other.wait()
            # Dead, but its last beat is fresh: still held, as a beat may come late.
            assert store.claim_run("r", "pending", seen) is not None
            assert seen.owner is not None
            _set_beat(path, seen.owner, HEARTBEAT_STALE_S + 1)
            stale = store.run("r")
            assert stale is not None
            assert stale.status == "interrupted"
            assert not store.run_owner_alive(stale)
            assert store.claim_run("r", "running", stale) is None
            taken = store.run("r")
            assert taken is not None
            assert (taken.status, taken.owner) == ("running", store_module._this_owner())
        finally:
            store.close()
    finally:
        other.kill()
        other.wait()


def test_the_heartbeat_goes_on_while_the_store_is_open_and_ends_on_a_clean_close(
        tmp_path: Path) -> None:
    path = tmp_path / "runs.sqlite"
    _new_run(path, "r")
    other = _other_host(path, "run", "r", beat_s=0.05)
    try:
        (owner, first), = ((o, b) for o, b in _beats(path).items() if b > 0)
        assert owner.startswith("otherhost:")
        deadline = time.monotonic() + 60
        while _beats(path)[owner] == first:
            assert time.monotonic() < deadline, "no second heartbeat"
            time.sleep(0.05)
        assert other.stdin is not None
        other.stdin.close()  # a clean close
        assert other.wait(60) == 0
    finally:
        other.kill()
        other.wait()
    assert _beats(path)[owner] == 0.0
    reading = Store(path)  # the owner is known to have ended: its run waits for a resume
    assert [(r.id, r.status) for r in reading.runs()] == [("r", "interrupted")]
    reading.close()


def test_a_clean_close_ends_the_heartbeat_once_no_store_of_the_process_beats(
        tmp_path: Path) -> None:
    path = tmp_path / "runs.sqlite"
    first, second = Store(path), Store(path)
    first.create_run(RunInfo(id="r"), {"total": 0}, [])
    second.set_status("r", "running")
    me = store_module._this_owner()
    assert list(_beats(path)) == [me]
    first.close()
    assert list(_beats(path)) == [me]  # the second still holds the run
    second.close()
    assert _beats(path) == {me: 0.0}
    reading = Store(path)  # reading owns nothing: no heartbeat
    assert [r.id for r in reading.runs()] == ["r"]
    reading.close()
    assert _beats(path) == {me: 0.0}


def test_a_process_that_owns_runs_exits_without_closing_its_store(tmp_path: Path) -> None:
    """The heartbeat thread never keeps a process alive; the row it leaves goes stale."""
    path = tmp_path / "runs.sqlite"
    subprocess.run([sys.executable, "-c", "import sys; from orchestrator.models import RunInfo;"
                    " from orchestrator.store import Store; Store(sys.argv[1]).create_run("
                    "RunInfo(id='r'), {}, [])", str(path)], check=True, timeout=60, cwd=REPO)
    assert len(_beats(path)) == 1


def test_a_failed_heartbeat_is_logged_once_and_never_raised(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    store = Store(tmp_path / "runs.sqlite")
    store.create_run(RunInfo(id="r"), {"total": 0}, [])
    store._db.execute("PRAGMA query_only = ON")  # as a store gone read-only is
    with caplog.at_level(logging.WARNING, logger="boilerbench.orchestrator"):
        for _ in range(3):
            store._beat_once(store_module._this_owner())
    store.close()
    assert [r.getMessage() for r in caplog.records if "heartbeat" in r.getMessage()] == [
        f"the heartbeat of this process in the store {tmp_path / 'runs.sqlite'} failed "
        f"(attempt to write a readonly database); another host takes it for ended once "
        f"its last beat is {HEARTBEAT_STALE_S:g} s old"]


def test_owners_of_another_host_by_their_heartbeat_or_as_before_without_one(
        tmp_path: Path) -> None:
    """A fresh heartbeat holds the run, a stale one has ended; without a row (an older
    version's owner) nothing is known: the run shows as recorded and is taken."""
    path = tmp_path / "runs.sqlite"
    for run_id, owner in (("fresh", "a:1:1"), ("stale", "b:2:2"), ("unknown", "c:3:3")):
        _new_run(path, run_id)
        set_run_owner(path, run_id, owner)
    _set_beat(path, "a:1:1", 1)
    _set_beat(path, "b:2:2", HEARTBEAT_STALE_S + 1)
    store = Store(path)
    try:
        seen = {info.id: info for info in store.runs()}
        assert {i: info.status for i, info in seen.items()} == {
            "fresh": "running", "stale": "interrupted", "unknown": "running"}
        assert [i for i, info in seen.items() if store.run_owner_alive(info)] == ["fresh"]
        assert {i: store.claim_run(i, "pending", info) is None for i, info in seen.items()} \
            == {"fresh": False, "stale": True, "unknown": True}
    finally:
        store.close()


def test_uploads_of_another_hosts_dead_server_go_once_its_heartbeat_is_stale(
        tmp_path: Path) -> None:
    """Not after a day: once the server that reserved it beats no more. An upload whose
    owner records no heartbeat (an older version's) still waits the day."""
    path = tmp_path / "runs.sqlite"
    store = Store(path)
    now = datetime.now(UTC).isoformat()
    days_ago = (datetime.now(UTC) - timedelta(days=2)).isoformat()
    with sqlite3.connect(path) as db:
        db.executemany("INSERT INTO uploads (run_id, folder, owner, created) "
                       "VALUES (?, ?, ?, ?)",
                       [("fresh", "/u/fresh", "a:1:1", now), ("stale", "/u/stale", "b:2:2", now),
                        ("unknown", "/u/unknown", "c:3:3", now),
                        ("old", "/u/old", "c:3:3", days_ago)])
    _set_beat(path, "a:1:1", 1)
    _set_beat(path, "b:2:2", HEARTBEAT_STALE_S + 1)
    try:
        assert sorted(run_id for run_id, _ in store.abandoned_uploads()) == ["old", "stale"]
    finally:
        store.close()


def test_a_server_starting_removes_the_upload_another_hosts_dead_server_left(
        tmp_path: Path) -> None:
    store, uploads = tmp_path / "runs.sqlite", tmp_path / "uploads"
    Store(store).close()
    folder = uploads / "0123456789ab"
    (folder / "set" / "html").mkdir(parents=True)
    config = RunConfig(store=store, output_folder=tmp_path / "out")
    other = _other_host(store, "upload", folder.name, str(folder))
    try:
        with TestClient(create_app(ApiSettings(resume=False, uploads=uploads), config)):
            pass
        assert folder.is_dir()  # its server is unpacking it
    finally:
        other.kill()
        other.wait()
    (owner,) = _beats(store)
    _set_beat(store, owner, HEARTBEAT_STALE_S + 1)
    with TestClient(create_app(ApiSettings(resume=False, uploads=uploads), config)):
        pass
    assert list(uploads.iterdir()) == []


def test_a_server_starting_resumes_no_run_another_hosts_live_server_holds(
        tmp_path: Path) -> None:
    """The server of the new host resumes the runs whose owner's heartbeat is stale;
    the ones a live server of another host holds stay its (resumed by the next start
    on the store once that server has ended)."""
    path = tmp_path / "runs.sqlite"
    held, free = one_page_runs(path, tmp_path / "out", 2)
    set_run_owner(path, held, "a:1:1")
    set_run_owner(path, free, "b:2:2")
    _set_beat(path, "a:1:1", 1)
    _set_beat(path, "b:2:2", HEARTBEAT_STALE_S + 1)
    started: list[str] = []
    app = create_app(ApiSettings(resume=True), RunConfig(store=path,
                                                          output_folder=tmp_path / "out"))
    app.state.api.start_task = lambda run_id, urls=None: started.append(run_id)
    with TestClient(app) as client:
        shown = {r["id"]: r["status"] for r in client.get("/runs").json()["runs"]}
    assert started == [free]
    assert shown == {held: "running", free: "pending"}


def test_resume_of_a_run_another_hosts_live_server_holds_exits_1(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "runs.sqlite"
    (run_id,) = one_page_runs(path, tmp_path / "out", 1)
    set_run_owner(path, run_id, "a:1:1")
    _set_beat(path, "a:1:1", 1)

    def never(*args: object, **kwargs: object) -> None:
        raise AssertionError("the run was executed twice")

    monkeypatch.setattr("orchestrator.runner.execute_run", never)
    monkeypatch.setattr("orchestrator.commands_run.LocalStack", never)
    done = CliRunner().invoke(cli_app, ["run", "--resume", run_id, "--store", str(path)],
                              terminal_width=200)
    assert done.exit_code == 1, done.output
    assert f"run {run_id} is running in another process (a:1:1)" in " ".join(
        done.output.split())


def test_a_store_of_the_previous_layout_gets_heartbeats(tmp_path: Path) -> None:
    """A store written before heartbeats (no such table, the same SCHEMA_VERSION) opens,
    and a process that takes a run in it beats."""
    path = tmp_path / "runs.sqlite"
    _new_run(path, "r")
    with sqlite3.connect(path) as db:
        db.execute("DROP TABLE heartbeats")
    store = Store(path)
    try:
        assert store.claim_run("r", "running", RunInfo(id="r", status="running")) is None
        assert list(_beats(path)) == [store_module._this_owner()]
    finally:
        store.close()
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == store_module.SCHEMA_VERSION
