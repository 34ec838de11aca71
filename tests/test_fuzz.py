"""Fuzzing every registry service over real HTTP: bad input gets a valid reply or a 4xx.

Hypothesis generates and mutates pages (unclosed tags, deep nesting, huge
attributes, mixed encodings as raw bytes, NUL and other control characters,
lone surrogate escapes in JSON, giant single lines, random bytes, random JSON
shapes) and posts them to each service running under uvicorn with its real
worker processes. Every reply must be a contract-valid 200 (ExtractReply) or a
4xx JSON error (ErrorReply): never a 500 or other 5xx, never a hang, never a
dropped connection. The one 5xx the contract has for a page is 504, over the time
limit: some small inputs do take a library that long (Boilerpipe's Java engine
needs seconds for a few thousand nested <a>, Resiliparse for deep <div>s), so a
504 JSON error is accepted, and the service must then serve a normal page again
(its killed worker replaced). The strategies are shared with benchmarks/fuzz.py,
the long run, which counts the 504s per service.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from shared.contract import ErrorReply, ExtractReply
from shared.registry import SERVICES
from shared.settings import ServiceSettings
from tests.helpers import RSS_FEED, RSS_URL
from tests.servers import serve_service

TIME_LIMIT_S = 5.0
# How long a client waits before calling the service hung: the time limit plus the
# time a replacement worker needs to start (the JVM of boilerpipe is the slowest).
CLIENT_TIMEOUT_S = TIME_LIMIT_S + 50.0
EXAMPLES = 12  # per test function and service: 6 functions -> 72 requests per service

SEED_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Harbour bridge reopens</title>
<style>p { color: red }</style><script>var x = "<p>not text</p>";</script></head>
<body><nav><ul><li><a href="/">Home</a></li><li><a href="/news">News</a></li></ul></nav>
<article><h1>Harbour bridge reopens after repairs</h1>
<p>The old harbour bridge opened again to traffic on Monday morning after eight months of
repairs, the city council said. Engineers replaced the corroded steel cables.</p>
<p>Commuters who had been taking the ferry welcomed the news. &quot;It saves me an hour
every day&quot;, said one driver &amp; nurse. Café, naïve, Straße, 東京, Москва.</p>
<table><tr><td>Cost</td><td>€ 12 m</td></tr></table></article>
<footer><p>Copyright 2026 City News. <a href="/privacy">Privacy</a></p></footer>
</body></html>"""

TAGS = (
    "html", "head", "body", "title", "meta", "div", "p", "span", "a", "b", "i", "ul", "ol",
    "li", "table", "tr", "td", "th", "h1", "h2", "br", "hr", "img", "pre", "article", "nav",
    "footer", "header", "main", "section", "script", "style", "noscript", "iframe", "svg",
    "math", "textarea", "select", "option", "form", "template", "frameset", "frame", "xmp",
    "plaintext", "object", "embed", "base", "blink", "x-custom", "rss", "item", "description",
)
# Characters parsers and extractors get wrong: C0/C1 controls, NUL, BOMs, non-characters,
# line/paragraph separators, bidi controls, a combining mark, an astral character.
ODD_CHARS = (
    "\x00\x01\x02\x07\x08\x0b\x0c\x0e\x1b\x1f\x7f\x80\x85\x9f\xa0\xad"
    "\ufeff\ufffe\uffff\ufffd\u2028\u2029\u200b\u200e\u202e\u0301\U0001f600\U0010fffd"
)
ENCODINGS = (
    "utf-8", "utf-16", "utf-16-le", "utf-16-be", "utf-32", "latin-1", "cp1252", "shift_jis",
    "euc-jp", "gb18030", "big5", "koi8-r", "iso-8859-7", "utf-7", "cp437",
)
DECLARED = ("utf-8", "iso-8859-1", "shift_jis", "utf-16", "x-bogus", "ebcdic-cp-us", "utf-32",
            "gbk", "koi8-r", "", "utf-8\x00", "a" * 60)
CONTENT_TYPES = (
    "text/html", "text/html; charset=utf-8", "text/html; charset=shift_jis",
    "application/xhtml+xml", "application/json", "TEXT/HTML", "text/plain", "",
    "multipart/form-data; boundary=x", "application/x-www-form-urlencoded",
)


@dataclass(frozen=True)
class FuzzRequest:
    """One POST /extract: the raw body, its content type and query parameters."""

    kind: str
    body: bytes
    content_type: str
    params: dict[str, str] = field(default_factory=dict)

    def __repr__(self) -> str:  # hypothesis prints this; the body can be megabytes
        return f"FuzzRequest({self.describe()})"

    def describe(self) -> str:
        return (f"{self.kind}: {len(self.body)} bytes, content-type {self.content_type!r}, "
                f"params {self.params!r}, head {self.body[:120]!r}")


# ---- pieces of pages ------------------------------------------------------------------

plain_text = st.text(alphabet=st.characters(codec="utf-8"), max_size=40)
odd_text = st.text(alphabet=st.sampled_from(ODD_CHARS + "ab <>&;\"'=/"), max_size=20)
giant_line = st.builds(
    lambda word, n, spaced: (word + " " if spaced else word) * n,
    st.sampled_from(["word", "x", "долго", "長い", "&amp;", "<b>"]),
    st.integers(1_000, 30_000),
    st.booleans(),
)
text_piece = st.one_of(
    plain_text, odd_text,
    st.sampled_from(["&amp;", "&#0;", "&#xD800;", "&#1114112;", "&nbsp;", "&bogus;", "&#x1F600;",
                     "<!-- c -->", "<!--", "<![CDATA[x]]>", "<?php echo 1 ?>", "<!DOCTYPE x>",
                     "</>", "<>", "< p>", "</p/>", "<p/ >", "<a <b>", "\r\n", "\t"]),
)
attr_value = st.one_of(
    plain_text, odd_text,
    st.builds(lambda c, n: c * n, st.sampled_from(["a", '"', "'", "<", " ", "é", "\x00"]),
              st.integers(5_000, 200_000)),
)
attribute = st.builds(
    lambda name, value, quote: f" {name}={quote}{value}{quote}",
    st.sampled_from(["class", "id", "href", "style", "src", "charset", "http-equiv", "content",
                     "onclick", "x", "data-a", "lang", "dir", "hidden"]),
    attr_value, st.sampled_from(['"', "'", ""]),
)


def _element(children: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    def render(tag: str, attrs: list[str], kids: list[str], close: bool) -> str:
        return f"<{tag}{''.join(attrs)}>{''.join(kids)}" + (f"</{tag}>" if close else "")

    return st.builds(render, st.sampled_from(TAGS), st.lists(attribute, max_size=2),
                     st.lists(children, max_size=4), st.booleans())


def _deep(tag: str, depth: int, inner: str, close: bool) -> str:
    return f"<{tag}>" * depth + inner + (f"</{tag}>" * depth if close else "")


deep_nesting = st.builds(_deep, st.sampled_from(["div", "span", "b", "table", "ul", "a", "p"]),
                         st.integers(100, 5_000), plain_text, st.booleans())
html_page = st.builds(
    lambda prefix, parts: prefix + "".join(parts),
    st.sampled_from(["", "<!DOCTYPE html>", "<?xml version='1.0' encoding='x-bogus'?>",
                     "<html>", "\ufeff", "<!-- x -->", "   \n"]),
    st.lists(st.one_of(st.recursive(text_piece, _element, max_leaves=25), deep_nesting,
                       giant_line), min_size=1, max_size=4),
)


# ---- whole requests -------------------------------------------------------------------

def raw_html_requests() -> st.SearchStrategy[FuzzRequest]:
    """Generated pages as UTF-8 bytes with an HTML content type."""
    return st.builds(
        lambda page, ctype: FuzzRequest("raw_html", page.encode("utf-8", "surrogatepass"), ctype),
        html_page, st.sampled_from(["text/html", "application/xhtml+xml",
                                    "text/html; charset=iso-8859-1"]),
    )


def json_html_requests(options: dict[str, Any] | None = None,
                       url: str | None = None) -> st.SearchStrategy[FuzzRequest]:
    """Generated pages inside a JSON body (control characters arrive as JSON escapes)."""
    def build(page: str, page_url: str | None, article: str) -> FuzzRequest:
        payload: dict[str, Any] = {"html": page + article, "url": page_url}
        if options is not None:
            payload["options"] = options
        return FuzzRequest("json_html", orjson.dumps(payload), "application/json")

    return st.builds(build, html_page,
                     st.one_of(st.none(), st.just(url) if url else st.none(), plain_text,
                               st.sampled_from(["file:///etc/passwd", "http://127.0.0.1:1/",
                                                "javascript:alert(1)", "::", "//"])),
                     # With options (rss), the seed article holds the feed item's text, so
                     # the algorithm gets past matching the item on some pages.
                     st.sampled_from(["", SEED_PAGE]) if options is not None else st.just(""))


def _mutate(data: bytes, ops: list[tuple[int, float, bytes, int]]) -> bytes:
    """Apply byte-level mutations: insert, delete, duplicate, overwrite, truncate."""
    buf = bytearray(data)
    for op, where, payload, length in ops:
        at = int(where * len(buf)) if buf else 0
        if op == 0:
            buf[at:at] = payload
        elif op == 1:
            del buf[at:at + length]
        elif op == 2:
            buf[at:at] = buf[at:at + length] * 3
        elif op == 3:
            buf[at:at + len(payload)] = payload
        else:
            del buf[at:]
    return bytes(buf)


def _encode_mixed(text: str, encodings: list[str], declared: str | None, bom: bytes) -> bytes:
    """Cut the page into as many pieces as encodings and encode each piece differently."""
    if declared is not None:
        text = f'<meta charset="{declared}">' + text
    size = max(len(text) // len(encodings), 1)
    pieces = [text[i * size:(i + 1) * size if i < len(encodings) - 1 else None]
              for i in range(len(encodings))]
    return bom + b"".join(p.encode(e, errors="replace") for p, e in zip(pieces, encodings,
                                                                          strict=True))


mutation = st.tuples(
    st.integers(0, 4), st.floats(0, 1), st.one_of(st.binary(max_size=30),
                                                  st.sampled_from([b"\x00", b"\xff\xfe", b"<",
                                                                   b"\xed\xa0\x80", b"\xc3"])),
    st.integers(0, 400),
)


def mutated_requests() -> st.SearchStrategy[FuzzRequest]:
    """The seed page (or a generated one) in mixed encodings, then mutated byte-wise."""
    return st.builds(
        lambda text, encodings, declared, bom, ops, ctype: FuzzRequest(
            "mutated", _mutate(_encode_mixed(text, encodings, declared, bom), ops), ctype),
        st.one_of(st.just(SEED_PAGE), html_page),
        st.lists(st.sampled_from(ENCODINGS), min_size=1, max_size=3),
        st.one_of(st.none(), st.sampled_from(DECLARED)),
        st.sampled_from([b"", b"\xef\xbb\xbf", b"\xff\xfe", b"\xfe\xff", b"\xff\xfe\x00\x00"]),
        st.lists(mutation, max_size=5),
        st.sampled_from(["text/html", "text/html; charset=utf-8"]),
    )


_ESCAPES = st.sampled_from([
    "\\ud800", "\\udfff", "\\ud83d\\ude00", "\\ude00\\ud83d", "\\u0000", "\\u001f", "\\u007f",
    "\\ufffe", "\\uffff", "\\u2028", "\\\\", "\\\"", "\\/", "\\b\\f\\n\\r\\t", "\\x41", "\\u12",
    "\\ud800\\u0041", "<p>", "</p>", "é", "\\u00e9",
])


def escaped_json_requests() -> st.SearchStrategy[FuzzRequest]:
    """Raw JSON text with lone surrogates, control escapes and broken escapes in strings."""
    def build(parts: list[str], where: str, text: str) -> FuzzRequest:
        junk = "".join(parts)
        html = f"<html><body><p>{text}{junk}</p></body></html>"
        if where == "html":
            body = f'{{"html": "{html}"}}'
        elif where == "url":
            body = f'{{"html": "<p>x</p>", "url": "{junk}"}}'
        elif where == "key":
            body = f'{{"html": "<p>x</p>", "options": {{"{junk}": 1}}}}'
        else:
            body = f'{{"html": "<p>x</p>", "options": {{"language": "{junk}"}}}}'
        return FuzzRequest("escaped_json", body.encode("utf-8", "surrogatepass"),
                           "application/json")

    safe_text = st.text(alphabet=st.characters(codec="ascii", exclude_characters='"\\'),
                        max_size=30)
    return st.builds(build, st.lists(_ESCAPES, min_size=1, max_size=6),
                     st.sampled_from(["html", "url", "key", "option"]), safe_text)


def random_bytes_requests() -> st.SearchStrategy[FuzzRequest]:
    """Random bytes (sometimes behind a tag) with an HTML content type and odd query strings."""
    return st.builds(
        lambda prefix, data, ctype, params: FuzzRequest("random_bytes", prefix + data, ctype,
                                                        params),
        st.sampled_from([b"", b"<p>", b"<html>", b"\xef\xbb\xbf<p>", b"\xff\xfe<\x00p\x00>\x00"]),
        st.one_of(st.binary(max_size=3000),
                  st.builds(lambda n, seed: random.Random(seed).randbytes(n),
                            st.integers(0, 200_000), st.integers(0, 2**32))),
        st.sampled_from(CONTENT_TYPES),
        st.dictionaries(st.sampled_from(["url", "language", "extractor", "threshold", "feed",
                                         "feed_url", "x", ""]), plain_text, max_size=3),
    )


json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-(2**63), 2**64 - 1),
              st.floats(allow_nan=False), plain_text, odd_text),
    lambda children: st.one_of(st.lists(children, max_size=4),
                               st.dictionaries(st.one_of(plain_text, st.sampled_from(
                                   ["html", "url", "options", "language", "feed"])), children,
                                   max_size=4)),
    max_leaves=20,
)


def random_json_requests() -> st.SearchStrategy[FuzzRequest]:
    """Random JSON shapes, alone or as the values of the contract's keys."""
    def build(top: Any, html: Any, url: Any, options: Any, which: int) -> FuzzRequest:
        payload: Any = [top, {"html": html}, {"html": "<p>x</p>", "url": url},
                        {"html": "<p>x</p>", "options": options},
                        {"html": html, "url": url, "options": options, "extra": top}][which]
        return FuzzRequest("random_json", orjson.dumps(payload,
                                                       option=orjson.OPT_NON_STR_KEYS),
                           "application/json")

    return st.builds(build, json_values, json_values, json_values, json_values,
                     st.integers(0, 4))


def all_requests(name: str) -> st.SearchStrategy[FuzzRequest]:
    """Every kind of fuzz request for service `name` (for the long run)."""
    options, url = service_options(name)
    return st.one_of(raw_html_requests(), json_html_requests(options, url), mutated_requests(),
                     escaped_json_requests(), random_bytes_requests(), random_json_requests())


def service_options(name: str) -> tuple[dict[str, Any] | None, str | None]:
    """Options and URL that let a page reach the algorithm (rss needs a feed)."""
    if name == "rss":
        return {"feed": RSS_FEED}, RSS_URL
    return None, None


# ---- checking a reply -----------------------------------------------------------------

class FuzzFindingError(AssertionError):
    """A reply outside the contract: a 5xx, a hang, a non-JSON or invalid body."""


def post(client: httpx.Client, url: str, request: FuzzRequest) -> httpx.Response:
    headers = {"content-type": request.content_type} if request.content_type else {}
    try:
        return client.post(f"{url}/extract", content=request.body, headers=headers,
                           params=request.params, timeout=CLIENT_TIMEOUT_S)
    except httpx.TimeoutException:
        raise FuzzFindingError(f"hang: no reply within {CLIENT_TIMEOUT_S:g} s") from None
    except httpx.TransportError as exc:
        raise FuzzFindingError(f"transport error: {type(exc).__name__}: {exc}") from None


def check_reply(name: str, reply: httpx.Response, allow_timeout: bool = False) -> None:
    """A contract-valid 200 for `name`, or a 4xx JSON error (or a 504 JSON error if
    `allow_timeout`); raise FuzzFindingError otherwise."""
    status = reply.status_code
    if not reply.headers.get("content-type", "").startswith("application/json"):
        raise FuzzFindingError(f"HTTP {status} without a JSON body: {reply.text[:300]!r}")
    try:
        if status == 200:
            body = ExtractReply.model_validate(reply.json())
            if body.algorithm != name:
                raise FuzzFindingError(f"the reply names algorithm {body.algorithm!r}")
            return
        error = ErrorReply.model_validate(reply.json())
    except ValueError as exc:  # JSON or pydantic validation
        raise FuzzFindingError(f"HTTP {status} with an invalid body: {exc}") from None
    if not (400 <= status < 500 or (allow_timeout and status == 504)):
        raise FuzzFindingError(f"HTTP {status}: {error.error}: {error.detail[:500]}")


def fuzz_settings(examples: int) -> settings:
    """Fixed examples for CI; no shrinking, since every step is an HTTP request and a
    finding's message already names its input."""
    return settings(max_examples=examples, deadline=None, derandomize=True, database=None,
                    phases=[Phase.explicit, Phase.generate],
                    suppress_health_check=list(HealthCheck), print_blob=True)


# ---- the tests ------------------------------------------------------------------------

@pytest.fixture(scope="module", params=sorted(SERVICES))
def service(request: pytest.FixtureRequest) -> Iterator[tuple[str, str, httpx.Client]]:
    """(name, base URL, client) of a real running service."""
    name: str = request.param
    with serve_service(name, ServiceSettings(time_limit_s=TIME_LIMIT_S)) as (url, client):
        yield name, url, client
        health = client.get(f"{url}/health", timeout=CLIENT_TIMEOUT_S)
        assert health.status_code == 200, f"{name} is unhealthy after fuzzing: {health.text}"


def serves_a_normal_page(client: httpx.Client, url: str, name: str,
                         wait_s: float = CLIENT_TIMEOUT_S) -> bool:
    """After a 504: a normal page is served again once the killed worker is replaced."""
    options, page_url = service_options(name)
    payload = {"html": SEED_PAGE, "url": page_url, "options": options or {}}
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        reply = client.post(f"{url}/extract", json=payload, timeout=wait_s)
        if reply.status_code != 503:
            return reply.status_code in (200, 422)  # rss: the seed page is not its item
        time.sleep(0.1)
    return False


def _run(service: tuple[str, str, httpx.Client], request: FuzzRequest) -> None:
    name, url, client = service
    try:
        reply = post(client, url, request)
        check_reply(name, reply, allow_timeout=True)
        if reply.status_code == 504 and not serves_a_normal_page(client, url, name):
            raise FuzzFindingError("no normal page served after a 504")
    except FuzzFindingError as exc:
        raise FuzzFindingError(f"{name}: {exc}\ninput: {request.describe()}") from None


@fuzz_settings(EXAMPLES)
@given(data=st.data())
def test_generated_html_raw(service: tuple[str, str, httpx.Client], data: st.DataObject) -> None:
    _run(service, data.draw(raw_html_requests()))


@fuzz_settings(EXAMPLES)
@given(data=st.data())
def test_generated_html_json(service: tuple[str, str, httpx.Client],
                             data: st.DataObject) -> None:
    _run(service, data.draw(json_html_requests(*service_options(service[0]))))


@fuzz_settings(EXAMPLES)
@given(data=st.data())
def test_mutated_pages_in_mixed_encodings(service: tuple[str, str, httpx.Client],
                                          data: st.DataObject) -> None:
    _run(service, data.draw(mutated_requests()))


@fuzz_settings(EXAMPLES)
@given(data=st.data())
def test_surrogate_and_control_escapes_in_json(service: tuple[str, str, httpx.Client],
                                               data: st.DataObject) -> None:
    _run(service, data.draw(escaped_json_requests()))


@fuzz_settings(EXAMPLES)
@given(data=st.data())
def test_random_bytes_as_html(service: tuple[str, str, httpx.Client],
                              data: st.DataObject) -> None:
    _run(service, data.draw(random_bytes_requests()))


@fuzz_settings(EXAMPLES)
@given(data=st.data())
def test_random_json_shapes(service: tuple[str, str, httpx.Client], data: st.DataObject) -> None:
    _run(service, data.draw(random_json_requests()))


def test_check_reply_flags_server_errors() -> None:
    """The checker itself: a 500, a non-JSON body and a foreign algorithm are findings."""
    request = httpx.Request("POST", "http://test/extract")
    bad = [
        httpx.Response(500, json={"error": "internal", "detail": "boom"}, request=request),
        httpx.Response(200, text="<html>ok</html>", request=request),
        httpx.Response(200, json={"algorithm": "other", "version": "1", "text": "",
                                  "blocks": [], "elapsed_ms": 1.0}, request=request),
        httpx.Response(422, json={"detail": "no error key"}, request=request),
    ]
    for reply in bad:
        with pytest.raises(FuzzFindingError):
            check_reply("justext", reply)
    check_reply("justext", httpx.Response(413, json={"error": "too_large", "detail": "x"},
                                          request=request))
