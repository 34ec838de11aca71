"""The rss service on pages and feeds built here: matching, support, growth, safety."""

from __future__ import annotations

import http.server
from collections.abc import Iterator
from dataclasses import dataclass
from html import escape

import orjson
import pytest
from pydantic import ValidationError

from orchestrator.scoring import bag_f1
from services.rss import extractor as rss
from services.rss.extractor import ALGORITHM, normalize_url, parse_feed
from services.rss.inputs import NO_FEEDS, NO_PAGE_FEED
from shared.answer import answer_page
from shared.contract import ExtractReplyBody, PageError
from shared.registry import MissingInputError, page_options
from tests.helpers import LIBRARY_ARTICLE
from tests.servers import serve_http

URL = "https://gazette.example/news/library-reopens"
TITLE = "Village library reopens after a year of building work"
PARAGRAPHS = list(LIBRARY_ARTICLE)
NAV = "".join(f'<li><a href="/section/{i}">Section {i}</a></li>' for i in range(10))
RELATED = "".join(f'<li><a href="/news/{i}">Another story number {i} from the town</a></li>'
                  for i in range(6))


def page(canonical: bool = False) -> str:
    link = f'<link rel="canonical" href="{URL}">' if canonical else ""
    body = "".join(f"<p>{p}</p>" for p in PARAGRAPHS)
    return (
        f"<!DOCTYPE html><html><head><title>{TITLE} - Town Gazette</title>{link}</head><body>"
        f'<header><a href="/">Town Gazette</a><nav><ul>{NAV}</ul></nav></header>'
        f'<main><article><h1>{TITLE}</h1><p class="byline">By A. Writer, 12 May</p>'
        f'<div class="body">{body}<figure><img src="x.jpg"><figcaption>The new reading room '
        f"</figcaption></figure></div></article>"
        f"<aside><h2>Related</h2><ul>{RELATED}</ul></aside></main>"
        f'<footer><p>Copyright Town Gazette. <a href="/terms">Terms</a> '
        f'<a href="/privacy">Privacy</a> <a href="/contact">Contact</a></p></footer>'
        "</body></html>"
    )


GOLD = "\n".join([TITLE, *PARAGRAPHS])
OTHER_ITEM = ("<item><title>Ferry service to resume on Monday</title>"
              "<link>https://gazette.example/news/ferry</link>"
              "<description>The harbour ferry sails again.</description></item>")


def rss_feed(item: str) -> str:
    return ('<?xml version="1.0" encoding="UTF-8"?>'
            '<rss version="2.0" xmlns:content="http://purl.org/rss/1.0/modules/content/">'
            f"<channel><title>Town Gazette</title>{OTHER_ITEM}{item}</channel></rss>")


def summary_item(link: str = URL, title: str = TITLE) -> str:
    return (f"<item><title>{escape(title)}</title><link>{escape(link)}</link>"
            f"<description>{escape('<p>' + PARAGRAPHS[0] + '</p>')}</description></item>")


def run(feed: str, url: str | None = URL, **options: object) -> ExtractReplyBody:
    return ALGORITHM.run(page(), {"feed": feed, **options}, url)


def content_texts(reply: ExtractReplyBody) -> list[str]:
    return [b.text for b in reply.blocks if b.is_content]


def assert_is_the_article(reply: ExtractReplyBody) -> float:
    f1 = bag_f1(reply.text, GOLD)
    print(f"word F1 against the article: {f1:.3f}")
    assert f1 > 0.8
    boilerplate = ("Section", "Another story", "Copyright")
    assert not any(t.startswith(boilerplate) for t in content_texts(reply))
    return f1


def test_full_content_item_matched_by_link() -> None:
    full = escape("".join(f"<p>{p}</p>" for p in PARAGRAPHS))
    reply = run(rss_feed(f"<item><title>{TITLE}</title><link>{URL}</link>"
                         f"<description>short</description>"
                         f"<content:encoded>{full}</content:encoded></item>"))
    assert set(PARAGRAPHS) <= set(content_texts(reply))
    assert all(b.label in ("supported", "boilerplate") for b in reply.blocks)
    assert bag_f1(reply.text, GOLD) == pytest.approx(1.0)


def test_summary_item_grows_into_the_article() -> None:
    reply = run(rss_feed(summary_item()))
    assert_is_the_article(reply)
    assert {b.label for b in reply.blocks if b.is_content} == {"supported", "grown"}
    assert set(PARAGRAPHS) <= set(content_texts(reply))


def test_summary_item_matched_by_title_without_a_url() -> None:
    reply = run(rss_feed(summary_item(link="https://elsewhere.example/feed-item/991")), url=None)
    assert_is_the_article(reply)


def test_links_compare_normalised_and_canonical_links_count() -> None:
    link = "http://www.gazette.example/news/library-reopens/?utm_source=rss#top"
    assert normalize_url(link) == normalize_url(URL)
    assert normalize_url("https://gazette.example/news?id=2") != normalize_url(URL)
    assert normalize_url("http://[broken/x") == "http://[broken/x"
    feed = rss_feed(summary_item(link=link, title="A title that matches nothing"))
    assert_is_the_article(run(feed))
    reply = ALGORITHM.run(page(canonical=True), {"feed": feed}, None)
    assert_is_the_article(reply)


def test_atom_summary_entry() -> None:
    feed = ('<?xml version="1.0" encoding="utf-8"?><feed xmlns="http://www.w3.org/2005/Atom">'
            "<title>Town Gazette</title><id>urn:gazette</id>"
            "<entry><title>Ferry service to resume</title><id>urn:1</id>"
            '<link rel="alternate" href="https://gazette.example/news/ferry"/>'
            "<summary>The harbour ferry sails again.</summary></entry>"
            f'<entry><title type="html">{escape(TITLE)}</title><id>urn:2</id>'
            f'<link rel="alternate" href="{URL}"/><link rel="edit" href="https://x.example/e"/>'
            f'<summary type="html">{escape("<p>" + PARAGRAPHS[0] + "</p>")}</summary>'
            "</entry></feed>")
    item = parse_feed(feed)[1]
    assert item.links == (URL,)
    assert not item.full
    assert item.text == PARAGRAPHS[0]
    assert_is_the_article(run(feed))


def test_atom_xhtml_content_is_full_text() -> None:
    body = "".join(f"<p>{p}</p>" for p in PARAGRAPHS)
    feed = ('<feed xmlns="http://www.w3.org/2005/Atom"><entry>'
            f'<title>{TITLE}</title><link href="{URL}"/><content type="xhtml">'
            f'<div xmlns="http://www.w3.org/1999/xhtml">{body}</div></content></entry></feed>')
    reply = run(feed)
    assert set(PARAGRAPHS) <= set(content_texts(reply))


def test_without_growth_only_the_summary_is_content() -> None:
    reply = run(rss_feed(summary_item()), grow="never")
    assert content_texts(reply) == [TITLE, PARAGRAPHS[0]]
    reply = run(rss_feed(summary_item()), grow="never", include_title=False)
    assert content_texts(reply) == [PARAGRAPHS[0]]


BILLION_LAUGHS = f"""<?xml version="1.0"?>
<!DOCTYPE rss [
 <!ENTITY lol "lol">
 <!ENTITY lol1 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">
 <!ENTITY lol2 "&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;">
 <!ENTITY lol3 "&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;">
]>
<rss version="2.0"><channel><item><title>&lol3;</title><link>{URL}</link>
<description>The village library reopened on Saturday.</description></item></channel></rss>
"""
EXTERNAL_ENTITY = f"""<?xml version="1.0"?>
<!DOCTYPE rss [<!ENTITY secret SYSTEM "file:///etc/passwd">]>
<rss version="2.0"><channel><item><title>&secret;</title><link>{URL}</link>
<description>The village library reopened on Saturday.</description></item></channel></rss>
"""
EXTERNAL_PARAMETER_ENTITY = f"""<?xml version="1.0"?>
<!DOCTYPE rss [<!ENTITY % remote SYSTEM "http://127.0.0.1:9/evil.dtd"> %remote;]>
<rss version="2.0"><channel><item><title>t</title><link>{URL}</link></item></channel></rss>
"""


@pytest.mark.parametrize("feed", [BILLION_LAUGHS, EXTERNAL_ENTITY, EXTERNAL_PARAMETER_ENTITY],
                         ids=["billion_laughs", "external_entity", "external_parameter_entity"])
def test_entity_feeds_are_refused(feed: str) -> None:
    with pytest.raises(PageError, match="refused"):
        run(feed)


@pytest.mark.parametrize(("feed", "message"), [
    ("<rss><channel><item><title>x", "not well-formed"),
    ("<html><body>not a feed</body></html>", "not an RSS or Atom feed"),
    ("<rss version='2.0'><channel><title>empty</title></channel></rss>", "no items"),
    (rss_feed(""), "no item of the feed"),
    (rss_feed(summary_item(link="https://gazette.example/other", title="Bridge closes")),
     "no item of the feed"),
])
def test_bad_or_unmatched_feeds_are_page_errors(feed: str, message: str) -> None:
    with pytest.raises(PageError, match=message):
        run(feed)


def test_an_item_whose_text_is_not_on_the_page_is_a_page_error() -> None:
    item = (f"<item><title>Unrelated words entirely</title><link>{URL}</link>"
            "<description>Quantum chromodynamics lattice gauge results.</description></item>")
    with pytest.raises(PageError, match="none of its feed item's text"):
        run(rss_feed(item))


def test_no_feed_is_a_page_error() -> None:
    with pytest.raises(PageError, match="needs the page's feed"):
        ALGORITHM.run(page(), {}, URL)


def test_a_request_without_either_feed_option_is_invalid_options() -> None:
    """The caller left out a required option: 422 invalid_options naming both, in either
    body form, not a page the algorithm refuses (unprocessable_page)."""
    expected = ("invalid_options: feed, feed_url: the rss algorithm needs the page's feed: "
                "give option 'feed' (the feed's XML text) or 'feed_url'")
    body = orjson.dumps({"html": page(), "url": URL, "options": {"grow": "never"}})
    assert answer_page(ALGORITHM, body, {}, "application/json") == {"error": expected}
    query = {"url": URL, "grow": "never"}
    assert answer_page(ALGORITHM, page().encode(), query) == {"error": expected}


def test_feed_and_feed_url_together_are_invalid_options() -> None:
    with pytest.raises(ValidationError):
        ALGORITHM.options_model.model_validate({"feed": "<rss/>", "feed_url": "http://a.b/f"})


@pytest.fixture
def feed_server() -> Iterator[str]:
    """A local HTTP server whose /feed.xml is the page's summary feed."""
    body = rss_feed(summary_item()).encode("utf-8")

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            status = 200 if self.path == "/feed.xml" else 404
            self.send_response(status)
            self.send_header("Content-Type", "application/rss+xml")
            self.send_header("Content-Length", str(len(body) if status == 200 else 0))
            self.end_headers()
            if status == 200:
                self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            return

    with serve_http(Handler) as url:
        yield url


def test_feed_url_is_refused_when_fetching_is_not_allowed(
    feed_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("BOILERBENCH_ALLOW_FETCH", raising=False)
    monkeypatch.setenv("BOILERBENCH_FETCH_ALLOW_LIST", '["127.0.0.1"]')
    with pytest.raises(PageError, match="may not fetch"):
        ALGORITHM.run(page(), {"feed_url": f"{feed_server}/feed.xml"}, URL)


def test_feed_url_is_fetched_from_allowed_hosts_only(
    feed_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BOILERBENCH_ALLOW_FETCH", "true")
    monkeypatch.setenv("BOILERBENCH_FETCH_ALLOW_LIST", '["127.0.0.1"]')
    assert_is_the_article(ALGORITHM.run(page(), {"feed_url": f"{feed_server}/feed.xml"}, URL))
    with pytest.raises(PageError, match="HTTP 404"):
        ALGORITHM.run(page(), {"feed_url": f"{feed_server}/missing.xml"}, URL)
    with pytest.raises(PageError, match="http"):
        ALGORITHM.run(page(), {"feed_url": "file:///etc/passwd"}, URL)
    monkeypatch.setattr(rss, "MAX_FEED_BYTES", 100)
    with pytest.raises(PageError, match="passes 100 bytes"):
        ALGORITHM.run(page(), {"feed_url": f"{feed_server}/feed.xml"}, URL)
    monkeypatch.setenv("BOILERBENCH_FETCH_ALLOW_LIST", '["feeds.example"]')
    with pytest.raises(PageError, match="not on BOILERBENCH_FETCH_ALLOW_LIST"):
        ALGORITHM.run(page(), {"feed_url": f"{feed_server}/feed.xml"}, URL)


@dataclass(frozen=True)
class _Page:
    id: str
    feed: str | None = None


@dataclass(frozen=True)
class _Set:
    name: str
    has_feeds: bool


def test_the_registry_input_hook_gives_rss_the_page_feed() -> None:
    """What the orchestrator asks the registry for each test page: the feed as option,
    or the reason the page is skipped (a page without a feed in a set with feeds, or a
    set without any)."""
    feed = rss_feed(summary_item())
    with_feed, without = _Page("library", feed), _Page("sports")
    feeds, plain = _Set("gazette", has_feeds=True), _Set("plain", has_feeds=False)
    assert page_options("rss", with_feed, feeds) == {"feed": feed}
    assert_is_the_article(ALGORITHM.run(page(), page_options("rss", with_feed, feeds), URL))
    for test_set, reason in ((feeds, NO_PAGE_FEED), (plain, NO_FEEDS)):
        with pytest.raises(MissingInputError, match=reason):
            page_options("rss", without, test_set)
    assert page_options("bte", without, plain) == {}
    assert page_options("a-prediction-file", without, plain) == {}
