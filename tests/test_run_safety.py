"""Runs that no page, upload, crowd or damaged file can jam, flood or fool.

- preparing a page for scoring is linear in its size, and bounded by a time limit
  per page, past which the page is an unscored error with the reason;
- results are scored in worker processes, to the same figures as in-process; a
  result past the time limit, or whose process dies, is unscored with the reason, and
  the next result is scored by a fresh process;
- runs can be cancelled (DELETE /runs/{id}, `boilerbench runs cancel`), from another
  process too, and are not resumed;
- runs beyond a limit wait, and past a queue limit POST /runs gets 429 Retry-After;
- a service that answers 503 busy is asked again, never recorded as failing;
- uploads: overlapping zip entries and archives past the real unpacked limit are
  refused; pages are unpacked into a folder of the run (not the store) and deleted
  with it; a tar with a non-UTF-8 file name is accepted;
- every file of a folder test set must resolve under the allowed roots;
- a service named twice runs once; pages.csv cells are neutralised; a damaged store
  is named in one line.
"""

from __future__ import annotations

import asyncio
import csv
import functools
import os
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import Response
from fastapi.testclient import TestClient
from typer.testing import CliRunner, Result

from orchestrator.api import ApiSettings, create_app
from orchestrator.cli import app as cli_app
from orchestrator.config import RunConfig
from orchestrator.models import PageResult, RunInfo
from orchestrator.report import write_outputs
from orchestrator.runner import (
    GIL_SWITCH_INTERVAL_S,
    Outcome,
    RunCancelledError,
    RunSpec,
    ScoringPool,
    create_run,
    execute_run,
)
from orchestrator.scoring import PageReference, prepare_page, score_extraction
from orchestrator.statistics import summarize
from orchestrator.store import Store, StoreError
from orchestrator.testsets import LabelledPage, in_memory
from shared.contract import Block
from shared.html import parse_html, text_blocks
from tests.helpers import (
    REPO,
    SAMPLE,
    overlapping_zip,
    set_run_owner,
    store_of_runs,
    tar_bytes,
    write_test_set,
    zip_bytes,
)
from tests.servers import serve_app, stand_in_service

PAGE = ("<html><body><h1>Harbour news</h1><p>The harbour bridge opened again today.</p>"
        "</body></html>")
GOLD = "The harbour bridge opened again today."
AUTH = {"authorization": "Bearer api-token"}


class InstantExtractor:
    """An extractor double: every page's text comes back at once (or after `delay`)."""

    def __init__(self, delay: float = 0.0) -> None:
        self.delay = delay

    async def start(self) -> None:
        return None

    async def extract(self, service: str, html: str, options: dict[str, Any]) -> Outcome:
        await asyncio.sleep(self.delay)
        return Outcome(text=GOLD, elapsed_ms=1.0, extract_ms=1.0)

    async def aclose(self) -> None:
        return None


def _pages(count: int, html: str = PAGE) -> list[LabelledPage]:
    return [LabelledPage("set", f"p{i:03d}", html, GOLD) for i in range(count)]


# ---------------------------------------------------------------- scoring: linear, limited

def test_block_paths_match_lxml_and_take_linear_work() -> None:
    html = "<html><body>" + "<div><p>a</p><p>b</p><span>c</span></div>" * 3 + "</body></html>"
    root = parse_html(html)
    tree = root.getroottree()
    assert [b.path for b in text_blocks(root)] == [
        tree.getpath(b.element) for b in text_blocks(root)]
    # 300,000 sibling paragraphs: lxml's getpath per block needs far more than the
    # minute of CPU given here (its cost grows faster than the square of the count).
    script = ("import resource; resource.setrlimit(resource.RLIMIT_CPU, (60, 60));"
              "from orchestrator.scoring import prepare_page;"
              "ref = prepare_page('<html><body>' + '<p>a b</p>' * 300000, 'a b');"
              "print(len(ref.page_tokens))")
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-500:]
    assert done.stdout.strip() == "600000"


def test_a_page_past_the_scoring_time_limit_is_an_unscored_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A page whose preparing runs past the limit is an unscored error with the reason,
    and the run goes on to score the others. Its preparing holds the GIL as a huge
    page's does (pure Python) and lasts until the run is over, so the limit can be one
    that the other pages, milliseconds each, never reach on a loaded machine."""
    limit_s = 3.0
    released = threading.Event()

    def slow_on_one_page(html: str, gold: str) -> PageReference:
        if "Tide news" in html:
            deadline = time.monotonic() + 8 * limit_s  # a runaway limit fails, not hangs
            while not released.is_set() and time.monotonic() < deadline:
                sum(range(10_000))
        return prepare_page(html, gold)

    monkeypatch.setattr("orchestrator.runner.prepare_page", slow_on_one_page)
    store = Store(tmp_path / "store.sqlite")
    slow = LabelledPage("set", "slow", PAGE.replace("Harbour news", "Tide news"), GOLD)
    spec = RunSpec(datasets=[], services=["justext"], scoring_time_limit_s=limit_s,
                   output_folder=str(tmp_path / "out"))
    run_id = create_run(store, spec, memory=[in_memory("set", [slow, *_pages(2)])])
    try:
        results = {r.page_id: r for r in asyncio.run(
            execute_run(store, run_id, extractor=InstantExtractor()))}
    finally:
        released.set()
    assert results["slow"].status == "error"
    assert results["slow"].scores is None
    assert "not scored" in (results["slow"].error or "")
    assert f"{limit_s:g} s" in (results["slow"].error or "")
    for page_id in ("p000", "p001"):
        assert results[page_id].status == "ok", results[page_id].error
        assert results[page_id].scores is not None
    assert store.status(run_id) == "finished"
    store.close()


def test_an_extract_past_the_scoring_time_limit_counts_as_empty_output(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The service answered but its extract could not be scored in time: an error,
    scored as empty output as every error is, so it weighs in the row's figures."""
    monkeypatch.setattr("orchestrator.runner.ScoringPool", functools.partial(
        ScoringPool, handler="tests.misbehaving_scoring:misbehaving_handler"))

    class HangsScoringOnOnePage(InstantExtractor):
        async def extract(self, service: str, html: str, options: dict[str, Any]) -> Outcome:
            return Outcome(text="hang" if "Tide" in html else GOLD, elapsed_ms=1.0,
                           extract_ms=1.0)

    store = Store(tmp_path / "store.sqlite")
    pages = [LabelledPage("set", "tide", PAGE.replace("Harbour news", "Tide news"), GOLD),
             *_pages(1)]
    spec = RunSpec(datasets=[], services=["justext"], scoring_time_limit_s=0.5,
                   output_folder=str(tmp_path / "out"))
    run_id = create_run(store, spec, memory=[in_memory("set", pages)])
    results = {r.page_id: r for r in asyncio.run(
        execute_run(store, run_id, extractor=HangsScoringOnOnePage()))}
    hung = results["tide"]
    assert hung.status == "error"
    assert hung.text == "hang"
    assert "counted as empty" in (hung.error or "")
    assert "0.5 s" in (hung.error or "")
    assert hung.scores is not None
    assert hung.scores.word.tp == 0
    assert hung.scores.word.fn == len(GOLD.split())
    row = summarize(list(results.values())).services[0]
    assert (row.pages, row.errors, row.unscored) == (2, 1, 0)
    assert row.levels["word"].macro["f1"].mean == pytest.approx(0.5)
    store.close()


def _sample_extracts() -> list[tuple[str, str, str, list[Block]]]:
    """Sample pages (HTML, gold) with three extracts each: every other block kept, every
    block kept (text: the kept blocks joined), and the gold as text without blocks."""
    cases = []
    for html_file in sorted((SAMPLE / "html").glob("*.html"))[:6]:
        html = html_file.read_text(encoding="utf-8", errors="replace")
        gold = (SAMPLE / "content" / f"{html_file.stem}.txt").read_text(encoding="utf-8")
        texts = [b.text for b in text_blocks(parse_html(html))]
        for every in (2, 1):
            blocks = [Block(text=t, is_content=i % every == 0) for i, t in enumerate(texts)]
            cases.append((html, gold, "\n".join(b.text for b in blocks if b.is_content),
                          blocks))
        cases.append((html, gold, gold, []))
    return cases


def test_scoring_in_worker_processes_gives_the_in_process_scores() -> None:
    cases = _sample_extracts()
    refs = {html: prepare_page(html, gold) for html, gold, _, _ in cases}

    async def go() -> list[Any]:
        pool = ScoringPool(2, 30.0)
        await pool.start()
        try:
            # Twice over every page, so the workers also score pages they hold already.
            return [await pool.score(refs[html], text, blocks)
                    for _ in range(2) for html, _, text, blocks in cases]
        finally:
            await pool.close()

    scored = asyncio.run(go())
    expected = [score_extraction(prepare_page(html, gold), text, blocks)
                for _ in range(2) for html, gold, text, blocks in cases]
    assert len(scored) == len(expected) == 36
    assert scored == expected
    assert scored[0].block is not None
    assert scored[2].block is None


def test_a_result_past_the_scoring_limit_or_whose_process_dies_is_unscored() -> None:
    ref = prepare_page(PAGE, GOLD)

    async def go() -> list[Any]:
        pool = ScoringPool(1, 0.5, handler="tests.misbehaving_scoring:misbehaving_handler")
        await pool.start()
        try:
            results = []
            for text in ("hang", GOLD, "die", GOLD):
                started = time.monotonic()
                results.append((await pool.score(ref, text, []), time.monotonic() - started))
            with pytest.raises(RuntimeError, match="a bug in scoring"):
                await pool.score(ref, "raise", [])
            return results
        finally:
            await pool.close()

    (hung, hung_s), (after_hang, _), (died, _), (after_death, _) = asyncio.run(go())
    assert isinstance(hung, str)
    assert "not scored" in hung
    assert "0.5 s" in hung
    assert hung_s < 10  # the limit, not the sleep of 60 s
    assert isinstance(died, str)
    assert "died" in died
    in_process = score_extraction(ref, GOLD, [])
    assert after_hang == after_death == in_process
    assert in_process.word.tp == len(GOLD.split())


# ---------------------------------------------------------------- cancelling runs

@pytest.mark.parametrize("how", ["cancelled", "deleted"])
def test_a_run_stopped_from_another_process_stops_cleanly(how: str, tmp_path: Path) -> None:
    """Cancelled (`boilerbench runs cancel`) or deleted (DELETE /runs/{id}) in the store
    by another process, a run stops within a page and is not resumed."""
    store = Store(tmp_path / "store.sqlite")
    spec = RunSpec(datasets=[], services=["justext"], concurrency=1,
                   output_folder=str(tmp_path / "out"))
    run_id = create_run(store, spec, memory=[in_memory("set", _pages(40))])

    async def go() -> None:
        task = asyncio.create_task(execute_run(store, run_id, extractor=InstantExtractor(0.1)))
        while store.counts(run_id)["done"] < 3:
            await asyncio.sleep(0.05)
        other = Store(tmp_path / "store.sqlite")
        if how == "cancelled":
            other.set_status(run_id, "cancelled")
        else:
            other.delete_run(run_id)
        other.close()
        with pytest.raises(RunCancelledError, match=how):
            await asyncio.wait_for(task, 30)

    asyncio.run(go())
    if how == "cancelled":
        assert store.status(run_id) == "cancelled"
        assert store.counts(run_id)["done"] < 40
    else:
        assert store.run(run_id) is None
    assert run_id not in {info.id for info in store.unfinished_runs()}
    assert not (tmp_path / "out" / run_id).exists()
    store.close()


@pytest.mark.parametrize("how", ["cancelled", "deleted"])
def test_a_queued_run_stopped_before_it_starts_is_not_started(how: str, tmp_path: Path
                                                               ) -> None:
    """Cancelled, or cancelled and then deleted, while it waits for a slot: the queued
    task ends as cancelled when its turn comes, and does not fail on the missing run."""
    store = Store(tmp_path / "store.sqlite")
    spec = RunSpec(datasets=[], services=["justext"], concurrency=1,
                   output_folder=str(tmp_path / "out"))
    run_id = create_run(store, spec, memory=[in_memory("set", _pages(3))])
    store.set_status(run_id, "cancelled")
    if how == "deleted":
        store.delete_run(run_id)
    with pytest.raises(RunCancelledError, match=how):
        asyncio.run(execute_run(store, run_id, extractor=InstantExtractor(0.0)))
    assert store.status(run_id) == (None if how == "deleted" else "cancelled")
    store.close()


class BrokenExtractor(InstantExtractor):
    """An extractor double with a bug: every call raises."""

    async def extract(self, service: str, html: str, options: dict[str, Any]) -> Outcome:
        raise RuntimeError("the extractor broke")


def test_a_run_lowers_the_switch_interval_and_restores_it_however_it_ends(
        tmp_path: Path) -> None:
    """The GIL switch interval is lowered while runs execute and is the caller's again
    after the last one ends: finished, failed, or its task cancelled (as DELETE /runs
    does) while another run still goes on."""
    store = Store(tmp_path / "store.sqlite")

    def new_run(pages: int) -> str:
        spec = RunSpec(datasets=[], services=["justext"], concurrency=1,
                       output_folder=str(tmp_path / "out"))
        return create_run(store, spec, memory=[in_memory("set", _pages(pages))])

    async def overlapping() -> float:
        # The second run has pages for 10 s: it still goes on however long the first
        # takes to cancel, and is cancelled in turn once the interval is read.
        first, second = new_run(10), new_run(200)
        cancelled = asyncio.create_task(
            execute_run(store, first, extractor=InstantExtractor(0.05)))
        going_on = asyncio.create_task(
            execute_run(store, second, extractor=InstantExtractor(0.05)))
        while store.counts(second)["done"] < 1:
            await asyncio.sleep(0.02)
        cancelled.cancel()
        await asyncio.gather(cancelled, return_exceptions=True)
        during = sys.getswitchinterval()
        assert not going_on.done()
        going_on.cancel()
        await asyncio.gather(going_on, return_exceptions=True)
        return during

    before = 0.004
    sys.setswitchinterval(before)
    try:
        seen: list[float] = []
        asyncio.run(execute_run(store, new_run(5), extractor=InstantExtractor(),
                                progress=lambda _: seen.append(sys.getswitchinterval())))
        assert seen == [pytest.approx(GIL_SWITCH_INTERVAL_S)] * 5
        assert sys.getswitchinterval() == pytest.approx(before)

        failed = new_run(3)
        with pytest.raises(RuntimeError, match="the extractor broke"):
            asyncio.run(execute_run(store, failed, extractor=BrokenExtractor()))
        assert store.status(failed) == "failed"
        assert sys.getswitchinterval() == pytest.approx(before)

        assert asyncio.run(overlapping()) == pytest.approx(GIL_SWITCH_INTERVAL_S)
        assert sys.getswitchinterval() == pytest.approx(before)
    finally:
        sys.setswitchinterval(0.005)
        store.close()


def test_runs_cancel_command(tmp_path: Path) -> None:
    path = tmp_path / "store.sqlite"
    store = Store(path)
    run_id = create_run(store, RunSpec(datasets=[], services=["justext"],
                                              output_folder=str(tmp_path / "out")),
                        memory=[in_memory("set", _pages(1))])
    store.close()
    runner = CliRunner()
    done = runner.invoke(cli_app, ["runs", "cancel", run_id, "--store", str(path)])
    assert done.exit_code == 0, done.output
    assert Store(path).status(run_id) == "cancelled"
    again = runner.invoke(cli_app, ["runs", "cancel", run_id, "--store", str(path)])
    assert again.exit_code == 1
    assert "already cancelled" in again.output


def test_runs_delete_command(tmp_path: Path) -> None:
    path = tmp_path / "store.sqlite"
    store = Store(path)
    spec = RunSpec(datasets=[], services=["justext"], output_folder=str(tmp_path / "out"))
    deleted, kept, running = (create_run(store, spec, memory=[in_memory("set", _pages(1))])
                              for _ in range(3))
    store.close()
    for run_id in (deleted, kept, running):
        (tmp_path / "out" / run_id).mkdir(parents=True)
        (tmp_path / "out" / run_id / "results.json").write_text("{}")
    set_run_owner(path, running, os.getppid())  # a live process of this host runs it
    runner = CliRunner()

    def delete(*args: str) -> Result:
        return runner.invoke(cli_app, ["runs", "delete", *args, "--store", str(path)])

    done = delete(deleted)
    assert done.exit_code == 0, done.output
    assert not (tmp_path / "out" / deleted).exists()
    assert delete(kept, "--keep-outputs").exit_code == 0
    assert (tmp_path / "out" / kept / "results.json").exists()
    refused = delete(running)
    assert refused.exit_code == 1
    assert "runs cancel" in refused.output
    assert (tmp_path / "out" / running).exists()
    assert delete(deleted).exit_code == 2  # gone: no such run
    store = Store(path)
    assert store.run(deleted) is None
    assert store.run(kept) is None
    assert store.run(running) is not None
    store.close()


def test_a_run_another_live_process_holds_is_deleted_by_neither_cli_nor_api(
        tmp_path: Path) -> None:
    """A run queued or running in another live process (a server, a `run`) is refused by
    `runs delete` (exit 1, one line saying how to stop it) and by DELETE /runs/{id}
    (409), and stays as it was, not cancelled; once that process has ended, either
    deletes it."""
    path = tmp_path / "store.sqlite"
    store = Store(path)
    spec = RunSpec(datasets=[], services=["justext"], output_folder=str(tmp_path / "out"))
    queued, running = (create_run(store, spec, memory=[in_memory("set", _pages(1))])
                       for _ in range(2))
    store.close()
    owner = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    config = RunConfig(store=path, output_folder=tmp_path / "out", mode="embedded")
    try:
        set_run_owner(path, queued, owner.pid, "pending")
        set_run_owner(path, running, owner.pid)
        with TestClient(create_app(ApiSettings(resume=False), config)) as client:
            for run_id, status, state in ((queued, "pending", "queued"),
                                          (running, "running", "running")):
                by_cli = CliRunner().invoke(cli_app, ["runs", "delete", run_id, "--store",
                                                      str(path)])
                assert by_cli.exit_code == 1, by_cli.output
                assert len(by_cli.output.strip().splitlines()) == 1, by_cli.output
                assert f"is {state} in another process" in by_cli.output
                assert f"boilerbench runs cancel {run_id}" in by_cli.output
                by_api = client.delete(f"/runs/{run_id}")
                assert by_api.status_code == 409, by_api.text
                assert by_api.json()["error"] == "run_busy"
                assert f"(`boilerbench runs cancel {run_id}`" in by_api.json()["detail"]
                assert client.get(f"/runs/{run_id}").json()["status"] == status
            documented = client.get("/openapi.json").json()["paths"]["/runs/{run_id}"]
            assert "409" in documented["delete"]["responses"]
            owner.kill()
            owner.wait()
            assert client.delete(f"/runs/{running}").status_code == 200
        by_cli = CliRunner().invoke(cli_app, ["runs", "delete", queued, "--store", str(path)])
        assert by_cli.exit_code == 0, by_cli.output
        assert Store(path).runs() == []
    finally:
        owner.kill()
        owner.wait()


# ---------------------------------------------------------------- the API under load

def _slow_service(delay: float) -> FastAPI:
    """A stand-in service that answers every page after `delay` seconds."""

    async def extract() -> dict[str, Any]:
        await asyncio.sleep(delay)
        return {"text": GOLD, "blocks": [], "algorithm": "justext", "version": "1",
                "elapsed_ms": 1.0}

    return stand_in_service("justext", extract)


@pytest.fixture
def api(tmp_path: Path) -> Iterator[tuple[str, Path, Path]]:
    """The orchestrator (one run at a time, one waiting) before a slow stand-in service,
    with one allowed root; yields its URL, the root and the uploads folder."""
    root = tmp_path / "allowed"
    write_test_set(root / "set", {"p1": (PAGE, GOLD)})
    uploads = tmp_path / "uploads"
    with serve_app(_slow_service(1.0)) as service_url:
        settings = ApiSettings(token="api-token", allowed_roots=[root], resume=False,
                               max_running_runs=1, max_queued_runs=1, uploads=uploads,
                               max_unpacked_bytes=2_000_000)
        config = RunConfig(store=tmp_path / "store.sqlite", output_folder=tmp_path / "out",
                           services=["justext"], urls={"justext": service_url}, retries=0,
                           timeout_s=30)
        with serve_app(create_app(settings, config)) as url:
            yield url, root, uploads


def _inline_run(url: str, pages: int = 1, **extra: Any) -> httpx.Response:
    body = {"pages": {"name": "inline", "pages": [
        {"id": f"p{i}", "html": PAGE, "gold": GOLD} for i in range(pages)]}, **extra}
    return httpx.post(f"{url}/runs", json=body, headers=AUTH, timeout=30)


def _wait_status(url: str, run_id: str, wanted: str, timeout: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        info: dict[str, Any] = httpx.get(f"{url}/runs/{run_id}", headers=AUTH).json()
        if info["status"] == wanted or time.monotonic() > deadline:
            return info
        time.sleep(0.1)


def test_a_json_run_request_may_begin_with_a_byte_order_mark(
        api: tuple[str, Path, Path]) -> None:
    url, _, _ = api
    body = {"pages": {"name": "inline", "pages": [{"id": "p", "html": PAGE, "gold": GOLD}]}}
    reply = httpx.post(f"{url}/runs", content=b"\xef\xbb\xbf" + orjson.dumps(body),
                       headers={**AUTH, "content-type": "application/json"}, timeout=30)
    assert reply.status_code == 202, reply.text


def test_runs_past_the_limits_queue_then_get_429(api: tuple[str, Path, Path]) -> None:
    url, _, _ = api
    first = _inline_run(url, pages=20)
    second = _inline_run(url)
    third = _inline_run(url)
    assert (first.status_code, second.status_code) == (202, 202)
    assert third.status_code == 429, third.text
    assert third.json()["error"] == "too_many_runs"
    assert int(third.headers["retry-after"]) > 0
    first_id, second_id = first.json()["id"], second.json()["id"]
    assert _wait_status(url, first_id, "running")["status"] == "running"
    assert httpx.get(f"{url}/runs/{second_id}", headers=AUTH).json()["status"] == "pending"
    health = httpx.get(f"{url}/health").json()
    assert (health["running"], health["queued"]) == (1, 1)
    # Cancelling the running run lets the waiting one start, and it finishes cleanly.
    deleted = httpx.delete(f"{url}/runs/{first_id}", headers=AUTH)
    assert deleted.status_code == 200
    assert deleted.json()["status"] == "cancelled"
    assert httpx.get(f"{url}/runs/{first_id}", headers=AUTH).status_code == 404
    finished = _wait_status(url, second_id, "finished")
    assert finished["counts"]["ok"] == 1
    assert finished["counts"]["error"] == 0


def test_posts_in_parallel_cannot_pass_the_queue_limit(api: tuple[str, Path, Path]) -> None:
    url, _, _ = api
    assert _inline_run(url, pages=20).status_code == 202  # running; one more may wait

    async def post_many() -> list[int]:
        body = {"pages": [{"id": f"p{i}", "html": PAGE, "gold": GOLD} for i in range(300)]}
        async with httpx.AsyncClient(headers=AUTH, timeout=60) as client:
            replies = await asyncio.gather(*(client.post(f"{url}/runs", json=body)
                                             for _ in range(6)))
        return [reply.status_code for reply in replies]

    codes = asyncio.run(post_many())
    assert sorted(codes) == [202, 429, 429, 429, 429, 429], codes
    assert httpx.get(f"{url}/health").json()["queued"] == 1


def test_a_finished_run_whose_report_is_gone_gets_404(api: tuple[str, Path, Path],
                                                      tmp_path: Path) -> None:
    url, _, _ = api
    run_id = _inline_run(url).json()["id"]
    assert _wait_status(url, run_id, "finished")["status"] == "finished"
    report = httpx.get(f"{url}/runs/{run_id}/report", headers=AUTH)
    assert report.status_code == 200
    # It shows others' text: the browser is told to run no script and load nothing.
    assert report.headers["content-security-policy"].startswith("default-src 'none';")
    assert "script-src" not in report.headers["content-security-policy"]
    assert report.headers["x-content-type-options"] == "nosniff"
    (tmp_path / "out" / run_id / "report.html").unlink()
    reply = httpx.get(f"{url}/runs/{run_id}/report", headers=AUTH)
    assert (reply.status_code, reply.json()["error"]) == (404, "report_missing")


def test_runs_delete_refuses_the_runs_a_server_has_queued_or_running(
        api: tuple[str, Path, Path], tmp_path: Path) -> None:
    """A server's queued run and its running one are its own: `boilerbench runs delete`
    from another process refuses both (the server's task would fail on a run gone),
    and the server's DELETE /runs/{id} deletes them."""
    url, _, _ = api
    # A second a page: the run outlasts the two commands below, which take seconds each
    # to start on a slow machine (a shorter one can end, and the queued run after it,
    # before the second command looks).
    running = _inline_run(url, pages=200).json()["id"]
    queued = _inline_run(url).json()["id"]
    assert _wait_status(url, running, "running")["status"] == "running"
    for run_id in (queued, running):
        done = subprocess.run(
            [sys.executable, "-m", "orchestrator.cli", "runs", "delete", run_id,
             "--store", str(tmp_path / "store.sqlite")],
            cwd=REPO, capture_output=True, text=True, timeout=120, check=False)
        assert done.returncode == 1, done.stdout + done.stderr
        assert "in another process" in done.stderr
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert httpx.get(f"{url}/runs/{queued}", headers=AUTH).json()["status"] == "pending"
    for run_id in (queued, running):
        assert httpx.delete(f"{url}/runs/{run_id}", headers=AUTH).status_code == 200
    assert httpx.get(f"{url}/runs", headers=AUTH).json()["runs"] == []


def test_a_run_whose_outputs_cannot_be_written_ends_failed_not_running(
        api: tuple[str, Path, Path], tmp_path: Path) -> None:
    """A run whose task ends on an error is recorded failed with it: left `running`, it
    would be held by the live server, so that no one could resume it."""
    url, _, _ = api
    (tmp_path / "out").write_text("a file where the output folder should be")
    run_id = _inline_run(url).json()["id"]
    info = _wait_status(url, run_id, "failed", timeout=20)
    assert info["status"] == "failed", info
    assert "NotADirectoryError" in info["error"]
    assert info["counts"]["ok"] == 1  # its results stay, for `run --resume`


def test_an_interrupted_run_says_how_to_resume_it(tmp_path: Path) -> None:
    path = tmp_path / "store.sqlite"
    store = Store(path)
    spec = RunSpec(datasets=[], services=["justext"], output_folder=str(tmp_path / "out"))
    run_id = create_run(store, spec, memory=[in_memory("set", _pages(1))])
    store.close()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    set_run_owner(path, run_id, dead.pid)
    config = RunConfig(store=path, output_folder=tmp_path / "out", mode="embedded")
    with TestClient(create_app(ApiSettings(resume=False), config)) as client:
        for reply in (client.get(f"/runs/{run_id}").json(),
                      client.get(f"/runs/{run_id}/results").json()):
            status = reply.get("status", reply.get("run", {}).get("status"))
            assert status == "interrupted", reply
            assert f"--resume {run_id} --store {path}" in reply["error"]
    shown = CliRunner().invoke(cli_app, ["runs", "show", run_id, "--store", str(path)])
    assert shown.exit_code == 0, shown.output
    assert f"--resume {run_id}" in shown.output


def test_reading_a_big_runs_results_leaves_the_server_answering(
        api: tuple[str, Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """A run's results take seconds to read where it has a hundred thousand: meanwhile
    the server answers other requests (and its runs go on)."""
    url, _, _ = api
    run_id = _inline_run(url).json()["id"]
    assert _wait_status(url, run_id, "finished")["status"] == "finished"
    read = Store.results

    def slow_read(store: Store, run: str) -> list[PageResult]:
        time.sleep(3)
        return read(store, run)

    monkeypatch.setattr(Store, "results", slow_read)
    reading = threading.Thread(target=httpx.get, args=(f"{url}/runs/{run_id}/results",),
                               kwargs={"headers": AUTH, "timeout": 30})
    reading.start()
    try:
        time.sleep(0.5)
        started = time.monotonic()
        assert httpx.get(f"{url}/runs/{run_id}", headers=AUTH, timeout=30).status_code == 200
        assert time.monotonic() - started < 1.5
    finally:
        reading.join()
    page = httpx.get(f"{url}/runs/{run_id}/pages/p0", headers=AUTH, timeout=30).json()
    assert [row["row"] for row in page["rows"]] == ["justext"]


def test_a_restart_resumes_runs_of_dead_processes_only(tmp_path: Path) -> None:
    """A run another live process executes is left to it; one whose process died, running
    or queued, waits (pending) for a slot, the oldest first, as this server's; an upload
    no reservation names (an earlier version's) goes once older than any unpacking
    takes, and one just begun (another server unpacking it) stays."""
    store = Store(tmp_path / "store.sqlite")
    spec = RunSpec(datasets=[], services=["justext"], concurrency=1,
                   output_folder=str(tmp_path / "out"))
    older = create_run(store, spec, memory=[in_memory("set", _pages(2))])
    newer = create_run(store, spec, memory=[in_memory("set", _pages(2))])
    alive = create_run(store, spec, memory=[in_memory("set", _pages(2))])
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    try:
        store.close()
        for run_id, pid in ((older, dead.pid), (newer, dead.pid), (alive, sleeper.pid)):
            set_run_owner(tmp_path / "store.sqlite", run_id, pid,
                          "pending" if run_id == newer else "running")
        crashed_upload = tmp_path / "uploads" / "0123456789ab.partial"
        crashed_upload.mkdir(parents=True)
        os.utime(crashed_upload, (time.time() - 2 * 24 * 3600,) * 2)
        unpacking = tmp_path / "uploads" / "ba9876543210.partial"
        unpacking.mkdir()
        started: list[str] = []
        settings = ApiSettings(resume=True, max_running_runs=1)
        config = RunConfig(store=tmp_path / "store.sqlite", output_folder=tmp_path / "out")
        app = create_app(settings, config)
        app.state.api.start_task = lambda run_id, urls=None: started.append(run_id)
        with TestClient(app) as client:
            shown = {r["id"]: r["status"] for r in client.get("/runs").json()["runs"]}
        assert started == [older, newer]
        assert shown == {older: "pending", newer: "pending", alive: "running"}
        # Resumed, they are this server's: no other process deletes them under it.
        store = Store(tmp_path / "store.sqlite")
        owners = {run_id: info.owner.split(":")[:2] for run_id in (older, newer, alive)
                  if (info := store.run(run_id)) is not None and info.owner is not None}
        store.close()
        assert owners == {older: [socket.gethostname(), str(os.getpid())],
                          newer: [socket.gethostname(), str(os.getpid())],
                          alive: [socket.gethostname(), str(sleeper.pid)]}
        assert not crashed_upload.exists()
        assert unpacking.is_dir()
    finally:
        sleeper.kill()
        sleeper.wait()


def test_a_busy_service_is_asked_again_not_recorded_as_failing(tmp_path: Path) -> None:
    calls = {"n": 0}

    async def extract(request: Request) -> Response:
        calls["n"] += 1
        if calls["n"] <= 3:
            return Response(b'{"error":"busy","detail":"no worker free"}', status_code=503,
                            media_type="application/json")
        return Response(b'{"text":"%s","blocks":[],"algorithm":"justext","version":"1",'
                        b'"elapsed_ms":1.0}' % GOLD.encode(), media_type="application/json")

    store = Store(tmp_path / "store.sqlite")
    with serve_app(stand_in_service("justext", extract)) as url:
        spec = RunSpec(datasets=[], services=["justext"], urls={"justext": url}, retries=0,
                       output_folder=str(tmp_path / "out"),
                       backoff_s=0.05, concurrency=1)
        run_id = create_run(store, spec, memory=[in_memory("set", _pages(2))])
        results = asyncio.run(execute_run(store, run_id))
    assert [r.status for r in results] == ["ok", "ok"], [r.error for r in results]
    assert calls["n"] == 5
    store.close()


# ---------------------------------------------------------------- uploads

def _upload(url: str, data: bytes, name: str = "upload.zip") -> httpx.Response:
    return httpx.post(f"{url}/runs", headers=AUTH, timeout=60,
                      files={"archive": (name, data, "application/octet-stream")})


def test_an_overlapping_zip_is_refused(api: tuple[str, Path, Path]) -> None:
    url, _, uploads = api
    reply = _upload(url, overlapping_zip(300, b"<p>" + b"x" * 20_000 + b"</p>"))
    assert reply.status_code == 422, reply.text
    assert "overlaps" in reply.json()["detail"]
    assert not any(uploads.iterdir()) if uploads.exists() else True


def test_a_form_with_two_archives_is_refused(api: tuple[str, Path, Path]) -> None:
    """Two `archive` files: one would be scored and the other silently not."""
    url, _, uploads = api
    data = tar_bytes([("set/html/p1.html", PAGE.encode()), ("set/content/p1.txt", GOLD.encode())])
    reply = httpx.post(f"{url}/runs", headers=AUTH, timeout=60, files=[
        ("archive", ("one.tar.gz", data, "application/octet-stream")),
        ("archive", ("two.tar.gz", data, "application/octet-stream"))])
    assert reply.status_code == 422, reply.text
    assert "2 `archive` fields" in reply.json()["detail"]
    assert httpx.get(f"{url}/runs", headers=AUTH).json()["runs"] == []
    assert not any(uploads.iterdir()) if uploads.exists() else True


def test_the_real_unpacked_size_is_limited(api: tuple[str, Path, Path]) -> None:
    url, _, uploads = api
    pages = {f"set/html/p{i}.html": bytes(range(256)) * 400 for i in range(30)}  # 3 MB
    reply = _upload(url, zip_bytes({**pages, "set/content/p0.txt": GOLD}))
    assert reply.status_code == 422, reply.text
    assert "unpacks to more than 2000000 bytes" in reply.json()["detail"]
    assert not any(uploads.iterdir()) if uploads.exists() else True


def test_an_upload_lives_in_its_folder_and_is_deleted_with_its_run(
        api: tuple[str, Path, Path], tmp_path: Path) -> None:
    url, _, uploads = api
    data = tar_bytes([("set/html/p1.html", PAGE.encode()), ("set/content/p1.txt", GOLD.encode()),
                      ("set/html/caf\udce9.html", PAGE.encode())])  # a Latin-1 file name
    reply = _upload(url, data, "upload.tar.gz")
    assert reply.status_code == 202, reply.text
    run_id = reply.json()["id"]
    info = _wait_status(url, run_id, "finished")
    assert info["counts"]["ok"] == 1, info
    assert any("caf\ufffd.html" in w for w in info["warnings"]), info["warnings"]
    assert (uploads / run_id / "set" / "html" / "p1.html").read_text() == PAGE
    with sqlite3.connect(tmp_path / "store.sqlite") as db:
        assert db.execute("SELECT COUNT(*) FROM inputs").fetchone() == (0,)
    assert (tmp_path / "out" / run_id / "report.html").is_file()
    assert httpx.delete(f"{url}/runs/{run_id}", headers=AUTH).status_code == 200
    assert not (uploads / run_id).exists()
    assert not (tmp_path / "out" / run_id).exists()
    with sqlite3.connect(tmp_path / "store.sqlite") as db:
        assert db.execute("SELECT COUNT(*) FROM page_results").fetchone() == (0,)
    assert httpx.delete(f"{url}/runs/{run_id}", headers=AUTH).status_code == 404


# ---------------------------------------------------------------- reads stay under the roots

def test_linked_folders_inside_a_root_read_nothing_outside(
        api: tuple[str, Path, Path], tmp_path: Path) -> None:
    url, root, _ = api
    outside = write_test_set(tmp_path / "outside",
                             {"secret": ("<p>outside secret text</p>", "outside secret text")})
    linked = root / "linked"
    linked.mkdir()
    (linked / "html").symlink_to(outside / "html", target_is_directory=True)
    (linked / "content").symlink_to(outside / "content", target_is_directory=True)
    (root / "set" / "html" / "p2.html").symlink_to(outside / "html" / "secret.html")
    (root / "set" / "content" / "p2.txt").write_text("gold")
    reply = httpx.post(f"{url}/runs", json={"dataset": ["linked", "set"]}, headers=AUTH)
    assert reply.status_code == 202, reply.text
    run_id = reply.json()["id"]
    info = _wait_status(url, run_id, "finished")
    results = httpx.get(f"{url}/runs/{run_id}/results", headers=AUTH).json()
    assert info["counts"]["total"] == 1  # set/p1 only
    assert sum("lies outside the allowed folders" in w for w in results["warnings"]) == 3
    # The warnings name the refused files; their text is never read.
    report = httpx.get(f"{url}/runs/{run_id}/report", headers=AUTH).text
    assert "outside secret text" not in report


# ---------------------------------------------------------------- smaller defects

def test_a_service_named_twice_runs_once(tmp_path: Path) -> None:
    spec = RunSpec(datasets=[], services=["bte", "bte", "justext", "bte"],
                   output_folder=str(tmp_path / "out"))
    assert spec.services == ["bte", "justext"]
    store = Store(tmp_path / "store.sqlite")
    run_id = create_run(store, spec, memory=[in_memory("set", _pages(3))])
    results = asyncio.run(execute_run(store, run_id, extractor=InstantExtractor()))
    assert len(results) == store.counts(run_id)["total"] == 6
    store.close()


def test_pages_csv_cells_are_not_formulas(tmp_path: Path) -> None:
    ids = ["=HYPERLINK(\"http://evil\",\"x\")", "@SUM(1+1)", "+cmd", "-2+3", "plain"]
    results = [PageResult(run_id="r", dataset="set", page_id=page_id, service="bte",
                          status="error", error="=1+1") for page_id in ids]
    write_outputs(tmp_path, RunInfo(id="r"), results)
    with (tmp_path / "pages.csv").open(newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    assert sorted(row["page_id"] for row in rows) == sorted(
        ["'" + i if i[0] in "=@+-" else i for i in ids])
    assert {row["error"] for row in rows} == {"'=1+1"}


def test_a_damaged_store_is_named_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "store.sqlite"
    store_of_runs(path, 200)
    whole = path.read_bytes()
    path.write_bytes(whole[: len(whole) // 2])
    with pytest.raises(StoreError, match=f"the store {path} is cut short"):
        Store(path)
    path.write_bytes(b"")
    with pytest.raises(StoreError, match=f"the store {path} is empty"):
        Store(path)
    done = CliRunner().invoke(cli_app, ["runs", "list", "--store", str(path)])
    assert done.exit_code == 2
    assert done.output.strip().count("\n") <= 1
    assert str(path) in done.output.replace("\n", "")
    assert "Traceback" not in done.output
    assert path.stat().st_size == 0  # never silently started afresh


def test_a_store_of_another_format_is_named(tmp_path: Path) -> None:
    path = tmp_path / "store.sqlite"
    path.write_bytes(b"not a database at all" * 10)
    with pytest.raises(StoreError, match="is not an SQLite database"):
        Store(path)
