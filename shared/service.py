"""The service kit: one pure extractor in, one FastAPI app with the /extract contract out.

    app = create_service_app(ALGORITHM)

gives POST /extract (JSON body or raw text/html body), GET /health, GET /info, JSON
errors with the statuses of the contract, a body size limit, a per-request time
limit enforced by killing the worker process (see shared/workers.py), an optional
bearer token and settings from the environment (shared/settings.py).

POST /extract is answered on the raw ASGI interface (ServiceApp.__call__): the
framework's middleware, routing and Request objects cost ~0.25 ms a request, a
tenth of what a fast extractor spends on a page. The FastAPI route stays for the
OpenAPI schema and other methods (405), and runs the same `extract_reply`.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import parse_qsl

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from shared.answer import ServiceError, body_form, finish_reply
from shared.contract import Algorithm
from shared.openapi import HTML_BODY, document_bodies, extract_body_schema, install_offline_docs
from shared.settings import ServiceSettings
from shared.workers import ExtractionFailedError, ExtractionTimeoutError, PoolBusyError, WorkerPool

log = logging.getLogger("boilerbench.service")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


def json_response(content: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(content), status_code=status, media_type="application/json")


def error_response(status: int, error: str, detail: str) -> Response:
    return json_response({"error": error, "detail": detail}, status)


async def read_limited(chunks: AsyncIterator[bytes], declared: str | None, limit: int) -> bytes:
    """A request body from its chunks, refused with 413 as soon as it passes `limit`
    bytes (at once when the declared Content-Length already does)."""
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise ServiceError(413, "too_large", f"the body is {declared} bytes; the limit is {limit}")
    parts: list[bytes] = []
    size = 0
    async for chunk in chunks:
        size += len(chunk)
        if size > limit:
            raise ServiceError(413, "too_large", f"the body passes the limit of {limit} bytes")
        parts.append(chunk)
    return b"".join(parts)


async def read_body(request: Request, limit: int) -> bytes:
    """The request body, refused with 413 as soon as it passes `limit` bytes."""
    return await read_limited(request.stream(), request.headers.get("content-length"), limit)


def check_token(request: Request, token: str | None) -> None:
    check_authorization(request.headers.get("authorization", ""), token)


def check_authorization(given: str, token: str | None) -> None:
    """Refuse (401) an Authorization header that is not `Bearer <token>`, if a token is
    set. The scheme is case-insensitive (RFC 9110, 11.1); the token is compared in
    constant time."""
    if token is None:
        return
    scheme, _, credentials = given.strip().partition(" ")
    if not (scheme.lower() == "bearer"
            and hmac.compare_digest(credentials.strip().encode(), token.encode())):
        raise ServiceError(401, "unauthorized", "a valid bearer token is required")


# Answered without the token: the health check of containers and load balancers.
OPEN_PATHS = frozenset({"/health"})


class ClientGoneError(Exception):
    """The client went away before its request body arrived."""


async def asgi_body_chunks(receive: Receive) -> AsyncIterator[bytes]:
    """The body's chunks on the raw ASGI interface (ClientGoneError if the client left)."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientGoneError
        yield message.get("body", b"")
        if not message.get("more_body", False):
            return


def install_error_handlers(app: FastAPI) -> None:
    """Every error as JSON `{"error", "detail"}`, including the framework's own 404/405."""

    @app.exception_handler(ServiceError)
    async def _service_error(_: Request, exc: ServiceError) -> Response:
        response = error_response(exc.status, exc.error, exc.detail)
        if exc.status == 413:  # the rest of the body is not read: end the connection
            response.headers["connection"] = "close"
        return response

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_: Request, exc: StarletteHTTPException) -> Response:
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        return error_response(exc.status_code, code, str(exc.detail))

    @app.exception_handler(RequestValidationError)
    async def _validation_error(_: Request, exc: RequestValidationError) -> Response:
        return error_response(422, "invalid_request", str(exc.errors()))


async def send_json(send: Send, status: int, body: bytes, close: bool = False) -> None:
    """A whole JSON reply on the raw ASGI interface (`close`: end the connection after)."""
    headers = [(b"content-type", b"application/json"),
               (b"content-length", str(len(body)).encode())]
    if close:
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class ServiceApp(FastAPI):
    """FastAPI, with POST /extract answered on the raw ASGI interface (module docstring),
    and the bearer token (if set) asked for every path but OPEN_PATHS, the schema and
    its pages (/docs, /openapi.json, /redoc) included."""

    fast_extract: Callable[[Scope, Receive, Send], Awaitable[None]] | None = None
    token: str | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            if self.token is not None and scope["path"] not in OPEN_PATHS:
                given = dict(scope["headers"]).get(b"authorization", b"").decode("latin-1")
                try:
                    check_authorization(given, self.token)
                except ServiceError as exc:
                    await send_json(send, exc.status, orjson.dumps(
                        {"error": exc.error, "detail": exc.detail}))
                    return
            if (self.fast_extract is not None and scope["method"] == "POST"
                    and scope["path"] == "/extract"):
                await self.fast_extract(scope, receive, send)
                return
        await super().__call__(scope, receive, send)


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
    )
    document_bodies(app, {("/extract", "post"): {
        "application/json": extract_body_schema(algorithm.options_model),
        "text/html": HTML_BODY}})
    install_offline_docs(app)
    app.state.pool = pool
    app.state.settings = settings
    app.token = settings.token
    install_error_handlers(app)

    @app.get("/health")
    async def health() -> Response:
        if pool.ready:
            if pool.alive():
                return json_response({"status": "ok"})
            return error_response(503, "not_ready", "every extraction worker died; "
                                                    "replacements are starting")
        if pool.start_error:
            return error_response(503, "not_ready", f"workers failed: {pool.start_error}")
        return error_response(503, "not_ready", "the extraction workers are starting")

    @app.get("/info")
    async def get_info() -> Response:
        return json_response(info)

    async def extract_reply(body: bytes, content_type: str, query: dict[str, str],
                             started: float) -> bytes:
        """The 200 reply's body for one /extract request, or a ServiceError. The worker
        parses, decodes and answers the request (shared/answer.py); this process only
        passes bytes on."""
        body_form(body, content_type)  # 415 or an empty body: refused without a worker
        if not pool.ready:
            raise ServiceError(503, "not_ready", "the extraction workers are starting")
        try:
            result = await pool.run(body, content_type, query, settings.time_limit_s,
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

    @app.post("/extract")
    async def extract(request: Request) -> Response:
        started = time.perf_counter()
        body = await read_body(request, settings.max_body_bytes)
        reply = await extract_reply(body, request.headers.get("content-type", ""),
                                     dict(request.query_params), started)
        return Response(reply, media_type="application/json")

    async def fast_extract(scope: Scope, receive: Receive, send: Send) -> None:
        started = time.perf_counter()
        headers: dict[bytes, bytes] = dict(scope["headers"])
        status = 200
        try:
            declared = headers.get(b"content-length")
            body = await read_limited(asgi_body_chunks(receive),
                                      declared.decode("latin-1") if declared else None,
                                      settings.max_body_bytes)
            query = dict(parse_qsl(scope["query_string"].decode("latin-1"),
                                   keep_blank_values=True))
            reply = await extract_reply(
                body, headers.get(b"content-type", b"").decode("latin-1"), query, started)
        except ClientGoneError:
            return
        except ServiceError as exc:
            status, reply = exc.status, orjson.dumps({"error": exc.error, "detail": exc.detail})
        except Exception as exc:  # a bug here must still answer in the contract's form
            log.exception("/extract failed")
            status = 500
            reply = orjson.dumps({"error": "internal_error", "detail": f"{type(exc).__name__}"})
        # A 413 leaves the rest of the body unread: the connection ends after it.
        await send_json(send, status, reply, close=status == 413)

    app.fast_extract = fast_extract
    return app
