"""Hostile and unlucky clients against a real service process (`python -m shared.serving`,
as services are deployed): oversized heads, slow clients, crowds of connections,
bodies past the limit, dead idle workers, the wait for a worker, the token on every
path, oversized replies.

The service is the misbehaving test extractor (tests/misbehaving_extractor.py), so
a page can ask for a second's work or for its worker to die.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.servers import serve_process

APP = "tests.misbehaving_app:app"
TOKEN = "service-token"
AUTH = {"authorization": f"Bearer {TOKEN}"}
SETTINGS = {
    "BOILERBENCH_TOKEN": TOKEN,
    "BOILERBENCH_WORKERS": "1",
    "BOILERBENCH_TIME_LIMIT_S": "1.6",  # a slow page (1 s) fits; two in a row would not
    "BOILERBENCH_QUEUE_WAIT_S": "30",
    "BOILERBENCH_MAX_REPLY_BYTES": "20000",
    "BOILERBENCH_MAX_HEADER_BYTES": "16384",
    "BOILERBENCH_REQUEST_TIMEOUT_S": "1.5",
    "BOILERBENCH_MAX_CONNECTIONS": "40",
}
OPEN_FILES = 256


@pytest.fixture(scope="module")
def service() -> Iterator[tuple[str, int]]:
    # A small open-file limit, so that a crowd can reach it within a test.
    with serve_process(APP, SETTINGS, open_files=OPEN_FILES) as (url, process):
        yield url, process.pid


def _address(url: str) -> tuple[str, int]:
    host, port = url.removeprefix("http://").split(":")
    return host, int(port)


def _extract(url: str, page: str, **headers: str) -> httpx.Response:
    return httpx.post(f"{url}/extract", json={"html": page},
                      headers={**AUTH, **headers}, timeout=30)


def _read_reply(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (or 10 s pass)."""
    sock.settimeout(10)
    parts = []
    try:
        while chunk := sock.recv(65536):
            parts.append(chunk)
    except (ConnectionResetError, TimeoutError):
        pass
    return b"".join(parts)


def test_an_oversized_head_gets_431_and_the_service_stays_healthy(
        service: tuple[str, int]) -> None:
    url, _ = service
    with socket.create_connection(_address(url)) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nhost: x\r\n")
        try:
            for _ in range(100):  # 1.6 MB of header, far past the 16 kB limit
                sock.sendall(b"x-filler: " + b"a" * 16_000 + b"\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass
        reply = _read_reply(sock)
    assert reply.startswith(b"HTTP/1.1 431 "), reply[:200]
    assert b"connection: close" in reply
    assert httpx.get(f"{url}/health").status_code == 200


def test_a_request_that_trickles_in_is_cut_off(service: tuple[str, int]) -> None:
    url, _ = service
    with socket.create_connection(_address(url)) as head_only, \
            socket.create_connection(_address(url)) as body_short:
        head_only.sendall(b"GET /health HTTP/1.1\r\nhost: x\r\n")  # never ends the head
        body_short.sendall(b"POST /extract HTTP/1.1\r\nhost: x\r\nauthorization: Bearer "
                           + TOKEN.encode() + b"\r\ncontent-type: text/html\r\n"
                           b"content-length: 1000\r\n\r\n<p>only part")
        started = time.monotonic()
        head_reply, body_reply = _read_reply(head_only), _read_reply(body_short)
        waited = time.monotonic() - started
    assert head_reply.startswith(b"HTTP/1.1 408 "), head_reply[:200]
    assert body_reply == b""  # closed: the app saw the client go
    assert waited < 9  # closed by the server at its limit, not by our read's time-out


def test_a_crowd_of_idle_connections_does_not_lock_clients_out(
        service: tuple[str, int]) -> None:
    url, _ = service
    # More idle connections than the service has file descriptors (its cap: 40).
    crowd = [socket.create_connection(_address(url)) for _ in range(OPEN_FILES + 50)]
    try:
        for sock in crowd:
            sock.sendall(b"GET /health HTTP/1.1\r\n")  # and then nothing
        replies = [httpx.get(f"{url}/health", timeout=5) for _ in range(10)]
        assert [r.status_code for r in replies] == [200] * 10
    finally:
        for sock in crowd:
            sock.close()


def test_a_chunked_body_far_past_the_limit_gets_its_413_and_ends_the_connection(
        service: tuple[str, int]) -> None:
    """Refused once it is 16 MiB past the limit; the rest is read and dropped (up to
    HttpLimits.linger_bytes), so a client that sends it all before it reads gets the 413."""
    url, _ = service
    chunk = b"%x\r\n%s\r\n" % (1 << 20, b"a" * (1 << 20))
    with socket.create_connection(_address(url)) as sock:
        sock.sendall(b"POST /extract HTTP/1.1\r\nhost: x\r\nauthorization: Bearer "
                     + TOKEN.encode() + b"\r\ncontent-type: text/html\r\n"
                     b"transfer-encoding: chunked\r\n\r\n")
        for _ in range(40):  # 40 MB, 30 past the 10 MB limit
            sock.sendall(chunk)
        sock.sendall(b"0\r\n\r\n")
        reply = _read_reply(sock)
    assert reply.startswith(b"HTTP/1.1 413 "), reply[:200]
    assert b"connection: close" in reply
    assert b'"too_large"' in reply


def test_waiting_for_a_worker_does_not_count_against_the_time_limit(
        service: tuple[str, int]) -> None:
    url, _ = service
    # One worker, a second per page, a limit of 1.6 s: the third request waits ~2 s.
    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        replies = list(pool.map(lambda i: _extract(url, f"<p>slow {i}</p>"), range(3)))
    assert [r.status_code for r in replies] == [200, 200, 200], [r.text for r in replies]


def _children(pid: int) -> list[int]:
    with open(f"/proc/{pid}/task/{pid}/children") as handle:
        return [int(child) for child in handle.read().split()]


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return True
    return state in ("Z", "X")


def test_a_dead_idle_worker_is_noticed_and_replaced(service: tuple[str, int]) -> None:
    url, pid = service
    assert _extract(url, "<p>before</p>").status_code == 200
    (worker,) = _children(pid)
    os.kill(worker, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while not _gone(worker) and time.monotonic() < deadline:
        time.sleep(0.05)
    health = httpx.get(f"{url}/health")
    assert health.status_code == 503, health.text  # no live worker until the new one is up
    reply = _extract(url, "<p>after</p>")
    assert reply.status_code == 200, reply.text  # not 422 "died on this page"
    assert reply.json()["text"] == "<p>after</p>"
    assert httpx.get(f"{url}/health").status_code == 200


# /redoc is not served (the offline /docs page replaces it): without the token it is
# refused before routing like every other path, so nothing says what exists.
@pytest.mark.parametrize(("path", "found"), [("/docs", 200), ("/openapi.json", 200),
                                             ("/redoc", 404), ("/info", 200)])
def test_the_token_guards_every_path_but_health(service: tuple[str, int], path: str,
                                                found: int) -> None:
    url, _ = service
    assert httpx.get(f"{url}{path}").status_code == 401
    assert httpx.get(f"{url}{path}", headers={"authorization": "Bearer wrong"}).status_code == 401
    assert httpx.get(f"{url}{path}", headers=AUTH).status_code == found
    assert httpx.get(f"{url}/health").status_code == 200


def test_the_bearer_scheme_is_case_insensitive(service: tuple[str, int]) -> None:
    url, _ = service
    for scheme in ("bearer", "BEARER", "Bearer"):
        reply = _extract(url, "<p>hello</p>", authorization=f"{scheme} {TOKEN}")
        assert reply.status_code == 200, (scheme, reply.text)


def test_an_oversized_reply_is_refused(service: tuple[str, int]) -> None:
    url, _ = service
    reply = _extract(url, "<p>" + "word " * 10_000 + "</p>")  # 50 kB back, limit 20 kB
    assert reply.status_code == 422
    assert reply.json()["error"] == "reply_too_large"
    assert _extract(url, "<p>small</p>").status_code == 200


def test_the_api_has_the_same_limits(tmp_path: Path) -> None:
    env = {"BOILERBENCH_API_MAX_HEADER_BYTES": "8192", "BOILERBENCH_API_RESUME": "false",
           "BOILERBENCH_STORE": str(tmp_path / "store.sqlite"),
           "BOILERBENCH_OUTPUT_FOLDER": str(tmp_path / "out")}
    with serve_process("orchestrator.api:app_factory", env, "--factory", "--env-prefix",
                       "BOILERBENCH_API_") as (url, _):
        reply = httpx.get(f"{url}/runs", headers={"x-filler": "a" * 20_000})
        assert reply.status_code == 431
        assert httpx.get(f"{url}/health").status_code == 200


def test_a_request_whose_client_left_frees_its_worker() -> None:
    """A client that hangs up while its page is being extracted (here one that would
    take a minute) leaves no worker busy for nobody: the next request is answered
    without waiting for the abandoned one's time limit."""
    settings = {"BOILERBENCH_WORKERS": "1", "BOILERBENCH_TIME_LIMIT_S": "60",
                "BOILERBENCH_QUEUE_WAIT_S": "60"}
    with serve_process(APP, settings) as (url, _):
        body = b'{"html": "<p>hang</p>"}'
        with socket.create_connection(_address(url)) as sock:
            sock.sendall(b"POST /extract HTTP/1.1\r\nhost: x\r\ncontent-type: application/json"
                         b"\r\ncontent-length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
            time.sleep(0.5)  # the worker has the page now
        reply = httpx.post(f"{url}/extract", json={"html": "<p>next page</p>"}, timeout=20)
        assert reply.status_code == 200, reply.text
        assert reply.json()["text"] == "<p>next page</p>"


@pytest.mark.parametrize("request_bytes", [
    b"POST /extract HTTP/1.1\r\nhost: x\r\ncontent-length: abc\r\n\r\n",
    b"POST /extract HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n",
    b"BREW /extract HTTP/1.1\r\nhost: x\r\n\r\n",
])
def test_a_request_the_http_parser_cannot_read_gets_a_json_400(
        service: tuple[str, int], request_bytes: bytes) -> None:
    url, _ = service
    with socket.create_connection(_address(url)) as sock:
        sock.sendall(request_bytes)
        reply = _read_reply(sock)
    head, _, body = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400 "), reply[:300]
    assert b"content-type: application/json" in head.lower()
    error = json.loads(body)
    assert error["error"] == "bad_request"
    assert error["detail"].startswith("the HTTP request is malformed")
    assert httpx.get(f"{url}/health", timeout=10).status_code == 200


@pytest.mark.parametrize("port", ["70000", "-1"])
def test_a_port_no_server_can_have_is_a_usage_error(port: str) -> None:
    # uvicorn started and stopped at once on such a port, without a word of why.
    from shared.serving import main

    with pytest.raises(SystemExit) as stopped:
        main(["services.bte.app:app", "--port", port])
    assert stopped.value.code == 2
