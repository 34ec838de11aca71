"""The features of a page's text blocks: what jusText, BTE, CETD and line density measure,
side by side.

One parse and one walk: shared.flatpage.flatten_html turns the page (lexbor's HTML5
tree) into plain lists with the class and id attributes, and every figure below is
read from those lists. Elements a browser would not draw (a `hidden` attribute, an
inline display:none or visibility:hidden) are left out as CETD leaves them out: news
pages often hold a hidden schema.org copy of the article, which is never the page's
text. An element's subtree is the index range i..last[i], so "inside
a <nav>", "characters below", "link tags below" or "depth" are prefix sums over all
elements at once (numpy), not walks of the tree; Python loops run over the blocks
only. Blocks are the FlatPage's blocks, cut as shared.html.text_blocks cuts them. Per
block:

- text (jusText, Boilerpipe): words, characters, link density, stopword density (the
  jusText stoplist of the page's language, chosen as the one covering most of the
  page's words), punctuation per word, sentence-final punctuation, digits, word length;
- markup: the container's tag group and depth; ancestors that are nav/header/footer/
  aside, form, list, table, article/main; class/id words that readability counts as
  signs of boilerplate or of content, on the container or any ancestor;
- density (CETD, services/cetd): Composite Text Density of the container, its parent
  and grandparent, the container's density over the body's (CETD's threshold), the
  share of the page's characters under the parent and grandparent and their link
  density;
- BTE (services/bte): the share of the block's words inside BTE's window (its tokens
  come from the same FlatPage);
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
  link density over the five blocks around it (Champandard's line network looks at
  neighbours too);
- structure (what holds across sites, not what one site's markup says): whether the
  previous or next block is a heading and how many blocks back the last heading is;
  link density and words over the 21 blocks around the block; how often the page
  repeats the block's markup (its container's and parent's tag and class: menus,
  teasers and comment lists repeat one template, an article's paragraphs share one
  too but hold most of the page's words), as a share of the blocks and of the words;
  the blocks sharing its parent; its distance from the longest block.
"""

from __future__ import annotations

import functools
import itertools
import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from services.bte.extractor import VOID, count_words
from services.cetd.extractor import composite_text_densities
from services.justext.extractor import load_stoplist, stoplist_names
from shared.blockmap import BlockTokens
from shared.contract import PathTree
from shared.flatpage import FlatPage, flatten_html
from shared.html import INVISIBLE
from shared.tokens import tokenize

Matrix = npt.NDArray[np.float64]
Ints = npt.NDArray[np.int64]
Flags = npt.NDArray[np.bool_]
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
STRUCTURE = ("heading_prev", "heading_next", "heading_distance", "wide_link_density",
             "wide_log_words", "path_share", "path_word_share", "log_sibling_blocks",
             "longest_distance")
FEATURES: tuple[str, ...] = (
    *OWN, *MARKUP, *DENSITY, *READABILITY, *LAYOUT, *PAGE,
    *(f"{name}_prev" for name in CONTEXT), *(f"{name}_next" for name in CONTEXT),
    "window_link_density", "window_log_words", *STRUCTURE,
)
# readability's initial candidate scores by tag, and which containers are paragraphs.
READABILITY_TAG_SCORE: dict[str, float] = {
    "div": 5, "pre": 3, "td": 3, "blockquote": 3, "address": -3, "ol": -3, "ul": -3,
    "dl": -3, "dd": -3, "dt": -3, "li": -3, "form": -3, "th": -5,
    **{f"h{i}": -5 for i in range(1, 7)},
}
READABILITY_PARAGRAPHS = frozenset({"p", "pre", "td", "div"})
# Element names by what they mark (bits of one per-element integer).
_NAV, _FORM, _LIST, _TABLE, _ARTICLE, _LINK, _LINK_TAG = 1, 2, 4, 8, 16, 32, 64
_CJK_FIRST = "\u3040"  # below it, no script that BTE counts by the character
_NAME_BITS: dict[str, int] = {
    **dict.fromkeys(NAVIGATION, _NAV), "form": _FORM,
    **dict.fromkeys(LISTS, _LIST), "table": _TABLE, **dict.fromkeys(ARTICLE, _ARTICLE),
    "a": _LINK | _LINK_TAG, "button": _LINK_TAG,  # CETD's link tags: a and button
}
_NAME_BITS["menu"] = _NAV | _LIST


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
    counts = Counter(tokens)
    found = list(counts.keys() & languages.keys())  # the page's stopwords, found in C
    if not found:
        return frozenset()
    ids = [languages[word] for word in found]
    weights = np.repeat(np.fromiter(map(counts.__getitem__, found), np.float64, len(found)),
                        np.fromiter(map(len, ids), np.int64, len(ids)))
    votes = np.bincount(np.fromiter(itertools.chain.from_iterable(ids), np.int64),
                        weights=weights, minlength=len(stoplists()))
    return stoplists()[int(np.argmax(votes))][1]  # on a tie, the first by name


@dataclass(frozen=True, slots=True)
class FusionBlock:
    """A text block: its text (whitespace normalised), its container (an element of the
    page's FlatPage) and the container's XPath."""

    text: str
    container: int
    path: str | None


@dataclass(frozen=True)
class PageFeatures:
    """A page's blocks, their tokens and their feature matrix (one row per block)."""

    blocks: list[FusionBlock]
    tokens: list[list[str]]
    matrix: Matrix
    tree: PathTree = "html5"  # the parse the blocks' paths name elements of

    @functools.cached_property
    def block_tokens(self) -> BlockTokens:
        """The blocks' tokens coded once, for aligning texts with them (the ensemble maps
        every member's text onto these blocks)."""
        return BlockTokens(self.tokens, coded=True)


def _covered(starts: Ints, last: Ints) -> Flags:
    """Per element: whether it lies in the subtree of one of the elements `starts`,
    itself included (a difference array over the subtrees' index ranges)."""
    n = len(last)
    steps = (np.bincount(starts, minlength=n + 1)[:n + 1]
             - np.bincount(last[starts] + 1, minlength=n + 1)[:n + 1])
    covered: Flags = np.cumsum(steps[:n]) > 0
    return covered


def _below(values: npt.NDArray[Any], last: Ints) -> Matrix:
    """Per element: the sum of `values` over its subtree, itself included."""
    cumulative = np.concatenate([[0.0], np.cumsum(values)])
    summed: Matrix = cumulative[last + 1] - cumulative[:len(last)]
    return summed


def _attribute_hints(marks: dict[int, tuple[str, str]], wanted: Sequence[bool]
                     ) -> tuple[Flags, Flags, Matrix]:
    """Per element: whether its class or id matches readability's negative or positive
    pattern, and readability's class weight (+25 per positive, -25 per negative
    attribute), for the `wanted` elements (others: no hint). One regex scan over the
    distinct attribute values joined, not one per element."""
    n = len(wanted)
    negative, positive = np.zeros(n, dtype=bool), np.zeros(n, dtype=bool)
    weight = np.zeros(n)
    marked = [(element, pair) for element, pair in marks.items() if wanted[element]]
    if not marked:
        return negative, positive, weight
    elements = np.array([element for element, _ in marked], dtype=np.int64)
    values = [value for _, pair in marked for value in pair]  # (class, id) per element
    distinct = list(dict.fromkeys(values))  # pages repeat their classes
    joined = "\n".join(distinct).lower()
    if len(joined) != sum(map(len, distinct)) + len(distinct) - 1:  # lower() grew a letter
        joined = "\n".join(value.lower() for value in distinct)
        distinct = [value.lower() for value in distinct]
        values = [value.lower() for value in values]
    starts = np.cumsum([0, *(len(value) + 1 for value in distinct)])[:-1]
    position = {value: i for i, value in enumerate(distinct)}
    which = np.fromiter(map(position.__getitem__, values), dtype=np.int64, count=len(values))
    hits = []
    for pattern in (NEGATIVE, POSITIVE):
        at = [match.start() for match in pattern.finditer(joined)]
        hit = np.zeros(len(distinct), dtype=bool)
        hit[np.searchsorted(starts, at, side="right") - 1] = True
        hits.append(hit[which].reshape(-1, 2))
    negative[elements] = hits[0].any(axis=1)
    positive[elements] = hits[1].any(axis=1)
    weight[elements] = 25.0 * (hits[1].sum(axis=1) - hits[0].sum(axis=1))
    return negative, positive, weight


def _link_chars(page: FlatPage, firsts: Ints, ends: Ints, chars: Matrix, in_link: Flags
                ) -> Matrix:
    """Characters of each block's text inside a link (each text piece whitespace
    normalised, as shared.html.text_blocks counts them): a block of one text (four in
    five) is all link or none; only blocks of several texts with a link are summed."""
    linked = in_link[np.array(page.holders, dtype=np.int64)]  # per text
    counts: Matrix = np.where(ends - firsts == 1, chars * linked[firsts], 0.0)
    running = np.concatenate([[0], np.cumsum(linked)])
    pieces, holders = page.texts, page.holders
    for i in np.flatnonzero((ends - firsts > 1) & (running[ends] > running[firsts])).tolist():
        counts[i] = min(chars[i], sum(len(" ".join(pieces[k].split()))
                                      for k in range(firsts[i], ends[i]) if in_link[holders[k]]))
    return counts


def _text_words(texts: Sequence[str]) -> Matrix:
    """BTE's words of each text (services/bte: whitespace-separated, CJK characters one
    by one); split in C, and only texts with characters from the CJK blocks up counted
    one by one."""
    words = np.fromiter(map(len, map(str.split, texts)), np.float64, len(texts))
    for k, text in enumerate(texts):
        if not text.isascii() and max(text) >= _CJK_FIRST:
            words[k] = count_words(text)
    return words


def _bte_shares(page: FlatPage, firsts: Ints, block_ends: Ints) -> Matrix:
    """Share of each block's words inside BTE's window (services/bte, default options:
    every start and end tag a token, void elements one, invisible ones one or two).

    The window i..j of texts maximises the words inside minus the tags between texts i
    and j; with W the running words and T the tags before each text, that is the
    largest (W_j - T_j) - (W_{i-1} - T_i) over i <= j: a running minimum (numpy),
    not Kadane's loop."""
    names = page.names
    invisible = np.fromiter(map(INVISIBLE.__contains__, names), dtype=bool, count=len(names))
    void = np.fromiter(map(VOID.__contains__, names), dtype=bool, count=len(names))
    start_tags = np.concatenate([[0], np.cumsum(1 + (invisible & ~void))])
    end_tags = np.concatenate([[0], np.cumsum((~invisible & ~void)[page.closed])])
    words = _text_words(page.texts)
    shares = np.zeros(len(firsts))
    if not words.any():
        return shares
    tags = (start_tags[np.array(page.opened, dtype=np.int64)]
            + end_tags[np.array(page.closes, dtype=np.int64)]).astype(np.float64)
    has = np.flatnonzero(words)  # texts with words, in order
    w, t = words[has], tags[has]
    running = np.cumsum(w)
    ends = running - t  # W_j - T_j
    starts = running - w - t  # W_{i-1} - T_i
    lowest = np.minimum.accumulate(starts)
    last = int(np.argmax(ends - lowest))
    first = int(np.argmin(starts[:last + 1]))
    inside = np.zeros(len(words))
    inside[has[first:last + 1]] = 1.0
    all_words = np.concatenate([[0.0], np.cumsum(words)])
    inside_words = np.concatenate([[0.0], np.cumsum(words * inside)])
    total = np.maximum(all_words[block_ends] - all_words[firsts], 1.0)
    inside_blocks: Matrix = (inside_words[block_ends] - inside_words[firsts]) / total
    return inside_blocks


def _readability(names: Sequence[str], parents: Ints, last: Ints, containers: Ints,
                 texts: Sequence[str], weight: Matrix, chars_below: Matrix,
                 links_below: Matrix) -> Matrix:
    """readability's (Arc90) candidate scores seen from each block: the score of its
    container's parent (the candidate its paragraph feeds) over the page's best, whether
    it lies in the article readability would keep, and the page's best score (log1p)."""
    rows = np.zeros((len(containers), len(READABILITY)))
    paragraphs = [i for i, (c, text) in enumerate(zip(containers.tolist(), texts, strict=True))
                  if len(text) >= 25 and names[c] in READABILITY_PARAGRAPHS and c > 0]
    if not paragraphs:
        return rows
    values = np.array([2.0 + texts[i].count(",") + min(len(texts[i]) / 100, 3.0)
                       for i in paragraphs])
    n = len(names)
    up = parents[containers[paragraphs]]
    grand = parents[up]
    has_grand = grand >= 0
    score = (np.bincount(up, weights=values, minlength=n)
             + np.bincount(grand[has_grand], weights=values[has_grand] / 2, minlength=n))
    candidates = np.unique(np.concatenate([up, grand[has_grand]]))
    initial = weight[candidates] + np.array([READABILITY_TAG_SCORE.get(names[c], 0.0)
                                             for c in candidates.tolist()])
    final = np.full(n, -math.inf)
    final[candidates] = ((initial + score[candidates])
                         * (1.0 - links_below[candidates] / np.maximum(chars_below[candidates], 1)))
    top = int(candidates[np.argmax(final[candidates])])
    best = float(final[top])
    threshold = max(10.0, 0.2 * best)
    article = [top]
    if parents[top] >= 0:
        article += candidates[(parents[candidates] == parents[top])
                              & (final[candidates] >= threshold)].tolist()
    inside = _covered(np.array(article, dtype=np.int64), last)
    own = parents[containers]
    scored = np.where(own >= 0, final[own], -math.inf)
    scored = np.where(np.isfinite(scored), scored, 0.0)
    rows[:, 0] = np.clip(scored / max(best, 1.0), -1.0, 1.0)
    rows[:, 1] = inside[containers]
    rows[:, 2] = math.log1p(max(best, 0.0))
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
    """Parse and flatten once and compute every block's features (module docstring)."""
    page = flatten_html(html, drop_hidden=True, attributes=True)
    all_texts, _ = page.block_texts()
    chosen = [i for i, text in enumerate(all_texts) if text]
    flat = [page.blocks[i] for i in chosen]
    texts = [all_texts[i] for i in chosen]
    tokens = [tokenize(text) for text in texts]
    n = len(flat)
    if n == 0:
        return PageFeatures([], tokens, np.zeros((0, len(FEATURES))), page.tree)
    blocks = [FusionBlock(text, block.container, page.path(block.container))
              for block, text in zip(flat, texts, strict=True)]
    names = page.names
    containers = np.array([block.container for block in flat], dtype=np.int64)
    container_list = containers.tolist()
    stop = page_stoplist(list(itertools.chain.from_iterable(tokens)))

    # Elements: what each is, its subtree (index..last), its ancestors' marks.
    m = len(names)
    index = np.arange(m)
    last = np.array(page.last, dtype=np.int64)
    parents = np.array(page.parents, dtype=np.int64)
    bits = np.fromiter(map(_NAME_BITS.get, names, itertools.repeat(0)), dtype=np.int64,
                       count=m)
    # Only the containers and their ancestors need class/id hints.
    holding = np.concatenate([[0], np.cumsum(np.bincount(containers, minlength=m))])
    negative, positive, weight = _attribute_hints(
        page.marks, (holding[last + 1] > holding[index]).tolist())
    in_link = _covered(np.flatnonzero(bits & _LINK), last)
    steps = np.bincount(index + 1, minlength=m + 1)[:m] - np.bincount(last + 1, minlength=m + 1)[:m]
    depth = np.cumsum(steps)  # ancestors of each element
    ancestry = np.column_stack([depth[containers]] + [
        _covered(np.flatnonzero(mask), last)[containers]
        for mask in (bits & _NAV, bits & _FORM, bits & _LIST, bits & _TABLE, bits & _ARTICLE,
                     negative, positive)]).astype(np.float64)

    # Text figures.
    words = np.array([len(t) for t in tokens], dtype=np.float64)
    chars = np.array([len(text) for text in texts], dtype=np.float64)
    firsts = np.array([block.first for block in flat], dtype=np.int64)
    ends = np.array([block.end for block in flat], dtype=np.int64)
    link = _link_chars(page, firsts, ends, chars, in_link)
    stopwords = np.array([sum(map(stop.__contains__, t)) for t in tokens], dtype=np.float64)
    punctuation = np.array([len(_PUNCTUATION.findall(text)) for text in texts], dtype=np.float64)
    digits = np.array([len(_DIGIT.findall(text)) for text in texts], dtype=np.float64)
    some_words = np.maximum(words, 1.0)
    own = np.column_stack([
        np.log1p(words), np.log1p(chars), link / chars, stopwords / some_words,
        np.minimum(punctuation / some_words, 2.0),
        [float(text[-1] in _SENTENCE_END) for text in texts],
        digits / chars, chars / some_words,
    ])
    groups = np.zeros((n, N_GROUPS))
    groups[np.arange(n), [TAG_GROUPS.get(names[c], N_GROUPS - 1) for c in container_list]] = 1.0

    # Density: CETD's Composite Text Density of the container, its parent, grandparent.
    chars_below = _below(np.bincount(containers, weights=chars, minlength=m), last)
    links_below = _below(np.bincount(containers, weights=link, minlength=m), last)
    link_tags = (bits & _LINK_TAG > 0).astype(np.float64)
    body = names.index("body") if "body" in names else 0
    body_chars, body_links = float(chars_below[body]), float(links_below[body])
    body_ratio = body_links / body_chars if body_chars else 0.0
    ctd = composite_text_densities(  # characters and counts: whole numbers
        chars_below.astype(np.int64), last - index, links_below.astype(np.int64),
        (_below(link_tags, last) - link_tags).astype(np.int64), body_ratio)
    up = np.where(parents < 0, index, parents)
    parent, grand = up[containers], up[up[containers]]
    some_body = max(body_chars, 1.0)
    density = np.column_stack([
        np.log1p(ctd[containers]), np.log1p(ctd[parent]), np.log1p(ctd[grand]),
        np.log1p(ctd[containers] / max(float(ctd[body]), 1e-6)),
        chars_below[parent] / some_body, chars_below[grand] / some_body,
        links_below[parent] / np.maximum(chars_below[parent], 1.0),
        links_below[grand] / np.maximum(chars_below[grand], 1.0),
    ])
    readability = _readability(names, parents, last, containers, texts, weight, chars_below,
                               links_below)

    # Layout: BTE's window, position, the longest block's parent and grandparent.
    longest = int(words.argmax())
    longest_parent = int(parents[containers[longest]])
    longest_grand = int(parents[longest_parent]) if longest_parent >= 0 else -1
    block_parents = parents[containers]
    block_grands = np.where(block_parents >= 0, parents[block_parents], -1)
    total_words = float(words.sum())
    before = np.concatenate([[0.0], np.cumsum(words)[:-1]])
    layout = np.column_stack([
        _bte_shares(page, firsts, ends),
        np.arange(n) / max(n - 1, 1),
        before / max(total_words, 1.0),
        words / max(float(words.max()), 1.0),
        (block_parents >= 0) & (block_parents == longest_parent),
        (block_parents >= 0) & (longest_grand >= 0)
        & ((block_parents == longest_grand) | (block_grands == longest_grand)),
    ])
    page_figures = np.tile([math.log1p(total_words), math.log1p(n),
                            float(link.sum() / max(chars.sum(), 1.0))], (n, 1))

    # Context: the neighbours' text figures and a five-block window.
    context = own[:, [OWN.index(name) for name in CONTEXT]]
    window_words = _window_sum(words, 2)
    window_link = _window_sum(link / chars * words, 2) / np.maximum(window_words, 1.0)

    # Structure: headings nearby, a wider window, blocks of the same markup and parent.
    heading = groups[:, TAG_GROUPS["h1"]]
    since = np.arange(n) - np.maximum.accumulate(np.where(heading > 0, np.arange(n), -1))
    since = np.where(since > np.arange(n), n, since)  # no heading before: as far as can be
    wide_words = _window_sum(words, 10)
    marks = page.marks
    signatures = [(names[c], marks.get(c, ("", ""))[0], names[p], marks.get(p, ("", ""))[0])
                  for c, p in zip(container_list, block_parents.tolist(), strict=True)]
    same = Counter(signatures)
    same_words: Counter[tuple[str, str, str, str]] = Counter()
    for signature, count in zip(signatures, words.tolist(), strict=True):
        same_words[signature] += count
    siblings = np.bincount(block_parents + 1)[block_parents + 1]
    structure = np.column_stack([
        _shift(heading, 1), _shift(heading, -1), np.log1p(since),
        _window_sum(link / chars * words, 10) / np.maximum(wide_words, 1.0),
        np.log1p(wide_words),
        [same[s] / n for s in signatures],
        [same_words[s] / max(total_words, 1.0) for s in signatures],
        np.log1p(siblings), (np.arange(n) - longest) / n,
    ])
    matrix = np.hstack([own, groups, ancestry, density, readability, layout, page_figures,
                        _shift(context, 1), _shift(context, -1),
                        window_link[:, None], np.log1p(window_words)[:, None], structure])
    return PageFeatures(blocks, tokens, matrix, page.tree)
