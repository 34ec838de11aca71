"""Reading crawl archives: the HTML responses of WARC files, and what else they hold.

Records are parsed by FastWARC. A WARC compressed per record (the usual `.warc.gz`,
ISO 28500 annex D) is split into its gzip members here first, and each member is
parsed on its own: FastWARC reads a record by its Content-Length, so a record cut
short would make it read into the next one and give up on the rest of the file.
Member by member, a truncated or garbled record costs that record only. An
uncompressed WARC has no such boundaries; FastWARC reads it as a stream, and a
malformed record ends that file (reported, never fatal).

No record larger than MAX_RECORD_BYTES is held in memory, compressed or not: a
gzip member is dropped as it inflates past it, a record whose Content-Length passes
it is streamed past unread, and a body's content coding is undone up to it only.

A response counts as HTML by its HTTP Content-Type (text/html or
application/xhtml+xml); a response without one is sniffed (the WHATWG MIME Sniffing
standard's HTML signatures at the start of the body).
"""

from __future__ import annotations

import glob
import io
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Literal, cast

from fastwarc.warc import ArchiveIterator, WarcRecord, WarcRecordType
from isal import isal_zlib

from shared.answer import HTML_TYPES
from shared.decoding import charset_parameter

_GZIP_MAGIC = b"\x1f\x8b\x08"
_READ_BYTES = 1 << 20
MAX_RECORD_BYTES = 512 << 20
"""A record past this is skipped as too large, without being kept: a gzip member (a
record, ISO 28500 annex D) that inflates past it, a record whose Content-Length passes
it (an uncompressed WARC's would be read whole otherwise), a body whose content coding
inflates past it. A page that size is no page, and a small file could hold a gzip bomb."""
# ISA-L's inflate error class (its type stubs declare it an instance).
_INFLATE_ERROR = cast("type[Exception]", isal_zlib.error)
# Tags whose appearance at the start of a body marks it as HTML (WHATWG MIME Sniffing,
# "identifying a resource with an unknown MIME type"), each followed by a space or `>`.
_HTML_SIGNATURES = (b"<!doctype html", b"<html", b"<head", b"<script", b"<iframe", b"<h1",
                    b"<div", b"<font", b"<table", b"<a", b"<style", b"<title", b"<b",
                    b"<body", b"<br", b"<p", b"<!--")

OddKind = Literal["not_html", "truncated", "malformed", "too_large", "duplicate_id"]


@dataclass(frozen=True, slots=True)
class WarcPage:
    """An HTML response: its record id, target URI, WARC-Date and HTTP body bytes, and
    the Content-Type to extract it with (the response's own, so its charset counts)."""

    record_id: str
    uri: str | None
    date: str | None
    body: bytes
    content_type: str = "text/html"


@dataclass(frozen=True, slots=True)
class OddRecord:
    """A response record that yields no page, and why."""

    kind: OddKind
    record_id: str | None
    detail: str


@dataclass(frozen=True, slots=True)
class OtherRecord:
    """A record of another type (warcinfo, request, metadata, ...): not a page."""

    record_type: str


WarcItem = WarcPage | OddRecord | OtherRecord


def expand_paths(patterns: Iterable[str]) -> list[Path]:
    """Files named or matched by each pattern (a path or a glob), in order, once each."""
    found: dict[Path, None] = {}
    for pattern in patterns:
        matches = sorted(glob.glob(pattern, recursive=True)) if glob.has_magic(pattern) \
            else [pattern]
        for match in matches:
            path = Path(match)
            if not path.is_file():
                raise FileNotFoundError(f"no WARC file at {match}")
            found.setdefault(path, None)
        if not matches:
            raise FileNotFoundError(f"no WARC file matches {pattern}")
    return list(found)


def sniff_html(body: bytes) -> bool:
    """Whether a body without a Content-Type starts like an HTML document."""
    start = body[:1024].lstrip(b" \t\n\r\x0c").lower()
    if start.startswith(b"\xef\xbb\xbf"):
        start = start[3:].lstrip()
    for signature in _HTML_SIGNATURES:
        if start.startswith(signature):
            rest = start[len(signature):len(signature) + 1]
            if signature == b"<!--" or rest in (b" ", b">"):
                return True
    return False


def read_warc(path: Path) -> Iterator[WarcItem]:
    """Every record of one WARC file, as a page, an odd record or another record."""
    limit = MAX_RECORD_BYTES
    with path.open("rb") as stream:
        gzipped = stream.read(3) == _GZIP_MAGIC
        stream.seek(0)
        if gzipped:
            for member in _gzip_members(stream, limit):
                if isinstance(member, OddRecord):
                    yield member
                else:
                    yield from _records(io.BytesIO(member), member.startswith(b"WARC/"), limit)
        else:
            yield from _records(stream, True, limit)


def _gzip_members(stream: BinaryIO, limit: int) -> Iterator[bytes | OddRecord]:
    """The decompressed gzip members of a stream, one at a time. A member that does not
    decompress is reported, and reading goes on at the next gzip header after it; one
    that inflates past `limit` bytes is inflated to its end and dropped as it goes."""
    pending = b""
    at_end = False
    while True:
        if not pending:
            pending = stream.read(_READ_BYTES)
            if not pending:
                return
        # ISA-L inflates a few times faster than zlib: this process feeds the workers
        # and shares the cores with them.
        decompressor = isal_zlib.decompressobj(wbits=31)
        parts: list[bytes] = []
        size = 0
        try:
            data = pending
            while True:
                part = decompressor.decompress(data)
                size += len(part)
                if size <= limit:
                    parts.append(part)
                elif parts:
                    parts.clear()
                if decompressor.eof:
                    pending = decompressor.unused_data
                    break
                data = stream.read(_READ_BYTES)
                if not data:
                    at_end = True
                    break
        except _INFLATE_ERROR as exc:
            yield OddRecord("malformed", None, f"a gzip member does not decompress: {exc}")
            pending = _next_member(stream, data)
            continue
        if size > limit:
            yield OddRecord("too_large", None, f"a gzip member inflates past {limit:,} bytes")
            if at_end:
                return
            continue
        member = b"".join(parts)
        if at_end and not decompressor.eof:
            # The file ends inside this member: what decompressed is a record cut short.
            yield member if member.startswith(b"WARC/") else OddRecord(
                "truncated", None, "the file ends inside a gzip member")
            return
        yield member


def _next_member(stream: BinaryIO, data: bytes) -> bytes:
    """The stream from the next gzip header on (searching past the failed one's start)."""
    while True:
        found = data.find(_GZIP_MAGIC, 1)
        if found >= 0:
            return data[found:]
        more = stream.read(_READ_BYTES)
        if not more:
            return b""
        data = data[-2:] + more


def _records(stream: BinaryIO, whole: bool, limit: int) -> Iterator[WarcItem]:
    if not whole:
        yield OddRecord("malformed", None, "a gzip member holds no WARC record")
        return
    try:
        for record in ArchiveIterator(stream, parse_http=False):
            yield _classify(record, limit)
    except OSError as exc:  # FastWARC's error for a record it cannot parse
        yield OddRecord("malformed", None, f"unreadable WARC record: {exc}")


def _classify(record: WarcRecord, limit: int) -> WarcItem:
    """What a record is. A block of more than `limit` bytes is judged by its header
    alone: left unread, FastWARC streams past it to the next record."""
    if record.record_type != WarcRecordType.response:
        return OtherRecord(str(record.headers.get("WARC-Type") or "unknown"))
    record_id = record.record_id or None
    declared = record.content_length
    if declared > limit:
        return OddRecord("too_large", record_id,
                         f"the record declares {declared:,} bytes, past {limit:,}")
    block = record.reader.read()
    if len(block) < declared:
        return OddRecord("truncated", record_id,
                         f"the record holds {len(block)} of its {declared} bytes")
    head, separator, body = block[:declared].partition(b"\r\n\r\n")
    if not separator or not head.startswith(b"HTTP/"):
        return OddRecord("malformed", record_id, "the response holds no HTTP message")
    headers = _header_fields(head)
    try:
        body = _decoded_body(headers, body, limit)
    except _TooLargeError as exc:
        return OddRecord("too_large", record_id, str(exc))
    except ValueError as exc:
        return OddRecord("malformed", record_id, str(exc))
    content_type = _media_type(headers.get(b"content-type", b""))
    if content_type is None:
        if not sniff_html(body):
            return OddRecord("not_html", record_id, "no Content-Type, and the body is not HTML")
    elif content_type not in HTML_TYPES:
        return OddRecord("not_html", record_id, f"Content-Type {content_type}")
    if record_id is None:
        return OddRecord("malformed", None, "the record has no WARC-Record-ID")
    charset = charset_parameter(headers.get(b"content-type", b"").decode("latin-1"))
    given = content_type or "text/html"
    return WarcPage(record_id, record.headers.get("WARC-Target-URI"),
                    record.headers.get("WARC-Date"), body,
                    f"{given}; charset={charset}" if charset else given)


def _header_fields(head: bytes) -> dict[bytes, bytes]:
    """An HTTP header block's fields by lower-case name (the first of repeated ones)."""
    fields: dict[bytes, bytes] = {}
    for line in head.split(b"\r\n")[1:]:
        name, colon, value = line.partition(b":")
        if colon:
            fields.setdefault(name.strip().lower(), value.strip())
    return fields


def _media_type(content_type: bytes) -> str | None:
    """The media type of a Content-Type value, lower case, or None when empty."""
    return content_type.split(b";", 1)[0].strip().lower().decode("latin-1") or None


class _TooLargeError(ValueError):
    """A body whose content coding inflates past the record limit."""


def _decoded_body(headers: dict[bytes, bytes], body: bytes, limit: int) -> bytes:
    """The body as the server meant it: crawlers that archive the bytes as they came
    (Heritrix, wget) keep the chunked transfer coding and the gzip or deflate content
    coding (RFC 9112 section 7.1, RFC 9110 section 8.4). Common Crawl stores them
    decoded, and renames the headers, so its bodies pass unchanged. A coded body that
    inflates past `limit` bytes raises _TooLargeError, with no more than that inflated."""
    if b"chunked" in headers.get(b"transfer-encoding", b"").lower():
        body = _dechunk(body)
    coding = headers.get(b"content-encoding", b"").strip().lower()
    if coding in (b"gzip", b"x-gzip", b"deflate"):
        try:
            # 47: a gzip or a zlib header, detected; deflate also comes raw (-15).
            body = _inflate(body, 47, limit) if coding != b"deflate" or body[:1] == b"\x78" \
                else _inflate(body, -15, limit)
        except zlib.error as exc:
            raise ValueError(f"the {coding.decode()} body does not decompress: {exc}") from None
    return body


def _inflate(data: bytes, wbits: int, limit: int) -> bytes:
    """The stream inflated whole; one cut short (zlib does not raise for that) too. One
    that inflates past `limit` is stopped there: a small body can be a gzip bomb."""
    decompressor = zlib.decompressobj(wbits)
    inflated = decompressor.decompress(data, limit + 1)
    if len(inflated) > limit:
        raise _TooLargeError(f"the body inflates past {limit:,} bytes")
    inflated += decompressor.flush()
    if not decompressor.eof:
        raise zlib.error("the compressed data ends before its end marker")
    return inflated


def _dechunk(body: bytes) -> bytes:
    """A chunked body's data (chunk extensions and trailers dropped)."""
    parts: list[bytes] = []
    position = 0
    while True:
        line_end = body.find(b"\r\n", position)
        if line_end < 0:
            raise ValueError("a chunked body ends inside a chunk header")
        size_field = body[position:line_end].split(b";", 1)[0].strip()
        try:
            size = int(size_field, 16)
        except ValueError:
            raise ValueError(f"a chunk size is not hexadecimal: {size_field[:20]!r}") from None
        if size == 0:
            return b"".join(parts)
        start = line_end + 2
        if start + size > len(body):
            raise ValueError("a chunked body ends inside a chunk")
        parts.append(body[start:start + size])
        position = start + size + 2
