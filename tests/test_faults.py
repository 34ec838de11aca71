"""Faults during runs: a service killed and restarted, a writer killed mid-write, a slow service.

tests/test_orchestrator_e2e.py covers a service killed for good (its later pages
become errors) and the orchestrator SIGKILLed and restarted (the run resumes);
this file covers what lies between and around:

- An algorithm service killed with SIGKILL during a run and restarted: the
  runner's retries with back-off (connection errors and 5xx, delays 0.5, 1, 2,
  4, 8 s here: 15.5 s in all, far longer than a restart) carry the pages in
  flight across the restart, so the run finishes with every (page, service)
  recorded, and, since the service came back within the retries, all of them ok.
- The SQLite store under kill -9: a writer process adds page results in a loop
  and is killed at arbitrary moments, again and again; the database passes
  `PRAGMA integrity_check`, every row is complete (its JSON parses, its fields
  match its key), and every result the writer reported committed is there.
- A slow service does not hold up the others: a service that answers nothing
  until the test lets it go; the other service's pages must all be recorded while
  the slow one is still holding every request (an ordering, not a timing).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from orchestrator.launcher import LocalStack
from orchestrator.models import PageResult, RunInfo
from orchestrator.runner import RunSpec, create_run, execute_run
from orchestrator.store import Store
from orchestrator.testsets import LabelledPage, in_memory, open_dataset_dir
from tests.helpers import REPO, SAMPLE
from tests.servers import local_stack, serve_app, stand_in_service

pytestmark = pytest.mark.e2e


def sample_pages(name: str, copies: int) -> list[LabelledPage]:
    """The sample set's pages, repeated under new ids."""
    dataset = open_dataset_dir(SAMPLE)
    return [LabelledPage(name, f"{page.id}-{i}", page.html, page.gold)
            for i in range(copies) for page in dataset.pages()]


def rows(store_path: Path, run_id: str) -> dict[tuple[str, str], str]:
    """(page id, service) -> status of every recorded result (read by its own connection)."""
    with sqlite3.connect(store_path, timeout=30) as db:
        return {(page, service): status for page, service, status in db.execute(
            "SELECT page_id, service, status FROM page_results WHERE run_id = ?", (run_id,))}


def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def wait_for_progress(count: Callable[[], int], target: int, stall_s: float = 10.0,
                      timeout: float = 120.0) -> int:
    """Wait until count() reaches target, or stops growing for stall_s; its last value."""
    deadline = time.monotonic() + timeout
    last, last_change = count(), time.monotonic()
    while last < target and time.monotonic() < min(deadline, last_change + stall_s):
        time.sleep(0.05)
        now = count()
        if now != last:
            last, last_change = now, time.monotonic()
    return last


class RunThread(threading.Thread):
    """execute_run in its own thread and event loop, so the test can act meanwhile."""

    def __init__(self, store_path: Path, run_id: str) -> None:
        super().__init__(daemon=True)
        self.store_path, self.run_id = store_path, run_id
        self.results: list[PageResult] | None = None
        self.error: BaseException | None = None

    def run(self) -> None:
        store = Store(self.store_path)
        try:
            self.results = asyncio.run(execute_run(store, self.run_id))
        except BaseException as exc:
            self.error = exc
        finally:
            store.close()


# ---- a service killed and restarted during a run ---------------------------------------

@pytest.fixture
def two_services() -> Iterator[LocalStack]:
    with local_stack(["justext", "bte"]) as stack:
        yield stack


def test_service_killed_and_restarted_mid_run_loses_no_page(
        tmp_path: Path, two_services: LocalStack) -> None:
    pages = sample_pages("inline", 5)
    store_path = tmp_path / "store.sqlite"
    store = Store(store_path)
    spec = RunSpec(datasets=[], services=["justext", "bte"], urls=two_services.urls(),
                   concurrency=2, retries=5, backoff_s=0.5, timeout_s=60,
                   output_folder=str(tmp_path / "out"))
    run_id = create_run(store, spec, memory=[in_memory("inline", pages)])
    store.close()
    runner = RunThread(store_path, run_id)
    runner.start()
    wait_for(lambda: sum(s == "justext" for _, s in rows(store_path, run_id)) >= 8, 120,
             "the first justext pages")
    old_pid = two_services.processes["justext"].process.pid
    two_services.kill("justext")  # SIGKILL to the process group: uvicorn and its workers
    killed_at = len(rows(store_path, run_id))
    time.sleep(0.5)
    two_services.start(timeout=120, names=["justext"])
    assert two_services.processes["justext"].process.pid != old_pid
    runner.join(timeout=300)
    assert not runner.is_alive(), "the run did not finish"
    assert runner.error is None, repr(runner.error)
    recorded = rows(store_path, run_id)
    expected = {(page.id, service) for page in pages for service in ("justext", "bte")}
    assert killed_at < len(expected), "the kill came while the run was going on"
    assert set(recorded) == expected, "every (page, service) has a result row"
    assert set(recorded.values()) == {"ok"}, {k: v for k, v in recorded.items() if v != "ok"}
    with contextlib.closing(Store(store_path)) as check:
        info = check.run(run_id)
        assert info is not None
        assert info.status == "finished"


# ---- the store's writes under kill -9 --------------------------------------------------

WRITER = r"""
import sys
from orchestrator.models import PageResult, RunInfo
from orchestrator.store import Store

store = Store(sys.argv[1])
start = int(sys.argv[2])
for i in range(start, start + 100_000):
    text = f"page {i} " + "word " * (2_000 + (i % 7) * 5_000)
    result = PageResult(run_id="r", dataset="d", page_id=f"p{i:06d}", service="justext",
                        status="ok", elapsed_ms=float(i), text=text)
    store.add_result(result)
    print(i, flush=True)
"""


def test_store_writes_are_atomic_under_kill_9(tmp_path: Path) -> None:
    path = tmp_path / "store.sqlite"
    store = Store(path)
    store.create_run(RunInfo(id="r", datasets=["d"], services=["justext"]), {"total": 0}, [])
    store.close()
    committed: set[int] = set()
    next_index = 0
    for round_number in range(8):
        writer = subprocess.Popen([sys.executable, "-c", WRITER, str(path), str(next_index)],
                                  stdout=subprocess.PIPE, cwd=REPO, text=True)
        assert writer.stdout is not None
        wait_until = 5 + round_number * 3  # kill after a different number of commits each time
        for line in writer.stdout:
            committed.add(int(line))
            if len(committed) >= next_index + wait_until:
                break
        os.kill(writer.pid, signal.SIGKILL)  # in the middle of the next write, most likely
        writer.wait(10)
        committed.update(int(line) for line in writer.stdout)  # printed, not yet read
        writer.stdout.close()
        with sqlite3.connect(path) as db:
            assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
            found = db.execute("SELECT page_id, service, status, result FROM page_results "
                               "WHERE run_id = 'r'").fetchall()
        indexes = set()
        for page_id, service, status, raw in found:
            result = PageResult.model_validate_json(raw)  # the whole JSON document is there
            index = int(page_id[1:])
            assert (result.page_id, result.service, result.status) == (page_id, service, status)
            assert result.elapsed_ms == float(index)
            assert result.text == f"page {index} " + "word " * (2_000 + (index % 7) * 5_000)
            indexes.add(index)
        assert committed <= indexes, f"committed results lost: {sorted(committed - indexes)}"
        assert len(indexes - committed) <= 1, "at most the write in flight is extra"
        next_index = max(indexes) + 1
    assert len(committed) >= 8 * 5


# ---- a slow service does not hold up the others ----------------------------------------

def fake_service(name: str, gate: threading.Event | None) -> FastAPI:
    """A contract-speaking service; with a gate, every /extract waits until it is set."""

    async def extract(request: Request) -> JSONResponse:
        body = await request.json()
        while gate is not None and not gate.is_set():
            await asyncio.sleep(0.02)
        text = body["html"][:50]
        return JSONResponse({"algorithm": name, "version": "1", "text": text,
                             "blocks": [{"text": text, "is_content": True}], "elapsed_ms": 1.0})

    return stand_in_service(name, extract)


def test_a_slow_service_does_not_hold_up_the_others(tmp_path: Path) -> None:
    gate = threading.Event()
    pages = sample_pages("inline", 4)
    store_path = tmp_path / "store.sqlite"
    with serve_app(fake_service("bte", None)) as fast_url, \
            serve_app(fake_service("justext", gate)) as slow_url:
        store = Store(store_path)
        spec = RunSpec(datasets=[], services=["justext", "bte"],
                       urls={"justext": slow_url, "bte": fast_url}, concurrency=2, retries=0,
                       timeout_s=300, output_folder=str(tmp_path / "out"))
        run_id = create_run(store, spec, memory=[in_memory("inline", pages)])
        store.close()
        runner = RunThread(store_path, run_id)
        runner.start()
        try:
            fast_done = wait_for_progress(
                lambda: sum(s == "bte" for _, s in rows(store_path, run_id)), len(pages))
            assert fast_done == len(pages), (
                f"the fast service stalled at {fast_done} of {len(pages)} pages while the slow "
                "one held its requests")
            assert not any(s == "justext" for _, s in rows(store_path, run_id))
        finally:
            gate.set()
            runner.join(timeout=300)
    assert runner.error is None, repr(runner.error)
    recorded = rows(store_path, run_id)
    assert len(recorded) == 2 * len(pages)
    assert set(recorded.values()) == {"ok"}
