"""End to end: the orchestrator API in a real uvicorn process, real service processes.

A run on the sample set from POST to report; a service killed in the middle of a
run (the run still ends, that service's later pages named as errors); the
orchestrator SIGKILLed in the middle of a run and started again on the same store
(the run resumes, and no finished page is lost or redone).
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from orchestrator.launcher import LocalStack, wait_healthy
from orchestrator.testsets import open_dataset_dir
from tests.helpers import REPO, SAMPLE
from tests.servers import free_port, local_stack

pytestmark = pytest.mark.e2e

SERVICES = ["justext", "bte"]


@pytest.fixture(scope="module")
def stack() -> Iterator[LocalStack]:
    with local_stack(SERVICES) as services:
        yield services


class Orchestrator:
    """`uvicorn orchestrator.api:app_factory` as its own process on a free port."""

    def __init__(self, workdir: Path, urls: dict[str, str]) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {**os.environ, "BOILERBENCH_STORE": str(workdir / "store.sqlite"),
                    "BOILERBENCH_OUTPUT_FOLDER": str(workdir / "out"),
                    "BOILERBENCH_URLS": json.dumps(urls), "BOILERBENCH_CONCURRENCY": "1",
                    "BOILERBENCH_RETRIES": "1", "BOILERBENCH_BACKOFF_S": "0.05",
                    "BOILERBENCH_SERVICES": ",".join(SERVICES)}
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "orchestrator.api:app_factory", "--factory",
             "--host", "127.0.0.1", "--port", str(self.port), "--log-level", "warning"],
            env=self.env, cwd=REPO, stdin=subprocess.DEVNULL)
        wait_healthy(self.url, 60, self.process)

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(10)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()

    def get(self, path: str) -> Any:
        reply = httpx.get(self.url + path, timeout=30)
        assert reply.status_code == 200, reply.text
        return reply.json()

    def wait(self, run_id: str, until: str = "finished", timeout: float = 120,
             min_done: int = 0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            run = self.get(f"/runs/{run_id}")
            if run["status"] == until and run["counts"]["done"] >= min_done:
                return run  # type: ignore[no-any-return]
            if run["status"] in ("failed", "cancelled"):
                raise AssertionError(f"run ended {run['status']}: {run.get('error')}")
            time.sleep(0.1)
        raise AssertionError(f"run {run_id} not {until} within {timeout} s: {run}")


@pytest.fixture
def orchestrator(tmp_path: Path, stack: LocalStack) -> Iterator[Orchestrator]:
    server = Orchestrator(tmp_path, stack.urls())
    server.start()
    try:
        yield server
    finally:
        server.stop()


def _inline_pages(copies: int) -> dict[str, Any]:
    """The sample pages, repeated under new ids, as a JSON test set."""
    dataset = open_dataset_dir(SAMPLE)
    pages = [{"id": f"{page.id}-{i}", "html": page.html_text(), "gold": page.gold}
             for i in range(copies) for page in dataset.pages()]
    return {"name": "inline", "pages": pages}


def test_a_run_from_post_to_report(orchestrator: Orchestrator) -> None:
    reply = httpx.post(f"{orchestrator.url}/runs", json={"dataset": str(SAMPLE)}, timeout=30)
    assert reply.status_code == 202, reply.text
    run_id = reply.json()["id"]
    run = orchestrator.wait(run_id)
    pages = len(open_dataset_dir(SAMPLE).ids)
    assert run["counts"]["total"] == run["counts"]["ok"] == pages * len(SERVICES)
    assert run["per_service"] == {s: {"ok": pages, "error": 0, "skipped": 0} for s in SERVICES}
    results = orchestrator.get(f"/runs/{run_id}/results")
    rows = {row["service"]: row for row in results["summary"]["services"]}
    assert set(rows) == set(SERVICES)
    for row in rows.values():
        assert row["pages"] == pages
        assert 0 < row["levels"]["word"]["macro"]["f1"]["mean"] <= 1
    report = httpx.get(f"{orchestrator.url}/runs/{run_id}/report", timeout=30)
    assert report.status_code == 200
    assert report.headers["content-type"].startswith("text/html")
    assert "<svg" in report.text
    listed = orchestrator.get("/runs")["runs"]
    assert [r["id"] for r in listed] == [run_id]
    missing = httpx.get(f"{orchestrator.url}/runs/nope", timeout=30)
    assert missing.status_code == 404
    assert missing.json()["error"] == "not_found"
    outside = httpx.post(f"{orchestrator.url}/runs", json={"dataset": "/etc"}, timeout=30)
    assert outside.status_code == 422
    assert outside.json()["error"] == "invalid_dataset"


def test_a_service_killed_mid_run_leaves_its_pages_named_as_errors(
        tmp_path: Path, orchestrator: Orchestrator, stack: LocalStack) -> None:
    body = {"pages": _inline_pages(6), "services": SERVICES}
    reply = httpx.post(f"{orchestrator.url}/runs", json=body, timeout=30)
    assert reply.status_code == 202, reply.text
    run_id = reply.json()["id"]
    orchestrator.wait(run_id, until="running", min_done=10)
    stack.kill("bte")
    try:
        run = orchestrator.wait(run_id)
    finally:
        stack.start(timeout=120, names=["bte"])
    total = 13 * 6
    assert run["per_service"]["justext"] == {"ok": total, "error": 0, "skipped": 0}
    bte = run["per_service"]["bte"]
    assert bte["error"] > 0
    assert bte["ok"] + bte["error"] == total
    results = orchestrator.get(f"/runs/{run_id}/results")
    errors = results["errors"]
    assert len(errors) == bte["error"]
    assert all(e["service"] == "bte" and "cannot reach" in e["error"] for e in errors)
    row = next(r for r in results["summary"]["services"] if r["service"] == "bte")
    assert row["errors"] == bte["error"]


def _rows(store: Path, run_id: str) -> dict[tuple[str, str], str]:
    with sqlite3.connect(store) as db:
        return {(page, service): created for page, service, created in db.execute(
            "SELECT page_id, service, created FROM page_results WHERE run_id = ?", (run_id,))}


def test_the_orchestrator_killed_mid_run_resumes_without_losing_or_redoing_pages(
        tmp_path: Path, orchestrator: Orchestrator) -> None:
    # Enough pages that the run is still going when the kill lands: the sample's pages
    # are small, and 156 results could all be in before the poll saw 20.
    copies = 40
    body = {"pages": _inline_pages(copies), "services": SERVICES}
    run_id = httpx.post(f"{orchestrator.url}/runs", json=body, timeout=30).json()["id"]
    orchestrator.wait(run_id, until="running", min_done=20)
    orchestrator.kill()
    before = _rows(tmp_path / "store.sqlite", run_id)
    total = 13 * copies * len(SERVICES)
    assert 20 <= len(before) < total
    orchestrator.start()  # same store: the run is picked up again
    run = orchestrator.wait(run_id)
    after = _rows(tmp_path / "store.sqlite", run_id)
    assert run["counts"]["done"] == len(after) == total
    assert {key: after[key] for key in before} == before  # nothing lost, nothing rewritten
    assert run["counts"]["ok"] == total
