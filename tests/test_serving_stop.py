"""Servers stopped by SIGTERM: where the signal cannot end the process (PID 1 of a
container), one ends once shut down, rather than wait for the thread of a request it
cancelled; the API's stop past its grace (BOILERBENCH_API_STOP_GRACE_S) is a warning."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from orchestrator.launcher import wait_healthy
from tests.helpers import REPO
from tests.servers import free_port


def app_with_grace(grace: float, setup: str, request: str, log_level: str) -> str:
    """A `python -c` script: `setup`, then an ASGI app whose lifespan asks a stop's grace
    of `grace` s and whose requests run `request`, served by shared.serving at the log
    level given; it prints its URL once it listens."""
    body = "".join(f"    {line}\n" for line in request.strip().splitlines())
    return f"""
import asyncio, signal, sys, threading
from shared import serving
{setup}
async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                scope["state"][serving.SHUTDOWN_GRACE_S] = {grace}
                await send({{"type": "lifespan.startup.complete"}})
            else:
                await send({{"type": "lifespan.shutdown.complete"}})
                return
{body}
serving.serve(app, "127.0.0.1", 0, log_level="{log_level}", access_log=False,
              on_listening=lambda url: print(url, flush=True))
"""


# An app whose one request works in a thread that never ends; SIGTERM has a handler
# that does nothing, as the kernel does with the default action of a signal sent to
# PID 1.
SERVER = app_with_grace(1, """
signal.signal(signal.SIGTERM, lambda *_: None)
never = threading.Event()
""", """
print("working", flush=True)
await asyncio.to_thread(never.wait)
""", "critical")


def test_a_stop_ignored_as_by_pid_1_still_ends_the_server() -> None:
    process = subprocess.Popen([sys.executable, "-c", SERVER], cwd=REPO, text=True,
                               stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
    try:
        assert process.stdout is not None
        url = process.stdout.readline().strip()
        asking = threading.Thread(target=lambda: httpx.get(url, timeout=60), daemon=True)
        asking.start()
        assert process.stdout.readline().strip() == "working"
        process.send_signal(signal.SIGTERM)
        try:
            code = process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            code = None
    finally:
        process.kill()
        process.wait()
    assert code == 128 + signal.SIGTERM, "the server waited for its request's thread"


@contextmanager
def _api(tmp_path: Path, grace: str) -> Iterator[tuple[int, subprocess.Popen[bytes]]]:
    """The runs API as `python -m shared.serving` runs it, with a stop's grace of `grace`
    seconds and every log line of a stop (`--log-level info`) on its stderr."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "shared.serving", "orchestrator.api:app_factory", "--factory",
         "--env-prefix", "BOILERBENCH_API_", "--port", str(port), "--log-level", "info",
         "--no-access-log"],
        env={**os.environ, "BOILERBENCH_STORE": str(tmp_path / "store.sqlite"),
             "BOILERBENCH_OUTPUT_FOLDER": str(tmp_path / "out"),
             "BOILERBENCH_API_RESUME": "false", "BOILERBENCH_API_STOP_GRACE_S": grace},
        cwd=REPO, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, start_new_session=True)
    try:
        wait_healthy(f"http://127.0.0.1:{port}", 120, process)
        yield port, process
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def _log_lines(process: subprocess.Popen[bytes]) -> list[str]:
    """The server's log, once it has ended."""
    return process.communicate(timeout=60)[1].decode().splitlines()


def test_a_stop_past_the_apis_grace_is_one_warning_line_not_an_error(tmp_path: Path) -> None:
    """The requests still in hand once the API's stop grace has passed are answered 503
    by design: uvicorn's ERROR line on cancelling them read as a fault of the server."""
    with _api(tmp_path, "0.5") as (port, process), \
            socket.create_connection(("127.0.0.1", port)) as sock:
        # A run posted whose body is still on its way: a request in hand at the stop.
        sock.sendall(b"POST /runs HTTP/1.1\r\nhost: x\r\ncontent-type: application/json"
                     b"\r\ncontent-length: 1000\r\n\r\n{\"dataset\": ")
        httpx.get(f"http://127.0.0.1:{port}/health", timeout=30)  # read meanwhile
        process.send_signal(signal.SIGTERM)
        sock.settimeout(60)
        reply = b""
        while chunk := sock.recv(65536):  # to the close: the head and body come apart
            reply += chunk
        lines = _log_lines(process)
    assert reply.startswith(b"HTTP/1.1 503 "), reply[:300]
    assert b'"shutting_down"' in reply
    assert not [line for line in lines if line.startswith("ERROR") or "Cancel" in line], lines
    assert [line for line in lines if line.startswith("WARNING")] == [
        "WARNING:  Stopping: 1 request(s) still in hand after the grace of 0.5 s cancelled; "
        "those whose reply had not started are answered 503"], lines


# An app whose one request starts its reply, sends part of the body and waits for more
# that never comes.
MID_REPLY = app_with_grace(0.5, "", """
await send({"type": "http.response.start", "status": 200,
            "headers": [(b"content-type", b"text/plain")]})
await send({"type": "http.response.body", "body": b"first part", "more_body": True})
await asyncio.Event().wait()
""", "info")


def test_a_stop_that_cuts_a_reply_in_the_middle_is_the_warning_alone() -> None:
    """A request whose reply had started when the grace passed has its connection
    closed mid-reply; uvicorn logged that as an exception of the app, with a traceback,
    beside the warning that already counts it."""
    process = subprocess.Popen([sys.executable, "-c", MID_REPLY], cwd=REPO,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        port = int(process.stdout.readline().rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port)) as sock:
            sock.sendall(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n")
            sock.settimeout(60)
            received = b""
            while b"first part" not in received:  # the head and the body come apart
                chunk = sock.recv(65536)
                assert chunk, received
                received += chunk
            process.send_signal(signal.SIGTERM)
            assert process.wait(timeout=60) == -signal.SIGTERM
        lines = process.communicate(timeout=60)[1].splitlines()
    finally:
        process.kill()
        process.wait()
    assert not [line for line in lines if line.startswith("ERROR") or "Traceback" in line], lines
    assert [line for line in lines if line.startswith("WARNING")] == [
        "WARNING:  Stopping: 1 request(s) still in hand after the grace of 0.5 s cancelled; "
        "those whose reply had not started are answered 503"], lines


def test_a_stop_with_no_request_in_hand_logs_no_warning(tmp_path: Path) -> None:
    """A grace of 0 s passes at once (uvicorn then says it cancels 0 tasks): nothing was
    cut, so nothing is reported."""
    with _api(tmp_path, "0") as (_, process):
        process.send_signal(signal.SIGTERM)
        lines = _log_lines(process)
    assert lines[-1].startswith("INFO:     Finished server process"), lines
    assert not [line for line in lines if line.startswith(("WARNING", "ERROR"))], lines


@pytest.mark.parametrize(("grace", "why"), [("-1", "Input should be greater than or equal "
                                                   "to 0"),
                                            ("inf", "Input should be a finite number")])
def test_a_stop_grace_out_of_range_stops_the_api_with_one_line(grace: str, why: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "shared.serving", "orchestrator.api:app_factory", "--factory",
         "--env-prefix", "BOILERBENCH_API_", "--port", "0"],
        env={**os.environ, "BOILERBENCH_API_STOP_GRACE_S": grace}, cwd=REPO, text=True,
        capture_output=True, stdin=subprocess.DEVNULL, timeout=60)
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        f"python -m shared.serving: error: BOILERBENCH_API_STOP_GRACE_S='{grace}': {why}"]
