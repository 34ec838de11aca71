"""The RSS-feed algorithm (Rolli, "Evaluation of different content
extraction algorithms", HSLU 2014, appendix B, f5): the page's feed item defines its content.

Steps, each a function below:

1. The feed comes from option `feed` (XML text) or `feed_url`, fetched only when
   the service's settings allow it (BOILERBENCH_ALLOW_FETCH, host on
   BOILERBENCH_FETCH_ALLOW_LIST; http(s) only, no redirects, size and time limits).
   It is parsed with defusedxml: a feed declaring entities (the billion-laughs
   bomb) or referring to external ones is refused, as is anything unparsable.
2. The page's item: first the item whose link (RSS link / permalink guid, Atom
   alternate link / URL id) equals one of the page's URLs (the request URL,
   <link rel=canonical>, og:url), compared normalised (scheme, "www.", default
   port, fragment, trailing slash and utm_* parameters ignored); else the item
   whose title is most similar (rapidfuzz ratio, at least `min_title_similarity`)
   to the page's <title> (or one of its " - "/" | " parts), og:title or an <h1>.
3. Support: the item's text (content:encoded or Atom content when present, else
   description/summary; HTML stripped to visible text), with its title when
   `include_title`, is aligned with the page's text blocks (shared.blockmap: one
   LCS over all blocks' tokens); a block is supported when most of its tokens align.
4. Growth, when the item carries only a summary (`grow="auto"`) or always: the
   region starts at the element holding the supported block with the most aligned
   tokens; the other supported blocks join, in decreasing order of aligned tokens,
   when the lowest common ancestor of the region and the block keeps a link
   density (link characters / characters of its blocks) of at most
   `max_link_density`. The region then climbs to its parent (never to <body>)
   while the text the parent adds is not link-dominated (its link density at most
   `max_link_density`) and has a similar text density to the region's (mean words
   per block at least `min_density_ratio` times the region's). The content is the
   region's blocks whose own text is not mostly link text.
   Without growth, the content is the supported blocks.

No feed, an unparsable or refused feed, no item matching the page, or an item
whose text the page does not hold: PageError (422), never an empty success.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable
from dataclasses import dataclass
from importlib.metadata import version
from typing import Literal
from urllib.parse import parse_qsl, urlencode, urlsplit
from xml.etree.ElementTree import Element, ParseError

import defusedxml
import defusedxml.ElementTree as SafeET
import httpx
from lxml import etree
from pydantic import Field, ValidationInfo, field_validator
from rapidfuzz import fuzz, utils

from shared.blockmap import CONTENT_SHARE, block_support
from shared.contract import Algorithm, Block, Extraction, Options, PageError
from shared.html import TextBlock, normalize_space, parse_html, tag_name, text_blocks, visible_text
from shared.settings import ServiceSettings
from shared.tokens import tokenize

MAX_FEED_BYTES = 5 * 1024 * 1024
FETCH_TIMEOUT_S = 5.0
_TITLE_SEPARATORS = re.compile(r"\s+[-|–—:·»]+\s+")
_TRACKING = re.compile(r"^(utm_|fbclid$|gclid$|ref$|cmpid$)")
NO_FEED = ("feed, feed_url: the rss algorithm needs the page's feed: give option 'feed' (the "
           "feed's XML text) or 'feed_url'")


class RssOptions(Options):
    feed: str | None = Field(None, description="The page's RSS or Atom feed, as XML text "
                             "(this or feed_url, not both: a request without either is "
                             "refused as invalid options).")
    feed_url: str | None = Field(
        None, description="URL of the feed; fetched only when the service allows fetching "
        "(BOILERBENCH_ALLOW_FETCH) from that host (BOILERBENCH_FETCH_ALLOW_LIST).")
    min_title_similarity: float = Field(
        85.0, ge=0, le=100, description="Least rapidfuzz ratio (0-100) between an item's title "
        "and the page's title for a match when no item links to the page.")
    include_title: bool = Field(True, description="The item's title supports blocks too.")
    grow: Literal["auto", "always", "never"] = Field(
        "auto", description="Grow the content region from the supported blocks through the "
        "DOM: 'auto' when the item has only a summary (no full content).")
    max_link_density: float = Field(
        0.3, ge=0, le=1, description="Most link text a region (and what growth adds) may hold.")
    min_density_ratio: float = Field(
        0.2, ge=0, description="Growth adds a parent only when its added text has at least "
        "this share of the region's mean words per block.")

    @field_validator("feed_url")
    @classmethod
    def _one_feed(cls, feed_url: str | None, info: ValidationInfo) -> str | None:
        """Refused as feed_url's error, so the 422 names an option as any other does."""
        if feed_url is not None and info.data.get("feed") is not None:
            raise ValueError("give either feed or feed_url, not both")
        return feed_url

    def missing(self) -> str | None:
        """A request without either feed option is the caller's error (422
        invalid_options), not a page the algorithm refuses."""
        return NO_FEED if self.feed is None and self.feed_url is None else None


@dataclass(frozen=True)
class FeedItem:
    """One RSS item or Atom entry, its HTML already reduced to text."""

    title: str
    links: tuple[str, ...]
    text: str
    full: bool  # the text is the full content, not a summary


# --- 1. the feed -------------------------------------------------------------------


def fetch_feed(url: str) -> bytes:
    """The feed at `url`, if the settings allow fetching from its host; else PageError."""
    settings = ServiceSettings()
    if not settings.allow_fetch:
        raise PageError("this service may not fetch feed_url (BOILERBENCH_ALLOW_FETCH is off); "
                        "send the feed XML as option 'feed'")
    try:
        parts = urlsplit(url)
        host = (parts.hostname or "").lower()
    except ValueError:
        raise PageError(f"feed_url is not a valid URL: {url!r}") from None
    allowed = [h.lower().strip(".") for h in settings.fetch_allow_list]
    if parts.scheme not in ("http", "https") or not host:
        raise PageError(f"feed_url must be an http(s) URL, not {url!r}")
    if not any(host == h or host.endswith("." + h) for h in allowed):
        raise PageError(f"feed host {host!r} is not on BOILERBENCH_FETCH_ALLOW_LIST")
    deadline = time.monotonic() + FETCH_TIMEOUT_S
    chunks: list[bytes] = []
    size = 0
    try:
        with httpx.Client(timeout=FETCH_TIMEOUT_S, follow_redirects=False) as client, \
                client.stream("GET", url) as response:
            if response.status_code != 200:
                raise PageError(f"fetching the feed gave HTTP {response.status_code}")
            for chunk in response.iter_bytes():
                size += len(chunk)
                if size > MAX_FEED_BYTES:
                    raise PageError(f"the feed passes {MAX_FEED_BYTES} bytes")
                if time.monotonic() > deadline:
                    raise PageError(f"fetching the feed took over {FETCH_TIMEOUT_S} s")
                chunks.append(chunk)
    except httpx.HTTPError as exc:
        raise PageError(f"fetching the feed failed: {exc}") from None
    return b"".join(chunks)


def _local(element: Element) -> str:
    tag = element.tag
    return tag.rsplit("}", 1)[-1].lower() if isinstance(tag, str) else ""


def _children(element: Element, name: str) -> list[Element]:
    return [child for child in element if _local(child) == name]


def _html_text(markup: str) -> str:
    """Visible text of an HTML fragment (feeds carry escaped or CDATA HTML)."""
    return visible_text(parse_html(markup)) if markup.strip() else ""


def _element_text(element: Element) -> str:
    """Text of an RSS field or Atom text construct (type text, html or xhtml)."""
    if element.get("type", "").lower() in ("xhtml", "application/xhtml+xml"):
        return normalize_space(" ".join(element.itertext()))
    return _html_text(element.text or "")


def _first_text(element: Element, *names: str) -> str:
    for name in names:
        for child in _children(element, name):
            text = _element_text(child)
            if text:
                return text
    return ""


def _item(element: Element) -> FeedItem:
    links: list[str] = []
    for link in _children(element, "link"):
        href = link.get("href")
        if href and link.get("rel", "alternate") == "alternate":
            links.append(href.strip())  # Atom (also atom:link inside RSS items)
        elif not href and link.text and link.text.strip():
            links.append(link.text.strip())  # RSS
    for name in ("guid", "id"):
        for ident in _children(element, name):
            value = (ident.text or "").strip()
            if value.startswith(("http://", "https://")) and ident.get("isPermaLink") != "false":
                links.append(value)
    about = element.get("{http://www.w3.org/1999/02/22-rdf-syntax-ns#}about")
    if about:
        links.append(about)
    content = _first_text(element, "encoded", "content")
    summary = _first_text(element, "description", "summary")
    return FeedItem(title=_first_text(element, "title"), links=tuple(links),
                    text=content or summary, full=bool(content))


def parse_feed(feed: str | bytes) -> list[FeedItem]:
    """Items of an RSS 0.9x/1.0/2.0 or Atom feed, parsed safely; PageError otherwise."""
    try:
        root = SafeET.fromstring(feed, forbid_dtd=False, forbid_entities=True,
                                 forbid_external=True)
    except defusedxml.DefusedXmlException as exc:
        raise PageError(f"the feed was refused: it declares entities or refers to external "
                        f"resources ({type(exc).__name__})") from None
    except (ParseError, ValueError) as exc:
        raise PageError(f"the feed is not well-formed XML: {exc}") from None
    if _local(root) not in ("rss", "rdf", "feed"):
        raise PageError(f"not an RSS or Atom feed: the root element is <{_local(root)}>")
    items = [_item(e) for e in root.iter() if _local(e) in ("item", "entry")]
    if not items:
        raise PageError("the feed has no items")
    return items


# --- 2. the page's item --------------------------------------------------------------


def normalize_url(url: str) -> str:
    """host/path?query with what does not name a different page removed."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:  # a malformed host or port: compare the text as it is
        return url.strip()
    host = (parts.hostname or "").lower().removeprefix("www.")
    if port and port not in (80, 443):
        host = f"{host}:{port}"
    path = parts.path.rstrip("/") or ""
    query = sorted((k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True)
                   if not _TRACKING.match(k.lower()))
    return f"{host}{path}" + (f"?{urlencode(query)}" if query else "")


def page_urls(root: etree._Element, url: str | None) -> set[str]:
    """The page's own URLs: the request's, its canonical link and og:url (normalised)."""
    found = [url] if url else []
    found += root.xpath("//link[translate(@rel,'CANONICAL','canonical')='canonical']/@href")
    found += root.xpath("//meta[@property='og:url' or @name='og:url']/@content")
    return {normalize_url(str(u)) for u in found if str(u).strip()}


def page_titles(root: etree._Element) -> list[str]:
    """The page's titles: <title> and its parts around separators, og:title, the <h1>s."""
    titles: list[str] = []
    for text in root.xpath("//title/text()|//meta[@property='og:title']/@content"):
        title = normalize_space(str(text))
        titles += [title, *_TITLE_SEPARATORS.split(title)]
    titles += [normalize_space(h1.text_content()) for h1 in root.iter("h1")]
    return [t for t in titles if t]


def match_item(items: list[FeedItem], root: etree._Element, url: str | None,
               min_similarity: float) -> FeedItem:
    """The page's item: by link, then by title similarity; PageError when none matches."""
    urls = page_urls(root, url)
    for item in items:
        if any(normalize_url(link) in urls for link in item.links):
            return item
    titles = page_titles(root)
    best, best_score = None, -1.0
    for item in items:
        if not item.title:
            continue
        score = max((fuzz.ratio(item.title, t, processor=utils.default_process) for t in titles),
                    default=0.0)
        if score > best_score:
            best, best_score = item, score
    if best is None or best_score < min_similarity:
        raise PageError(
            f"no item of the feed ({len(items)} items) matches the page: no link equals the "
            f"page's URL and the best title similarity is {max(best_score, 0.0):.0f} "
            f"(< {min_similarity:.0f})"
        )
    return best


# --- 3./4. the content -----------------------------------------------------------------


@dataclass
class _Stats:
    chars: int = 0
    link_chars: int = 0
    words: int = 0
    blocks: int = 0
    squares: int = 0

    def add(self, other: _Stats, sign: int = 1) -> None:
        self.chars += sign * other.chars
        self.link_chars += sign * other.link_chars
        self.words += sign * other.words
        self.blocks += sign * other.blocks
        self.squares += sign * other.squares

    @property
    def link_density(self) -> float:
        return self.link_chars / self.chars if self.chars else 0.0

    @property
    def density(self) -> float:
        """Words per block, each block weighted by its words: the length of the block a
        random word is in, so a few short labels do not drown a run of paragraphs."""
        return self.squares / self.words if self.words else 0.0


def _subtree_stats(blocks: list[TextBlock], words: list[int]) -> dict[etree._Element, _Stats]:
    """Characters, link characters, words and blocks under every element holding a block."""
    stats: dict[etree._Element, _Stats] = {}
    for block, count in zip(blocks, words, strict=True):
        own = _Stats(len(block.text), block.link_chars, count, 1, count * count)
        for element in (block.element, *block.element.iterancestors()):
            stats.setdefault(element, _Stats()).add(own)
    return stats


def _common_ancestor(a: etree._Element, b: etree._Element) -> etree._Element:
    chain = {id(e): e for e in (a, *a.iterancestors())}
    for element in (b, *b.iterancestors()):
        if id(element) in chain:
            return element
    return a.getroottree().getroot()


def grow_region(blocks: list[TextBlock], support: list[float], max_link_density: float,
                min_density_ratio: float) -> etree._Element:
    """The content region: the supported blocks' common ancestor, grown as the module says."""
    words = [len(tokenize(b.text)) for b in blocks]
    stats = _subtree_stats(blocks, words)
    anchors = sorted((i for i, s in enumerate(support) if s > CONTENT_SHARE),
                     key=lambda i: -support[i] * words[i])
    region = blocks[anchors[0]].element
    for i in anchors[1:]:
        joined = _common_ancestor(region, blocks[i].element)
        if stats[joined].link_density <= max_link_density:
            region = joined
    while True:
        parent = region.getparent()
        if parent is None or tag_name(parent) in ("body", "html"):
            return region
        added = _Stats()
        added.add(stats[parent])
        added.add(stats[region], -1)
        if added.blocks and (
            added.link_density > max_link_density
            or added.density < min_density_ratio * stats[region].density
        ):
            return region
        region = parent


def _link_dominated(block: TextBlock) -> bool:
    return block.link_chars * 2 > len(block.text)


def classify(blocks: list[TextBlock], item: FeedItem, options: RssOptions) -> list[Block]:
    """Blocks marked by the item's support, grown into a region where the options say."""
    reference = tokenize(f"{item.title}\n{item.text}" if options.include_title else item.text)
    if not reference:
        raise PageError("the page's feed item has no text")
    support = block_support([b.text for b in blocks], reference)
    supported = [s > CONTENT_SHARE for s in support]
    if not any(supported):
        raise PageError("the page holds none of its feed item's text")
    grow = options.grow == "always" or (options.grow == "auto" and not item.full)
    content = list(supported)
    labels = ["supported" if s else "boilerplate" for s in supported]
    if grow:
        region = grow_region(blocks, support, options.max_link_density, options.min_density_ratio)
        inside = {id(e) for e in region.iter()}
        for i, block in enumerate(blocks):
            if id(block.element) in inside and not _link_dominated(block) and not content[i]:
                content[i], labels[i] = True, "grown"
    return [
        Block(text=b.text, is_content=c, score=round(s, 4), path=b.path, label=label)
        for b, c, s, label in zip(blocks, content, support, labels, strict=True)
    ]


def extract(html: str, options: RssOptions, url: str | None = None) -> Extraction:
    if options.feed is not None:
        feed: str | bytes = options.feed
    elif options.feed_url is not None:
        feed = fetch_feed(options.feed_url)
    else:
        raise PageError(NO_FEED)
    items = parse_feed(feed)
    root = parse_html(html)
    item = match_item(items, root, url, options.min_title_similarity)
    return Extraction(classify(text_blocks(root), item, options))


def _versions(names: Iterable[str]) -> str:
    return ", ".join(f"{n} {version(n)}" for n in names)


ALGORITHM = Algorithm(
    name="rss",
    version="1.0",
    description="RSS-feed algorithm: the page's item in its RSS/Atom feed (by link, then by "
    "title) marks the blocks its text supports; a summary-only item grows them into their "
    "DOM region. Feeds parsed "
    f"with {_versions(['defusedxml'])}; matching with {_versions(['rapidfuzz'])}.",
    reference="Specification of the evaluation framework (thesis appendix B), feature f5 "
    "'Evaluation and Implementation RSS feed algorithm'",
    options_model=RssOptions,
    extract=extract,
    score="The share of the block's tokens aligned with the feed item's text (one longest "
    "common subsequence over the page); content above one half, or grown into the item's "
    "region (`label`: supported, grown, boilerplate).",
    score_range=(0.0, 1.0),
    path_tree="libxml2",
)
