"""SQLite store of runs and page results, so a run survives a killed orchestrator.

Every page result is written in its own transaction as it arrives (WAL journal,
synchronous=NORMAL: a committed row survives a killed process), and the row key
(run, dataset, page, service) is unique, so a resumed run skips what is done and
can never record a page twice. Pages given inline or in an archive are kept in
the `inputs` table, so their runs can resume too.

One connection per Store, shared by the threads of the API server under a lock:
the writes are small, and SQLite serialises writers anyway.

A store file that is empty or shorter than its own header says is refused with
StoreError (one line naming the file), never silently started afresh: SQLite
would take an emptied file for a new database and the runs would vanish without
a word, and would only notice a cut one at the first read of a missing page.
Another program's SQLite database is refused untouched, and so is a store of a newer
SCHEMA_VERSION. Any later SQLite failure (a damaged page, a full disk, a read-only
file) is a StoreError too, its `problem` told by SQLite's result code; a failed write
rolls back whole, so what was committed before stays and a run resumes from it.

delete_run_with_folders is the one way a run is deleted (`boilerbench runs delete`,
DELETE /runs/{id}): the store's rows, then the folders the run owns. A run is owned by
the process that recorded it or last set it pending or running (`owner`,
host:pid:start, the start time telling a pid taken again after a crash from the
owner); while it is unfinished and that process lives, no other process deletes it
(RunBusyError): the owner's queued or running task would fail on a run that is gone.
Once that process has ended, the run is shown `interrupted` until it is resumed;
resuming takes it over with claim_run, whose check and write are one transaction, so
that two processes resuming it at once do not both execute it.

An owner of this host is checked by its pid and start; one of another host (servers
on two hosts sharing the store file) by its heartbeat: a process that owns a run or an
upload writes the time into the `heartbeats` table every HEARTBEAT_S from a daemon
thread while its Store is open, and marks itself ended (a beat at time 0) on a clean
close. Another host's owner lives while its heartbeat is at most HEARTBEAT_STALE_S old
(the hosts' clocks must agree to well within that) and has ended once it is older.
Another host's owner without a row (an older version's) cannot be checked: it holds
nothing, as before heartbeats, and its uploads go after UPLOAD_ABANDONED_S.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import shutil
import socket
import sqlite3
import threading
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import cache
from pathlib import Path
from typing import Any, Literal

from orchestrator.models import PageResult, RunInfo, RunStatus
from orchestrator.testsets import LabelledPage
from shared.pids import proc_stat, process_exists

log = logging.getLogger("boilerbench.orchestrator")

SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY,
    created TEXT NOT NULL,
    updated TEXT NOT NULL,
    status TEXT NOT NULL,
    info TEXT NOT NULL,
    spec TEXT NOT NULL,
    warnings TEXT NOT NULL DEFAULT '[]',
    error TEXT
);
CREATE TABLE IF NOT EXISTS inputs (
    run_id TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    dataset TEXT NOT NULL,
    page_id TEXT NOT NULL,
    html BLOB NOT NULL,
    gold TEXT NOT NULL,
    feed TEXT,
    PRIMARY KEY (run_id, dataset, page_id)
);
CREATE TABLE IF NOT EXISTS uploads (
    run_id TEXT PRIMARY KEY,
    folder TEXT NOT NULL,
    owner TEXT NOT NULL,
    created TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS heartbeats (
    owner TEXT PRIMARY KEY,
    beat REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS page_results (
    run_id TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    dataset TEXT NOT NULL,
    page_id TEXT NOT NULL,
    service TEXT NOT NULL,
    status TEXT NOT NULL,
    result TEXT NOT NULL,
    created TEXT NOT NULL,
    PRIMARY KEY (run_id, dataset, page_id, service)
);
"""

SCHEMA_VERSION = 1
"""The store's layout (SQLite's user_version): a store of a higher one is refused.
Stores made before it was recorded (0) have the layout of 1. A table that older
versions can do without (`heartbeats`) is added on open and keeps the version: an
older process still opens the store and ignores it, its own runs and uploads judged
by the rules for owners without a heartbeat."""

UNFINISHED: tuple[RunStatus, ...] = ("pending", "running")
_SQLITE_MAGIC = b"SQLite format 3\x00"


StoreProblem = Literal["damaged", "locked", "full", "read_only", "foreign", "newer"]
"""What is wrong with a store: `damaged` (cut, emptied, a bad page), `locked` (by
another process past the wait), `full` (no space left for it), `read_only` (it or its
folder cannot be written), `foreign` (not a store of boilerbench), `newer` (of a newer
SCHEMA_VERSION)."""


def held_state(info: RunInfo) -> str:
    """An unfinished run's status as its owner holds it: a pending run is queued."""
    return "queued" if info.status == "pending" else info.status


class RunBusyError(Exception):
    """A run that another live process holds, queued or running: deleting it would
    fail that process's task. The message says how to stop it first."""

    def __init__(self, info: RunInfo) -> None:
        super().__init__(
            f"run {info.id} is {held_state(info)} in another process ({info.owner}): cancel it "
            f"first (`boilerbench runs cancel {info.id}`, or DELETE /runs/{info.id} to "
            "the server that holds it, which deletes it too), or end that process")
        self.info = info


class StoreError(Exception):
    """The store cannot be used now; the message names it and says what to do, and
    `problem` says why, for a caller that answers each case its own way (the API)."""

    def __init__(self, message: str, problem: StoreProblem) -> None:
        super().__init__(message)
        self.problem: StoreProblem = problem


UPLOAD_ABANDONED_S = 24 * 3600.0
"""An upload older than this whose run was never recorded is abandoned, whoever made
it: unpacking an upload and recording its run take minutes at most. What takes an
upload of a dead process sooner is its owner found ended: by its pid on this host, by
its stale heartbeat on another; this bound is for another host's owner without one."""

HEARTBEAT_S = 5.0
"""How often a process that owns runs or uploads in a store records that it lives."""

HEARTBEAT_STALE_S = 12 * HEARTBEAT_S
"""Another host's owner whose heartbeat is older than this has ended: twelve beats
missed, so a beat held up by a locked store or a busy machine is not taken for death."""

LOCK_WAIT_S = 30.0
"""How long a write waits for another process's lock on the store."""

_LOCKED_CODES = {sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED}
_UNWRITABLE_CODES = {sqlite3.SQLITE_READONLY, sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_IOERR,
                     sqlite3.SQLITE_PERM}


def _result_code(exc: sqlite3.Error) -> int:
    """SQLite's primary result code of an error (SQLITE_FULL, ...); 0 for an error the
    sqlite3 module raised itself."""
    return (getattr(exc, "sqlite_errorcode", None) or 0) & 0xFF  # extended -> primary


def _store_error(exc: sqlite3.Error, path: Path) -> StoreError:
    """The one-line StoreError for an SQLite failure on the store, by SQLite's primary
    result code: locked by another process, out of space or not writable (the store is
    whole: what was committed stays), or else damaged."""
    code = _result_code(exc)
    if code in _LOCKED_CODES:
        return StoreError(f"the store {path} is locked by another process (waited "
                          f"{LOCK_WAIT_S:g} s); try again when that process has finished",
                          "locked")
    if code == sqlite3.SQLITE_FULL:
        return StoreError(f"the store {path} cannot be written: the disk is full; what was "
                          "recorded is kept: free some space and try again", "full")
    if code in _UNWRITABLE_CODES:
        return StoreError(f"the store {path} cannot be written ({exc}): it and its folder "
                          "must be writable", "read_only")
    return StoreError(f"the store {path} is damaged ({exc}); restore it from a backup, or "
                      "move it away to start a new store", "damaged")


def _store_failure(exc: sqlite3.DatabaseError) -> bool:
    """Whether an SQLite error is the store's (damaged, locked, full, read-only) rather
    than the statement's: a constraint a caller relies on stays what it is."""
    return isinstance(exc, sqlite3.OperationalError) or type(exc) is sqlite3.DatabaseError


def check_store_file(path: Path) -> None:
    """Refuse a store file that is empty, not SQLite, or shorter than its header says
    (the file format's header: page size at byte 16, page count at byte 28, valid
    when the change counter at 24 equals the version number at 92)."""
    if not path.exists():
        return
    if path.is_dir():
        raise StoreError(f"the store {path} is a folder: name a file (runs.sqlite) in it",
                         "foreign")
    size = path.stat().st_size
    advice = "restore it from a backup, or move it away to start a new store"
    if size == 0:
        raise StoreError(f"the store {path} is empty (0 bytes): its runs are lost; {advice}",
                         "damaged")
    with path.open("rb") as handle:
        header = handle.read(100)
    if len(header) < 100 or not header.startswith(_SQLITE_MAGIC):
        raise StoreError(f"the store {path} is not an SQLite database; {advice}", "damaged")
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    pages = int.from_bytes(header[28:32], "big")
    # A checkpoint stopped by a full disk leaves the file shorter than its header says,
    # with the missing pages still in the write-ahead log: such a store is whole.
    # The log may go between two calls (another process closing the store), so one.
    try:
        pending = path.with_name(path.name + "-wal").stat().st_size > 0
    except FileNotFoundError:
        pending = False
    if header[24:28] == header[92:96] and pages and size < pages * page_size and not pending:
        raise StoreError(f"the store {path} is cut short ({size} of {pages * page_size} "
                         f"bytes); {advice}", "damaged")


def _now() -> str:
    return datetime.now(UTC).isoformat()


@cache
def _boot_id() -> str:
    """The start of this boot's id: a start time counts from the boot, so one of an
    earlier boot is told apart by it."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()[:8]
    except OSError:
        return ""


def _start_stamp(ticks: str) -> str:
    return f"{ticks}@{_boot_id()}" if _boot_id() else ticks


def _this_owner() -> str:
    """This process as a run's owner: `host:pid:start`, its start time where /proc tells
    it (else `host:pid`), so that a later process given the same pid after this one has
    died is not taken for it on this host (another host's reads its heartbeat)."""
    owner = f"{socket.gethostname()}:{os.getpid()}"
    stat = proc_stat(os.getpid())
    return owner if stat is None else f"{owner}:{_start_stamp(stat[1])}"


def _local_owner(owner: str | None) -> tuple[int, str | None] | None:
    """The pid and recorded start of a run owner of this host (`host:pid:start`, or
    `host:pid` as stores recorded it before the start); None for another host's owner
    (whose process cannot be checked) or no owner."""
    host = socket.gethostname() + ":"
    if owner is None or not owner.startswith(host):
        return None
    pid, _, start = owner.removeprefix(host).partition(":")
    return (int(pid), start or None) if pid.isdigit() else None


def _process_alive(pid: int, start: str | None) -> bool:
    """Whether process `pid` lives and is the one that started at `start` where that
    was recorded: a zombie has ended, and a pid taken since by another process (its
    start differs) is the recorded one's no more."""
    stat = proc_stat(pid)
    if stat is None:  # no /proc, or a process hidden from this user: its pid alone
        return process_exists(pid)
    state, ticks = stat
    return state not in ("Z", "X") and (start is None or start == _start_stamp(ticks))


def _heartbeats(db: sqlite3.Connection) -> dict[str, float]:
    """The last heartbeat (Unix time) of each owner that records one."""
    return dict(db.execute("SELECT owner, beat FROM heartbeats").fetchall())


def _beat(db: sqlite3.Connection, owner: str) -> None:
    """Record that `owner` lives now: one row per owner, one statement per beat."""
    db.execute("INSERT INTO heartbeats (owner, beat) VALUES (?, ?) "
               "ON CONFLICT (owner) DO UPDATE SET beat = excluded.beat", (owner, time.time()))


def _owner_alive(owner: str | None, beats: Mapping[str, float]) -> bool | None:
    """Whether the owner of a run or an upload lives: a process of this host by its pid
    and start, one of another host by its heartbeat (alive while at most
    HEARTBEAT_STALE_S old). None where that cannot be told: no owner, or another host's
    that records no heartbeat (an older version's)."""
    local = _local_owner(owner)
    if local is not None:
        return _process_alive(*local)
    beat = None if owner is None else beats.get(owner)
    return None if beat is None else time.time() - beat <= HEARTBEAT_STALE_S


def _owner_gone(owner: str | None, beats: Mapping[str, float]) -> bool:
    """Whether the owner of a run or an upload is known to have ended."""
    return _owner_alive(owner, beats) is False


def _held_by_other(info: RunInfo, beats: Mapping[str, float]) -> bool:
    """Whether an unfinished run is held by another live process, which executes it or
    has it queued (one that must not be doubled, nor the run deleted under it). Another
    host's owner without a heartbeat cannot be checked: most often it is an earlier
    life of this server (a container recreated), so no."""
    local = _local_owner(info.owner)
    if info.status not in UNFINISHED or (local is not None and local[0] == os.getpid()):
        return False
    return _owner_alive(info.owner, beats) is True


def _stored_run(db: sqlite3.Connection, run_id: str) -> RunInfo:
    """A run as recorded (not as shown); KeyError where there is none."""
    row = db.execute("SELECT info FROM runs WHERE id = ?", (run_id,)).fetchone()
    if row is None:
        raise KeyError(run_id)
    return RunInfo.model_validate_json(row[0])


def _record_status(db: sqlite3.Connection, info: RunInfo, status: RunStatus,
                   error: str | None) -> None:
    """Write a run's status and error, and this process as its owner where it queues or
    executes the run (pending, running), with its heartbeat in the same transaction."""
    update: dict[str, Any] = {"status": status}
    if status in UNFINISHED:
        update["owner"] = _this_owner()
        _beat(db, update["owner"])
    info = info.model_copy(update=update)
    db.execute("UPDATE runs SET status = ?, info = ?, updated = ?, error = ? WHERE id = ?",
               (status, info.model_dump_json(), _now(), error, info.id))


def _shown(info: RunInfo, beats: Mapping[str, float]) -> RunInfo:
    """A run as reported: `interrupted` when it is recorded running or queued but the
    process that held it has ended (no one will take it up until it is resumed)."""
    if info.status in UNFINISHED and _owner_gone(info.owner, beats):
        return info.model_copy(update={"status": "interrupted"})
    return info


def resume_hint(run_id: str, store: Path) -> str:
    """What an interrupted run's reader can do: whoever reads it, no process takes it up."""
    return (f"the process that held the run ended before it finished; `boilerbench run "
            f"--resume {run_id} --store {store}` resumes it, as does `boilerbench serve` "
            "on this store when it starts")


def _create_store_file(path: Path) -> None:
    """A new store appears whole: its schema is written under a name of its own, then
    linked into place. sqlite3.connect would leave an empty file at `path` until the
    schema is written, which another process opening the store in that moment would
    take for a store that lost its runs. Where a store is there already, nothing."""
    if path.exists():
        return
    fresh = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.new")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(str(fresh), isolation_level=None)
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.executescript(SCHEMA + f"PRAGMA user_version = {SCHEMA_VERSION};")
        finally:
            db.close()
        try:
            os.link(fresh, path)
        except FileExistsError:  # another process made it first: use theirs
            pass
        except OSError:  # a file system without hard links
            if not path.exists():
                os.replace(fresh, path)
        fresh.unlink(missing_ok=True)
    except (OSError, sqlite3.Error) as exc:  # a read-only or full folder
        with suppress(OSError):
            fresh.unlink(missing_ok=True)
        reason: object = exc
        if isinstance(exc, OSError) and exc.strerror:
            reason = f"{exc.strerror}: {exc.filename}" if exc.filename else exc.strerror
        full = (exc.errno == errno.ENOSPC if isinstance(exc, OSError)
                else _result_code(exc) == sqlite3.SQLITE_FULL)
        raise StoreError(f"cannot create the store {path}: {reason}",
                         "full" if full else "read_only") from None


_BEATING: Counter[Path] = Counter()
"""The open Stores of this process that beat, by store file: the heartbeat row is
this process's, so it goes when the last of them closes."""
_BEATING_LOCK = threading.Lock()


def _last_to_stop(file: Path) -> bool:
    """Count a Store of `file` that beat as closed: whether it was the last."""
    with _BEATING_LOCK:
        _BEATING[file] -= 1
        if _BEATING[file] > 0:
            return False
        del _BEATING[file]
        return True


class Store:
    """Runs, their inputs and their page results in one SQLite file."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        if str(path) != ":memory:":
            _create_store_file(self.path)
            check_store_file(self.path)
        self._lock = threading.RLock()
        self._closed = threading.Event()
        self._beating: threading.Thread | None = None
        self._file = self.path.resolve()
        self._beat_failed = False
        self._db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None,
                                   timeout=LOCK_WAIT_S)
        try:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.execute("PRAGMA foreign_keys=ON")
            self._check_schema()
            with self._lock:
                self._db.executescript(SCHEMA)
        except StoreError:
            self._db.close()
            raise
        except sqlite3.Error as exc:
            self._db.close()
            raise _store_error(exc, self.path) from None

    def _check_schema(self) -> None:
        """Refuse another program's SQLite database (its tables would get ours beside
        them) and a store of a newer schema (read by this version, it would be misread)."""
        version = self._db.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise StoreError(f"the store {self.path} was written by a newer boilerbench "
                             f"(store schema {version}; this version reads up to "
                             f"{SCHEMA_VERSION}): upgrade boilerbench to use it", "newer")
        tables = {row[0] for row in self._db.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table'")}
        if tables and "runs" not in tables:
            raise StoreError(f"the store {self.path} is an SQLite database of another "
                             f"program (tables: {', '.join(sorted(tables))}): name a store "
                             "of boilerbench, or a new file", "foreign")

    def close(self) -> None:
        """Close the store, stopping the heartbeat; the last of this process's Stores of
        the file that beat marks the process ended (a beat at time 0), so other hosts
        take its runs for interrupted and its uploads for abandoned at once."""
        with self._lock:
            self._closed.set()
            beating, self._beating = self._beating, None
        if beating is not None:
            beating.join()  # at once, or after the beat in hand
        with self._lock:
            if beating is not None and _last_to_stop(self._file):
                with suppress(sqlite3.Error):  # left in a store not writable: it goes stale
                    self._db.execute("UPDATE heartbeats SET beat = 0 WHERE owner = ?",
                                     (_this_owner(),))
            self._db.close()

    def _keep_beating(self) -> None:
        """Start the heartbeat, once this process owns a run or an upload in the store."""
        with self._lock:
            if self._beating is not None or self._closed.is_set():
                return
            self._beating = threading.Thread(target=self._beat_until_closed, daemon=True,
                                             name=f"heartbeat of {self.path.name}")
            with _BEATING_LOCK:
                _BEATING[self._file] += 1
            self._beating.start()

    def _beat_until_closed(self) -> None:
        owner = _this_owner()
        while not self._closed.wait(HEARTBEAT_S):
            self._beat_once(owner)

    def _beat_once(self, owner: str) -> None:
        """One heartbeat. A failed one (a store locked, full or gone read-only) is logged
        once and never raised: the next beat tries again, and only beats missed for
        HEARTBEAT_STALE_S make another host take this process for ended."""
        try:
            with self._lock:
                _beat(self._db, owner)
        except Exception as exc:
            if not self._beat_failed:
                self._beat_failed = True
                log.warning("the heartbeat of this process in the store %s failed (%s); "
                            "another host takes it for ended once its last beat is %g s "
                            "old", self.path, exc, HEARTBEAT_STALE_S)

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """One atomic transaction: all of it is committed, or none of it. An SQLite
        failure (a full disk, a read-only file) is a StoreError naming the store."""
        with self._lock:
            try:
                self._db.execute("BEGIN IMMEDIATE")
                try:
                    yield self._db
                    self._db.execute("COMMIT")
                except BaseException:
                    if self._db.in_transaction:  # a failed COMMIT may have rolled back
                        self._db.execute("ROLLBACK")
                    raise
            except sqlite3.DatabaseError as exc:
                if not _store_failure(exc):
                    raise
                raise _store_error(exc, self.path) from None

    @contextmanager
    def _reading(self) -> Iterator[sqlite3.Connection]:
        """The connection for reads; a page SQLite finds damaged is a StoreError."""
        with self._lock:
            try:
                yield self._db
            except sqlite3.DatabaseError as exc:
                if not _store_failure(exc):
                    raise
                raise _store_error(exc, self.path) from None

    # -- runs ------------------------------------------------------------------------

    def create_run(self, info: RunInfo, spec: dict[str, Any], warnings: list[str],
                   inputs: Iterable[LabelledPage] = ()) -> None:
        """Record a new run with its plan, warnings and (inline) input pages at once,
        owned by this process (which executes it or queues it)."""
        info = info.model_copy(update={"owner": _this_owner()})
        with self._transaction() as db:
            db.execute(
                "INSERT INTO runs (id, created, updated, status, info, spec, warnings) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (info.id, info.created.isoformat(), _now(), info.status,
                 info.model_dump_json(), json.dumps(spec), json.dumps(warnings)),
            )
            db.executemany(
                "INSERT INTO inputs (run_id, dataset, page_id, html, gold, feed) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                ((info.id, p.dataset, p.id,
                  p.html if isinstance(p.html, bytes) else p.html.encode("utf-8"),
                  p.gold, p.feed) for p in inputs),
            )
            db.execute("DELETE FROM uploads WHERE run_id = ?", (info.id,))  # the run has it
            _beat(db, info.owner or _this_owner())
        self._keep_beating()

    def set_status(self, run_id: str, status: RunStatus, error: str | None = None) -> None:
        """Record a run's status; setting it pending or running records this process as
        its owner (it queues or executes the run)."""
        with self._transaction() as db:
            _record_status(db, _stored_run(db, run_id), status, error)
        if status in UNFINISHED:
            self._keep_beating()

    def claim_run(self, run_id: str, status: Literal["pending", "running"], seen: RunInfo
                  ) -> RunInfo | None:
        """Take a run over to queue (`pending`) or execute (`running`) it: None when this
        process holds it now; else the run as it stands, held by another process
        (pending or running) or with nothing left to run (finished, cancelled). `seen`
        is the run as the caller read it when it found no one held it.

        The check and the write are one transaction, so of two processes resuming a run
        at once (a `serve` starting, a `run --resume`) one takes it and the other is told,
        rather than both executing it. Another process holds it where a live process of
        this host owns it, or one of another host whose heartbeat is fresh, or where
        another host's process without a heartbeat (whose life cannot be checked) has
        taken it since `seen`. KeyError where there is no such run."""
        with self._transaction() as db:
            info = _stored_run(db, run_id)
            if info.status in ("finished", "cancelled"):
                return info
            beats = _heartbeats(db)
            taken = info.owner != seen.owner and not _owner_gone(info.owner, beats)
            if info.status in UNFINISHED and info.owner != _this_owner() and (
                    _held_by_other(info, beats) or taken):
                return info
            _record_status(db, info, status, None)
        self._keep_beating()
        return None

    def run_owner_alive(self, info: RunInfo) -> bool:
        """Whether an unfinished run is held by another live process (of this host by
        its pid, of another host by its heartbeat), which must not be doubled nor have
        the run deleted under it."""
        with self._reading() as db:
            return _held_by_other(info, _heartbeats(db))

    def add_warnings(self, run_id: str, warnings: list[str]) -> None:
        with self._transaction() as db:
            row = db.execute("SELECT warnings FROM runs WHERE id = ?", (run_id,)).fetchone()
            if row is None:
                raise KeyError(run_id)
            known = json.loads(row[0])
            merged = known + [w for w in warnings if w not in known]
            db.execute("UPDATE runs SET warnings = ? WHERE id = ?", (json.dumps(merged), run_id))

    def run(self, run_id: str) -> RunInfo | None:
        """The run with its current status and progress counts, or None."""
        with self._reading() as db:
            try:
                stored = _stored_run(db, run_id)
            except KeyError:
                return None
            beats = _heartbeats(db)
        return _shown(stored, beats).model_copy(update={"counts": self.counts(run_id)})

    def status(self, run_id: str) -> RunStatus | None:
        """A run's status alone (cheap: runs poll it to notice a cancellation)."""
        with self._reading() as db:
            row = db.execute("SELECT status FROM runs WHERE id = ?", (run_id,)).fetchone()
        status: RunStatus | None = None if row is None else row[0]
        return status

    def delete_run(self, run_id: str) -> bool:
        """Remove a run with its stored inputs and page results; False if there was none.
        RunBusyError, and nothing removed, while another live process holds it (checked
        in the deleting transaction, so that process cannot take it up in between)."""
        with self._transaction() as db:
            try:
                info = _stored_run(db, run_id)
            except KeyError:
                return False
            if _held_by_other(info, _heartbeats(db)):
                raise RunBusyError(info)
            db.execute("DELETE FROM runs WHERE id = ?", (run_id,))
            return True

    def spec(self, run_id: str) -> dict[str, Any]:
        with self._reading() as db:
            row = db.execute("SELECT spec FROM runs WHERE id = ?", (run_id,)).fetchone()
        if row is None:
            raise KeyError(run_id)
        spec: dict[str, Any] = json.loads(row[0])
        return spec

    def details(self, run_id: str) -> dict[str, Any]:
        """Status extras: warnings, error and last update of a run."""
        with self._reading() as db:
            row = db.execute("SELECT warnings, error, updated FROM runs WHERE id = ?",
                             (run_id,)).fetchone()
        if row is None:
            raise KeyError(run_id)
        return {"warnings": json.loads(row[0]), "error": row[1], "updated": row[2]}

    def runs(self, statuses: Iterable[RunStatus] | None = None) -> list[RunInfo]:
        """Every run, newest first (optionally only those in `statuses`)."""
        query = "SELECT info FROM runs"
        params: list[str] = []
        if statuses is not None:
            wanted = list(statuses)
            query += f" WHERE status IN ({', '.join('?' for _ in wanted)})"
            params = list(wanted)
        with self._reading() as db:
            rows = db.execute(query + " ORDER BY created DESC", params).fetchall()
            beats = _heartbeats(db)
        return [_shown(RunInfo.model_validate_json(row[0]), beats) for row in rows]

    def unfinished_runs(self) -> list[RunInfo]:
        return self.runs(UNFINISHED)

    # -- inputs ----------------------------------------------------------------------

    def inputs(self, run_id: str) -> dict[str, list[LabelledPage]]:
        """A run's stored input pages by dataset name (in insertion order)."""
        with self._reading() as db:
            rows = db.execute(
                "SELECT dataset, page_id, html, gold, feed FROM inputs WHERE run_id = ? "
                "ORDER BY rowid", (run_id,)).fetchall()
        pages: dict[str, list[LabelledPage]] = {}
        for dataset, page_id, html, gold, feed in rows:
            pages.setdefault(dataset, []).append(
                LabelledPage(dataset, page_id, bytes(html), gold, feed))
        return pages

    # -- uploads ---------------------------------------------------------------------

    def reserve_upload(self, run_id: str, folder: Path) -> None:
        """Record, before unpacking, that this process unpacks an upload into `folder`
        for the run `run_id`, until the run is recorded (create_run) or refused
        (release_upload). A server killed in between leaves a folder no run refers to:
        the reservation names it to abandoned_uploads, and a folder never reserved in
        this store (another store's upload beside it) is never taken for one."""
        owner = _this_owner()
        with self._transaction() as db:
            db.execute("INSERT OR REPLACE INTO uploads (run_id, folder, owner, created) "
                       "VALUES (?, ?, ?, ?)", (run_id, str(folder), owner, _now()))
            _beat(db, owner)
        self._keep_beating()

    def release_upload(self, run_id: str) -> None:
        """Forget an upload's reservation: its run was refused, or its folder removed."""
        with self._transaction() as db:
            db.execute("DELETE FROM uploads WHERE run_id = ?", (run_id,))

    def abandoned_uploads(self) -> list[tuple[str, Path]]:
        """(run id, folder) of the reserved uploads whose run was never recorded and that
        no process is still unpacking: its process has ended (this host's by its pid,
        another host's by its stale heartbeat), or it was reserved more than
        UPLOAD_ABANDONED_S ago (what decides for another host's owner without one)."""
        with self._reading() as db:
            rows = db.execute(
                "SELECT run_id, folder, owner, created FROM uploads "
                "WHERE NOT EXISTS (SELECT 1 FROM runs WHERE runs.id = uploads.run_id)"
            ).fetchall()
            beats = _heartbeats(db)
        cutoff = datetime.now(UTC) - timedelta(seconds=UPLOAD_ABANDONED_S)
        return [(run_id, Path(folder)) for run_id, folder, owner, created in rows
                if _owner_gone(owner, beats) or datetime.fromisoformat(created) < cutoff]

    # -- page results ----------------------------------------------------------------

    def add_result(self, result: PageResult) -> bool:
        """Write one page result in its own transaction; False if it was already there
        (a finished page is never recorded twice)."""
        with self._transaction() as db:
            cursor = db.execute(
                "INSERT INTO page_results (run_id, dataset, page_id, service, status, result, "
                "created) VALUES (?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (run_id, dataset, page_id, service) DO NOTHING",
                (result.run_id, result.dataset, result.page_id, result.service, result.status,
                 result.model_dump_json(), _now()),
            )
            return cursor.rowcount == 1

    def done_keys(self, run_id: str) -> set[tuple[str, str, str]]:
        """(dataset, page_id, service) of every result already recorded for a run."""
        with self._reading() as db:
            rows = db.execute(
                "SELECT dataset, page_id, service FROM page_results WHERE run_id = ?",
                (run_id,)).fetchall()
        return {(r[0], r[1], r[2]) for r in rows}

    def results(self, run_id: str) -> list[PageResult]:
        with self._reading() as db:
            rows = db.execute(
                "SELECT result FROM page_results WHERE run_id = ? "
                "ORDER BY dataset, page_id, service", (run_id,)).fetchall()
        return [PageResult.model_validate_json(row[0]) for row in rows]

    def page_results(self, run_id: str, page_id: str, dataset: str | None = None
                     ) -> list[PageResult]:
        """The results of one page of a run (of every test set holding its id, or of
        `dataset`): not every result of the run read to keep a few."""
        query = "SELECT result FROM page_results WHERE run_id = ? AND page_id = ?"
        params = [run_id, page_id]
        if dataset is not None:
            query += " AND dataset = ?"
            params.append(dataset)
        with self._reading() as db:
            rows = db.execute(query + " ORDER BY dataset, service", params).fetchall()
        return [PageResult.model_validate_json(row[0]) for row in rows]

    def counts(self, run_id: str) -> dict[str, int]:
        """Recorded results of a run by status, with `done` their sum and `total`
        the planned count (services x pages, from the run's spec)."""
        with self._reading() as db:
            rows = db.execute(
                "SELECT status, COUNT(*) FROM page_results WHERE run_id = ? GROUP BY status",
                (run_id,)).fetchall()
            spec_row = db.execute("SELECT spec FROM runs WHERE id = ?",
                                  (run_id,)).fetchone()
        counts = {"ok": 0, "error": 0, "skipped": 0}
        counts.update(dict(rows))
        counts["done"] = sum(n for _, n in rows)
        if spec_row is not None:
            counts["total"] = int(json.loads(spec_row[0]).get("total", 0))
        return counts

    def service_counts(self, run_id: str) -> dict[str, dict[str, int]]:
        """Progress per service: results by status."""
        with self._reading() as db:
            rows = db.execute(
                "SELECT service, status, COUNT(*) FROM page_results WHERE run_id = ? "
                "GROUP BY service, status", (run_id,)).fetchall()
        out: dict[str, dict[str, int]] = {}
        for service, status, n in rows:
            out.setdefault(service, {"ok": 0, "error": 0, "skipped": 0})[status] = n
        return out


@dataclass(frozen=True)
class RunFolders:
    """The folders a run owns, deleted with it: its output folder, and the folders its
    uploaded test sets were unpacked into (the API's uploads/ID)."""

    output: Path | None
    uploads: tuple[Path, ...] = ()


def _is_folder_name(run_id: str) -> bool:
    """Whether a run id names one folder inside another (`..` would name the parent)."""
    return run_id not in ("", ".", "..") and "/" not in run_id and "\x00" not in run_id


def run_folders(run_id: str, spec: Mapping[str, Any]) -> RunFolders:
    """The folders of a run, by its stored spec. An upload folder counts only where the
    spec marks its test set owned and the folder is named after the run, as the API
    makes it: no spec can have a shared folder (an allowed root) deleted."""
    from orchestrator.runner import RunSpec, run_output_dir  # the runner imports the store

    if not _is_folder_name(run_id):
        return RunFolders(None)
    parsed = RunSpec.model_validate(spec)
    uploads = dict.fromkeys(Path(root) for source in parsed.datasets
                            if source.owned for root in source.roots or ()
                            if Path(root).is_absolute() and Path(root).name == run_id)
    return RunFolders(run_output_dir(Path(parsed.output_folder), run_id), tuple(uploads))


def delete_run_with_folders(store: Store, run_id: str, keep_output: bool = False
                            ) -> RunFolders | None:
    """Delete a run from the store with its inputs and results, then the folders it owns
    (its output folder too unless `keep_output`): what `runs delete` and DELETE
    /runs/{id} both do, so neither leaves an upload behind. None if there is no such
    run; RunBusyError (nothing deleted) while another live process holds it. The rows
    go first: a folder that cannot be removed leaves no run half there. A folder that
    is a symbolic link is left alone (rmtree follows none)."""
    try:
        folders = run_folders(run_id, store.spec(run_id))
    except KeyError:
        return None
    if not store.delete_run(run_id):
        return None
    removed = list(folders.uploads)
    if folders.output is not None and not keep_output:
        removed.append(folders.output)
    for folder in removed:
        shutil.rmtree(folder, ignore_errors=True)
    return folders
