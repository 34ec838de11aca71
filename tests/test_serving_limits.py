"""A reply that ends the connection while the request's body still arrives (a 413 for a
body far past the limit), against real clients: the connection is closed in stages, so
a client that sends its whole body before it reads gets the reply, and the server reads
and drops no more than LINGER_BYTES of the rest, nor past the request's time limit."""

from __future__ import annotations

import http.client
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import orjson
import pytest
import uvicorn

from shared import serving
from shared.settings import HttpLimits
from tests.helpers import post_html_sent_whole
from tests.servers import free_port, serve_process

MIB = 2**20


def _address(url: str) -> tuple[str, int]:
    host, port = url.removeprefix("http://").split(":")
    return host, int(port)


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_a_body_far_past_the_limit_gets_its_413_on_a_client_that_sends_it_all_first(
        chunked: bool) -> None:
    """Python's http.client sends the whole body before it reads the reply. A body more
    than the 16 MiB the service reads and drops past its limit is refused at once; the
    service then drops the rest as it comes, so the client reads the 413, not a reset."""
    limit = MIB
    body = b"<html><body>" + b"<p>word</p>" * (21 * MIB // 11) + b"</body></html>"
    with serve_process("tests.misbehaving_app:app",
                       {"BOILERBENCH_MAX_BODY_BYTES": str(limit)}) as (url, _):
        connection = http.client.HTTPConnection(*_address(url), timeout=60)
        refused = post_html_sent_whole(connection, body, chunked)
        reply = orjson.loads(refused.read())
        connection.close()
    assert refused.status == 413, reply
    assert refused.getheader("connection") == "close"
    assert reply["error"] == "too_large"
    assert reply["detail"] == (f"the body passes the limit of {limit} bytes" if chunked
                               else f"the body is {len(body)} bytes; the limit is {limit}")


async def _refusing_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Refuses every request at once with a 413 that ends the connection, its body unread."""
    await send({"type": "http.response.start", "status": 413,
                "headers": [(b"content-length", b"2"), (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": b"{}"})


@contextmanager
def _guarded_server(limits: HttpLimits) -> Iterator[tuple[str, int]]:
    """_refusing_app under uvicorn with the guarded protocol, in a thread."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(
        _refusing_app, host="127.0.0.1", port=port, http=serving.guarded_protocol(limits),
        lifespan="off", log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        while not server.started:
            if not thread.is_alive():
                raise RuntimeError("the test server exited")
            time.sleep(0.05)
        yield "127.0.0.1", port
    finally:
        server.should_exit = True
        thread.join(timeout=30)


def _post_head(size: int) -> bytes:
    return (b"POST /extract HTTP/1.1\r\nhost: x\r\ncontent-type: text/html\r\n"
            b"content-length: %d\r\n\r\n" % size)


def _sent_until_cut(sock: socket.socket, chunk: bytes, most: int, pause: float = 0.0) -> int:
    """How many bytes of `chunk`s the peer took before it cut the connection (`most` if
    it never did)."""
    sent = 0
    try:
        while sent < most:
            sock.sendall(chunk)
            sent += len(chunk)
            time.sleep(pause)
    except (BrokenPipeError, ConnectionResetError):
        pass
    return sent


def test_the_rest_of_a_refused_body_is_dropped_up_to_linger_bytes(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(serving, "LINGER_BYTES", 4 * MIB)
    with _guarded_server(HttpLimits(request_timeout_s=60)) as address, \
            socket.create_connection(address) as sock:
        sock.sendall(_post_head(2**30))
        sent = _sent_until_cut(sock, b"a" * 65536, 256 * MIB)
    assert sent < 256 * MIB, "the server read a refused body on past LINGER_BYTES"


def test_the_rest_of_a_refused_body_is_dropped_only_within_the_request_time_limit() -> None:
    with _guarded_server(HttpLimits(request_timeout_s=1)) as address, \
            socket.create_connection(address) as sock:
        sock.sendall(_post_head(2**30) + b"a" * 65536)
        sock.settimeout(30)
        reply = sock.recv(65536)
        # A byte every 0.05 s: the server's half-close leaves our side open until its
        # time limit (1 s) closes the connection; 30 s of it means it never did.
        sent = _sent_until_cut(sock, b"a", 600, pause=0.05)
    assert reply.startswith(b"HTTP/1.1 413 "), reply
    assert sent < 600, "the server kept reading past the request's time limit"
