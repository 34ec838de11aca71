"""The service kit: one pure extractor in, one FastAPI app with the /extract contract out.

    app = create_service_app(ALGORITHM)

gives POST /extract (JSON body or raw text/html body), GET /health, GET /info, JSON
errors with the statuses of the contract, a body size limit, a per-request time
limit enforced by killing the worker process (see shared/workers.py), an optional
bearer token and settings from the environment (shared/settings.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import time
from collections.abc import AsyncIterator
from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from shared.contract import Algorithm, ExtractRequest, PageError
from shared.decoding import NotHTMLError, check_html, decode_html
from shared.settings import ServiceSettings
from shared.workers import ExtractionFailedError, ExtractionTimeoutError, PoolBusyError, WorkerPool

HTML_TYPES = ("text/html", "application/xhtml+xml")


class ServiceError(Exception):
    """An error reply: HTTP status, short code, human-readable detail."""

    def __init__(self, status: int, error: str, detail: str) -> None:
        super().__init__(detail)
        self.status, self.error, self.detail = status, error, detail


def json_response(content: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(content), status_code=status, media_type="application/json")


def error_response(status: int, error: str, detail: str) -> Response:
    return json_response({"error": error, "detail": detail}, status)


def validation_message(exc: ValidationError) -> str:
    """pydantic errors as one line: `field: message; ...`."""
    return "; ".join(
        f"{'.'.join(str(p) for p in err['loc']) or '(body)'}: {err['msg']}" for err in exc.errors()
    )


async def read_body(request: Request, limit: int) -> bytes:
    """The request body, refused with 413 as soon as it passes `limit` bytes."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise ServiceError(413, "too_large", f"the body is {declared} bytes; the limit is {limit}")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise ServiceError(413, "too_large", f"the body passes the limit of {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def check_token(request: Request, token: str | None) -> None:
    if token is None:
        return
    given = request.headers.get("authorization", "")
    if not hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
        raise ServiceError(401, "unauthorized", "a valid bearer token is required")


def install_error_handlers(app: FastAPI) -> None:
    """Every error as JSON `{"error", "detail"}`, including the framework's own 404/405."""

    @app.exception_handler(ServiceError)
    async def _service_error(_: Request, exc: ServiceError) -> Response:
        return error_response(exc.status, exc.error, exc.detail)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_: Request, exc: StarletteHTTPException) -> Response:
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        return error_response(exc.status_code, code, str(exc.detail))

    @app.exception_handler(RequestValidationError)
    async def _validation_error(_: Request, exc: RequestValidationError) -> Response:
        return error_response(422, "invalid_request", str(exc.errors()))


def parse_extract_request(body: bytes, content_type: str, query: dict[str, str]) -> ExtractRequest:
    """Turn either body form into an ExtractRequest, or raise the matching ServiceError."""
    media_type = content_type.split(";", 1)[0].strip().lower()
    if media_type == "application/json":
        if not body.strip():
            raise ServiceError(400, "empty_body", "the body is empty")
        try:
            payload = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            detail = f"the body is not valid JSON: {exc}"
            raise ServiceError(400, "malformed_json", detail) from None
        if not isinstance(payload, dict):
            raise ServiceError(422, "invalid_request", "the JSON body must be an object")
        try:
            request = ExtractRequest.model_validate(payload)
        except ValidationError as exc:
            raise ServiceError(422, "invalid_request", validation_message(exc)) from None
        try:
            check_html(request.html)
        except NotHTMLError as exc:
            raise ServiceError(400, "not_html", str(exc)) from None
        return request
    if media_type in HTML_TYPES:
        try:
            html = decode_html(body)
        except NotHTMLError as exc:
            raise ServiceError(400, "not_html", str(exc)) from None
        options: dict[str, Any] = {k: v for k, v in query.items() if k != "url"}
        return ExtractRequest(html=html, url=query.get("url"), options=options)
    raise ServiceError(
        415, "unsupported_media_type",
        f"Content-Type {media_type or '(none)'} is not accepted; send application/json "
        "or text/html",
    )


def create_service_app(algorithm: Algorithm, settings: ServiceSettings | None = None) -> FastAPI:
    """A FastAPI app serving `algorithm` under the /extract contract."""
    settings = settings or ServiceSettings()
    module = algorithm.extract.__module__
    pool = WorkerPool(module, settings.workers)
    info = algorithm.info().model_dump()
    head = orjson.dumps({"algorithm": algorithm.name, "version": algorithm.version})[:-1]

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        # Workers start in the background: /health says 503 until they are ready.
        starting = asyncio.get_running_loop().create_task(pool.start())
        try:
            yield
        finally:
            starting.cancel()
            await pool.close()

    app = FastAPI(
        title=f"boilerbench {algorithm.name}",
        version=algorithm.version,
        description=algorithm.description,
        lifespan=lifespan,
    )
    app.state.pool = pool
    app.state.settings = settings
    install_error_handlers(app)

    @app.get("/health")
    async def health() -> Response:
        if pool.ready:
            return json_response({"status": "ok"})
        if pool.start_error:
            return error_response(503, "not_ready", f"workers failed: {pool.start_error}")
        return error_response(503, "not_ready", "the extraction workers are starting")

    @app.get("/info")
    async def get_info(request: Request) -> Response:
        check_token(request, settings.token)
        return json_response(info)

    @app.post("/extract")
    async def extract(request: Request) -> Response:
        started = time.perf_counter()
        check_token(request, settings.token)
        body = await read_body(request, settings.max_body_bytes)
        parsed = parse_extract_request(
            body, request.headers.get("content-type", ""), dict(request.query_params)
        )
        try:
            options = algorithm.options_model.model_validate(parsed.options)
        except ValidationError as exc:
            raise ServiceError(422, "invalid_options", validation_message(exc)) from None
        if not pool.ready:
            raise ServiceError(503, "not_ready", "the extraction workers are starting")
        try:
            result = await pool.run(
                parsed.html, options.model_dump(mode="json"), parsed.url, settings.time_limit_s
            )
        except ExtractionTimeoutError as exc:
            raise ServiceError(504, "timeout", str(exc)) from None
        except PoolBusyError as exc:
            raise ServiceError(503, "busy", str(exc)) from None
        except PageError as exc:
            raise ServiceError(422, "unprocessable_page", str(exc)) from None
        except ExtractionFailedError as exc:
            raise ServiceError(422, "extraction_failed", str(exc)) from None
        # The worker sent the blocks as JSON already: splice them in, no decode/encode.
        # The time this request took the service, less any wait for a free worker, so
        # the figure describes the algorithm and not how busy the service was.
        spent_ms = (time.perf_counter() - started) * 1000 - result.wait_ms
        elapsed = orjson.dumps(round(max(spent_ms, 0.0), 3))
        return Response(
            b"".join((head, b',"text":', orjson.dumps(result.text), b',"blocks":',
                      result.blocks_json, b',"elapsed_ms":', elapsed, b"}")),
            media_type="application/json",
        )

    return app
