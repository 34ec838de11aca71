"""A reply sent while the request's body still arrives (a 413 for a body far past the
limit; a 401, 404 or 405 before the body was read), against real clients: it ends the
connection, closed in stages, so a client that sends its whole body before it reads gets
the reply, and the server reads and drops no more than `linger_bytes` of the rest, nor
past the request's time limit."""

from __future__ import annotations

import http.client
import os
import select
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import orjson
import pytest

from shared.settings import HttpLimits
from tests.helpers import REPO, post_html_sent_whole
from tests.servers import serve_guarded, serve_process

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


def test_the_rest_of_a_refused_body_is_dropped_up_to_linger_bytes() -> None:
    with serve_guarded(_refusing_app, HttpLimits(request_timeout_s=60, linger_bytes=4 * MIB),
                       lifespan="off") as (url, _), \
            socket.create_connection(_address(url)) as sock:
        sock.sendall(_post_head(2**30))
        sent = _sent_until_cut(sock, b"a" * 65536, 256 * MIB)
    assert sent < 256 * MIB, "the server read a refused body on past linger_bytes"


def test_the_rest_of_a_refused_body_is_dropped_only_within_the_request_time_limit() -> None:
    with serve_guarded(_refusing_app, HttpLimits(request_timeout_s=1), lifespan="off") as (
            url, _), socket.create_connection(_address(url)) as sock:
        sock.sendall(_post_head(2**30) + b"a" * 65536)
        sock.settimeout(30)
        reply = sock.recv(65536)
        # A byte every 0.05 s: the server's half-close leaves our side open until its
        # time limit (1 s) closes the connection; 30 s of it means it never did.
        sent = _sent_until_cut(sock, b"a", 600, pause=0.05)
    assert reply.startswith(b"HTTP/1.1 413 "), reply
    assert sent < 600, "the server kept reading past the request's time limit"


TOKEN = b"service-token"
# What the service below drops at most after a reply that ends the connection: more
# than http.client's 20 MiB body, far less than the bodies sent on past it.
LINGER = 32 * MIB


@pytest.fixture(scope="module")
def token_service() -> Iterator[tuple[str, int]]:
    """The misbehaving test service as deployed, with a token and a linger cap."""
    with serve_process("tests.misbehaving_app:app", {
            "BOILERBENCH_TOKEN": TOKEN.decode(),
            "BOILERBENCH_LINGER_BYTES": str(LINGER)}) as (url, _):
        yield _address(url)


def _reply_while_sending(sock: socket.socket, chunk: bytes, most: int,
                         pause: float) -> tuple[bytes, bool]:
    """What the server sends while the body goes on, a `chunk` every `pause` s (`most`
    bytes at most), and whether it ended its side of the connection meanwhile."""
    reply, sent = b"", 0
    while sent < most:
        if select.select([sock], [], [], pause)[0]:
            data = sock.recv(65536)
            if not data:
                return reply, True
            reply += data
        else:
            sock.sendall(chunk)
            sent += len(chunk)
    return reply, False


# Requests the service answers before it reads their body.
EARLY_REPLIES = {
    "wrong token": (b"POST /extract", b"Bearer wrong", 401),
    "unknown path": (b"POST /nowhere", b"Bearer " + TOKEN, 404),
    "wrong method": (b"PUT /extract", b"Bearer " + TOKEN, 405),
}


@pytest.mark.parametrize(("request_line", "authorization", "status"),
                         EARLY_REPLIES.values(), ids=EARLY_REPLIES)
def test_a_reply_sent_before_the_body_arrived_ends_the_connection(
        token_service: tuple[str, int], request_line: bytes, authorization: bytes,
        status: int) -> None:
    """Such a reply kept the connection open, and the server read the rest of the body,
    however long, until the request's time limit: now it ends the connection as a 413
    does, the rest of the body dropped up to the linger cap."""
    with socket.create_connection(token_service) as sock:
        sock.sendall(request_line + b" HTTP/1.1\r\nhost: x\r\nauthorization: " + authorization
                     + b"\r\ncontent-type: text/html\r\ncontent-length: %d\r\n\r\n" % 2**30)
        reply, ended = _reply_while_sending(sock, b"a" * 65536, 64 * MIB, pause=0.005)
        sent = _sent_until_cut(sock, b"a" * 65536, 256 * MIB)
    assert reply.startswith(b"HTTP/1.1 %d " % status), reply[:200]
    assert ended, "the connection stayed open after the reply while the body went on"
    assert b"\r\nconnection: close\r\n" in reply.lower()
    assert sent < 128 * MIB, "the server read the body on past its linger cap"


def test_a_client_that_sends_its_whole_body_first_reads_the_reply_sent_before_it(
        token_service: tuple[str, int]) -> None:
    connection = http.client.HTTPConnection(*token_service, timeout=60)
    connection.request("POST", "/nowhere", body=b"a" * (20 * MIB),
                       headers={"authorization": f"Bearer {TOKEN.decode()}"})
    reply = connection.getresponse()
    body = orjson.loads(reply.read())
    connection.close()
    assert reply.status == 404, body
    assert reply.getheader("connection") == "close"


def test_a_linger_cap_out_of_range_stops_the_service_with_one_line() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "shared.serving", "tests.misbehaving_app:app", "--port", "0"],
        env={**os.environ, "BOILERBENCH_LINGER_BYTES": "-1"}, cwd=REPO, text=True,
        capture_output=True, stdin=subprocess.DEVNULL, timeout=60)
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "python -m shared.serving: error: BOILERBENCH_LINGER_BYTES='-1': Input should be "
        "greater than or equal to 0"]
