"""The SQLite store: one transaction per page result, no duplicates, resume after a kill;
a store that cannot be used is one line in the CLI, and 503 or 507 from the API."""

from __future__ import annotations

import multiprocessing
import sqlite3
import subprocess
import sys
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Barrier
from pathlib import Path

import httpx2
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from orchestrator.api import ApiSettings, create_app
from orchestrator.config import RunConfig
from orchestrator.models import Counts, PageResult, PageScores, RunInfo
from orchestrator.store import Store, StoreError
from orchestrator.testsets import LabelledPage
from tests.helpers import run_processes_at_once, store_of_runs


def _result(page_id: str, service: str = "justext", status: str = "ok") -> PageResult:
    counts = Counts(tp=3, fp=1, fn=2, tn=10)
    return PageResult(run_id="r1", dataset="d", page_id=page_id, service=service,
                      status=status, text="some text",
                      scores=PageScores(word=counts, word_bag=counts))


def _new(path: Path) -> Store:
    store = Store(path)
    store.create_run(RunInfo(id="r1", datasets=["d"], services=["justext", "bte"]),
                     {"total": 4}, ["d: html/x.html has no content/x.txt"],
                     [LabelledPage("d", "p1", b"<p>a</p>", "a"),
                      LabelledPage("d", "p2", "<p>b</p>", "b", "<rss/>")])
    return store


def test_results_round_trip_and_are_never_recorded_twice(tmp_path: Path) -> None:
    store = _new(tmp_path / "s.sqlite")
    assert store.add_result(_result("p1"))
    assert not store.add_result(_result("p1").model_copy(update={"text": "changed"}))
    assert store.add_result(_result("p1", "bte", "error"))
    (first, second) = store.results("r1")
    assert first.service == "bte"
    assert first.status == "error"
    assert second.text == "some text"
    assert second.scores is not None
    assert second.scores.word.tp == 3
    assert store.done_keys("r1") == {("d", "p1", "justext"), ("d", "p1", "bte")}
    assert store.counts("r1") == {"ok": 1, "error": 1, "skipped": 0, "done": 2, "total": 4}
    assert store.service_counts("r1")["bte"] == {"ok": 0, "error": 1, "skipped": 0}


def test_inputs_and_run_state_survive_reopening(tmp_path: Path) -> None:
    store = _new(tmp_path / "s.sqlite")
    store.add_result(_result("p1"))
    store.set_status("r1", "running")
    store.add_warnings("r1", ["d/p9: the page is not HTML"])
    store.close()
    again = Store(tmp_path / "s.sqlite")
    info = again.run("r1")
    assert info is not None
    assert info.status == "running"
    assert info.counts["done"] == 1
    assert [r.id for r in again.unfinished_runs()] == ["r1"]
    pages = again.inputs("r1")["d"]
    assert [(p.id, p.html, p.feed) for p in pages] == [("p1", b"<p>a</p>", None),
                                                       ("p2", b"<p>b</p>", "<rss/>")]
    assert again.details("r1")["warnings"] == ["d: html/x.html has no content/x.txt",
                                               "d/p9: the page is not HTML"]
    again.set_status("r1", "finished")
    assert again.unfinished_runs() == []
    assert again.run("nope") is None


def test_a_failed_transaction_leaves_nothing_behind(tmp_path: Path) -> None:
    store = _new(tmp_path / "s.sqlite")
    row = "INSERT INTO page_results VALUES ('r1','d','p1','bte','ok','{}','now')"

    def two_inserts() -> None:
        with store._transaction() as db:
            db.execute(row)
            db.execute(row)

    with pytest.raises(sqlite3.IntegrityError):
        two_inserts()
    assert store.done_keys("r1") == set()
    with pytest.raises(sqlite3.IntegrityError):  # a duplicate run id: no partial inputs
        store.create_run(RunInfo(id="r1"), {}, [], [LabelledPage("d", "p9", b"x", "x")])
    assert "p9" not in [p.id for p in store.inputs("r1")["d"]]


_WRITER = """
import os, sys
from orchestrator.store import Store
from orchestrator.models import PageResult
store = Store(sys.argv[1])
for i in range(10_000):
    store.add_result(PageResult(run_id="r1", dataset="d", page_id=f"p{i}", service="justext",
                                status="ok", text="x" * 2000))
    if i == 50:
        print("ready", flush=True)
"""


def test_killed_writer_leaves_only_whole_rows(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite"
    _new(path).close()
    writer = subprocess.Popen([sys.executable, "-c", _WRITER, str(path)],
                              stdout=subprocess.PIPE, cwd=Path(__file__).resolve().parent.parent)
    assert writer.stdout is not None
    assert writer.stdout.readline().strip() == b"ready"
    writer.kill()  # SIGKILL in the middle of the writes
    writer.wait()
    store = Store(path)
    results = store.results("r1")
    assert len(results) >= 51
    assert all(r.text == "x" * 2000 for r in results)  # every row parses and is whole
    assert store.counts("r1")["done"] == len(results)


def _open_at_once(path: Path, barrier: Barrier, errors: Queue[str]) -> None:
    barrier.wait()
    try:
        Store(path).close()
    except StoreError as exc:
        errors.put(str(exc))


def test_processes_opening_a_new_store_at_once_all_get_it(tmp_path: Path) -> None:
    """Two commands started together on a new store (a `run` and a `runs list`, say):
    neither may find the file the other is creating empty and refuse it as damaged."""
    context = multiprocessing.get_context("fork")
    for attempt in range(5):
        path = tmp_path / str(attempt) / "runs.sqlite"
        barrier, errors = context.Barrier(4), context.Queue()
        run_processes_at_once(context, _open_at_once, (path, barrier, errors))
        assert errors.empty(), errors.get()
        assert [p.name for p in path.parent.iterdir() if not p.name.startswith("runs.")] == []
        store = Store(path)
        assert store.runs() == []
        store.close()


def test_a_store_locked_by_another_process_is_one_line_not_a_traceback(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from orchestrator.cli import app
    from tests.helpers import SAMPLE

    path = tmp_path / "store.sqlite"
    Store(path).close()
    monkeypatch.setattr("orchestrator.store.LOCK_WAIT_S", 0.3)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(StoreError, match="locked by another process"):
            Store(path).create_run(RunInfo(id="r"), {}, [])
        done = CliRunner().invoke(app, [
            "run", "--in-process", "--services", "bte", "--dataset", str(SAMPLE),
            "--store", str(path), "--output", str(tmp_path / "out")])
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert done.exit_code == 1, done.output
    assert "locked by another process" in done.output
    assert "Traceback" not in done.output
    assert not isinstance(done.exception, sqlite3.Error)


def _cli(*args: str) -> tuple[int, str]:
    from typer.testing import CliRunner

    from orchestrator.cli import app

    done = CliRunner().invoke(app, list(args))
    assert "Traceback" not in done.output
    assert not isinstance(done.exception, sqlite3.Error), done.exception
    return done.exit_code, done.output


def test_a_damaged_page_inside_the_store_is_one_line_not_a_traceback(tmp_path: Path) -> None:
    path = tmp_path / "store.sqlite"
    store_of_runs(path, 50)
    with path.open("r+b") as handle:  # the header is whole, a page of the tables is not
        handle.seek(4096)
        handle.write(b"\xff" * 4096)
    store = Store(path)
    with pytest.raises(StoreError, match="is damaged"):
        store.runs()
    store.close()
    code, output = _cli("runs", "list", "--store", str(path))
    assert code == 1
    assert "is damaged" in output
    assert output.strip().count("\n") <= 1


def test_a_full_disk_keeps_what_was_recorded_and_the_run_resumes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.helpers import SAMPLE

    path = tmp_path / "store.sqlite"
    real_add = Store.add_result
    written: list[str] = []

    def add_until_full(self: Store, result: PageResult) -> bool:
        if len(written) == 4:  # the disk fills: no page more for the store
            pages = self._db.execute("PRAGMA page_count").fetchone()[0]
            self._db.execute(f"PRAGMA max_page_count = {pages}")
            result = result.model_copy(update={"text": "x" * 200_000})
        added = real_add(self, result)
        written.append(result.page_id)
        return added

    monkeypatch.setattr(Store, "add_result", add_until_full)
    code, output = _cli("run", "--in-process", "--services", "bte", "--dataset", str(SAMPLE),
                        "--workers", "1", "--store", str(path), "--output",
                        str(tmp_path / "out"))
    assert code == 1, output
    assert "the disk is full" in output
    run_id = output.split("--resume ")[1].split()[0]
    store = Store(path)
    assert len(store.results(run_id)) == 4  # every result accepted is kept
    store.close()
    monkeypatch.setattr(Store, "add_result", real_add)
    code, output = _cli("run", "--resume", run_id, "--store", str(path))
    assert code == 0, output
    store = Store(path)
    info = store.run(run_id)
    assert info is not None
    assert info.status == "finished"
    assert info.counts["done"] == info.counts["total"] == 13
    store.close()


def test_a_store_that_cannot_be_written_is_named(tmp_path: Path) -> None:
    store = _new(tmp_path / "store.sqlite")
    store._db.execute("PRAGMA query_only = ON")  # as a read-only file is
    with pytest.raises(StoreError, match=r"cannot be written .*readonly"):
        store.add_result(_result("p1"))
    assert store.results("r1") == []
    store.close()
    (tmp_path / "file").write_text("")
    with pytest.raises(StoreError, match="cannot create the store"):
        Store(tmp_path / "file" / "store.sqlite")


def test_another_programs_database_and_a_newer_store_are_refused_untouched(
        tmp_path: Path) -> None:
    other = tmp_path / "places.sqlite"
    db = sqlite3.connect(other)
    db.execute("CREATE TABLE moz_places (id INTEGER)")
    db.commit()
    db.close()
    with pytest.raises(StoreError, match="database of another program"):
        Store(other)
    db = sqlite3.connect(other)
    assert [r[0] for r in db.execute("SELECT name FROM sqlite_master")] == ["moz_places"]
    db.close()
    code, output = _cli("runs", "list", "--store", str(other))
    assert code == 2
    assert "another program" in output

    newer = tmp_path / "newer.sqlite"
    _new(newer).close()
    db = sqlite3.connect(newer)
    assert db.execute("PRAGMA user_version").fetchone()[0] == 1
    db.execute("PRAGMA user_version = 2")
    db.close()
    with pytest.raises(StoreError, match="written by a newer boilerbench"):
        Store(newer)

    older = tmp_path / "older.sqlite"  # made before the version was recorded: the same tables
    _new(older).close()
    db = sqlite3.connect(older)
    db.execute("PRAGMA user_version = 0")
    db.close()
    store = Store(older)
    assert [r.id for r in store.runs()] == ["r1"]
    store.close()


def test_a_checkpoint_cut_by_a_full_disk_is_not_taken_for_a_cut_store(tmp_path: Path) -> None:
    """The file is shorter than its header says, and the pages it lacks are in the
    write-ahead log: SQLite reads such a store whole."""
    source = tmp_path / "source.sqlite"
    _new(source).close()
    db = sqlite3.connect(source, isolation_level=None)
    db.execute("PRAGMA wal_autocheckpoint = 0")
    before = source.read_bytes()
    db.executemany("INSERT INTO runs (id, created, updated, status, info, spec) "
                   "VALUES (?, '', '', 'finished', ?, '{}')",
                   [(f"x{i}", RunInfo(id=f"x{i}").model_dump_json() + " " * 3000)
                    for i in range(40)])
    wal = Path(f"{source}-wal").read_bytes()
    db.execute("PRAGMA wal_checkpoint(FULL)")  # the header now counts the new pages
    after = source.read_bytes()
    db.close()
    assert len(after) > len(before)
    path = tmp_path / "store.sqlite"
    path.write_bytes(after[:len(before)])  # the checkpoint's new pages did not fit
    Path(f"{path}-wal").write_bytes(wal)
    store = Store(path)
    assert len(store.runs()) == 41
    assert store._db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    store.close()


def _api(store: Path) -> FastAPI:
    """The API on `store`; its one service runs in the server's processes (no service
    is asked for before a run is recorded)."""
    config = RunConfig(store=store, output_folder=store.parent / "out", services=["bte"],
                       mode="embedded")
    return create_app(ApiSettings(resume=False), config)


def _post_run(client: TestClient, html: str = "<p>a page</p>") -> httpx2.Response:
    """POST /runs of one page, refused: its reply, an ErrorReply."""
    reply = client.post("/runs", json={"pages": [{"id": "p", "html": html, "gold": "x"}]})
    assert set(reply.json()) == {"error", "detail"}, reply.text
    return reply


def _api_store(app: FastAPI) -> Store:
    store: Store = app.state.api.store
    return store


def test_the_api_answers_a_full_disk_with_507_and_keeps_what_was_recorded(
        tmp_path: Path) -> None:
    path = tmp_path / "store.sqlite"
    app = _api(path)
    with TestClient(app) as client:
        db = _api_store(app)._db
        pages = db.execute("PRAGMA page_count").fetchone()[0]
        db.execute(f"PRAGMA max_page_count = {pages}")  # the disk fills
        reply = _post_run(client, "<p>" + "x" * 200_000 + "</p>")
        db.execute("PRAGMA max_page_count = 1000000")
        runs = client.get("/runs").json()["runs"]
    assert reply.status_code == 507, reply.text
    assert reply.json()["error"] == "store_full"
    assert f"the store {path} cannot be written: the disk is full" in reply.json()["detail"]
    assert runs == []  # the write rolled back whole


def test_the_api_answers_a_store_it_cannot_use_with_503(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    damaged = tmp_path / "damaged.sqlite"
    store_of_runs(damaged, 50)
    with damaged.open("r+b") as handle:  # the header is whole, a page of the tables is not
        handle.seek(4096)
        handle.write(b"\xff" * 4096)
    with TestClient(_api(damaged)) as client:
        reply = client.get("/runs")
    assert reply.status_code == 503, reply.text
    assert reply.json() == {"error": "store_unavailable", "detail": reply.json()["detail"]}
    assert f"the store {damaged} is damaged" in reply.json()["detail"]

    read_only = tmp_path / "read-only.sqlite"
    app = _api(read_only)
    with TestClient(app) as client:
        _api_store(app)._db.execute("PRAGMA query_only = ON")  # as a read-only file is
        reply = _post_run(client)
    assert reply.status_code == 503, reply.text
    assert reply.json()["error"] == "store_unavailable"
    assert f"the store {read_only} cannot be written" in reply.json()["detail"]

    monkeypatch.setattr("orchestrator.store.LOCK_WAIT_S", 0.3)
    locked = tmp_path / "locked.sqlite"
    app = _api(locked)
    with TestClient(app) as client:
        holder = sqlite3.connect(locked, isolation_level=None)
        holder.execute("BEGIN EXCLUSIVE")  # another process writing, past the wait
        try:
            reply = _post_run(client)
        finally:
            holder.execute("ROLLBACK")
            holder.close()
    assert reply.status_code == 503, reply.text
    assert reply.json()["error"] == "store_locked"
    assert reply.headers["retry-after"].isdigit()
    assert "locked by another process" in reply.json()["detail"]


def test_a_store_error_says_what_is_wrong(tmp_path: Path) -> None:
    """The API answers by `problem`: each way a store fails names its own."""
    store = _new(tmp_path / "store.sqlite")
    store._db.execute("PRAGMA query_only = ON")
    with pytest.raises(StoreError) as raised:
        store.add_result(_result("p1"))
    assert raised.value.problem == "read_only"
    store.close()
    newer = tmp_path / "newer.sqlite"
    _new(newer).close()
    db = sqlite3.connect(newer)
    db.execute("PRAGMA user_version = 2")
    db.close()
    with pytest.raises(StoreError) as raised:
        Store(newer)
    assert raised.value.problem == "newer"
    (tmp_path / "empty.sqlite").write_bytes(b"")
    with pytest.raises(StoreError) as raised:
        Store(tmp_path / "empty.sqlite")
    assert raised.value.problem == "damaged"
