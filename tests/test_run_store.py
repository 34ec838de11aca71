"""Runs and their store: one store per user in the platform's data folder, runs whose
process died shown as interrupted, `--resume` saying which store holds a run, a run
taken over by one process only however many resume it at once, a deleted run leaving
none of its files behind, whichever way it was deleted, and an upload a killed server
left without its run removed by the next server."""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Barrier
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from orchestrator import store as store_module
from orchestrator.api import ApiSettings, create_app
from orchestrator.cli import app as cli_app
from orchestrator.config import RunConfig, default_store_path, load_config
from orchestrator.launcher import free_port, wait_healthy
from orchestrator.models import RunInfo
from orchestrator.runner import RunSpec, create_run, folder_source
from orchestrator.store import RunBusyError, Store
from orchestrator.testsets import LabelledPage, in_memory
from tests.helpers import (
    REPO,
    one_page_runs,
    run_processes_at_once,
    set_run_owner,
    tar_bytes,
    write_test_set,
)


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
    """On this host a run's owner is its process's pid and start time, so a
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
            assert not store.run_owner_alive(crashed)
            assert store.run_owner_alive(held)
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
            assert store.run_owner_alive(alive)
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
            assert not store.run_owner_alive(info)
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
        refused = client.post("/runs", data={"services": "nope"}, files={
            "archive": ("set.tar.gz", archive, "application/octet-stream")})
        assert refused.status_code == 422, refused.text
        deadline = time.monotonic() + 60
        while {client.get(f"/runs/{i}").json()["status"] for i in ids} != {"finished"}:
            assert time.monotonic() < deadline, [client.get(f"/runs/{i}").json() for i in ids]
            time.sleep(0.1)
    with sqlite3.connect(store) as db:  # recorded or refused, no upload stays reserved
        assert db.execute("SELECT COUNT(*) FROM uploads").fetchone() == (0,)
    assert sorted(p.name for p in uploads.iterdir()) == sorted(ids)
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


# ---------------------------------------------------------------- taking a run over

def _claim_at_once(path: Path, run_id: str, start: Barrier, done: Barrier,
                   won: Queue[bool]) -> None:
    store = Store(path)
    seen = store.run(run_id)
    assert seen is not None
    start.wait()
    won.put(store.claim_run(run_id, "running", seen) is None)
    done.wait()  # alive until every other process has tried: it holds the run
    store.close()


def test_of_processes_resuming_one_run_at_once_one_takes_it(tmp_path: Path) -> None:
    """A `serve` starting and a `run --resume` at the same moment: each finds the run's
    owner gone, and one of them takes it."""
    context = multiprocessing.get_context("fork")
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    for attempt in range(3):
        path = tmp_path / f"{attempt}.sqlite"
        _new_run(path, "r")
        set_run_owner(path, "r", dead.pid)
        start, done, won = context.Barrier(4), context.Barrier(4), context.Queue()
        run_processes_at_once(context, _claim_at_once, (path, "r", start, done, won))
        assert sorted(won.get(timeout=5) for _ in range(4)) == [False, False, False, True]


def _take_over(path: Path, run_id: str, owner: str) -> bool:
    """Another process taking the run over now, as claim_run writes it: whether it could
    (not while this process holds the store's write lock)."""
    db = sqlite3.connect(path, timeout=0.2)
    try:
        (info,) = db.execute("SELECT info FROM runs WHERE id = ?", (run_id,)).fetchone()
        db.execute("UPDATE runs SET status = 'running', info = ? WHERE id = ?",
                   (json.dumps(json.loads(info) | {"status": "running", "owner": owner}),
                    run_id))
        db.commit()
        return True
    except sqlite3.OperationalError:  # locked: it waits, then finds the run taken
        return False
    finally:
        db.close()


def test_a_run_taken_between_the_check_and_the_claim_is_not_taken_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Whenever another process takes the run over while this one decides (its owner
    found gone), only one of them holds it: checking and recording are one claim."""
    path = tmp_path / "runs.sqlite"
    _new_run(path, "r")
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    set_run_owner(path, "r", dead.pid)
    other = f"{socket.gethostname()}:{os.getppid()}"  # a live process of this host
    taken: list[bool] = []
    alive = store_module._process_alive

    def deciding(pid: int, start: str | None) -> bool:
        if pid == dead.pid and not taken:
            taken.append(_take_over(path, "r", other))
        return alive(pid, start)

    store = Store(path)
    try:
        seen = store.run("r")
        assert seen is not None
        assert seen.status == "interrupted"
        monkeypatch.setattr(store_module, "_process_alive", deciding)
        holder = store.claim_run("r", "running", seen)
        monkeypatch.undo()
        info = store.run("r")
    finally:
        store.close()
    assert info is not None
    assert taken == [False]  # the claim holds the store's write lock while it checks
    assert holder is None
    assert (info.owner or "").startswith(f"{socket.gethostname()}:{os.getpid()}:")


def test_a_claim_takes_what_no_one_holds_and_leaves_what_is_held_or_done(
        tmp_path: Path) -> None:
    """A run whose process died, or that failed, is taken and recorded as this
    process's; one a live process holds, or that another host's process took since it
    was read, is not; a finished or cancelled one is left as it is."""
    path = tmp_path / "runs.sqlite"
    for run_id in ("dead", "failed", "held", "moved", "finished", "cancelled"):
        _new_run(path, run_id)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    set_run_owner(path, "dead", dead.pid)
    set_run_owner(path, "failed", os.getppid(), "failed")
    set_run_owner(path, "held", os.getppid())
    set_run_owner(path, "finished", dead.pid, "finished")
    set_run_owner(path, "cancelled", dead.pid, "cancelled")
    store = Store(path)
    try:
        seen = {info.id: info for info in store.runs()}
        _record_owner(path, "moved", "elsewhere:7:1")  # another host's server took it
        me = f"{socket.gethostname()}:{os.getpid()}"
        for run_id in ("dead", "failed"):
            assert store.claim_run(run_id, "pending", seen[run_id]) is None
            taken = store.run(run_id)
            assert taken is not None
            assert taken.status == "pending"
            assert (taken.owner or "").startswith(me + ":")
        for run_id, status in (("held", "running"), ("moved", "pending"),
                               ("finished", "finished"), ("cancelled", "cancelled")):
            holder = store.claim_run(run_id, "running", seen[run_id])
            assert holder is not None
            assert holder.status == status
            assert store.status(run_id) == status
        assert _recorded_owner(path, "moved") == "elsewhere:7:1"
        with pytest.raises(KeyError):
            store.claim_run("nothing", "running", seen["dead"])
    finally:
        store.close()


def test_resume_of_a_run_another_process_took_meanwhile_exits_1_and_runs_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`run --resume` finds the owner gone, and another process (a `serve` starting)
    takes the run before this one starts it: it says so and runs nothing."""
    path = tmp_path / "runs.sqlite"
    store = Store(path)
    run_id = create_run(store, RunSpec(datasets=[], services=["bte"],
                                       output_folder=str(tmp_path / "out")),
                        memory=[in_memory("set", [LabelledPage("set", "p", PAGE, GOLD)])])
    store.close()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    set_run_owner(path, run_id, dead.pid)
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])

    def services_checked(*args: object) -> None:
        set_run_owner(path, run_id, other.pid)  # the other process took it meanwhile

    def never(*args: object, **kwargs: object) -> None:
        raise AssertionError("the run was executed twice")

    monkeypatch.setattr("orchestrator.commands_run._check_called_services", services_checked)
    monkeypatch.setattr("orchestrator.runner.execute_run", never)
    monkeypatch.setattr("orchestrator.commands_run.LocalStack", never)
    try:
        done = CliRunner().invoke(cli_app, ["run", "--resume", run_id, "--store", str(path)],
                                  terminal_width=200)
        assert done.exit_code == 1, done.output
        output = " ".join(done.output.split())
        assert f"run {run_id} is running in another process" in output
        assert f"{socket.gethostname()}:{other.pid}), which holds it" in output
        assert _recorded_owner(path, run_id) == f"{socket.gethostname()}:{other.pid}"
    finally:
        other.kill()
        other.wait()


def test_a_server_starting_resumes_no_run_another_process_took_meanwhile(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A `serve` lists the runs whose owner is gone; one that another process (a `run
    --resume`) takes before this server does stays that process's, not started twice."""
    path = tmp_path / "runs.sqlite"
    taken, free = one_page_runs(path, tmp_path / "out", 2)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    for run_id in (taken, free):
        set_run_owner(path, run_id, dead.pid)
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    listed = Store.unfinished_runs

    def listing(store: Store) -> list[RunInfo]:
        runs = listed(store)
        set_run_owner(path, taken, other.pid)  # the other process took it meanwhile
        return runs

    monkeypatch.setattr(Store, "unfinished_runs", listing)
    started: list[str] = []
    app = create_app(ApiSettings(resume=True), RunConfig(store=path,
                                                          output_folder=tmp_path / "out"))
    app.state.api.start_task = lambda run_id, urls=None: started.append(run_id)
    try:
        with TestClient(app) as client:
            shown = {r["id"]: r["status"] for r in client.get("/runs").json()["runs"]}
        assert started == [free]
        assert shown == {taken: "running", free: "pending"}
        assert _recorded_owner(path, taken) == f"{socket.gethostname()}:{other.pid}"
    finally:
        other.kill()
        other.wait()


# ---------------------------------------------------------------- uploads left by a crash

_DAY_AGO = time.time() - 2 * 24 * 3600


def _start_server(env: dict[str, str]) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "orchestrator.api:app_factory", "--factory",
         "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"],
        env={**os.environ, **env}, cwd=REPO, stdin=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    wait_healthy(url, 60, server)
    return server, url


def test_an_upload_a_killed_server_left_without_its_run_goes_when_a_server_starts(
        tmp_path: Path) -> None:
    """A server SIGKILLed after it unpacked an upload and before it recorded the run
    leaves the upload's folder, which no run refers to: the next server on the store
    removes it. The upload of another store's run beside it stays, however old."""
    store, uploads = tmp_path / "runs.sqlite", tmp_path / "uploads"
    others = write_test_set(uploads / "0123456789ab" / "set", {"p1": (PAGE, GOLD)})
    os.utime(uploads / "0123456789ab", (_DAY_AGO, _DAY_AGO))
    silent = socket.socket()  # a service that never answers: the post waits on its /info
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    env = {"BOILERBENCH_STORE": str(store), "BOILERBENCH_OUTPUT_FOLDER": str(tmp_path / "out"),
           "BOILERBENCH_API_UPLOADS": str(uploads), "BOILERBENCH_SERVICES": "justext",
           "BOILERBENCH_URLS": json.dumps(
               {"justext": f"http://127.0.0.1:{silent.getsockname()[1]}"})}
    server, url = _start_server(env)
    archive = tar_bytes([("set/html/p1.html", PAGE.encode()),
                         ("set/content/p1.txt", GOLD.encode())])
    posting = threading.Thread(target=_post_quietly, args=(url, archive), daemon=True)
    try:
        posting.start()
        deadline = time.monotonic() + 30
        while not (unpacked := [p for p in uploads.iterdir() if p.name != "0123456789ab"
                                and not p.name.endswith(".partial")]):
            assert time.monotonic() < deadline, "the upload was never unpacked"
            time.sleep(0.01)
        server.kill()  # unpacked, its run not recorded
        server.wait(10)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait(10)
        silent.close()
    posting.join(30)
    assert (unpacked[0] / "set" / "html" / "p1.html").is_file()  # what the kill left
    config = RunConfig(store=store, output_folder=tmp_path / "out")
    with TestClient(create_app(ApiSettings(resume=False, uploads=uploads), config)) as client:
        assert client.get("/runs").json()["runs"] == []
    assert sorted(p.name for p in uploads.iterdir()) == ["0123456789ab"]
    assert (others / "html" / "p1.html").is_file()
    opened = Store(store)
    assert opened.abandoned_uploads() == []
    opened.close()


def _post_quietly(url: str, archive: bytes) -> None:
    """POST the archive to a server that will be killed while it answers."""
    with contextlib.suppress(httpx.HTTPError):
        httpx.post(f"{url}/runs", timeout=30,
                   files={"archive": ("set.tar.gz", archive, "application/octet-stream")})


_UNPACKING = """
import sys, time
from pathlib import Path
from orchestrator.store import Store
Store(sys.argv[1]).reserve_upload(sys.argv[2], Path(sys.argv[3]))
print("ready", flush=True)
time.sleep(60)
"""


def test_an_upload_another_live_server_is_unpacking_is_left_to_it(tmp_path: Path) -> None:
    """Two servers on one store: one starting removes no upload the other is unpacking
    (reserved in the store, its run not yet recorded); once that server has died, the
    next start removes it, and the half-unpacked `.partial` with it."""
    store, uploads = tmp_path / "runs.sqlite", tmp_path / "uploads"
    Store(store).close()
    folder = uploads / "0123456789ab"
    config = RunConfig(store=store, output_folder=tmp_path / "out")
    unpacking = subprocess.Popen([sys.executable, "-c", _UNPACKING, str(store), folder.name,
                                  str(folder)], stdout=subprocess.PIPE, cwd=REPO)
    try:
        assert unpacking.stdout is not None
        assert unpacking.stdout.readline().strip() == b"ready"
        (folder / "set" / "html").mkdir(parents=True)
        (uploads / f"{folder.name}.partial").mkdir()
        app = create_app(ApiSettings(resume=False, uploads=uploads), config)
        with TestClient(app):
            pass
        assert folder.is_dir()
        assert (uploads / f"{folder.name}.partial").is_dir()
    finally:
        unpacking.kill()
        unpacking.wait()
    with TestClient(create_app(ApiSettings(resume=False, uploads=uploads), config)):
        pass
    assert list(uploads.iterdir()) == []
