"""`boilerbench check URL --service NAME`: a real service passes every check; a stand-in
that breaks one rule of docs/docker.md's "What a replacement must answer" fails that
check alone (exit 1, the check named); a wrong name or URL is a usage error (exit 2);
an address where nothing answers, or where the answer never ends, is one line and
exit 1 within the time limit."""

from __future__ import annotations

import asyncio
import http.server
import re
import socket
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import orjson
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from typer.testing import CliRunner

from orchestrator.cli import app
from shared.answer import ServiceError, answer_extract, finish_reply, reply_head
from shared.registry import SERVICES
from shared.settings import ServiceSettings
from tests.servers import free_port, serve_app, serve_http, serve_service, stand_in_service

BTE = SERVICES["bte"].algorithm()
TOKEN = "s3cret-token"
EXTRACT_CHECKS = {"extract (JSON body)", "extract (text/html body)"}
ALL_CHECKS = {"health", "info", *EXTRACT_CHECKS, "malformed JSON", "neither JSON nor HTML",
              "unknown option"}
TOKEN_CHECKS = {"/info without token", "/extract without token"}
Endpoint = Callable[[Request], Awaitable[Response]]


def check(*args: str) -> tuple[int, str]:
    """`boilerbench check ARGS`: its exit code and its output, whitespace and the
    table's borders folded into single spaces (so a wrapped cell reads as one)."""
    result = CliRunner().invoke(app, ["check", *args], terminal_width=300)
    return result.exit_code, re.sub(r"[\s│]+", " ", result.output)


def failed_checks(output: str) -> set[str]:
    """The checks the closing line names as failed."""
    found = re.search(r"\d+ of \d+ checks failed: (.*)$", output.strip())
    assert found is not None, output
    return set(found.group(1).split("; "))


def passed_checks(output: str) -> set[str]:
    """The checks whose row says ok."""
    return {name for name in ALL_CHECKS | TOKEN_CHECKS
            if re.search(rf" {re.escape(name)} ok ", output)}


@pytest.mark.parametrize(("name", "token"), [("bte", None), ("rss", TOKEN)])
def test_a_real_service_passes_every_check(name: str, token: str | None) -> None:
    # rss with a token: its pages carry their feed (the registry's input hook), in the
    # query string for the text/html body, and /info and /extract ask for the token.
    settings = ServiceSettings(time_limit_s=20, token=token)
    with serve_service(name, settings) as (url, _):
        code, output = check(url, "--service", name, *(["--token", token] if token else []))
    assert code == 0, output
    assert "FAIL" not in output
    assert passed_checks(output) == (ALL_CHECKS | TOKEN_CHECKS if token else ALL_CHECKS)
    assert f"all {len(ALL_CHECKS) + (len(TOKEN_CHECKS) if token else 0)} checks passed" \
        in output


async def bte_extract(request: Request) -> Response:
    """bte's reply to the request, made here as its worker makes it: a stand-in that
    keeps every rule."""
    try:
        partial = answer_extract(BTE, reply_head(BTE), await request.body(),
                                 request.headers.get("content-type", ""),
                                 dict(request.query_params))
    except ServiceError as exc:
        return Response(exc.body(), exc.status, media_type="application/json")
    return Response(finish_reply(partial, 1.0), media_type="application/json")


def reply_changed(change: Callable[[dict[str, Any]], None]) -> Endpoint:
    """bte_extract with `change` made to each 200 reply."""
    async def extract(request: Request) -> Response:
        reply = await bte_extract(request)
        if reply.status_code != 200:
            return reply
        body = orjson.loads(reply.body)
        change(body)
        return JSONResponse(body)

    return extract


def instead_of(status: int, replacement: Response) -> Endpoint:
    """bte_extract with `replacement` where it answers `status`."""
    async def extract(request: Request) -> Response:
        reply = await bte_extract(request)
        return replacement if reply.status_code == status else reply

    return extract


EMPTY_REPLY = {"algorithm": "bte", "version": BTE.version, "text": "", "blocks": [],
               "elapsed_ms": 1.0}


def bte_stand_in() -> FastAPI:
    return stand_in_service("bte", bte_extract)


def guarded_everywhere() -> FastAPI:
    """A stand-in that asks for the token on /health too."""
    stand_in = bte_stand_in()

    @stand_in.middleware("http")
    async def token_asked(request: Request, call_next: Any) -> Any:
        if request.headers.get("authorization") != f"Bearer {TOKEN}":
            return JSONResponse({"error": "unauthorized", "detail": "no token"}, 401)
        return await call_next(request)

    return stand_in


def info_without_version() -> FastAPI:
    stand_in = bte_stand_in()

    @stand_in.middleware("http")
    async def info(request: Request, call_next: Any) -> Any:
        if request.url.path == "/info":
            return JSONResponse({"name": "bte"})
        return await call_next(request)

    return stand_in


def add_language(body: dict[str, Any]) -> None:
    body["language"] = "en"


def add_block_weight(body: dict[str, Any]) -> None:
    body["blocks"][0]["weight"] = 2


def name_justext(body: dict[str, Any]) -> None:
    body["algorithm"] = "justext"


BROKEN_RULES: dict[str, tuple[Callable[[], FastAPI], bool, set[str], str]] = {
    # rule broken: (stand-in, asked with --token, checks that fail, what the row says)
    "an extra key on the reply": (
        lambda: stand_in_service("bte", reply_changed(add_language)), False,
        EXTRACT_CHECKS, "invalid reply from bte: language: Extra inputs are not permitted"),
    "an extra key on a block": (
        lambda: stand_in_service("bte", reply_changed(add_block_weight)), False,
        EXTRACT_CHECKS, "blocks.0.weight: Unexpected keyword argument"),
    "replies naming another algorithm": (
        lambda: stand_in_service("bte", reply_changed(name_justext)), False,
        EXTRACT_CHECKS, "algorithm 'justext'"),
    "/info naming another service": (
        lambda: stand_in_service("justext", bte_extract), False,
        {"info"}, "the 'justext' service answers there"),
    "/info without a version": (
        info_without_version, False, {"info"}, "name 'bte', version None"),
    "a plain-text 500 to malformed JSON": (
        lambda: stand_in_service("bte", instead_of(
            400, PlainTextResponse("Internal Server Error", 500))), False,
        {"malformed JSON"}, "500, not JSON: 'Internal Server Error'"),
    "a plain-text 400 to malformed JSON": (
        lambda: stand_in_service("bte", instead_of(
            400, PlainTextResponse("Bad Request", 400))), False,
        {"malformed JSON"}, "400, not JSON: 'Bad Request'"),
    "a 200 to malformed JSON": (
        lambda: stand_in_service("bte", instead_of(400, JSONResponse(EMPTY_REPLY))), False,
        {"malformed JSON"}, "400, JSON {error, detail} 200, JSON"),
    "a 400 to a plain-text body": (
        lambda: stand_in_service("bte", instead_of(
            415, JSONResponse({"error": "not_html", "detail": "plain text"}, 400))), False,
        {"neither JSON nor HTML"}, "400 not_html: plain text"),
    "an unknown option taken": (
        lambda: stand_in_service("bte", instead_of(422, JSONResponse(EMPTY_REPLY))), False,
        {"unknown option"}, "422, JSON {error, detail} 200, JSON"),
    "/health asking for the token": (
        guarded_everywhere, True, {"health"}, "401 unauthorized: no token"),
    "/info and /extract open without the token": (
        bte_stand_in, True, TOKEN_CHECKS, "401, JSON {error, detail} 200"),
}


@pytest.mark.parametrize("rule", list(BROKEN_RULES))
def test_a_stand_in_breaking_one_rule_fails_that_check_alone(rule: str) -> None:
    make_app, with_token, failing, said = BROKEN_RULES[rule]
    # A stand-in whose /health asks for the token is never ready to serve_app's probe.
    with serve_app(make_app(), ready_path=None if with_token else "/health") as url:
        code, output = check(url, "--service", "bte",
                             *(["--token", TOKEN] if with_token else []))
    assert code == 1, output
    assert failed_checks(output) == failing
    expected_checks = ALL_CHECKS | (TOKEN_CHECKS if with_token else set())
    assert passed_checks(output) == expected_checks - failing
    assert said in output


def test_the_stand_in_keeping_every_rule_passes() -> None:
    # What the stand-ins above break, they break alone: unbroken, every check passes.
    with serve_app(bte_stand_in()) as url:
        code, output = check(url, "--service", "bte")
    assert code == 0, output
    assert passed_checks(output) == ALL_CHECKS


@pytest.mark.parametrize(("args", "said"), [
    (["http://127.0.0.1:8003", "--service", "nope"], "unknown service 'nope'"),
    (["ftp://127.0.0.1:8003", "--service", "bte"], "'ftp://127.0.0.1:8003' is not an http(s) URL"),
    (["127.0.0.1:8003", "--service", "bte"], "is not an http(s) URL"),
])
def test_a_wrong_name_or_url_is_a_usage_error(args: list[str], said: str) -> None:
    code, output = check(*args)
    assert code == 2, output
    assert said in output


def test_nothing_listening_is_one_line() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    result = CliRunner().invoke(app, ["check", url, "--service", "bte"], terminal_width=300)
    assert result.exit_code == 1
    assert result.output.strip().splitlines() == [
        f"nothing answers at {url}: no reply to GET /health: ConnectError: "
        "[Errno 111] Connection refused"]


@pytest.fixture
def silent_listener() -> Iterator[str]:
    """An address whose connections are taken (the kernel's backlog) and never answered."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"


class TricklingHandler(http.server.BaseHTTPRequestHandler):
    """Answers 200 and then sends its body a byte at a time, never ending it."""

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("content-length", "1000000")
        self.end_headers()
        try:
            for _ in range(600):
                self.wfile.write(b" ")
                self.wfile.flush()
                time.sleep(0.05)
        except OSError:  # the client gave up
            return

    def log_message(self, format: str, *args: Any) -> None:
        pass


def test_a_service_that_never_answers_is_given_up(silent_listener: str) -> None:
    started = time.monotonic()
    code, output = check(silent_listener, "--service", "bte", "--timeout", "0.5")
    assert code == 1
    assert time.monotonic() - started < 10
    assert f"nothing answers at {silent_listener}: no reply to GET /health within 0.5 s" \
        in output


def test_a_reply_that_never_ends_is_given_up() -> None:
    # Each read gets a byte within the time limit: only a limit on the whole reply ends it.
    with serve_http(TricklingHandler) as url:
        started = time.monotonic()
        code, output = check(url, "--service", "bte", "--timeout", "0.5")
        assert time.monotonic() - started < 10
    assert code == 1
    assert "no whole reply to GET /health within 0.5 s" in output


def test_the_time_limit_is_on_every_request() -> None:
    # The first check answered, a later one hanging fails that check, not the command.
    async def slow(request: Request) -> Response:
        if request.headers.get("content-type") == "text/html":
            await asyncio.sleep(3)
        return await bte_extract(request)

    with serve_app(stand_in_service("bte", slow)) as url:
        started = time.monotonic()
        code, output = check(url, "--service", "bte", "--timeout", "1")
        spent = time.monotonic() - started
    assert code == 1
    assert spent < 10
    assert failed_checks(output) == {"extract (text/html body)"}
    assert "news-harbour-ferry: no reply to POST /extract within 1 s" in output

