"""The service kit: one pure extractor in, one FastAPI app with the /extract contract out.

    app = create_service_app(ALGORITHM)

gives POST /extract (JSON body or raw text/html body), GET /health, GET /info, JSON
errors with the statuses of the contract, a body size limit, a per-request time
limit enforced by killing the worker process (see shared/workers.py), an optional
bearer token and settings from the environment (shared/settings.py).

/extract is answered on the raw ASGI interface (ServiceApp, ExtractEndpoint), not by a
FastAPI route: the framework's middleware, routing and Request objects would cost each
request a share of what a fast extractor spends on a whole page. It is the one path
for /extract: POST is extracted, every other method gets a JSON 405, and the OpenAPI
document describes it as a route's (shared/openapi.py). The bearer token is checked
on the same interface, before any route, for the services and the orchestrator's API
alike (TokenGuardedApp).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hmac
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, MutableMapping
from typing import Any
from urllib.parse import parse_qsl

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from shared.answer import HTML_TYPES, ServiceError, body_form, finish_reply
from shared.contract import (
    START_FAILED,
    Algorithm,
    ErrorReply,
    ExtractReply,
    HealthReply,
    ServiceInfo,
)
from shared.openapi import (
    HTML_BODY,
    RawOperation,
    document_bodies,
    extract_body_schema,
    install_offline_docs,
    query_parameters,
)
from shared.settings import ServiceSettings
from shared.workers import ExtractionFailedError, ExtractionTimeoutError, PoolBusyError, WorkerPool

log = logging.getLogger("boilerbench.service")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


def json_response(content: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(content), status_code=status, media_type="application/json")


def error_response(exc: ServiceError) -> Response:
    """A ServiceError as the contract's ErrorReply, with the headers it carries."""
    return Response(exc.body(), status_code=exc.status, headers=exc.headers,
                    media_type="application/json")


# A 413 that leaves the rest of the body unread ends the connection after the reply.
_CLOSE = {"connection": "close"}
# How much of a body past the limit is read and dropped before the 413, so that a
# client that sends its whole body before reading (Python's http.client, and requests
# on it) gets the reply rather than a reset connection (RFC 9112, section 9.6). A body
# longer still is refused at once, with the connection's end: shared.serving then drops
# its rest as it comes, up to a bound, before it closes the connection.
DRAIN_BYTES = 16 * 2**20


async def read_limited(chunks: AsyncIterator[bytes], declared: str | None, limit: int) -> bytes:
    """A request body from its chunks, refused with 413 once it passes `limit` bytes:
    after the rest of it is read and dropped where that is at most DRAIN_BYTES more (the
    connection then stays open), else at once (at the start when the declared
    Content-Length says so)."""
    size = int(declared) if declared is not None and declared.isdigit() else None
    if size is not None and size > limit + DRAIN_BYTES:
        raise ServiceError(413, "too_large", f"the body is {declared} bytes; the limit is {limit}",
                           _CLOSE)
    parts: list[bytes] = []
    received = 0
    async for chunk in chunks:
        received += len(chunk)
        if received > limit + DRAIN_BYTES:
            raise ServiceError(413, "too_large", f"the body passes the limit of {limit} bytes",
                               _CLOSE)
        if received <= limit:
            parts.append(chunk)
        else:
            parts.clear()  # dropped: only its length is wanted now
    if received > limit:
        raise ServiceError(413, "too_large", f"the body is {received} bytes; the limit is {limit}")
    return b"".join(parts)


def check_content_encoding(scope: Scope) -> None:
    """Refuse (415) a body sent compressed: read as it is, gzip would be answered as
    "binary, not HTML" and a body labelled with another coding extracted as if it were
    plain. Accept-Encoding says what is taken (RFC 9110, 15.5.16)."""
    codings = [value.decode("latin-1").strip() for key, value in scope["headers"]
               if key == b"content-encoding"]
    named = ", ".join(coding for coding in codings if coding)
    if any(part.strip().lower() not in ("", "identity") for part in named.split(",")):
        raise ServiceError(415, "unsupported_content_encoding",
                           f"Content-Encoding {named[:100]} is not accepted; send the body "
                           "uncompressed", {"accept-encoding": "identity"})


def check_authorization(given: str, token: str | None) -> None:
    """Refuse (401) an Authorization header that is not `Bearer <token>`, if a token is
    set. The scheme is case-insensitive (RFC 9110, 11.1); the token is compared in
    constant time."""
    if token is None:
        return
    scheme, _, credentials = given.strip().partition(" ")
    try:  # the header's own bytes (ASGI servers hand them over as latin-1)
        sent = credentials.strip().encode("latin-1")
    except UnicodeEncodeError:
        sent = credentials.strip().encode()
    if not (scheme.lower() == "bearer" and hmac.compare_digest(sent, token.encode())):
        raise ServiceError(401, "unauthorized", "a valid bearer token is required",
                           {"www-authenticate": "Bearer"})


# Answered without the token: the health check of containers and load balancers.
OPEN_PATHS = frozenset({"/health"})


class ClientGoneError(Exception):
    """The client went away before its request was answered."""


async def unless_client_leaves(work: Awaitable[bytes], receive: Receive) -> bytes:
    """`work`'s result, or ClientGoneError (and `work` cancelled: its worker is
    replaced, shared.workers) as soon as the client hangs up: nobody would read the
    reply, and the worker is free for the requests waiting."""
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(_disconnected(receive))
    try:
        await asyncio.wait((task, watcher), return_when=asyncio.FIRST_COMPLETED)
        if task.done():
            return task.result()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
        raise ClientGoneError
    finally:
        watcher.cancel()
        if not task.done():  # this request itself was cancelled
            task.cancel()


async def _disconnected(receive: Receive) -> None:
    """Returns when the ASGI server says the client left (the body was read before)."""
    while (await receive())["type"] != "http.disconnect":
        pass


async def asgi_body_chunks(receive: Receive) -> AsyncIterator[bytes]:
    """The body's chunks on the raw ASGI interface (ClientGoneError if the client left)."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientGoneError
        yield message.get("body", b"")
        if not message.get("more_body", False):
            return


def header(scope: Scope, name: bytes) -> str:
    """A request header's value on the raw ASGI interface ("" if absent)."""
    for key, value in scope["headers"]:
        if key == name:
            return str(value.decode("latin-1"))
    return ""


def install_error_handlers(app: FastAPI) -> None:
    """Every error as the contract's ErrorReply, including the framework's own 404/405."""

    @app.exception_handler(ServiceError)
    async def _service_error(_: Request, exc: ServiceError) -> Response:
        return error_response(exc)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_: Request, exc: StarletteHTTPException) -> Response:
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        return error_response(ServiceError(exc.status_code, code, str(exc.detail), exc.headers))

    @app.exception_handler(RequestValidationError)
    async def _validation_error(_: Request, exc: RequestValidationError) -> Response:
        return error_response(ServiceError(422, "invalid_request", str(exc.errors())))

    @app.exception_handler(Exception)
    async def _unexpected_error(_: Request, exc: Exception) -> Response:
        # A bug, not a bad request: JSON like every other error; the server logs the
        # traceback (Starlette re-raises it after this reply).
        return error_response(ServiceError(500, "internal_error",
                                           f"{type(exc).__name__}: {exc}"))


async def send_reply(send: Send, status: int, body: bytes,
                     headers: Iterable[tuple[str, str]] = ()) -> None:
    """A whole JSON reply on the raw ASGI interface."""
    raw = [(b"content-type", b"application/json"),
           (b"content-length", str(len(body)).encode()),
           *((name.encode("latin-1"), value.encode("latin-1")) for name, value in headers)]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})


async def send_error(send: Send, exc: ServiceError) -> None:
    await send_reply(send, exc.status, exc.body(), exc.headers.items())


class TokenGuardedApp(FastAPI):
    """FastAPI with the bearer token (if set) asked on the raw ASGI interface for every
    path but OPEN_PATHS, the schema and its pages (/docs, /openapi.json) included,
    before any route, middleware or body is touched. HEAD is answered as GET (RFC 9110,
    9.3.2), which FastAPI's routes do not: load balancers and monitors probe /health
    so; the server sends the head of the reply only, as for any HEAD request."""

    token: str | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and self.token is not None \
                and scope["path"] not in OPEN_PATHS:
            try:
                check_authorization(header(scope, b"authorization"), self.token)
            except ServiceError as exc:
                await send_error(send, exc)
                return
        await self.dispatch(scope, receive, send)

    async def dispatch(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The request, once authorised: FastAPI's routes."""
        if scope["type"] == "http":
            if scope["method"] == "HEAD":
                scope = {**scope, "method": "GET"}
            send = _allowing_head(send)
        await super().__call__(scope, receive, send)


class ServiceApp(TokenGuardedApp):
    """A service: /extract answered by its ExtractEndpoint (module docstring), the other
    paths by FastAPI's routes."""

    extract_endpoint: ExtractEndpoint | None = None

    async def dispatch(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.extract_endpoint is not None and scope["type"] == "http" \
                and scope["path"] == "/extract":
            await self.extract_endpoint(scope, receive, send)
            return
        await super().dispatch(scope, receive, send)


def _allowing_head(send: Send) -> Send:
    """`send` with HEAD added to a 405's Allow wherever GET is in it."""

    async def sending(message: Message) -> None:
        if message["type"] == "http.response.start" and message["status"] == 405:
            message["headers"] = [
                (key, value + b", HEAD" if key.lower() == b"allow"
                 and b"GET" in value.replace(b" ", b"").split(b",") else value)
                for key, value in message["headers"]]
        await send(message)

    return sending


def starting_detail(pool: WorkerPool) -> str:
    """Why a service that is not ready cannot answer: its workers are starting, or
    failed to (for good: nothing starts them again)."""
    if pool.start_error:
        return f"the extraction workers failed to start: {pool.start_error}"
    return "the extraction workers are starting"


OTHER_ERRORS = "Any other error (404, 408, 431, ...), in the same form."
"""The `default` reply of every operation: statuses the server, not the route, answers."""

EXTRACT_OPERATION = RawOperation(
    summary="Extract the main content of a page",
    description="The page as a JSON body ({html, url, options}) or as the raw HTML "
                "(text/html, with `url` and the options in the query string: the "
                "parameters, which a JSON body must not have). The reply gives the content "
                "text and every block of the page, content or not.",
    replies={200: ("The page's content text and blocks.", ExtractReply),
             **{status: (description, ErrorReply) for status, description in (
                 (400, "Empty or malformed body, or not HTML."),
                 (401, "A bearer token is set and the request has not got it."),
                 (405, "Any other method than POST."),
                 (413, "The body passes the size limit."),
                 (415, "Neither application/json nor text/html, or a compressed body "
                       "(Content-Encoding)."),
                 (422, "Invalid request or options (a query string beside a JSON body "
                       "too), or the algorithm refused the page."),
                 (503, "The workers are starting, or all are busy."),
                 (504, "The extraction passed the time limit."),
                 ("default", OTHER_ERRORS))}},
)


class ExtractEndpoint:
    """/extract on the raw ASGI interface: the body read within the size limit, handed
    to a worker as bytes (shared/answer.py parses and answers it there), the worker's
    reply passed on with the service's elapsed time."""

    def __init__(self, pool: WorkerPool, settings: ServiceSettings) -> None:
        self.pool, self.settings = pool, settings

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = time.perf_counter()
        try:
            if scope["method"] != "POST":
                raise ServiceError(405, "method_not_allowed", "Method Not Allowed",
                                   {"allow": "POST"})
            declared = header(scope, b"content-length")
            body = await read_limited(asgi_body_chunks(receive), declared or None,
                                      self.settings.max_body_bytes)
            check_content_encoding(scope)
            query = dict(parse_qsl(scope["query_string"].decode("latin-1"),
                                   keep_blank_values=True))
            reply = await unless_client_leaves(
                self.reply(body, header(scope, b"content-type"), query, started), receive)
        except ClientGoneError:
            return
        except ServiceError as exc:
            await send_error(send, exc)
            return
        except Exception as exc:  # a bug here must still answer in the contract's form
            log.exception("/extract failed")
            await send_error(send, ServiceError(500, "internal_error", type(exc).__name__))
            return
        await send_reply(send, 200, reply)

    async def reply(self, body: bytes, content_type: str, query: dict[str, str],
                    started: float) -> bytes:
        """The 200 reply's body for one /extract request, or a ServiceError. The worker
        parses, decodes and answers the request (shared/answer.py); this process only
        passes bytes on."""
        body_form(body, content_type, query)  # refused without a worker: 415, 400, 422
        if not self.pool.ready:
            raise ServiceError(503, "not_ready", starting_detail(self.pool))
        settings = self.settings
        try:
            result = await self.pool.run(body, content_type, query, settings.time_limit_s,
                                         settings.queue_wait_s)
        except ExtractionTimeoutError as exc:
            raise ServiceError(504, "timeout", str(exc)) from None
        except PoolBusyError as exc:
            raise ServiceError(503, "busy", str(exc)) from None
        except ExtractionFailedError as exc:
            raise ServiceError(422, "extraction_failed", str(exc)) from None
        # The time this request took the service, less any wait for a free worker, so
        # the figure describes the algorithm and not how busy the service was.
        spent_ms = (time.perf_counter() - started) * 1000 - result.wait_ms
        if len(result.partial_reply) > settings.max_reply_bytes:
            raise ServiceError(422, "reply_too_large",
                               f"the reply passes the limit of {settings.max_reply_bytes} bytes")
        return finish_reply(result.partial_reply, spent_ms)


def create_service_app(algorithm: Algorithm, settings: ServiceSettings | None = None) -> FastAPI:
    """A FastAPI app serving `algorithm` under the /extract contract."""
    settings = settings or ServiceSettings()
    module = algorithm.extract.__module__
    pool = WorkerPool(module, settings.workers)
    info = algorithm.info().model_dump()
    if info["details"] is None:  # most services: /info as it always was
        del info["details"]

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        # Workers start in the background: /health says 503 until they are ready.
        starting = asyncio.get_running_loop().create_task(pool.start())
        try:
            yield
        finally:
            starting.cancel()
            await pool.close()

    app = ServiceApp(
        title=f"boilerbench {algorithm.name}",
        version=algorithm.version,
        description=algorithm.description,
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        redirect_slashes=False,  # /info/ is no path (404), as /extract/ is, not a redirect
    )
    extract_operation = dataclasses.replace(
        EXTRACT_OPERATION, parameters=query_parameters(algorithm.options_model))
    document_bodies(app, {("/extract", "post"): {
        "application/json": extract_body_schema(algorithm.options_model),
        **dict.fromkeys(HTML_TYPES, HTML_BODY)}},
        raw={("/extract", "post"): extract_operation})
    install_offline_docs(app)
    app.state.pool = pool
    app.state.settings = settings
    app.token = settings.token
    app.extract_endpoint = ExtractEndpoint(pool, settings)
    install_error_handlers(app)

    errors: dict[int | str, dict[str, Any]] = {
        401: {"model": ErrorReply,
              "description": "A bearer token is set and the request has not got it."},
        "default": {"model": ErrorReply, "description": OTHER_ERRORS}}

    @app.get("/health", responses={
        200: {"model": HealthReply, "description": "Ready to extract."},
        503: {"model": ErrorReply, "description": "Not ready: the workers are starting "
              "(not_ready) or failed to (start_failed, for good)."},
        "default": errors["default"]})
    async def health() -> Response:
        if pool.ready:
            if pool.alive():
                return json_response({"status": "ok"})
            raise ServiceError(503, "not_ready", "every extraction worker died; "
                                                 "replacements are starting")
        if pool.start_error:
            raise ServiceError(503, START_FAILED, starting_detail(pool))
        raise ServiceError(503, "not_ready", starting_detail(pool))

    @app.get("/info", responses={
        200: {"model": ServiceInfo, "description": "What runs behind the service."},
        **errors})
    async def get_info() -> Response:
        return json_response(info)

    return app
