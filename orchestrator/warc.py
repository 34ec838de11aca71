"""Reading crawl archives: the HTML responses of WARC files, and what else they hold.

A WARC compressed per record (the usual `.warc.gz`, ISO 28500 annex D, or `.warc.zst`,
IIPC's "WARC zstd": a zstd frame per record, maybe after a dictionary) is split into
its gzip members or zstd frames first; an uncompressed one is read as it is. Records are then cut
here by their Content-Length, and each is checked against what follows it (two
CRLFs, then the next record or the end): a record whose Content-Length does not fit,
or bytes that are no record, are reported, and reading goes on at the next record
header. So a bad record costs that record only, compressed or not. FastWARC parses
each record's header.

No record larger than MAX_RECORD_BYTES is held in memory, compressed or not: a
gzip member is dropped as it inflates past it, a zstd frame is stopped there (or
passed over unread when its compressed bytes pass it), a record whose Content-Length
passes it is passed over unread, and a body's content coding is undone up to it only.

A page is an HTTP response of status 200 or 203 (RFC 9110, section 15: the others'
content is not the page at their URI). It counts as HTML by its HTTP Content-Type
(text/html or application/xhtml+xml); a response without one is sniffed (the WHATWG
MIME Sniffing standard's HTML signatures at the start of the body).

A page cut short (its record says WARC-Truncated, or its chunked or compressed body
ends early) is still a page, as a browser shows what arrived: it gets the HTML it
holds, and says why it is cut (WarcPage.truncated). An HTTP head cut short is no
response.
"""

from __future__ import annotations

import glob
import io
import re
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, Literal, cast

from fastwarc.warc import WarcHeaderMap
from isal import isal_zlib

from shared.answer import HTML_TYPES
from shared.decoding import charset_parameter

if TYPE_CHECKING:
    from zstandard import ZstdDecompressor

_GZIP_MAGIC = b"\x1f\x8b\x08"
# A zstd frame (RFC 8878, section 3.1.1), and the skippable frames beside it (3.1.2:
# magic 0x184D2A50 to 0x184D2A5F, little-endian): IIPC's WARC zstd holds its dictionary
# in one of magic 0x184D2A5D at the start of the file.
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_SKIPPABLE_MAGIC = b"\x2a\x4d\x18"  # after a first byte of 0x50 to 0x5F
_DICTIONARY_MAGIC = b"\x5d\x2a\x4d\x18"
_NEXT_FRAME = re.compile(rb"\x28\xb5\x2f\xfd|[\x50-\x5f]\x2a\x4d\x18")
# A zstd block holds at most 128 KiB (RFC 8878, section 3.1.1.2.4): a larger size read
# from a block header says the bytes are no frame.
_ZSTD_MAX_BLOCK = 128 << 10
_ZSTD_MISSING = ("a zstd-compressed WARC: install zstandard (pip install "
                 "'boilerbench[warc]') or decompress it with zstd -d")
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

# The line that starts a record (ISO 28500, section 4: `WARC/1.1`, `WARC/1.0`, ...).
_RECORD_START = re.compile(rb"WARC/[0-9]+\.[0-9]+\r?\n")
# A WARC header longer than this has lost its end.
_MAX_HEAD_BYTES = 1 << 20
# Responses whose content is the representation of their target (RFC 9110, sections
# 15.3.1 and 15.3.4); a redirect's, an error's, a partial or empty response's is not.
_PAGE_STATUSES = frozenset({200, 203})
# Responses that send the client elsewhere (RFC 9110, section 15.4).
_REDIRECTS = frozenset({301, 302, 303, 307, 308})

OddKind = Literal["not_ok", "not_html", "truncated", "malformed", "too_large", "duplicate_id"]


@dataclass(frozen=True, slots=True)
class WarcPage:
    """An HTML response: its record id, target URI, WARC-Date and HTTP body bytes, the
    Content-Type to extract it with (the response's own, so its charset counts), and
    why its body is cut short, if it is."""

    record_id: str
    uri: str | None
    date: str | None
    body: bytes
    content_type: str = "text/html"
    truncated: str | None = None


@dataclass(frozen=True, slots=True)
class OddRecord:
    """A response record that yields no page, and why (with its URI where known)."""

    kind: OddKind
    record_id: str | None
    detail: str
    uri: str | None = None


@dataclass(frozen=True, slots=True)
class OtherRecord:
    """A record of another type (warcinfo, request, metadata, ...): not a page."""

    record_type: str


WarcItem = WarcPage | OddRecord | OtherRecord


def expand_paths(patterns: Iterable[str], leave_out: Callable[[Path], bool] | None = None
                 ) -> tuple[list[Path], list[Path]]:
    """Files named or matched by each pattern (a path or a glob), in order, once each;
    and the paths that `leave_out` took out of them (a job's output, file or folder,
    which a glob over the crawl's folder may match too)."""
    found: dict[Path, None] = {}
    left_out: dict[Path, None] = {}
    for pattern in patterns:
        matches = sorted(glob.glob(pattern, recursive=True)) if glob.has_magic(pattern) \
            else [pattern]
        for match in matches:
            path = Path(match)
            if leave_out is not None and leave_out(path):
                left_out.setdefault(path, None)
                continue
            if not path.is_file():
                raise FileNotFoundError(f"no WARC file at {match}")
            found.setdefault(path, None)
        if not matches:
            raise FileNotFoundError(f"no WARC file matches {pattern}")
    return list(found), list(left_out)


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
        magic = stream.read(4)
        stream.seek(0)
        if magic.startswith(_GZIP_MAGIC) or _is_zstd(magic):
            members = _gzip_members(stream, limit) if magic.startswith(_GZIP_MAGIC) \
                else _zstd_frames(stream, limit)
            for member in members:
                if isinstance(member, OddRecord):
                    yield member
                else:
                    yield from _records(io.BytesIO(member), limit)
        else:
            yield from _records(stream, limit)


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


def _is_zstd(magic: bytes) -> bool:
    """Whether a file starting with these 4 bytes starts with a zstd or skippable frame."""
    return magic == _ZSTD_MAGIC or (magic[1:] == _SKIPPABLE_MAGIC and magic[0] >> 4 == 5)


def _zstd_frames(stream: BinaryIO, limit: int) -> Iterator[bytes | OddRecord]:
    """The decompressed zstd frames of a stream, one at a time, with the dictionary of a
    leading dictionary frame (IIPC WARC zstd; it may be zstd-compressed itself).
    Skippable frames are passed over. Each frame's end is found from its block headers
    before it is decompressed, so a frame that does not decompress costs that frame,
    and one that inflates past `limit` is stopped there (a zstd block of 4 bytes can
    stand for 128 KiB). Bytes that are no frame are reported, and reading goes on at
    the next frame."""
    try:
        import zstandard
    except ImportError:
        yield OddRecord("malformed", None, _ZSTD_MISSING)
        return
    source = _Source(stream)
    decompressor = zstandard.ZstdDecompressor()
    has_dictionary = False
    position = 0
    while position < source.size:
        magic = source.read(position, 8)
        if magic[1:4] == _SKIPPABLE_MAGIC and magic[0] >> 4 == 5 and len(magic) == 8:
            skipped = position + 8 + int.from_bytes(magic[4:], "little")
            if skipped > source.size:
                yield OddRecord("truncated", None, "the file ends inside a skippable zstd frame")
                return
            if magic[:4] == _DICTIONARY_MAGIC and position == 0:
                try:
                    if skipped - 8 > limit:
                        raise _TooLargeError(f"it holds {skipped - 8:,} bytes, past {limit:,}")
                    dictionary = source.read(8, skipped - 8)
                    if dictionary.startswith(_ZSTD_MAGIC):
                        dictionary = _zstd_inflate(decompressor, dictionary, limit, True)
                    decompressor = zstandard.ZstdDecompressor(
                        dict_data=zstandard.ZstdCompressionDict(dictionary))
                    has_dictionary = True
                except (zstandard.ZstdError, _TooLargeError) as exc:
                    yield OddRecord("malformed", None, f"the zstd dictionary is unusable: {exc}")
            position = skipped
            continue
        end = _zstd_frame_end(source, position) if magic.startswith(_ZSTD_MAGIC) else None
        if end is None:
            found = source.find(_NEXT_FRAME, position + 1)
            yield _junk(source, position, found, "zstd frame")
            if found is None:
                return
            position = found
            continue
        whole = end <= source.size
        if min(end, source.size) - position > limit:
            yield OddRecord("too_large", None, f"a zstd frame of {end - position:,} "
                            f"compressed bytes, past {limit:,}")
            position = end
            continue
        frame = source.read(position, min(end, source.size) - position)
        try:
            member = _zstd_inflate(decompressor, frame, limit, whole)
        except _TooLargeError as exc:
            yield OddRecord("too_large", None, f"a zstd frame {exc}")
        except zstandard.ZstdError as exc:
            if not whole:
                yield OddRecord("truncated", None, "the file ends inside a zstd frame")
                return
            # A frame's header names the dictionary it was compressed with, if any.
            hint = " (it needs a dictionary, which the file does not begin with)" \
                if frame[4] & 3 and not has_dictionary else ""
            yield OddRecord("malformed", None, f"a zstd frame does not decompress: {exc}{hint}")
        else:
            if whole:
                yield member
            else:  # the file ends inside this frame: what decompressed is a record cut short
                yield member if member.startswith(b"WARC/") else OddRecord(
                    "truncated", None, "the file ends inside a zstd frame")
        position = end


def _zstd_frame_end(source: _Source, start: int) -> int | None:
    """The offset just past the zstd frame at `start`, from its header and its blocks'
    headers (RFC 8878, section 3.1.1), past the end of the source for a frame the file
    cuts; None where the bytes are no frame (a reserved bit or block type, a block
    larger than a block can be)."""
    header = source.read(start, 6)
    if len(header) < 6:
        return start + 6
    descriptor = header[4]
    if descriptor & 0x08:
        return None
    single_segment = descriptor >> 5 & 1
    position = (start + 5 + (1 - single_segment) + (0, 1, 2, 4)[descriptor & 3]
                + (single_segment, 2, 4, 8)[descriptor >> 6])
    while True:
        block = source.read(position, 3)
        if len(block) < 3:
            return position + 3
        value = int.from_bytes(block, "little")
        kind, size = value >> 1 & 3, value >> 3
        if kind == 3 or size > _ZSTD_MAX_BLOCK:
            return None
        position += 3 + (1 if kind == 1 else size)
        if value & 1:  # the last block; a checksum may follow
            return position + 4 * (descriptor >> 2 & 1)


def _zstd_inflate(decompressor: ZstdDecompressor, frame: bytes, limit: int,
                  whole: bool) -> bytes:
    """A zstd frame decompressed, _TooLargeError past `limit` bytes: a frame whose header
    gives its size is decompressed at once when that fits (zstd checks it holds that
    much), any other is read in steps and stopped past the limit."""
    from zstandard import frame_content_size

    declared = frame_content_size(frame)
    if declared > limit:
        raise _TooLargeError(f"declares {declared:,} bytes, past {limit:,}")
    if declared >= 0 and whole:
        return decompressor.decompress(frame)
    parts: list[bytes] = []
    size = 0
    with decompressor.stream_reader(frame, read_across_frames=False) as reader:
        while part := reader.read(_READ_BYTES):
            size += len(part)
            if size > limit:
                raise _TooLargeError(f"inflates past {limit:,} bytes")
            parts.append(part)
    return b"".join(parts)


def _records(stream: BinaryIO, limit: int) -> Iterator[WarcItem]:
    """Every record of an uncompressed WARC stream (a file, or a gzip member's content):
    a header, a block of its Content-Length, two CRLFs (ISO 28500, section 4). Each
    record is checked against what follows its block, the next record or the end: a
    record whose Content-Length ends anywhere else is malformed (its block would be a
    cut or a spliced page), and reading goes on at the next record header after its
    own header. Bytes that are no record are reported the same way. So one bad record
    costs that record only, in an uncompressed WARC too."""
    source = _Source(stream)
    position: int | None = 0
    while position is not None:
        position = source.skip_line_ends(position)
        if not source.read(position, 1):
            return
        item, position = _record_at(source, position, limit)
        yield item


def _record_at(source: _Source, position: int, limit: int) -> tuple[WarcItem, int | None]:
    """The record that starts at `position` (or what stands there instead), and the
    offset reading goes on at: past its block, or at the next record header after a
    bad one (None: there is none)."""
    if not _RECORD_START.match(source.read(position, 32)):
        found = source.find_record(position + 1)
        return _junk(source, position, found, "WARC record"), found
    head = source.read_head(position)
    if head is None:
        return (OddRecord("malformed", None, "a WARC header without its end"),
                source.find_record(position + 1))
    headers = WarcHeaderMap()
    try:
        headers.parse(io.BytesIO(head))
    except (OSError, ValueError) as exc:  # FastWARC's errors for a header it cannot read
        return (OddRecord("malformed", None, f"unreadable WARC header: {exc}"),
                source.find_record(position + 1))
    record_id = headers.get("WARC-Record-ID") or None
    uri = _target_uri(headers)
    length = (headers.get("Content-Length") or "").strip()
    block_start = position + len(head)
    if not length.isdigit():
        return (OddRecord("malformed", record_id, "the record has no Content-Length", uri),
                source.find_record(block_start))
    declared = int(length)
    block_end = block_start + declared
    if block_end > source.size or not source.record_ends(block_end):
        found = source.find_record(block_start)
        if found is None and block_end > source.size:
            return OddRecord("truncated", record_id,
                             f"the record holds {source.size - block_start:,} of its "
                             f"{declared:,} bytes", uri), None
        # A block followed by its two CRLFs, with no record starting inside it, has the
        # right length: the bytes after it are reported on their own.
        if block_end > source.size or (found is not None and found < block_end) \
                or source.read(block_end, 4) != b"\r\n\r\n":
            return OddRecord("malformed", record_id, _misfit(declared, block_end, found),
                             uri), found
    if declared > limit:
        return OddRecord("too_large", record_id,
                         f"the record declares {declared:,} bytes, past {limit:,}",
                         uri), block_end
    return (_classify(headers, record_id, uri, source.read(block_start, declared), limit),
            block_end)


def _junk(source: _Source, position: int, found: int | None, what: str) -> OddRecord:
    """The bytes from `position` up to the next `what` found there (or the end), which
    are none."""
    size = (found if found is not None else source.size) - position
    return OddRecord("malformed", None, f"{size:,} bytes that are no {what}")


def _misfit(declared: int, block_end: int, found: int | None) -> str:
    """Why a record's Content-Length does not fit: the next record starts inside the
    block it declares, or bytes that are no record follow that block."""
    if found is not None and found < block_end:
        return (f"its Content-Length, {declared:,}, runs {block_end - found:,} bytes into "
                "the next record")
    return f"its Content-Length, {declared:,}, is followed by bytes that are no WARC record"


class _Source:
    """A seekable stream read forward by offset through one buffer: bytes before the
    offset last read are let go, so a block is held once, and a block that is not read
    (a record past the limit) is passed over by seeking."""

    def __init__(self, stream: BinaryIO) -> None:
        self._stream = stream
        self.size = stream.seek(0, io.SEEK_END)
        self._start = 0  # the offset of _data[0]
        self._data = b""

    def read(self, offset: int, size: int) -> bytes:
        """Up to `size` bytes from `offset` (fewer at the end of the stream)."""
        skip = offset - self._start
        if skip >= 0 and skip + size <= len(self._data):
            return self._data[skip:skip + size]
        rest = self._data[skip:] if 0 <= skip < len(self._data) else b""
        self._stream.seek(offset + len(rest))
        parts = [rest] if rest else []
        wanted = max(size, _READ_BYTES) - len(rest)
        while wanted > 0:
            part = self._stream.read(wanted)
            if not part:
                break
            parts.append(part)
            wanted -= len(part)
        # One part (a block read whole) is kept as it is, and a slice of all of it is
        # that same object: a large block is not copied here.
        self._data = parts[0] if len(parts) == 1 else b"".join(parts)
        self._start = offset
        return self._data[:size]

    def skip_line_ends(self, offset: int) -> int:
        """The offset of the first byte from `offset` on that is no CR or LF."""
        while True:
            data = self.read(offset, 64)
            rest = data.lstrip(b"\r\n")
            if rest or not data:
                return offset + len(data) - len(rest)
            offset += len(data)

    def read_head(self, offset: int) -> bytes | None:
        """The header starting at `offset`, through its blank line (None: no end)."""
        size = 16 << 10
        while True:
            data = self.read(offset, size)
            end = data.find(b"\r\n\r\n")
            if end >= 0:
                return data[:end + 4]
            if len(data) < size or size >= _MAX_HEAD_BYTES:
                return None
            size *= 4

    def record_ends(self, offset: int) -> bool:
        """Whether a record's block may end at `offset`: line ends (two CRLFs, ISO 28500),
        then the next record or the end of the stream."""
        rest = self.read(self.skip_line_ends(offset), 32)
        return not rest or _RECORD_START.match(rest) is not None

    def find(self, pattern: re.Pattern[bytes], offset: int) -> int | None:
        """The offset of the first match of `pattern` (at most 32 bytes long) from
        `offset` on, or None."""
        window = 1 << 20
        while offset < self.size:
            found = pattern.search(self.read(offset, window + 32))
            if found is not None:
                return offset + found.start()
            offset += window
        return None

    def find_record(self, offset: int) -> int | None:
        """The offset of the first record header (a `WARC/x.y` line at a line start) from
        `offset` on, or None."""
        window = 1 << 20
        while offset < self.size:
            data = self.read(offset - 1, window + 1) if offset else b"\n" + self.read(0, window)
            found = 0
            while True:
                found = data.find(b"\nWARC/", found)
                if found < 0:
                    break
                if _RECORD_START.match(data, found + 1):
                    return offset - 1 + found + 1
                found += 1
            offset += window - 32  # a header line cut by the window's end is seen again
        return None


def _classify(headers: WarcHeaderMap, record_id: str | None, uri: str | None, block: bytes,
              limit: int) -> WarcItem:
    """What a record whose block is `block` is: a page, an odd response, another record."""
    record_type = (headers.get("WARC-Type") or "").strip()
    if record_type.lower() != "response":
        return OtherRecord(record_type or "unknown")
    block_type = _media_type((headers.get("Content-Type") or "").encode("latin-1", "replace"))
    if block_type not in (None, "application/http"):
        return OddRecord("not_html", record_id, f"a {block_type} record, not an HTTP response",
                         uri)
    try:
        status, head, body = _http_response(block)
    except ValueError as exc:
        return OddRecord("malformed", record_id, str(exc), uri)
    fields = _header_fields(head)
    if status[0] not in _PAGE_STATUSES:
        location = fields.get(b"location", b"").decode("latin-1")
        return OddRecord("not_ok", record_id, f"HTTP {status[1]}"
                         + (f", to {location}" if location and status[0] in _REDIRECTS else ""),
                         uri)
    try:
        body, cut = _decoded_body(fields, body, limit)
    except _TooLargeError as exc:
        return OddRecord("too_large", record_id, str(exc), uri)
    except ValueError as exc:
        return OddRecord("malformed", record_id, str(exc), uri)
    content_type = _media_type(fields.get(b"content-type", b""))
    if content_type is None:
        if not sniff_html(body):
            return OddRecord("not_html", record_id, "no Content-Type, and the body is not HTML",
                             uri)
    elif content_type not in HTML_TYPES:
        return OddRecord("not_html", record_id, f"Content-Type {content_type}", uri)
    if record_id is None:
        return OddRecord("malformed", None, "the record has no WARC-Record-ID", uri)
    charset = charset_parameter(fields.get(b"content-type", b"").decode("latin-1"))
    given = content_type or "text/html"
    truncated = headers.get("WARC-Truncated")
    return WarcPage(record_id, uri, headers.get("WARC-Date"), body,
                    f"{given}; charset={charset}" if charset else given,
                    f"WARC-Truncated: {truncated.strip()}" if truncated else cut)


def _target_uri(headers: WarcHeaderMap) -> str | None:
    """WARC-Target-URI as the URI itself: WARC 1.0 wrote it in angle brackets (as wget
    still does), WARC 1.1 without. A URI is ASCII (RFC 3986); an IRI's UTF-8 is kept as
    text, other raw bytes are percent-encoded rather than lost."""
    raw = headers.get_bytes(b"WARC-Target-URI")
    if raw is None:
        return None
    raw = raw.strip()
    if raw.startswith(b"<") and raw.endswith(b">"):
        raw = raw[1:-1].strip()
    try:
        return raw.decode("utf-8") or None
    except UnicodeDecodeError:
        return "".join(chr(byte) if byte < 0x80 else f"%{byte:02X}" for byte in raw) or None


def _http_response(block: bytes) -> tuple[tuple[int, str], bytes, bytes]:
    """The final response of a block, (status code, status line less its version), its
    head and its body. Interim (1xx) responses before it are passed over, as a client
    does (RFC 9110, section 15.2); a bare LF ends a line as a CRLF does (RFC 9112,
    section 2.2). ValueError where the block holds no HTTP response."""
    while True:
        crlf = block.find(b"\r\n\r\n")
        lf = block.find(b"\n\n", 0, crlf if crlf >= 0 else len(block))
        if not block.startswith(b"HTTP/") or (crlf < 0 and lf < 0):
            raise ValueError("the response holds no HTTP message")
        end, skip = (crlf, 4) if lf < 0 else (lf, 2)
        head, body = block[:end], block[end + skip:]
        status_line = head.split(b"\n", 1)[0].rstrip(b"\r").decode("latin-1")
        parts = status_line.split(None, 2)
        if len(parts) < 2 or not (len(parts[1]) == 3 and parts[1].isdigit()):
            raise ValueError(f"the status line {status_line[:60]!r} has no status code")
        code = int(parts[1])
        if 100 <= code < 200 and code != 101 and body.startswith(b"HTTP/"):
            block = body
            continue
        return (code, " ".join(parts[1:])), head, body


def _header_fields(head: bytes) -> dict[bytes, bytes]:
    """An HTTP header block's fields by lower-case name (the first of repeated ones)."""
    fields: dict[bytes, bytes] = {}
    for line in head.split(b"\n")[1:]:
        name, colon, value = line.rstrip(b"\r").partition(b":")
        if colon:
            fields.setdefault(name.strip().lower(), value.strip())
    return fields


def _media_type(content_type: bytes) -> str | None:
    """The media type of a Content-Type value, lower case, or None when empty."""
    return content_type.split(b";", 1)[0].strip().lower().decode("latin-1") or None


class _TooLargeError(ValueError):
    """A body whose content coding inflates past the record limit."""


def _decoded_body(headers: dict[bytes, bytes], body: bytes, limit: int
                  ) -> tuple[bytes, str | None]:
    """The body as the server meant it, and why it is cut short (None: it is whole):
    crawlers that archive the bytes as they came (Heritrix, wget) keep the chunked
    transfer coding and the gzip or deflate content coding (RFC 9112 section 7.1, RFC
    9110 section 8.4). Common Crawl stores them decoded, and renames the headers, so its
    bodies pass unchanged. A coded body that ends early (a record cut at a size limit,
    a connection lost) gives what decodes of it; one that does not decode raises
    ValueError, and one that inflates past `limit` bytes raises _TooLargeError, with no
    more than that inflated."""
    cut = None
    if b"chunked" in headers.get(b"transfer-encoding", b"").lower():
        body, cut = _dechunk(body)
    coding = headers.get(b"content-encoding", b"").strip().lower()
    if coding in (b"gzip", b"x-gzip", b"deflate"):
        try:
            # 47: a gzip or a zlib header, detected; deflate also comes raw (-15).
            body, whole = _inflate(body, 47, limit) \
                if coding != b"deflate" or body[:1] == b"\x78" else _inflate(body, -15, limit)
        except zlib.error as exc:
            raise ValueError(f"the {coding.decode()} body does not decompress: {exc}") from None
        if not whole:
            cut = cut or f"the {coding.decode()} body ends early"
    return body, cut


def _inflate(data: bytes, wbits: int, limit: int) -> tuple[bytes, bool]:
    """The stream inflated, and whether it is whole: one cut short gives what inflates
    of it (zlib does not raise for that). One that inflates past `limit` is stopped
    there: a small body can be a gzip bomb."""
    decompressor = zlib.decompressobj(wbits)
    inflated = decompressor.decompress(data, limit + 1)
    if len(inflated) > limit:
        raise _TooLargeError(f"the body inflates past {limit:,} bytes")
    inflated += decompressor.flush()
    return inflated, decompressor.eof


def _dechunk(body: bytes) -> tuple[bytes, str | None]:
    """A chunked body's data (chunk extensions and trailers dropped), and why it is cut
    short (None: it ends with its last chunk): a body that ends early gives the data up
    to its end. A chunk size that is no number raises ValueError."""
    parts: list[bytes] = []
    position = 0
    while True:
        line_end = body.find(b"\r\n", position)
        if line_end < 0:
            return b"".join(parts), "the chunked body ends early"
        size_field = body[position:line_end].split(b";", 1)[0].strip()
        try:
            size = int(size_field, 16)
        except ValueError:
            raise ValueError(f"a chunk size is not hexadecimal: {size_field[:20]!r}") from None
        if size == 0:
            return b"".join(parts), None
        start = line_end + 2
        parts.append(body[start:start + size])
        if start + size > len(body):
            return b"".join(parts), "the chunked body ends early"
        position = start + size + 2
