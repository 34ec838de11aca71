"""The features of a page's text blocks: what the seed algorithms measure, side by side.

One parse (shared.html.parse_html); blocks are shared.html.text_blocks; besides their
walk, only BTE's token walk goes over the whole tree. Per block:

- text (jusText, Boilerpipe): words, characters, link density, stopword density (the
  jusText stoplist of the page's language, chosen as the one covering most of the
  page's words), punctuation per word, sentence-final punctuation, digits, word length;
- markup: the container's tag group and depth; ancestors that are nav/header/footer/
  aside, form, list, table, article/main; class/id words that readability counts as
  signs of boilerplate or of content, on the container or any ancestor;
- density (CETD, services/cetd): Composite Text Density of the container, its parent
  and grandparent, the container's density over the body's (CETD's threshold), the
  share of the page's characters under the parent and grandparent and their link
  density (characters summed from the blocks, tags counted by XPath: no second walk);
- BTE (services/bte): the share of the block's words inside BTE's window;
- readability (Arc90): the content score readability gives the block's container's
  parent (paragraphs of 25+ characters score 1 + their commas + up to 3
  for length into their parent and half into their grandparent, after class/id and tag
  weights, times one minus link density), over the page's best candidate; whether the
  block lies inside readability's article (the best candidate and the siblings that
  score at least a fifth of it); the best candidate's score itself;
- layout: relative position by block and by words, whether the block shares a parent or
  grandparent with the page's longest block (where articles keep their paragraphs);
- page: total words, number of blocks, overall link density (so one model can adapt
  to pages that are mostly text or mostly links);
- context: the same text figures for the previous and next block and a words-weighted
  link density over the five blocks around it (density's seed looks at neighbours too).
"""

from __future__ import annotations

import functools
import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from lxml import etree

from services.bte.extractor import BteOptions, best_window, tokenize_page
from services.cetd.extractor import composite_text_density
from services.justext.extractor import load_stoplist, stoplist_names
from shared.flatpage import flatten_tree
from shared.html import TextBlock, parse_html, tag_name, text_blocks
from shared.tokens import tokenize

Matrix = npt.NDArray[np.float64]

TAG_GROUPS: dict[str, int] = {
    "p": 0,
    **{f"h{i}": 1 for i in range(1, 7)},
    "li": 2, "dt": 2, "dd": 2,
    "td": 3, "th": 3, "caption": 3, "tr": 3, "table": 3, "tbody": 3,
    "div": 4, "section": 4, "article": 4, "main": 4, "center": 4, "body": 4, "html": 4,
    "pre": 5, "blockquote": 5, "address": 5, "figcaption": 5,
}
N_GROUPS = 7  # the last group: every other block-level container (ul, form, br, ...)
NAVIGATION = frozenset({"nav", "header", "footer", "aside", "menu"})
LISTS = frozenset({"ul", "ol", "dl", "menu"})
ARTICLE = frozenset({"article", "main"})
# readability's class/id patterns (Arc90), lower-cased.
NEGATIVE = re.compile(
    r"comment|combx|contact|foot|masthead|media|meta|outbrain|promo|related|scroll|shoutbox|"
    r"sidebar|sponsor|shopping|tags|tool|widget|nav|menu|breadcrumb|share|social|banner|"
    r"login|subscribe|copyright|header|cookie|popup|hidden")
POSITIVE = re.compile(r"article|body|content|entry|hentry|main|page|post|text|blog|story")
_PUNCTUATION = re.compile(r"[.,;:!?]")
_DIGIT = re.compile(r"\d")
_SENTENCE_END = frozenset(".!?\"'”’»)")
CONTEXT = ("log_words", "link_density", "stopword_density", "punctuation", "sentence_end")
OWN = ("log_words", "log_chars", "link_density", "stopword_density", "punctuation",
       "sentence_end", "digits", "word_length")
MARKUP = (*(f"tag_{g}" for g in ("p", "h", "li", "td", "div", "pre", "other")), "depth",
          "in_navigation", "in_form", "in_list", "in_table", "in_article", "negative_attr",
          "positive_attr")
DENSITY = ("log_ctd", "log_parent_ctd", "log_grandparent_ctd", "ctd_over_body",
           "parent_char_share", "grandparent_char_share", "parent_link_density",
           "grandparent_link_density")
READABILITY = ("readability_share", "readability_article", "readability_log_top")
LAYOUT = ("bte_inside", "position", "word_position", "words_over_longest", "longest_parent",
          "longest_grandparent")
PAGE = ("page_log_words", "page_log_blocks", "page_link_density")
FEATURES: tuple[str, ...] = (
    *OWN, *MARKUP, *DENSITY, *READABILITY, *LAYOUT, *PAGE,
    *(f"{name}_prev" for name in CONTEXT), *(f"{name}_next" for name in CONTEXT),
    "window_link_density", "window_log_words",
)
# readability's initial candidate scores by tag, and which containers are paragraphs.
READABILITY_TAG_SCORE: dict[str, float] = {
    "div": 5, "pre": 3, "td": 3, "blockquote": 3, "address": -3, "ol": -3, "ul": -3,
    "dl": -3, "dd": -3, "dt": -3, "li": -3, "form": -3, "th": -5,
    **{f"h{i}": -5 for i in range(1, 7)},
}
READABILITY_PARAGRAPHS = frozenset({"p", "pre", "td", "div"})
_BTE_OPTIONS = BteOptions()
_BTE_LOOKAHEAD = 8
_COUNT_TAGS = etree.XPath("count(.//*)")
_COUNT_LINKS = etree.XPath("count(.//a | .//button)")  # CETD's link tags


@functools.cache
def stoplists() -> tuple[tuple[str, frozenset[str]], ...]:
    """Every jusText stoplist, by name (loaded once per process)."""
    return tuple((name, load_stoplist(name)) for name in sorted(stoplist_names()))


@functools.cache
def _languages_of() -> dict[str, tuple[int, ...]]:
    """For each stopword, the stoplists that hold it (by index in `stoplists()`)."""
    index: dict[str, list[int]] = {}
    for i, (_, words) in enumerate(stoplists()):
        for word in words:
            index.setdefault(word, []).append(i)
    return {word: tuple(ids) for word, ids in index.items()}


def page_stoplist(tokens: Sequence[str]) -> frozenset[str]:
    """The stoplist that covers most of the page's words (jusText's language guess,
    without asking the caller for the language); empty when no stopword occurs."""
    languages = _languages_of()
    votes: Counter[int] = Counter()
    for word, count in Counter(tokens).items():
        for language in languages.get(word, ()):
            votes[language] += count
    if not votes:
        return frozenset()
    best = min(votes, key=lambda language: (-votes[language], language))
    return stoplists()[best][1]


@dataclass(frozen=True)
class PageFeatures:
    """A page's blocks, their tokens and their feature matrix (one row per block)."""

    blocks: list[TextBlock]
    tokens: list[list[str]]
    matrix: Matrix


def _ancestry(element: etree._Element, memo: dict[etree._Element, tuple[int, ...]]
              ) -> tuple[int, ...]:
    """(depth, in_navigation, in_form, in_list, in_table, in_article, negative, positive)
    of an element, itself included, memoised up the tree."""
    chain: list[etree._Element] = []
    node: etree._Element | None = element
    while node is not None and node not in memo:
        chain.append(node)
        node = node.getparent()
    flags = memo[node] if node is not None else (-1, 0, 0, 0, 0, 0, 0, 0)
    for item in reversed(chain):
        name = tag_name(item)
        attrs = f"{item.get('class') or ''} {item.get('id') or ''}".lower()
        flags = (flags[0] + 1,
                 flags[1] | (name in NAVIGATION),
                 flags[2] | (name == "form"),
                 flags[3] | (name in LISTS),
                 flags[4] | (name == "table"),
                 flags[5] | (name in ARTICLE),
                 flags[6] | bool(attrs.strip() and NEGATIVE.search(attrs)),
                 flags[7] | bool(attrs.strip() and POSITIVE.search(attrs)))
        memo[item] = flags
    return flags


def _bte_shares(root: etree._Element, blocks: Sequence[TextBlock]) -> list[float]:
    """Share of each block's words inside BTE's window. BTE cuts blocks as text_blocks
    does; they are matched in order by text, so a block BTE lacks gets 0."""
    gains, bte_blocks = tokenize_page(flatten_tree(root), _BTE_OPTIONS)
    first, last, _ = best_window(gains)
    shares = [0.0] * len(blocks)
    j = 0
    for block in bte_blocks:
        text = block.text
        k = j  # the next block, or one a few further on: never a scan of the whole page
        while k < min(j + _BTE_LOOKAHEAD, len(blocks)) and blocks[k].text != text:
            k += 1
        if k == min(j + _BTE_LOOKAHEAD, len(blocks)):
            continue
        total = sum(words for _, words in block.runs)
        inside = sum(words for run, words in block.runs if first <= run <= last)
        shares[k] = inside / total if total else 0.0
        j = k + 1
    return shares


def _subtree_chars(blocks: Sequence[TextBlock],
                   ancestry: dict[etree._Element, tuple[int, ...]]
                   ) -> dict[etree._Element, list[float]]:
    """Characters and link characters of the blocks under each element of `ancestry`
    (every container and its ancestors, with their depth first), summed up the tree."""
    chars: dict[etree._Element, list[float]] = {}  # element -> [chars, link chars]
    for block in blocks:
        figures = chars.setdefault(block.element, [0.0, 0.0])
        figures[0] += len(block.text)
        figures[1] += block.link_chars
    # Deepest first, each element hands its subtree's figures to its parent: linear.
    for element in sorted(ancestry, key=lambda e: -ancestry[e][0]):
        figures = chars.setdefault(element, [0.0, 0.0])
        parent = element.getparent()
        if parent is not None:
            above = chars.setdefault(parent, [0.0, 0.0])
            above[0] += figures[0]
            above[1] += figures[1]
    return chars


def _readability(blocks: Sequence[TextBlock], chars: dict[etree._Element, list[float]]
                 ) -> Matrix:
    """readability's (Arc90) candidate scores seen from each block: the score of its
    container's parent (the candidate its paragraph feeds) over the page's best, whether
    it lies in the article readability would keep, and the page's best score (log1p)."""
    scores: dict[etree._Element, float] = {}

    def add(element: etree._Element, value: float) -> None:
        if element not in scores:
            attrs = (element.get("class") or "", element.get("id") or "")
            weight = sum(25.0 * (bool(POSITIVE.search(a.lower())) -
                                 bool(NEGATIVE.search(a.lower()))) for a in attrs if a)
            scores[element] = weight + READABILITY_TAG_SCORE.get(tag_name(element), 0.0)
        scores[element] += value

    for block in blocks:
        text = block.text
        if tag_name(block.element) not in READABILITY_PARAGRAPHS or len(text) < 25:
            continue
        parent = block.element.getparent()
        if parent is None:
            continue
        value = 2.0 + text.count(",") + min(len(text) / 100, 3.0)
        add(parent, value)
        grand = parent.getparent()
        if grand is not None:
            add(grand, value / 2)
    rows = np.zeros((len(blocks), len(READABILITY)))
    if not scores:
        return rows
    final = {e: s * (1.0 - chars[e][1] / max(chars[e][0], 1.0)) if e in chars else s
             for e, s in scores.items()}
    top = max(final, key=lambda e: final[e])
    best = final[top]
    parent_of_top = top.getparent()
    threshold = max(10.0, 0.2 * best)
    siblings = list(parent_of_top) if parent_of_top is not None else []
    article = {top} | {e for e in siblings if final.get(e, -math.inf) >= threshold}
    inside: dict[etree._Element, bool] = {}

    def in_article(element: etree._Element) -> bool:
        chain = []
        node: etree._Element | None = element
        while node is not None and node not in inside and node not in article:
            chain.append(node)
            node = node.getparent()
        answer = node is not None and (node in article or inside[node])
        for item in chain:
            inside[item] = answer
        return answer

    scale = max(best, 1.0)
    for i, block in enumerate(blocks):
        parent = block.element.getparent()
        own = final.get(parent, 0.0) if parent is not None else 0.0
        rows[i] = (min(max(own / scale, -1.0), 1.0), float(in_article(block.element)),
                   math.log1p(max(best, 0.0)))
    return rows


def _densities(root: etree._Element, blocks: Sequence[TextBlock],
               chars: dict[etree._Element, list[float]]) -> Matrix:
    """CETD's figures of each block's container, parent and grandparent, computed from
    the blocks (`chars`: characters and link characters summed up the tree) and XPath
    counts of the tags below the few elements that need them, instead of a second walk."""
    densities: dict[etree._Element, float] = {}

    def ctd(element: etree._Element) -> float:
        value = densities.get(element)
        if value is None:
            c, lc = chars[element]
            value = densities[element] = composite_text_density(
                int(c), int(_COUNT_TAGS(element)), int(lc), int(_COUNT_LINKS(element)),
                body_ratio)
        return value

    body = root.find("body")
    body = body if body is not None and body in chars else root
    body_chars, body_links = chars.get(body, [0.0, 0.0])
    body_ratio = body_links / body_chars if body_chars else 0.0
    body_ctd = max(ctd(body), 1e-6) if body in chars else 1e-6
    rows = np.zeros((len(blocks), len(DENSITY)))
    for i, block in enumerate(blocks):
        node = block.element
        parent = node.getparent()
        parent = node if parent is None else parent
        grand = parent.getparent()
        grand = parent if grand is None else grand
        own, up, top = ctd(node), ctd(parent), ctd(grand)
        rows[i] = (math.log1p(own), math.log1p(up), math.log1p(top),
                   math.log1p(own / body_ctd),
                   chars[parent][0] / max(body_chars, 1.0), chars[grand][0] / max(body_chars, 1.0),
                   chars[parent][1] / max(chars[parent][0], 1.0),
                   chars[grand][1] / max(chars[grand][0], 1.0))
    return rows


def _shift(values: Matrix, by: int) -> Matrix:
    """Rows moved down by `by` (up when negative), zeros where nothing moves in."""
    result = np.zeros_like(values)
    if by > 0:
        result[by:] = values[:-by]
    else:
        result[:by] = values[-by:]
    return result


def _window_sum(values: Matrix, half: int) -> Matrix:
    """Sum over the 2*half+1 rows around each row (rows beyond the page count 0)."""
    cumulative = np.concatenate([[0.0], np.cumsum(values)])
    n = len(values)
    upper = np.minimum(np.arange(n) + half + 1, n)
    lower = np.maximum(np.arange(n) - half, 0)
    result: Matrix = cumulative[upper] - cumulative[lower]
    return result


def page_features(html: str) -> PageFeatures:
    """Parse once and compute every block's features (see the module docstring)."""
    return features_of(parse_html(html))


def features_of(root: etree._Element) -> PageFeatures:
    blocks = text_blocks(root)
    tokens = [tokenize(block.text) for block in blocks]
    n = len(blocks)
    if n == 0:
        return PageFeatures(blocks, tokens, np.zeros((0, len(FEATURES))))
    stop = page_stoplist([t for block_tokens in tokens for t in block_tokens])

    # Text figures.
    words = np.array([len(t) for t in tokens], dtype=np.float64)
    chars = np.array([len(b.text) for b in blocks], dtype=np.float64)
    link = np.array([b.link_chars for b in blocks], dtype=np.float64)
    stopwords = np.array([sum(w in stop for w in t) for t in tokens], dtype=np.float64)
    punctuation = np.array([len(_PUNCTUATION.findall(b.text)) for b in blocks],
                           dtype=np.float64)
    digits = np.array([len(_DIGIT.findall(b.text)) for b in blocks], dtype=np.float64)
    some_words = np.maximum(words, 1.0)
    own = np.column_stack([
        np.log1p(words), np.log1p(chars), link / chars, stopwords / some_words,
        np.minimum(punctuation / some_words, 2.0),
        [float(b.text[-1] in _SENTENCE_END) for b in blocks],
        digits / chars, chars / some_words,
    ])

    # Markup.
    memo: dict[etree._Element, tuple[int, ...]] = {}
    groups = np.zeros((n, N_GROUPS))
    ancestry = np.zeros((n, 8))
    for i, block in enumerate(blocks):
        groups[i, TAG_GROUPS.get(tag_name(block.element), N_GROUPS - 1)] = 1.0
        ancestry[i] = _ancestry(block.element, memo)

    # Density (CETD's Composite Text Density of the container, its parent, grandparent).
    chars_below = _subtree_chars(blocks, memo)
    density = _densities(root, blocks, chars_below)
    readability = _readability(blocks, chars_below)

    # Layout: BTE's window, position, the longest block's parent and grandparent.
    longest = blocks[int(words.argmax())].element
    longest_parent = longest.getparent()
    longest_grand = longest_parent.getparent() if longest_parent is not None else None
    parents = [b.element.getparent() for b in blocks]
    total_words = float(words.sum())
    before = np.concatenate([[0.0], np.cumsum(words)[:-1]])
    layout = np.column_stack([
        _bte_shares(root, blocks),
        np.arange(n) / max(n - 1, 1),
        before / max(total_words, 1.0),
        words / max(float(words.max()), 1.0),
        [float(p is not None and p is longest_parent) for p in parents],
        [float(p is not None and longest_grand is not None
               and (p is longest_grand or p.getparent() is longest_grand)) for p in parents],
    ])
    page = np.tile([math.log1p(total_words), math.log1p(n),
                    float(link.sum() / max(chars.sum(), 1.0))], (n, 1))

    # Context: the neighbours' text figures and a five-block window.
    context = own[:, [OWN.index(name) for name in CONTEXT]]
    window_words = _window_sum(words, 2)
    window_link = _window_sum(link / chars * words, 2) / np.maximum(window_words, 1.0)
    matrix = np.hstack([own, groups, ancestry, density, readability, layout, page,
                        _shift(context, 1), _shift(context, -1),
                        window_link[:, None], np.log1p(window_words)[:, None]])
    return PageFeatures(blocks, tokens, matrix)
