"""Pathological pages against every registry service: a valid reply or a clear error in time.

The corpus is built here (nothing copied from elsewhere): 10 MB of text just under
the size limit (and one byte over it, which must get 413), 200,000 nested
elements, 100,000 `<br>`, a 1 MB single word, a page of nothing but scripts, a
page in UTF-16 and one in Shift-JIS (raw bodies with text/html) and an XML
declaration with a bogus encoding. Each page is posted to every service running
under uvicorn with a short time limit; the reply must come within the limit plus
slack as a contract-valid 200, a 4xx JSON error or a 504, and the service must be
healthy after (GET /health 200 and a normal page served). The pages that carry
text in a legacy encoding must also come back decoded. benchmarks/pathological.py
prints the same corpus as a table (page, service, status, seconds).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest

from shared.contract import ErrorReply, ExtractReply
from shared.html import parse_html, text_blocks
from shared.registry import SERVICES
from shared.settings import ServiceSettings
from tests.helpers import RSS_FEED, RSS_URL
from tests.servers import serve_service

TIME_LIMIT_S = 3.0
# Transfer of 10 MB, decoding, pickling to the worker and back: slack on top of the limit.
SLACK_S = 12.0
LIMIT_BYTES = 10 * 1024 * 1024

NORMAL_PAGE = (
    "<html><head><title>Harbour bridge reopens</title></head><body>"
    "<nav><a href='/'>Home</a> <a href='/news'>News</a></nav><article>"
    "<h1>Harbour bridge reopens after repairs</h1>"
    "<p>The old harbour bridge opened again to traffic on Monday morning after eight months "
    "of repairs, the city council said. Engineers replaced the corroded steel cables that had "
    "worried inspectors since the winter storms of the previous year.</p>"
    "<p>Commuters who had been taking the ferry or the long road around the bay welcomed the "
    "news, and the council expects traffic to return to normal within a week.</p>"
    "</article><footer>Copyright 2026 City News</footer></body></html>"
)
JAPANESE = (
    "東京の古い港湾橋は八か月の修理を終えて月曜日の朝に再び開通したと市議会が発表した。"
    "技術者たちは前年の冬の嵐以来検査官を心配させていた腐食した鋼鉄のケーブルを交換した。"
)
GERMAN = (
    "Die alte Hafenbrücke wurde am Montagmorgen nach acht Monaten Reparatur wieder für den "
    "Verkehr geöffnet, teilte der Stadtrat mit. Ingenieure ersetzten die korrodierten "
    "Stahlseile, die den Prüfern seit den Winterstürmen Sorgen gemacht hatten. Größe, Maß."
)


@dataclass(frozen=True)
class PathologicalPage:
    """One pathological request body; `expect_words`: words its blocks must contain."""

    name: str
    body: bytes
    content_type: str = "text/html"
    expect_words: tuple[str, ...] = ()


def _article(paragraph: str, repeat: int, charset: str | None = None) -> str:
    meta = f'<meta charset="{charset}">' if charset else ""
    paragraphs = "".join(f"<p>{paragraph}</p>" for _ in range(repeat))
    return (f"<html><head>{meta}<title>港湾橋</title></head><body><div id='nav'>"
            f"<a href='/'>Home</a></div><article><h1>Harbour bridge</h1>{paragraphs}"
            "</article></body></html>")


def text_page(size: int) -> bytes:
    """An HTML page of exactly `size` bytes, nearly all of it paragraph text."""
    head = b"<html><head><title>Long</title></head><body><article>"
    tail = b"</article></body></html>"
    sentence = b"<p>The harbour bridge opened again after eight months of repairs.</p>\n"
    filler = sentence * ((size - len(head) - len(tail)) // len(sentence) + 1)
    body = head + filler[: size - len(head) - len(tail)] + tail
    assert len(body) == size
    return body


def build_corpus() -> list[PathologicalPage]:
    """The pathological pages, built fresh (about 13 MB in memory)."""
    depth = 200_000
    return [
        PathologicalPage("text_10mb", text_page(LIMIT_BYTES - 1024)),
        PathologicalPage("nested_200k", b"<html><body>" + b"<div>" * depth + b"deep text"
             + b"</div>" * depth + b"</body></html>"),
        PathologicalPage("br_100k", b"<html><body><p>" + b"line of text<br>" * 100_000
             + b"</p></body></html>"),
        PathologicalPage("word_1mb", b"<html><body><p>" + b"a" * 1_000_000 + b"</p></body></html>"),
        PathologicalPage("all_scripts", b"<html><head>"
             + b"<script>var s = '<p>not shown</p>'; for (;;) {}</script>\n" * 20_000
             + b"</head><body>" + b"<script>document.write('x')</script>" * 20_000
             + b"</body></html>"),
        PathologicalPage("utf16", _article(GERMAN + " " + JAPANESE, 6).encode("utf-16"),
             expect_words=("hafenbrücke", JAPANESE[:20])),
        PathologicalPage("shift_jis", _article(JAPANESE, 6, "Shift_JIS").encode("shift_jis"),
             expect_words=(JAPANESE[-30:-1],)),
        PathologicalPage("xml_bogus_encoding",
             b'<?xml version="1.0" encoding="x-no-such-encoding"?>\n'
             + _article(GERMAN, 6).encode("utf-8"), expect_words=("hafenbrücke", "größe")),
    ]


def page_params(name: str) -> dict[str, str]:
    """Query parameters of a raw-body request: rss takes its feed as option `feed` there,
    so it parses every page (those that hold none of the item's text get a 422)."""
    return {"url": RSS_URL, "feed": RSS_FEED} if name == "rss" else {}


def post_page(client: httpx.Client, url: str, name: str, page: PathologicalPage) -> httpx.Response:
    params = page_params(name)
    return client.post(f"{url}/extract", content=page.body, params=params,
                       headers={"content-type": page.content_type},
                       timeout=TIME_LIMIT_S + SLACK_S + 30)


def post_normal_page(client: httpx.Client, url: str, name: str,
                     wait_s: float = 90.0) -> httpx.Response:
    """A normal page, retried while a killed worker is being replaced (503 busy)."""
    payload: dict[str, object] = {"html": NORMAL_PAGE}
    if name == "rss":
        payload |= {"url": RSS_URL, "options": {"feed": RSS_FEED}}
    deadline = time.monotonic() + wait_s
    while True:
        reply = client.post(f"{url}/extract", json=payload, timeout=wait_s)
        if reply.status_code != 503 or time.monotonic() > deadline:
            return reply
        time.sleep(0.2)


def check_pathological_reply(name: str, page: PathologicalPage, reply: httpx.Response) -> None:
    assert reply.headers.get("content-type", "").startswith("application/json"), reply.text[:300]
    if reply.status_code == 200:
        body = ExtractReply.model_validate(reply.json())
        assert body.algorithm == name
        seen = " ".join(b.text for b in body.blocks).casefold()
        for word in page.expect_words:
            assert word.casefold() in seen, f"{name} lost {word!r} of {page.name}: {seen[:300]!r}"
        return
    error = ErrorReply.model_validate(reply.json())
    assert reply.status_code == 504 or 400 <= reply.status_code < 500, (reply.status_code, error)
    if page.expect_words:  # a page of ordinary size in a legacy charset must be served
        assert reply.status_code not in (400, 415), f"{page.name} refused: {error}"


@pytest.fixture(scope="module", params=sorted(SERVICES))
def service(request: pytest.FixtureRequest) -> Iterator[tuple[str, str, httpx.Client]]:
    name: str = request.param
    settings = ServiceSettings(time_limit_s=TIME_LIMIT_S, max_body_bytes=LIMIT_BYTES)
    with serve_service(name, settings) as (url, client):
        yield name, url, client


@pytest.fixture(scope="module")
def corpus() -> list[PathologicalPage]:
    return build_corpus()


# nested_200k and br_100k also run in tests/test_contract.py; here every page runs through
# the same checks, including the decoding of the legacy-charset pages.
@pytest.mark.parametrize("page_name", [
    "text_10mb", "nested_200k", "br_100k", "word_1mb", "all_scripts", "utf16", "shift_jis",
    "xml_bogus_encoding",
])
def test_pathological_page(service: tuple[str, str, httpx.Client], corpus: list[PathologicalPage],
                           page_name: str) -> None:
    name, url, client = service
    page = next(p for p in corpus if p.name == page_name)
    started = time.monotonic()
    reply = post_page(client, url, name, page)
    waited = time.monotonic() - started
    check_pathological_reply(name, page, reply)
    assert waited < TIME_LIMIT_S + SLACK_S, f"{name} took {waited:.1f} s on {page.name}"
    assert client.get(f"{url}/health", timeout=30).status_code == 200
    normal = post_normal_page(client, url, name)
    assert normal.status_code == 200, normal.text[:300]


def test_one_byte_over_the_limit_is_413(service: tuple[str, str, httpx.Client]) -> None:
    """One byte over the limit is refused before parsing (exactly the limit is accepted:
    tests/test_security.py checks the boundary in-process), and the service goes on."""
    name, url, client = service
    reply = client.post(f"{url}/extract", content=text_page(LIMIT_BYTES + 1),
                        headers={"content-type": "text/html"}, timeout=60)
    assert reply.status_code == 413, reply.text[:300]
    assert ErrorReply.model_validate(reply.json()).error == "too_large"
    assert post_normal_page(client, url, name).status_code == 200


def test_text_after_a_too_deep_part_is_kept() -> None:
    """libxml2 stops at 2048 nested elements and drops the rest of the page; parse_html
    parses such pages again with the depth capped, so no text is lost."""
    for depth in (2_100, 200_000):
        html = ("<html><body><p>before the deep part</p>" + "<div>" * depth + "deep text"
                + "</div>" * depth + "<p>after the deep part</p></body></html>")
        blocks = [b.text for b in text_blocks(parse_html(html))]
        assert blocks == ["before the deep part", "deep text", "after the deep part"], depth
    unclosed = "<html><body>" + "<font size=2>x " * 3_000 + "<p>the article text</p>"
    assert "the article text" in " ".join(b.text for b in text_blocks(parse_html(unclosed)))
