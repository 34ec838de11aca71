"""The worker pool (shared/workers.py) on its own: whole /extract requests answered in
a worker process, every way an extraction can go wrong, and the frames between them."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from shared.answer import ServiceError, finish_reply, reply_text_json
from shared.contract import ExtractReply
from shared.service import create_service_app
from shared.settings import ServiceSettings
from shared.workers import (
    SOCKET_BUFFER_BYTES,
    ExtractionFailedError,
    ExtractionTimeoutError,
    Handler,
    WorkerPool,
    _worker_main,
    descendants,
    receive_frame,
    send_frame,
)
from tests.misbehaving_extractor import ALGORITHM
from tests.servers import serve_app

MODULE = ALGORITHM.extract.__module__  # what create_service_app gives its pool too


def with_pool(test: Callable[[WorkerPool], Awaitable[Any]]) -> Any:
    async def go() -> Any:
        pool = WorkerPool(MODULE, 1)
        await pool.start()
        try:
            return await test(pool)
        finally:
            await pool.close()

    return asyncio.run(go())


def reply_of(partial: bytes) -> ExtractReply:
    return ExtractReply.model_validate_json(finish_reply(partial, 1.5))


def test_a_worker_answers_both_body_forms() -> None:
    async def test(pool: WorkerPool) -> None:
        raw = await pool.run("<p>Grüße aus Köln</p>".encode("cp1252"), "text/html",
                             {"label": "raw", "url": "https://x.org/a"}, 10)
        reply = reply_of(raw.partial_reply)
        assert reply.text == "<p>Grüße aus Köln</p>"
        assert (reply.blocks[0].label, reply.blocks[0].path) == ("raw", "https://x.org/a")
        assert (reply.algorithm, reply.elapsed_ms) == ("misbehaving", 1.5)
        assert raw.extract_ms > 0
        body = orjson.dumps({"html": "<p>json body</p>", "options": {"label": "json"}})
        reply = reply_of((await pool.run(body, "application/json", {}, 10)).partial_reply)
        assert (reply.text, reply.blocks[0].label) == ("<p>json body</p>", "json")

    with_pool(test)


def test_a_reply_without_blocks_gives_its_text_json_as_is() -> None:
    """A caller that keeps only the text asks for no blocks, and cuts the text's JSON
    out of the reply unparsed: also when the text holds quotes, backslashes and what
    looks like the reply's own field names."""
    async def test(pool: WorkerPool) -> None:
        for text in ('<p>plain</p>', '<p>"a","blocks":[1],\\",\\"text\\":"</p>',
                     '<p>\\</p>\n<p>"</p>'):
            whole = await pool.run(text.encode(), "text/html", {}, 10)
            bare = await pool.run(text.encode(), "text/html", {}, 10, blocks=False)
            assert orjson.loads(finish_reply(bare.partial_reply, 1.5)).keys() == {
                "algorithm", "version", "text", "elapsed_ms"}
            assert reply_text_json(bare.partial_reply) == \
                reply_text_json(whole.partial_reply) == orjson.dumps(text)

    with_pool(test)


@pytest.mark.parametrize(("body", "content_type", "status", "error"), [
    (b"<p>refuse me</p>", "text/html", 422, "unprocessable_page"),
    (b"<p>raise</p>", "text/html", 422, "extraction_failed"),
    (b'{"html": "<p>x</p>", "options": {"colour": 1}}', "application/json", 422,
     "invalid_options"),
    (b'{"html": ', "application/json", 400, "malformed_json"),
    (b"\x00\x01\x02" * 100, "text/html", 400, "not_html"),
    (b"<p>x</p>", "text/plain", 415, "unsupported_media_type"),
])
def test_refusals_come_back_as_error_replies(body: bytes, content_type: str, status: int,
                                             error: str) -> None:
    async def test(pool: WorkerPool) -> None:
        with pytest.raises(ServiceError) as refused:
            await pool.run(body, content_type, {}, 10)
        assert (refused.value.status, refused.value.error) == (status, error)
        if error == "extraction_failed":  # the bug's name and message; its traceback is logged
            assert refused.value.detail == "RuntimeError: a bug in the extractor"
        # The same worker answers the next request.
        assert reply_of((await pool.run(b"<p>fine</p>", "text/html", {}, 10)).partial_reply)

    with_pool(test)


@pytest.mark.parametrize(("page", "failure"), [
    (b"<p>die</p>", ExtractionFailedError), (b"<p>hang</p>", ExtractionTimeoutError)])
def test_a_dead_or_hung_worker_is_replaced(page: bytes, failure: type[Exception]) -> None:
    async def test(pool: WorkerPool) -> None:
        before = {w.process.pid for w in pool._workers}
        with pytest.raises(failure):
            await pool.run(page, "text/html", {}, 1.0)
        reply = await pool.run(b"<p>after</p>", "text/html", {}, 60)
        assert reply_of(reply.partial_reply).text == "<p>after</p>"
        assert not before & {w.process.pid for w in pool._workers}

    with_pool(test)


@pytest.mark.parametrize("size", [0, 10, 3 * SOCKET_BUFFER_BYTES])
def test_frames_arrive_whole(size: int) -> None:
    """A payload larger than the socket's buffer arrives whole while the sender still writes."""
    left, right = socket.socketpair()
    payload = bytes(range(256)) * (size // 256) + b"x" * (size % 256)
    sender = threading.Thread(target=send_frame, args=(left, ("meta", size), payload))
    sender.start()
    meta, received = receive_frame(right)
    sender.join()
    assert meta == ("meta", size)
    assert received == payload
    left.close()
    with pytest.raises(EOFError):
        receive_frame(right)
    right.close()


def test_a_request_in_neither_body_form_is_refused_while_the_worker_is_busy() -> None:
    """415 and an empty JSON body need no worker: the service answers them at once,
    even while its only worker is stuck on a page."""
    app = create_service_app(ALGORITHM, ServiceSettings(time_limit_s=30.0))
    with serve_app(app) as url:
        stuck = threading.Thread(target=httpx.post, args=(f"{url}/extract",),
                                 kwargs={"content": b"<p>hang</p>", "timeout": 60,
                                         "headers": {"content-type": "text/html"}})
        stuck.start()
        try:
            while not app.state.pool._idle.empty():  # until the worker has the page
                time.sleep(0.01)
            plain = httpx.post(f"{url}/extract", content=b"<p>x</p>",
                               headers={"content-type": "text/plain"}, timeout=60)
            empty = httpx.post(f"{url}/extract", content=b" \n",
                               headers={"content-type": "application/json"}, timeout=60)
            assert stuck.is_alive(), "answered while the worker was still busy"
        finally:
            for worker in list(app.state.pool._workers):
                worker.process.kill()  # ends the stuck request (422) and the thread
            stuck.join()
    assert (plain.status_code, plain.json()["error"]) == (415, "unsupported_media_type")
    assert (empty.status_code, empty.json()["error"]) == (400, "empty_body")


def test_descendants_are_children_and_their_children() -> None:
    shell = subprocess.Popen(["sh", "-c", "sh -c 'sleep 60; :' & sleep 60; :"])
    try:
        deadline = time.monotonic() + 10
        while len(found := descendants(shell.pid)) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        names = sorted(Path(f"/proc/{pid}/comm").read_text().strip() for pid in found)
        assert names == ["sh", "sleep", "sleep"]  # the inner shell and both sleeps
        assert shell.pid not in found
    finally:
        for pid in descendants(shell.pid):
            os.kill(pid, signal.SIGKILL)
        shell.kill()
        shell.wait()


def test_a_pool_closed_while_it_replaces_a_worker_leaves_the_next_pool_working() -> None:
    """A request cancelled mid-page (a run cancelled, a client gone) makes the pool
    start a replacement worker; closing the pool then must not leave the replacement's
    socket watched by the event loop, or the next pool, given the same descriptor
    numbers, waits for a worker that has long answered."""
    async def go() -> float:
        first = WorkerPool(MODULE, 1)
        await first.start()
        request = asyncio.create_task(first.run(b"<p>hang</p>", "text/html", {}, 60))
        await asyncio.sleep(0.5)
        request.cancel()
        await asyncio.sleep(0.05)  # the replacement is starting
        await first.close()
        started = time.monotonic()
        second = WorkerPool(MODULE, 1, start_timeout_s=20)
        try:
            await second.start()
            reply = await second.run(b"<p>after</p>", "text/html", {}, 20)
            assert reply_of(reply.partial_reply).text == "<p>after</p>"
        finally:
            await second.close()
        return time.monotonic() - started

    assert asyncio.run(go()) < 15


def test_closing_a_pool_awaits_the_replacements_it_started() -> None:
    """A request cancelled while its worker works (a run stopped) has the pool replace
    that worker in a task of its own; close() cancels and awaits such tasks, so that
    none outlives the pool (the event loop would end with it pending and report it
    as "Task was destroyed but it is pending!")."""
    async def go() -> list[asyncio.Task[Any]]:
        pool = WorkerPool(MODULE, 1)
        await pool.start()
        request = asyncio.create_task(pool.run(b"<p>hang</p>", "text/html", {}, 60))
        while not pool._idle.empty():  # until the worker has the page
            await asyncio.sleep(0.01)
        request.cancel()
        await asyncio.gather(request, return_exceptions=True)
        await pool.close()
        return [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]

    assert asyncio.run(go()) == []


def echo_handler(argument: str) -> Handler:
    """A worker handler for the test below: each frame back as it came."""
    return lambda meta, payload: (meta, payload)


@pytest.mark.parametrize("frames", [0, 1])
def test_a_worker_whose_pool_is_gone_ends_quietly(frames: int) -> None:
    # A pool closed while its worker starts (0 frames) or works (1): the worker's reply
    # finds the socket closed, and it ends without a traceback in the service's log.
    ours, theirs = socket.socketpair()
    for _ in range(frames):
        send_frame(ours, ("page",), b"<p>x</p>")
    ours.close()
    try:
        _worker_main(theirs, "tests.test_workers:echo_handler", "")
    finally:
        theirs.close()
