"""The runs API stopping under load: a request still in hand past the stop's grace is
answered 503 and the server stops; a run that does not stop is left to resume; a run
posted as the stop cuts its request is recorded with its upload, or not at all."""

from __future__ import annotations

import asyncio
import io
import threading
import time
import zipfile
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from orchestrator.api import ApiSettings, ApiState, create_app, lifespan
from orchestrator.config import RunConfig
from orchestrator.models import RunInfo
from orchestrator.runner import create_run, folder_source, run_summary
from orchestrator.store import Store
from tests.helpers import SAMPLE
from tests.servers import serve_guarded


def _app(tmp_path: Path) -> tuple[FastAPI, ApiState]:
    config = RunConfig(store=tmp_path / "store.sqlite", output_folder=tmp_path / "out")
    app = create_app(ApiSettings(resume=False, uploads=tmp_path / "uploads"), config)
    return app, app.state.api


def _recorded_run(tmp_path: Path) -> str:
    """A run of the sample set in the store, as POST /runs records it (not executed)."""
    config = RunConfig(store=tmp_path / "store.sqlite", output_folder=tmp_path / "out")
    store = Store(config.store_path)
    try:
        spec = config.run_spec(services=["justext"], backend="embedded")
        source = folder_source("sample", SAMPLE / "html", SAMPLE / "content", None)
        return create_run(store, spec, [source])
    finally:
        store.close()


def test_a_request_in_hand_past_the_grace_gets_503_and_the_server_stops(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run's figures take seconds to read where it has thousands of results: the stop
    waited for every such read in hand (up to 18 s of a stop under load)."""
    run_id = _recorded_run(tmp_path)
    entered, release = threading.Event(), threading.Event()

    def slow_summary(*args: Any) -> Any:
        entered.set()
        release.wait(120)
        return run_summary(*args)

    monkeypatch.setattr("orchestrator.api.run_summary", slow_summary)
    app, api = _app(tmp_path)
    replies: list[httpx.Response] = []
    try:
        with serve_guarded(app) as (url, server):
            asking = threading.Thread(target=lambda: replies.append(
                httpx.get(f"{url}/runs/{run_id}/results", timeout=120)))
            asking.start()
            assert entered.wait(60), "the request never reached the figures"
            server.should_exit = True  # the stop
            asking.join(timeout=60)
            # Still in the thread of its figures, which cannot be stopped: the reply and
            # the store's closing did not wait for it.
            answered = not asking.is_alive()
            for _ in range(600):  # then the lifespan's end (the runs, the store)
                if api.opened is None:
                    break
                time.sleep(0.1)
            store_closed = api.opened is None
            release.set()
    finally:
        release.set()
    assert answered, "the stop waited for the request in hand"
    assert store_closed
    assert [reply.status_code for reply in replies] == [503]
    assert replies[0].json()["error"] == "shutting_down"


def test_a_run_that_does_not_stop_is_left_to_resume(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A run whose task does not end when cancelled (its report still being written,
    its workers slow to die) no longer holds the stop: it is left as a killed server
    leaves it, unfinished, for the next start to resume."""
    run_id = _recorded_run(tmp_path)

    async def stop_with_a_stubborn_run() -> tuple[bool, str | None]:
        release = asyncio.Event()

        async def stubborn(store: Store, run_id: str, **_: Any) -> None:
            store.set_status(run_id, "running")
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                await release.wait()
                raise

        monkeypatch.setattr("orchestrator.api.execute_run", stubborn)
        app, api = _app(tmp_path)
        async with lifespan(app):
            api.start_task(run_id)
            while api.store.status(run_id) != "running":
                await asyncio.sleep(0.01)
            task = api.tasks[run_id]
        ended = not task.done()  # the lifespan ended while the run was still stopping
        release.set()
        await asyncio.gather(task, return_exceptions=True)
        store = Store(tmp_path / "store.sqlite")
        try:
            return ended, store.status(run_id)
        finally:
            store.close()

    ended, status = asyncio.run(asyncio.wait_for(stop_with_a_stubborn_run(), 60))
    assert ended
    assert status == "running"


def _archive() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("set/html/p1.html", "<html><body><p>The harbour bridge opened "
                                             "again after a year of work.</p></body></html>")
        archive.writestr("set/content/p1.txt", "The harbour bridge opened again.")
    return buffer.getvalue()


def test_a_post_cut_while_its_run_is_recorded_keeps_the_upload_of_the_recorded_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The stop cancels a POST /runs whose run is being recorded in a thread, which
    goes on and records it: the upload it reads must stay (it was removed, and the
    recorded run then failed on its missing test set when a later start resumed it)."""
    entered, release, recorded = threading.Event(), threading.Event(), threading.Event()
    ids: list[str] = []
    record = Store.create_run

    def slow_record(store: Store, info: RunInfo, *args: Any) -> None:
        ids.append(info.id)
        entered.set()
        release.wait(60)
        try:
            record(store, info, *args)
        finally:
            recorded.set()

    monkeypatch.setattr(Store, "create_run", slow_record)

    async def post_cut_while_recording() -> tuple[httpx.Response, str, bool, str | None]:
        app, api = _app(tmp_path)
        async with lifespan(app), httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app), base_url="http://api") as client:
            posting = asyncio.create_task(client.post(
                "/runs", files={"archive": ("set.zip", _archive(), "application/zip")},
                data={"services": "justext", "backend": "embedded"}))
            await asyncio.to_thread(entered.wait, 60)
            posting.cancel()  # as the server does once the stop's grace has passed
            reply = await posting
            release.set()
            await asyncio.to_thread(recorded.wait, 60)
            run_id = ids[0]
            return (reply, run_id, api.upload_folder(run_id).is_dir(),
                    api.store.status(run_id))

    reply, run_id, kept, status = asyncio.run(asyncio.wait_for(post_cut_while_recording(), 120))
    assert reply.status_code == 503, reply.text
    assert reply.json()["error"] == "shutting_down"
    assert "the run may have been recorded: GET /runs" in reply.json()["detail"]
    assert status == "pending"  # recorded: the next start resumes it
    assert kept, f"the upload of the recorded run {run_id} was removed"
