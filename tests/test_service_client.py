"""One service as an outside client meets it: a real service over HTTP, asked the way
other systems and tools ask (HEAD probes, compressed bodies, a query string beside a
JSON body, JSON in another encoding), and a service started by hand from the
environment's settings. Each reply must say what is wrong with the request, never
answer a request it misread."""

from __future__ import annotations

import asyncio
import gzip
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.responses import JSONResponse
from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.launcher import wait_healthy
from orchestrator.runner import HttpExtractor, RunSpec
from shared.settings import ServiceSettings
from tests.helpers import REPO, assert_error, post_html_sent_whole
from tests.servers import free_port, serve_app, serve_service, stand_in_service, stop_process_group

PAGE = ("<html><head><title>Harbour bridge</title></head><body><p>The old harbour bridge "
        "opened again to traffic on Monday morning after eight months of repairs.</p>"
        "</body></html>")


@pytest.fixture(scope="module")
def bte() -> Iterator[tuple[str, httpx.Client]]:
    with serve_service("bte", ServiceSettings(time_limit_s=20)) as served:
        yield served


@pytest.mark.parametrize("path", ["/health", "/info"])
def test_head_is_answered_as_get_without_a_body(bte: tuple[str, httpx.Client],
                                                path: str) -> None:
    # Load balancers and uptime monitors probe with HEAD (RFC 9110, 9.3.2: a resource
    # that answers GET answers HEAD too).
    url, client = bte
    got = client.get(f"{url}{path}")
    head = client.head(f"{url}{path}")
    assert head.status_code == got.status_code == 200
    assert head.content == b""
    assert head.headers["content-type"] == got.headers["content-type"]
    assert head.headers["content-length"] == str(len(got.content))


def test_head_of_extract_still_asks_for_post(bte: tuple[str, httpx.Client]) -> None:
    url, client = bte
    reply = client.head(f"{url}/extract")
    assert reply.status_code == 405
    assert reply.headers["allow"] == "POST"
    assert reply.content == b""


@pytest.mark.parametrize("coding", ["gzip", "br", "deflate, gzip"])
@pytest.mark.parametrize("content_type", ["text/html", "application/json"])
def test_a_compressed_body_is_refused_as_such(bte: tuple[str, httpx.Client], coding: str,
                                              content_type: str) -> None:
    # Read as it is, a gzip body was "binary, not HTML", and a body labelled brotli was
    # extracted as if it were plain: neither is what the client sent.
    url, client = bte
    raw = PAGE if content_type == "text/html" else httpx.Request(
        "POST", url, json={"html": PAGE}).content.decode()
    body = gzip.compress(raw.encode()) if coding == "gzip" else raw.encode()
    reply = client.post(f"{url}/extract", content=body, headers={
        "content-type": content_type, "content-encoding": coding})
    error = assert_error(reply, 415)
    assert error.error == "unsupported_content_encoding"
    assert coding in error.detail
    assert "uncompressed" in error.detail
    assert reply.headers["accept-encoding"] == "identity"
    # the connection and the service go on
    assert client.post(f"{url}/extract", content=PAGE, headers={
        "content-type": "text/html", "content-encoding": "identity"}).status_code == 200


def test_query_parameters_beside_a_json_body_are_refused(
        bte: tuple[str, httpx.Client]) -> None:
    # They were ignored: a client that put its options (or the page's URL) in the query
    # got the defaults, with nothing to tell it.
    url, client = bte
    reply = client.post(f"{url}/extract", params={"min_inside": "0.9", "url": "https://a.example/"},
                        json={"html": PAGE})
    error = assert_error(reply, 422)
    assert error.error == "invalid_request"
    assert "min_inside" in error.detail
    assert "url" in error.detail
    assert "JSON body" in error.detail
    assert client.post(f"{url}/extract", json={"html": PAGE, "url": "https://a.example/",
                                               "options": {"min_inside": 0.9}}
                       ).status_code == 200


@pytest.mark.parametrize("encoding", ["latin-1", "utf-16"])
def test_json_in_another_encoding_is_told_so(bte: tuple[str, httpx.Client],
                                             encoding: str) -> None:
    url, client = bte
    body = '{"html": "<p>Grüße aus Köln, schöne Straße</p>"}'.encode(encoding)
    reply = client.post(f"{url}/extract", content=body,
                        headers={"content-type": f"application/json; charset={encoding}"})
    error = assert_error(reply, 400)
    assert error.error == "malformed_json"
    assert "not UTF-8" in error.detail
    assert "surrogates" not in error.detail


def _start(app: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "shared.serving", app, "--log-level", "warning"],
        env={**os.environ, **env}, cwd=REPO, stdin=subprocess.DEVNULL,
        start_new_session=True)


def test_a_service_started_by_hand_listens_where_the_environment_says() -> None:
    # BOILERBENCH_HOST and BOILERBENCH_PORT are the documented settings, but the server
    # took neither: every service listened on 127.0.0.1:8000, the orchestrator's port.
    port = free_port()
    process = _start("services.bte.app:app",
                     {"BOILERBENCH_PORT": str(port), "BOILERBENCH_HOST": "127.0.0.1"})
    try:
        wait_healthy(f"http://127.0.0.1:{port}", 120, process)
        assert httpx.get(f"http://127.0.0.1:{port}/info").json()["name"] == "bte"
    finally:
        stop_process_group(process)


@pytest.mark.parametrize(("app", "env", "named"), [
    ("services.bte.app:app", {"BOILERBENCH_MAX_BODY_BYTES": "ten megabytes"},
     "BOILERBENCH_MAX_BODY_BYTES"),
    ("services.bte.app:app", {"BOILERBENCH_REQUEST_TIMEOUT_S": "-1"},
     "BOILERBENCH_REQUEST_TIMEOUT_S"),
])
def test_a_setting_out_of_range_stops_the_server_with_one_line(
        app: str, env: dict[str, str], named: str) -> None:
    # An operator who sets a variable wrong got pydantic's traceback through uvicorn's
    # import of the app; the variable and what is wrong with it are what they need.
    done = subprocess.run(
        [sys.executable, "-m", "shared.serving", app, "--port", str(free_port())],
        env={**os.environ, **env}, cwd=REPO, stdin=subprocess.DEVNULL,
        capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert f"{named}={env[named]!r}" in done.stderr, done.stderr


def test_the_port_defaults_to_the_registrys() -> None:
    from shared.serving import default_port

    assert default_port("services.bte.app:app", {}) == 8003
    assert default_port("services.fusion.app:app", {"BOILERBENCH_PORT": "9100"}) == 9100
    assert default_port("orchestrator.api:app_factory", {}, "BOILERBENCH_API_") == 8000
    assert default_port("services.bte.app:app", {"BOILERBENCH_API_PORT": "9000"},
                        "BOILERBENCH_API_") == 9000


def test_a_reply_outside_the_contract_names_the_field() -> None:
    # A service of one's own that adds a field to its reply fails every page of a run:
    # the reason must say which field, not only "Extra inputs are not permitted".
    async def extract() -> Any:
        return JSONResponse({"algorithm": "bte", "version": "mine", "text": "x",
                             "blocks": [{"text": "x", "is_content": True}],
                             "elapsed_ms": 1.0, "language": "en"})

    async def ask(url: str) -> str | None:
        spec = RunSpec(datasets=[], services=["bte"], urls={"bte": url}, retries=0)
        extractor = HttpExtractor(spec)
        await extractor.start()
        try:
            return (await extractor.extract("bte", PAGE, {})).error
        finally:
            await extractor.aclose()

    with serve_app(stand_in_service("bte", extract)) as url:
        error = asyncio.run(ask(url))
    assert error is not None
    assert "language: Extra inputs are not permitted" in error


def test_extract_refuses_a_reply_a_run_would_refuse(tmp_path: Path) -> None:
    # `boilerbench extract --url` is how one tries a service of one's own on a page; it
    # printed a reply that a run then refused on every page.
    async def extract() -> Any:
        return JSONResponse({"algorithm": "bte", "version": "mine", "text": "x",
                             "blocks": [{"text": "x", "is_content": True, "weight": 2}],
                             "elapsed_ms": 1.0})

    page = tmp_path / "page.html"
    page.write_text(PAGE, encoding="utf-8")
    with serve_app(stand_in_service("bte", extract)) as url:
        result = CliRunner().invoke(app, ["extract", str(page), "--service", "bte",
                                          "--url", url], terminal_width=300)
    assert result.exit_code == 1
    output = " ".join(result.output.split())
    assert "not in the /extract contract" in output
    assert "blocks.0.weight: Unexpected keyword argument" in output


def test_a_405_names_head_among_the_methods_taken(bte: tuple[str, httpx.Client]) -> None:
    url, client = bte
    reply = client.post(f"{url}/health")
    assert_error(reply, 405)
    assert reply.headers["allow"] == "GET, HEAD"


@pytest.mark.parametrize("chunked", [False, True])
def test_a_body_a_little_past_the_limit_gets_its_413_on_any_client(chunked: bool) -> None:
    """Python's http.client (which requests uses) sends the whole body before it reads
    the reply: a service that stopped reading at the limit and closed would reset the
    connection under it. Read and dropped, the body gets its 413, and the connection
    serves the next request."""
    import http.client

    limit = 1 << 20
    with serve_service("bte", ServiceSettings(max_body_bytes=limit)) as (url, _):
        host, port = url.removeprefix("http://").split(":")
        connection = http.client.HTTPConnection(host, int(port), timeout=30)
        # Larger than what the loopback's socket buffers take in before anyone reads.
        body = b"<html><body>" + b"<p>word</p>" * (13 * limit // 11) + b"</body></html>"
        headers = {"content-type": "text/html"}
        refused = post_html_sent_whole(connection, body, chunked)
        detail = refused.read()
        assert refused.status == 413, detail[:200]
        assert b'"too_large"' in detail
        assert f"{len(body)} bytes".encode() in detail
        connection.request("POST", "/extract", body=PAGE.encode(), headers=headers)
        answered = connection.getresponse()
        assert answered.status == 200, answered.read()[:200]
        connection.close()


def test_a_page_in_hand_is_answered_when_the_service_is_stopped() -> None:
    """`boilerbench up` and the tests stop a service by SIGTERM to its process group,
    which reaches its workers too: a worker that died of it failed the page it was on
    (500, the worker died), which a crawl records for good, while the server was still
    draining the requests in hand. The workers leave the stop to the server."""
    from concurrent.futures import ThreadPoolExecutor

    from tests.servers import serve_process

    settings = {"BOILERBENCH_WORKERS": "1", "BOILERBENCH_TIME_LIMIT_S": "10"}
    with serve_process("tests.misbehaving_app:app", settings) as (url, process), \
            ThreadPoolExecutor(1) as pool:
        reply = pool.submit(httpx.post, f"{url}/extract",
                            json={"html": "<p>a slow page</p>"}, timeout=30)
        time.sleep(0.4)  # the worker is on the page
        os.killpg(process.pid, signal.SIGTERM)
        answered = reply.result()
        assert answered.status_code == 200, answered.text
        assert "a slow page" in answered.json()["text"]
        process.wait(timeout=15)
