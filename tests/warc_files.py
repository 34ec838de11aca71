"""WARC files for the tests and the WARC benchmark, written record by record (ISO 28500:
a header block, the HTTP response, two CRLFs), each record its own gzip member, so
single records can be made odd: cut short, garbled, without a Content-Type."""

from __future__ import annotations

import dataclasses
import gzip
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Response:
    """One HTTP response to archive. `declared_extra` bytes more than it holds are
    declared in its Content-Length (a record cut short); `headers` are added to the
    HTTP header as they are (the body must match them: chunked, compressed)."""

    uri: str
    body: bytes
    content_type: str | None = "text/html; charset=utf-8"
    declared_extra: int = 0
    record_id: str = ""
    headers: tuple[tuple[str, str], ...] = ()

    def with_id(self) -> Response:
        return self if self.record_id else dataclasses.replace(
            self, record_id=f"<urn:uuid:{uuid.uuid4()}>")


def warc_record(response: Response, record_type: str = "response") -> bytes:
    head = b"HTTP/1.1 200 OK\r\n"
    if response.content_type is not None:
        head += f"Content-Type: {response.content_type}\r\n".encode()
    head += "".join(f"{name}: {value}\r\n" for name, value in response.headers).encode()
    if not any(name.lower() == "transfer-encoding" for name, _ in response.headers):
        head += f"Content-Length: {len(response.body)}\r\n".encode()
    http = head + b"\r\n" + response.body
    header = (
        "WARC/1.1\r\n"
        f"WARC-Type: {record_type}\r\n"
        f"WARC-Record-ID: {response.record_id}\r\n"
        "WARC-Date: 2024-05-01T12:00:00Z\r\n"
        f"WARC-Target-URI: {response.uri}\r\n"
        "Content-Type: application/http; msgtype=response\r\n"
        f"Content-Length: {len(http) + response.declared_extra}\r\n\r\n"
    ).encode()
    return header + http + b"\r\n\r\n"


def write_warc(path: Path, items: Iterable[Response | bytes]) -> list[Response]:
    """Write each response as one gzip member (raw bytes items as they are, for garbled
    members); return the responses with their record ids."""
    written: list[Response] = []
    with path.open("wb") as stream:
        stream.write(gzip.compress(warc_record(
            Response("", b"software: boilerbench tests\r\n", None, 0,
                     f"<urn:uuid:{uuid.uuid4()}>"), record_type="warcinfo")))
        for item in items:
            if isinstance(item, bytes):
                stream.write(item)
                continue
            response = item.with_id()
            stream.write(gzip.compress(warc_record(response)))
            written.append(response)
    return written


def dataset_responses(html_folder: Path, count: int, step: int = 1) -> list[Response]:
    """`count` HTML responses from a dataset's html/ folder (its pages in sorted order,
    every `step`-th, repeated from the start when there are too few), each with its own
    record id and URI."""
    files = sorted(html_folder.glob("*.html"))[::step]
    return [Response(f"https://pages.example/{i}/{files[i % len(files)].stem}",
                     files[i % len(files)].read_bytes()).with_id() for i in range(count)]
