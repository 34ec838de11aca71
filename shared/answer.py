"""One /extract request answered: from the body's bytes to the reply's bytes.

This runs in the extraction worker process (shared/workers.py), not in the service's
event loop. Everything a page's size makes slow happens here: decoding (charset
detection can take tens of milliseconds), parsing and validating a JSON body of
megabytes, extracting and encoding the reply. So all of it falls under the time
limit, the event loop stays free for other requests and /health, and the service
process only moves bytes: the raw body to the worker and its reply to the client,
with no str or Block ever copied between the two processes.
"""

from __future__ import annotations

import codecs
import time
from collections.abc import Mapping
from typing import Any

import orjson
from pydantic import BaseModel, ValidationError

from shared.contract import Algorithm, Block, ErrorReply, ExtractRequest, Options, PageError
from shared.decoding import NotHTMLError, charset_parameter, check_html, decode_html

HTML_TYPES = ("text/html", "application/xhtml+xml")
# How orjson refuses a number past a 64-bit float's range (1e400), which is valid JSON.
_OUT_OF_RANGE = "number is infinity"


class ServiceError(Exception):
    """An error reply: HTTP status, short code, human-readable detail, and the headers
    the status needs (Allow of a 405, Retry-After of a 429, ...)."""

    def __init__(self, status: int, error: str, detail: str,
                 headers: Mapping[str, str] | None = None) -> None:
        super().__init__(detail)
        self.status, self.error, self.detail = status, error, detail
        self.headers: dict[str, str] = dict(headers or {})

    def body(self) -> bytes:
        """The reply's body: the contract's ErrorReply as JSON."""
        return ErrorReply(error=self.error, detail=self.detail).model_dump_json().encode()


def validation_message(exc: ValidationError, most: int | None = None) -> str:
    """pydantic errors as one line: `field: message; ...` (the first `most` of them)."""
    return "; ".join(
        f"{'.'.join(str(p) for p in err['loc']) or '(body)'}: {err['msg']}"
        for err in exc.errors()[:most]
    )


def media_type(content_type: str) -> str:
    """A Content-Type's media type, without its parameters, in lower case."""
    return content_type.split(";", 1)[0].strip().lower()


def body_form(body: bytes, content_type: str, query: Mapping[str, str] | None = None) -> str:
    """The request's media type if it is one of the two body forms, else the matching
    ServiceError (415, 400 for an empty JSON body, 422 for a query string beside a JSON
    body, which would otherwise be ignored unseen). Cheap, so the service process
    refuses such requests at once instead of queueing them for a worker."""
    form = media_type(content_type)
    if form == "application/json":
        if not body or body.isspace():  # no copy of the body, unlike strip()
            raise ServiceError(400, "empty_body", "the body is empty")
        if query:
            raise ServiceError(
                422, "invalid_request",
                f"query parameters ({', '.join(sorted(query))}) are read only with a "
                "text/html body; with a JSON body, give the url and the options in the "
                "JSON body")
        return form
    if form in HTML_TYPES:
        return form
    raise ServiceError(
        415, "unsupported_media_type",
        f"Content-Type {form or '(none)'} is not accepted; send application/json "
        "or text/html",
    )


def json_text(body: bytes) -> bytes:
    """A JSON body without the UTF-8 byte-order mark some editors and clients write:
    RFC 8259 (section 8.1) lets a parser ignore it, and orjson would refuse it."""
    return body[3:] if body.startswith(codecs.BOM_UTF8) else body


def parse_extract_request(body: bytes, content_type: str, query: dict[str, str]) -> ExtractRequest:
    """Turn either body form into an ExtractRequest, or raise the matching ServiceError."""
    if body_form(body, content_type, query) == "application/json":
        try:
            payload = orjson.loads(json_text(body))
        except orjson.JSONDecodeError as exc:
            if exc.msg.startswith(_OUT_OF_RANGE):  # valid JSON, past what a float holds
                raise ServiceError(
                    422, "invalid_request",
                    f"a number is out of range at line {exc.lineno} column {exc.colno}: "
                    "numbers are read as 64-bit floats, up to about 1.8e308") from None
            raise ServiceError(400, "malformed_json", _json_problem(body, content_type, exc)
                               ) from None
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
    try:
        html = decode_html(body, charset_parameter(content_type))
    except NotHTMLError as exc:
        raise ServiceError(400, "not_html", str(exc)) from None
    options: dict[str, Any] = {k: v for k, v in query.items() if k != "url"}
    return ExtractRequest(html=html, url=query.get("url"), options=options)


def _json_problem(body: bytes, content_type: str, exc: orjson.JSONDecodeError) -> str:
    """What is wrong with a JSON body: bytes that are not UTF-8 said as such (orjson
    calls them "surrogates"), else orjson's own words."""
    try:
        body.decode("utf-8")
    except UnicodeDecodeError as bad:
        declared = charset_parameter(content_type)
        said = f"; the Content-Type says charset={declared}" if declared else ""
        return (f"the body is not UTF-8 (byte 0x{body[bad.start]:02x} at offset "
                f"{bad.start}{said}): a JSON body must be UTF-8")
    return f"the body is not valid JSON: {exc}"


def _model_fields(value: Any) -> Any:
    """orjson's fallback for pydantic models: their fields (Blocks are dataclasses,
    which orjson encodes natively, but an extractor may hand over models)."""
    if isinstance(value, BaseModel):
        return value.__dict__
    raise TypeError(f"cannot encode {type(value).__name__} as JSON")


def encode_blocks(blocks: list[Block]) -> bytes:
    """A list of Blocks as the JSON array of the contract."""
    return orjson.dumps(blocks, default=_model_fields)


def reply_head(algorithm: Algorithm) -> bytes:
    """`{"algorithm":...,"version":...` : how every 200 reply of this algorithm starts."""
    return orjson.dumps({"algorithm": algorithm.name, "version": algorithm.version})[:-1]


def request_options(model: type[Options], values: dict[str, Any], json_body: bool) -> Options:
    """A request's options, or 422 invalid_options. A JSON body's are JSON values, taken
    only in the types the options schema states ("70" is no number); a query string's
    are text, read as each option's type."""
    try:
        return model.model_validate(values, strict=json_body)
    except ValidationError as exc:
        raise ServiceError(422, "invalid_options", validation_message(exc)) from None


def answer_extract(algorithm: Algorithm, head: bytes, body: bytes, content_type: str,
                   query: dict[str, str], blocks: bool = True) -> bytes:
    """The 200 reply to one /extract request up to its `blocks` (finish_reply adds the
    elapsed time and the closing brace), or a ServiceError. An extractor's PageError
    and other exceptions are left to the caller (the worker). Without `blocks` the
    reply ends after its text (and details): for callers that keep the text only."""
    request = parse_extract_request(body, content_type, query)
    options = request_options(algorithm.options_model, request.options,
                              json_body=media_type(content_type) == "application/json")
    missing = options.missing()
    if missing is not None:
        raise ServiceError(422, "invalid_options", missing)
    result = algorithm.run(request.html, options, request.url)
    details = b"" if result.details is None else b',"details":' + orjson.dumps(result.details)
    reply = (head, b',"text":', orjson.dumps(result.text), details)
    if not blocks:
        return b"".join(reply)
    return b"".join((*reply, b',"blocks":', encode_blocks(result.blocks)))


def reply_text_json(partial: bytes) -> bytes:
    """The JSON string of a reply's `text`, cut out of answer_extract's bytes without
    parsing them: `,"` never occurs inside a JSON string (a quote there is escaped), so
    the first `,"text":` is the field and the next `,"` ends its value."""
    start = partial.index(b',"text":') + len(b',"text":')
    end = partial.find(b',"', start)
    return partial[start:] if end < 0 else partial[start:end]


def finish_reply(partial: bytes, elapsed_ms: float) -> bytes:
    """answer_extract's reply with the contract's last field, `elapsed_ms`, which only
    the service process can measure (the worker's part and the hand-over to it)."""
    elapsed = orjson.dumps(round(max(elapsed_ms, 0.0), 3))
    return b"".join((partial, b',"elapsed_ms":', elapsed, b"}"))


def page_query(uri: str | None, options: dict[str, str]) -> dict[str, str]:
    """The query parameters of an /extract request with an HTML body: the page's URL and
    the algorithm's options."""
    return {**options, "url": uri} if uri else dict(options)


def answer_page(algorithm: Algorithm, data: bytes, query: dict[str, str],
                content_type: str = "text/html") -> dict[str, Any]:
    """One page's reply, as a service would give it to a body of `content_type`,
    computed in this process (for callers without a worker pool: `boilerbench extract
    --in-process`, Ray tasks): the contract's reply fields, or `error` (`code: detail`)
    where the page was refused or the extractor refused it."""
    started = time.perf_counter()
    try:
        partial = answer_extract(algorithm, reply_head(algorithm), data, content_type, query)
    except ServiceError as exc:
        return {"error": f"{exc.error}: {exc.detail}"}
    except PageError as exc:
        return {"error": f"unprocessable_page: {exc}"}
    except Exception as exc:  # an extractor's bug fails its page, as in a worker
        return {"error": f"extraction_failed: {type(exc).__name__}: {exc}"}
    elapsed_ms = (time.perf_counter() - started) * 1000
    reply: dict[str, Any] = orjson.loads(finish_reply(partial, elapsed_ms))
    return reply
