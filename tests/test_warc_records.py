"""`boilerbench extract --warc` on crawls as crawlers write them: WARC 1.0 headers,
every HTTP status, interim responses, non-HTTP responses, Content-Lengths that do not
fit their records, pages a service will not take, and what the report tells of them."""

from __future__ import annotations

import functools
import gzip
import http.server
import shutil
import subprocess
import uuid
from pathlib import Path

import orjson
import pytest
from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.warc import OddRecord, OtherRecord, WarcPage, read_warc
from tests.warc_files import Response, warc_record

SERVICE = "bte"
PAGE = b"<html><head><title>t</title></head><body><p>" + b"words of the page " * 40 + \
    b"</p></body></html>"


def record(block: bytes, uri: str | None = "https://a.example/", *, version: str = "1.1",
           record_type: str = "response", content_type: str = "application/http; msgtype=response",
           declared: int | None = None, record_id: str | None = None,
           truncated: str | None = None) -> bytes:
    """One WARC record around `block` as it is (`declared`: another Content-Length;
    `truncated`: the WARC-Truncated reason of a block its crawler cut)."""
    head = (f"WARC/{version}\r\nWARC-Type: {record_type}\r\n"
            f"WARC-Record-ID: {record_id or f'<urn:uuid:{uuid.uuid4()}>'}\r\n"
            "WARC-Date: 2024-05-01T12:00:00Z\r\n"
            + (f"WARC-Target-URI: {uri}\r\n" if uri is not None else "")
            + (f"WARC-Truncated: {truncated}\r\n" if truncated else "")
            + f"Content-Type: {content_type}\r\n"
            f"Content-Length: {len(block) if declared is None else declared}\r\n\r\n")
    return head.encode() + block + b"\r\n\r\n"


def message(body: bytes = PAGE, status: str = "200 OK", content_type: str | None = "text/html",
            eol: bytes = b"\r\n", extra: str = "") -> bytes:
    """An HTTP response: status line, head (lines ending in `eol`), body."""
    head = f"HTTP/1.1 {status}{eol.decode()}"
    if content_type:
        head += f"Content-Type: {content_type}{eol.decode()}"
    head += extra.replace("\n", eol.decode())
    head += f"Content-Length: {len(body)}{eol.decode()}{eol.decode()}"
    return head.encode() + body


def read(tmp_path: Path, *records: bytes, gzipped: bool = False
         ) -> list[WarcPage | OddRecord | OtherRecord]:
    path = tmp_path / ("crawl.warc.gz" if gzipped else "crawl.warc")
    path.write_bytes(b"".join(gzip.compress(r) for r in records) if gzipped
                     else b"".join(records))
    return list(read_warc(path))


def pages(items: list[WarcPage | OddRecord | OtherRecord]) -> list[WarcPage]:
    return [i for i in items if isinstance(i, WarcPage)]


def odd(items: list[WarcPage | OddRecord | OtherRecord]) -> list[OddRecord]:
    return [i for i in items if isinstance(i, OddRecord)]


def report_counts(output: str) -> dict[str, str]:
    return {line.split("│")[1].strip(): line.split("│")[2].strip()
            for line in output.splitlines() if line.count("│") >= 3 and
            line.split("│")[1].strip()}


def test_a_warc_1_0_target_uri_in_angle_brackets_is_the_uri(tmp_path: Path) -> None:
    """WARC 1.0 (ISO 28500:2009) put a URI in angle brackets, as wget still does;
    WARC 1.1 (ISO 28500:2017) dropped them. The row's uri and the URL the extractor gets are
    the URI itself. A URI with raw bytes that are not UTF-8 keeps them, percent-encoded
    (RFC 3986, section 2.1), instead of losing them to replacement characters."""
    items = read(tmp_path, record(message(), "<https://a.example/warc10>", version="1.0"),
                 record(message(), "https://a.example/caf@").replace(b"caf@", b"caf\xe9"),
                 record(message(), "https://a.example/caf\u00e9"))
    assert [p.uri for p in pages(items)] == [
        "https://a.example/warc10", "https://a.example/caf%E9", "https://a.example/caf\u00e9"]


def test_only_a_200_or_203_response_is_a_page_and_the_rest_are_counted_as_not_ok(
        tmp_path: Path) -> None:
    """A redirect's, an error page's, a partial or an empty response's body is not the
    page at its URI (RFC 9110, section 15): no row, one count each, with its status."""
    statuses = ["301 Moved Permanently", "302 Found", "404 Not Found",
                "500 Internal Server Error", "206 Partial Content", "204 No Content",
                "304 Not Modified", "203 Non-Authoritative Information", "200 OK"]
    items = read(tmp_path, *(record(message(status=s, extra="Location: /next\n"
                                         if s.startswith("30") else ""),
                                    f"https://a.example/{s[:3]}") for s in statuses))
    assert [p.uri for p in pages(items)] == ["https://a.example/203", "https://a.example/200"]
    assert [(o.kind, o.detail) for o in odd(items)] == [
        ("not_ok", "HTTP 301 Moved Permanently, to /next"), ("not_ok", "HTTP 302 Found, to /next"),
        ("not_ok", "HTTP 404 Not Found"), ("not_ok", "HTTP 500 Internal Server Error"),
        ("not_ok", "HTTP 206 Partial Content"), ("not_ok", "HTTP 204 No Content"),
        ("not_ok", "HTTP 304 Not Modified")]


def test_an_interim_response_is_passed_over_for_the_final_one(tmp_path: Path) -> None:
    """A client reads 1xx responses before the final one (RFC 9110, section 15.2); a
    crawler that archives the stream keeps them in the record."""
    (page,) = pages(read(tmp_path, record(b"HTTP/1.1 100 Continue\r\n\r\n"
                                          + message(content_type="text/html; charset=utf-8"))))
    assert page.body == PAGE
    assert page.content_type == "text/html; charset=utf-8"


def test_an_http_head_with_bare_line_feeds_is_read(tmp_path: Path) -> None:
    """RFC 9112, section 2.2: a recipient may take a bare LF for a line end; older
    crawlers and ARC conversions wrote such heads."""
    (page,) = pages(read(tmp_path, record(message(content_type="text/html; charset=utf-8",
                                               eol=b"\n"))))
    assert page.body == PAGE
    assert page.content_type == "text/html; charset=utf-8"


def test_a_response_that_is_not_http_is_not_a_page_nor_malformed(tmp_path: Path) -> None:
    """Heritrix archives its DNS lookups as response records of type text/dns (WARC 1.1,
    section 6.3: the block's Content-Type says what it is)."""
    items = read(tmp_path, record(b"20240501120000\na.example.\t300\tIN\tA\t10.0.0.1\n",
                                  "dns:a.example", content_type="text/dns"),
                 record(message()))
    assert len(pages(items)) == 1
    assert [(o.kind, o.detail) for o in odd(items)] == [
        ("not_html", "a text/dns record, not an HTTP response")]


@pytest.mark.parametrize("gzipped", [False, True], ids=["uncompressed", "gzip per record"])
def test_a_record_whose_content_length_is_wrong_costs_that_record_only(
        tmp_path: Path, gzipped: bool) -> None:
    """A Content-Length (ISO 28500, section 5.3) too short leaves the rest of the record
    where the next should start, one too long runs into the next record: either way
    that record is reported as malformed (its row would hold a cut or a spliced page),
    and every record after it is read, in an uncompressed WARC too."""
    good = [record(message(), f"https://a.example/{i}") for i in range(4)]
    short_block = message()
    items = read(tmp_path, good[0],
                 record(short_block, "https://a.example/short", declared=len(short_block) - 300,
                        record_id="<urn:short>"),
                 good[1],
                 record(message(), "https://a.example/long", declared=len(message()) + 120,
                        record_id="<urn:long>"),
                 good[2], good[3], gzipped=gzipped)
    assert [p.uri for p in pages(items)] == [f"https://a.example/{i}" for i in range(4)]
    assert [(o.kind, o.record_id) for o in odd(items)] == [
        ("malformed", "<urn:short>"), ("malformed" if not gzipped else "truncated", "<urn:long>")]


def test_a_content_length_past_the_end_of_the_file_in_the_middle_costs_that_record_only(
        tmp_path: Path) -> None:
    """A record that declares more bytes than the rest of an uncompressed file holds is
    not the file's last record when another record follows: it is malformed, and that
    one is read; only a record the file really ends inside is truncated."""
    items = read(tmp_path, record(message(), "https://a.example/0"),
                 record(message(), "https://a.example/huge", declared=10**9, record_id="<urn:h>"),
                 record(message(), "https://a.example/1"),
                 record(message(), "https://a.example/cut", record_id="<urn:cut>")[:-500])
    assert [p.uri for p in pages(items)] == ["https://a.example/0", "https://a.example/1"]
    assert [(o.kind, o.record_id) for o in odd(items)] == [
        ("malformed", "<urn:h>"), ("truncated", "<urn:cut>")]


# A page that gzip does not shrink to a few bytes, so that half its gzip body holds
# words: every word differs from the last.
LONG_PAGE = b"<html><head><title>t</title></head><body><p>" + b" ".join(
    b"word%d" % (n * 7919 % 100_003) for n in range(4000)) + b"</p></body></html>"


def chunked(body: bytes, size: int = 1000) -> bytes:
    """`body` in the chunked transfer coding (RFC 9112, section 7.1), chunks of `size`."""
    return b"".join(b"%x\r\n%s\r\n" % (len(body[i:i + size]), body[i:i + size])
                    for i in range(0, len(body), size)) + b"0\r\n\r\n"


def coded_response(body: bytes, *codings: str) -> bytes:
    """An HTTP response whose body is already in `codings` ("chunked", "gzip")."""
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n"
    if "gzip" in codings:
        head += b"Content-Encoding: gzip\r\n"
    if "chunked" in codings:
        head += b"Transfer-Encoding: chunked\r\n"
    return head + b"\r\n" + body


_GZIPPED = gzip.compress(LONG_PAGE)


@pytest.mark.parametrize(("response", "truncated", "reason"), [
    (coded_response(_GZIPPED[:len(_GZIPPED) // 2], "gzip"), "length", "WARC-Truncated: length"),
    (coded_response(_GZIPPED[:len(_GZIPPED) // 2], "gzip"), None, "the gzip body ends early"),
    (coded_response(chunked(LONG_PAGE)[:len(LONG_PAGE) // 2], "chunked"), "length",
     "WARC-Truncated: length"),
    (coded_response(chunked(LONG_PAGE)[:5010], "chunked"), None,
     "the chunked body ends early"),  # inside the size line of the sixth chunk
    (coded_response(chunked(_GZIPPED)[:len(_GZIPPED) // 2], "chunked", "gzip"), "time",
     "WARC-Truncated: time"),
    (message(LONG_PAGE[:len(LONG_PAGE) // 2]), "length", "WARC-Truncated: length"),
], ids=["gzip", "gzip unsaid", "chunked", "chunked in a size", "chunked gzip", "plain"])
def test_a_page_cut_short_is_the_page_it_holds(
        tmp_path: Path, response: bytes, truncated: str | None, reason: str) -> None:
    """A crawler that stops a download at a size or time limit says so in WARC-Truncated
    (ISO 28500, section 5.13), and archives the bytes that came, coded as they came; a
    lost connection leaves a coded body that ends early. A browser shows what arrived:
    so is the page, the part of it that decodes, and it says why it is cut."""
    (page,) = pages(read(tmp_path, record(response, truncated=truncated)))
    assert len(page.body) > 1000
    assert LONG_PAGE.startswith(page.body)
    assert page.truncated == reason


def test_a_response_whose_http_head_is_cut_is_malformed(tmp_path: Path) -> None:
    """Without the end of its head, the response has no body: no page is there."""
    items = read(tmp_path, record(message()[:30], truncated="length"), record(message()))
    assert len(pages(items)) == 1
    assert [(o.kind, o.detail) for o in odd(items)] == [
        ("malformed", "the response holds no HTTP message")]


def test_a_page_cut_short_gets_its_row_and_the_report_counts_it(tmp_path: Path) -> None:
    path = tmp_path / "crawl.warc.gz"
    path.write_bytes(b"".join(gzip.compress(r) for r in (
        record(coded_response(_GZIPPED[:len(_GZIPPED) // 2], "gzip"), "https://a.example/cut",
               truncated="length"),
        record(message(LONG_PAGE), "https://a.example/whole"))))
    out = tmp_path / "rows.jsonl"
    done = CliRunner().invoke(app, ["extract", "--warc", str(path), "--service", SERVICE,
                                    "--out", str(out), "--workers", "1"], terminal_width=200)
    assert done.exit_code == 0, done.output
    rows = {r["uri"]: r for r in map(orjson.loads, out.read_bytes().splitlines())}
    cut, whole = rows["https://a.example/cut"], rows["https://a.example/whole"]
    assert cut["error"] is None
    assert 1000 < len(cut["text"]) < len(whole["text"])
    assert whole["text"].startswith(cut["text"][:1000])
    counts = report_counts(done.output)
    assert (counts["HTML pages"], counts["pages cut short"], counts["malformed"]) == \
        ("2", "1", "0")
    examples = "".join(line.split("│")[3].strip() for line in done.output.splitlines()
                       if line.count("│") >= 4)  # folded lines joined, their spaces lost
    assert "https://a.example/cut:WARC-Truncated:length" in examples.replace(" ", "")


def test_bytes_between_records_are_reported_and_reading_goes_on(tmp_path: Path) -> None:
    items = read(tmp_path, b"garbage before the first record\r\n",
                 record(message(), "https://a.example/0"),
                 b"\r\nmore garbage\r\n" * 10,
                 record(message(), "https://a.example/1"))
    assert [p.uri for p in pages(items)] == ["https://a.example/0", "https://a.example/1"]
    assert [o.kind for o in odd(items)] == ["malformed", "malformed"]


def test_the_report_names_the_other_record_types_and_shows_examples_whole(
        tmp_path: Path) -> None:
    """Revisit records hold no body (WARC 1.1, section 6.7): they get no row, and the
    report says how many there were, beside requests and the like; an example's URI is
    shown whole, not cut to the table's width."""
    uri = "https://a.example/a/rather/long/path/to/an/image/that/does/not/fit/image.png"
    path = tmp_path / "crawl.warc.gz"
    path.write_bytes(b"".join(gzip.compress(r) for r in (
        record(b"software: test\r\n", None, record_type="warcinfo",
               content_type="application/warc-fields"),
        record(b"GET / HTTP/1.1\r\n\r\n", record_type="request",
               content_type="application/http; msgtype=request"),
        record(message(), "https://a.example/"),
        record(message(b"", extra=""), "https://a.example/again", record_type="revisit"),
        record(message(b"\x89PNG\r\n", content_type="image/png"), uri))))
    done = CliRunner().invoke(app, ["extract", "--warc", str(path), "--service", SERVICE,
                                    "--out", str(tmp_path / "rows.jsonl"), "--workers", "1"],
                              terminal_width=100)
    assert done.exit_code == 0, done.output
    assert "revisit 1" in done.output
    assert "request 1" in done.output
    assert uri in "".join(line.split("│")[3].strip() for line in done.output.splitlines()
                          if line.count("│") >= 4)


def test_in_process_failures_have_the_error_codes_a_service_answers() -> None:
    """A row's error is `code: detail` with the contract's code, whether the page ran
    in-process or through a service (which answers a timeout with `timeout`)."""
    import asyncio

    from orchestrator.warc_job import WarcJob, _pool_extract
    from shared.workers import WorkerPool

    async def run() -> dict[str, object]:
        pool = WorkerPool("tests.misbehaving_extractor", 1)
        await pool.start()
        try:
            job = WarcJob([], "misbehaving", Path("rows.jsonl"), time_limit_s=0.5)
            page = WarcPage("<urn:x>", None, None, b"<p>hang</p>")
            return await _pool_extract(job, pool)(page)
        finally:
            await pool.close()

    error = str(asyncio.run(run())["error"])
    assert error.startswith("timeout: "), error


def test_a_page_past_the_services_body_limit_gets_an_error_row_and_the_job_goes_on(
        tmp_path: Path) -> None:
    """A service refuses a body past its max_body_bytes and closes the connection before
    the client has sent it all, so the client sees the connection go, not the 413. The
    service still answers: that page gets an error row, the job is not stopped (a
    re-run would stop at the same page again), and the other pages get their text."""
    from tests.servers import serve_process

    big = b"<html><body>" + b"<p>a long page of many words</p>\n" * 400_000 + b"</body></html>"
    path = tmp_path / "crawl.warc.gz"
    path.write_bytes(b"".join(gzip.compress(warc_record(r)) for r in (
        Response("https://a.example/0", PAGE, record_id="<urn:0>"),
        Response("https://a.example/big", big, record_id="<urn:big>"),
        Response("https://a.example/1", PAGE, record_id="<urn:1>"))))
    out = tmp_path / "rows.jsonl"
    with serve_process(f"services.{SERVICE}.app:app",
                       {"BOILERBENCH_MAX_BODY_BYTES": "200000"}) as (url, _):
        done = CliRunner().invoke(app, ["extract", "--warc", str(path), "--service", SERVICE,
                                        "--url", url, "--out", str(out), "--workers", "1"])
    assert done.exit_code == 0, done.output
    rows = {r["record_id"]: r for r in map(orjson.loads, out.read_bytes().splitlines())}
    assert sorted(rows) == ["<urn:0>", "<urn:1>", "<urn:big>"]
    assert rows["<urn:0>"]["error"] is None
    assert rows["<urn:1>"]["error"] is None
    assert str(rows["<urn:big>"]["error"]).startswith("too_large: "), rows["<urn:big>"]


# --- a crawl by wget ---------------------------------------------------------------


class _Site(http.server.BaseHTTPRequestHandler):
    """A site answering as servers do: pages (one chunked, one gzipped), a redirect, a
    missing page, an image."""

    protocol_version = "HTTP/1.1"

    def __init__(self, *args: object, pages: dict[str, bytes], **kwargs: object) -> None:
        self.pages = pages
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        body = self.pages.get(self.path)
        if self.path == "/moved":
            self._send(301, b"<html><body>Moved <a href='/p0'>here</a></body></html>",
                       "text/html", ("Location", "/p0"))
        elif body is None:
            self._send(404, b"<html><body><h1>Not Found</h1></body></html>", "text/html")
        elif self.path == "/image.png":
            self._send(200, body, "image/png")
        elif self.path == "/chunked":
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for start in range(0, len(body), 5000):
                part = body[start:start + 5000]
                self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
            self.wfile.write(b"0\r\n\r\n")
        elif self.path == "/gzipped":
            self._send(200, gzip.compress(body, mtime=0), "text/html; charset=utf-8",
                       ("Content-Encoding", "gzip"))
        else:
            self._send(200, body, "text/html; charset=utf-8")

    def _send(self, status: int, body: bytes, content_type: str,
              *headers: tuple[str, str]) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in headers:
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)


def test_a_wget_crawl_gives_one_row_per_page_and_tells_what_else_it_held(
        scrapinghub: Path, tmp_path: Path) -> None:
    """wget archives what the server sent (chunked, gzip), in WARC 1.0 with bracketed
    URIs, beside requests, a redirect, a 404, an image, and, crawled again with
    --warc-dedup, revisit records: rows for the pages reached by a 200, with their
    URIs, and the text each gives on its own."""
    from tests.servers import serve_http

    wget = shutil.which("wget")
    if wget is None:
        pytest.skip("wget is not installed: it writes the crawl")
    html = sorted((scrapinghub / "html").glob("*.html"))[:3]
    site = {"/p0": html[0].read_bytes(), "/chunked": html[1].read_bytes(),
            "/gzipped": html[2].read_bytes(), "/image.png": b"\x89PNG\r\n\x1a\n" + bytes(64)}
    links = "".join(f"<a href='{p}'>{p}</a>" for p in [*site, "/moved", "/gone"])
    site["/"] = f"<html><body>{links}</body></html>".encode()
    with serve_http(functools.partial(_Site, pages=site)) as url:
        for name, extra in (("first", ["--warc-cdx"]), ("again", ["--warc-dedup=first.cdx"])):
            subprocess.run([wget, "-q", "-r", "-l", "1", "-e", "robots=off", "--no-directories",
                            "--delete-after", f"--warc-file={name}", *extra, f"{url}/"],
                           cwd=tmp_path, check=False, timeout=60)
    out = tmp_path / "rows.jsonl"
    done = CliRunner().invoke(app, ["extract", "--warc", str(tmp_path / "first.warc.gz"),
                                    str(tmp_path / "again.warc.gz"), "--service", SERVICE,
                                    "--out", str(out), "--workers", "1"], terminal_width=200)
    assert done.exit_code == 0, done.output
    rows = [orjson.loads(line) for line in out.read_bytes().splitlines()]
    # The second crawl archives what did not change as revisit records, which hold no
    # body: pages once each, but for /p0, fetched again where /moved leads.
    assert sorted(r["uri"] for r in rows if r["uri"] != f"{url}/p0") == \
        [f"{url}{p}" for p in ("/", "/chunked", "/gzipped")]
    assert all(r["error"] is None for r in rows)
    runner = CliRunner()
    for path, file in (("/p0", html[0]), ("/chunked", html[1]), ("/gzipped", html[2])):
        single = runner.invoke(app, ["extract", str(file), "--service", SERVICE, "--in-process",
                                     "--page-url", f"{url}{path}", "--json"])
        text = orjson.loads(single.stdout)["text"]
        assert {r["text"] for r in rows if r["uri"] == f"{url}{path}"} == {text}
    counts = report_counts(done.output)
    assert counts["not ok"] == "2"  # /moved and /gone (revisits the second time)
    assert counts["not html"] == "1"  # the image
    revisits = gzip.decompress((tmp_path / "again.warc.gz").read_bytes()).count(
        b"WARC-Type: revisit\r\n")
    assert revisits > 0
    assert f"revisit {revisits}" in done.output
