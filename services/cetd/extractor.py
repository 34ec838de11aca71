"""Content Extraction via Text Density (Sun, Song, Liao, SIGIR 2011; Song, Sun, Liao,
KAIS 2015) as a pure extractor.

Descriptions of Composite Text Density that circulate on the web are often garbled
(the formula cut after `log_{ln`). We follow the paper (section 3) and its authors' code
(github.com/FeiSun/ContentExtraction, textdensity.cpp), which agree:

    TD_i  = C_i / T_i
    CTD_i = C_i / T_i * log_B(C_i / LC_i * T_i / LT_i),
        B = ln(C_i / nonLC_i * LC_i + LC_b / C_b * C_i + e)

C: characters in the subtree, T: tags in the subtree, LC: characters inside links,
LT: link tags in the subtree, nonLC = C - LC, b: the <body>. Guards, as the paper
and its code set them: T, LC, LT and nonLC that are 0 count as 1 (a leaf has no tags
below it; a node without links would divide by zero); a node without characters has
density 0. With these guards C*T >= LC*LT (links are part of the subtree), so the
logarithm is never negative; and C/nonLC*LC >= 1, so the base ln(...) is at least
ln(e + 1) > 1 and log_base(y) = ln(y) / ln(ln(...)) never divides by zero or flips sign.

DensitySum_i is the sum of the densities of i's children. As in the authors' code the
text pieces directly inside i count as children too (a text node has C characters,
no tags, no links, or only link characters inside a link), so a <div> of text and
<br>s is not worth nothing. The content subtree is the node with the largest
DensitySum; the threshold is the density of <body> (`threshold: body`, the paper) or
the smallest density on the path from <body> to that node (`threshold: path`, the
authors' code). The paper's ExtractContent procedure then runs from <body>: a
node whose density reaches the threshold has the largest-DensitySum node of its
subtree marked as content and its children visited in turn; below the threshold a
subtree is left out.

Hybrid Text Density (measure `htd`, Song, Sun, Liao 2015, Definition 3.4) weighs
each text leaf's characters by the visual importance VI in [0, 1] of its node in the
page as a browser draws it: HC_i = VI_i * C_i for a leaf, the sum of the children's
HC for other nodes; HC replaces C (and HC_b replaces C_b) in the CTD formula, and a
T_i of 0 becomes HC_i / C_i. The layout comes from headless Chromium (shared.layout,
joined to the elements by XPath); VI itself is a documented choice from the rendered
boxes (visual_importance), since the paper's formula was not available to us. A
request for htd where no browser can run is refused (503), never answered with ctd.

How it runs: the page is parsed once into a shared.flatpage.FlatPage (lexbor), whose
walk gives every element, the text pieces with the element holding each, and the text
blocks. Elements are numbered in document order, so a subtree is a contiguous range
i..last[i], and C, T, LC and LT of every node are differences of cumulative sums
(numpy), as are the densities: no Python-level work per node or per tag. A text's
characters come from its block's normalised text when it is the block's only text
(piece_characters), else from text_characters (all ASCII texts at once, others one by
one).

Counting: characters are the non-whitespace characters of visible text (the
whitespace of HTML source is layout, not text); tags are visible elements (script,
style and the other shared.html.INVISIBLE elements are dropped first, as the
authors' code drops elements rendered with display:none, and so are elements hidden
by a `hidden` attribute or an inline display:none when `drop_hidden` is on); links
are <a> and <button>.
"""

from __future__ import annotations

import math
import operator
import struct
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib.metadata import version
from itertools import compress
from typing import Literal

import numpy as np
import numpy.typing as npt
from pydantic import Field

from shared.answer import ServiceError
from shared.contract import Algorithm, Block, Extraction, Options, PageError
from shared.flatpage import FlatBlock, FlatPage, flatten_html, tree_details
from shared.layout import (
    Box,
    BrowserUnavailableError,
    Layout,
    LayoutFailedError,
    browser_problem,
    chromium_path,
    layout,
)

LINKS = frozenset({"a", "button"})
_ARGMAX_QUERIES = 32
# What str.split() takes for whitespace among ASCII characters: deleted in C by
# bytes.translate, which counts characters without building the words.
_ASCII_WHITESPACE = bytes(c for c in range(128) if chr(c).isspace())
Ints = npt.NDArray[np.int64]
Floats = npt.NDArray[np.float64]


class CetdOptions(Options):
    measure: Literal["td", "ctd", "htd"] = Field(
        "ctd", description="Text Density (C/T), Composite Text Density (with link "
        "statistics) or Hybrid Text Density (CTD with characters weighted by their visual "
        "importance in the page as headless Chromium lays it out; needs a browser, else 503).")
    javascript: bool = Field(
        False, description="htd only: run the page's scripts before the layout is measured "
        "(they still get no network).")
    threshold: Literal["body", "path"] = Field(
        "body", description="The density of <body> (the paper) or the smallest density on the "
        "path from <body> to the largest-DensitySum node (the authors' code).")
    drop_hidden: bool = Field(
        True, description="Leave out elements hidden by a `hidden` attribute or an inline "
        "display:none / visibility:hidden, as a browser would not render them.")


def text_density(chars: int, tags: int) -> float:
    """TD = C / T, with T = 0 counted as 1 (a leaf) and 0 for a node without text."""
    if chars == 0:
        return 0.0
    return chars / max(tags, 1)


def composite_text_density(chars: int, tags: int, link_chars: int, link_tags: int,
                           body_link_ratio: float) -> float:
    """CTD of the paper (Eq. 2); `body_link_ratio` is LC_b / C_b. Guards: see the module."""
    if chars == 0:
        return 0.0
    non_link = max(chars - link_chars, 1)
    t, lc, lt = max(tags, 1), max(link_chars, 1), max(link_tags, 1)
    base = math.log(chars / non_link * lc + body_link_ratio * chars + math.e)
    return chars / t * math.log(chars * t / (lc * lt)) / math.log(base)


def composite_text_densities(chars: Ints, tags: Ints, link_chars: Ints, link_tags: Ints,
                             body_link_ratio: float) -> Floats:
    """composite_text_density over arrays (one numpy pass for all nodes of a page)."""
    c = np.maximum(chars, 1).astype(np.float64)
    t, lc, lt = np.maximum(tags, 1), np.maximum(link_chars, 1), np.maximum(link_tags, 1)
    non_link = np.maximum(chars - link_chars, 1)
    base = np.log(c / non_link * lc + body_link_ratio * c + math.e)
    densities: Floats = c / t * np.log(c * t / (lc * lt)) / np.log(base)
    return np.where(chars == 0, 0.0, densities)


def hybrid_text_densities(hybrid_chars: Floats, chars: Ints, tags: Ints, link_chars: Ints,
                          link_tags: Ints, body_link_ratio: float) -> Floats:
    """Hybrid Text Density (Song, Sun, Liao 2015, Definition 3.4) over arrays: CTD with
    C_i replaced by HC_i (and LC_b / C_b by LC_b / HC_b, `body_link_ratio`); T_i of 0
    becomes HC_i / C_i instead of 1, as the paper adapts it. LC, LT and nonLC stay
    counts of characters and tags. Guards: a node without hybrid characters has density
    0, and so has one whose logarithm turns negative (hybrid characters below its link
    characters: the paper's adaption only covers leaves)."""
    hc = np.maximum(hybrid_chars, 1e-12)
    c = np.maximum(chars, 1).astype(np.float64)
    t = np.where(tags == 0, hc / c, tags.astype(np.float64))
    lc, lt = np.maximum(link_chars, 1), np.maximum(link_tags, 1)
    non_link = np.maximum(chars - link_chars, 1)
    base = np.log(hc / non_link * lc + body_link_ratio * hc + math.e)
    densities: Floats = hc / t * np.log(hc * t / (lc * lt)) / np.log(base)
    return np.where((hybrid_chars <= 0) | (chars == 0), 0.0, np.maximum(densities, 0.0))


@dataclass
class PageMeasures:
    """CETD's figures per element of a FlatPage (arrays indexed by element; elements
    that are invisible or hidden have `visible` False and count for nothing)."""

    page: FlatPage
    visible: npt.NDArray[np.bool_]
    chars: Ints
    tags: Ints
    link_chars: Ints
    link_tags: Ints
    density: Floats
    density_sum: Floats
    holders: Ints  # per text of the page (FlatPage.texts): its element
    piece_chars: Ints  # and its characters
    _ranked: Floats = field(init=False, repr=False)
    _queries: int = field(default=0, init=False, repr=False)
    _best: list[int] = field(default_factory=list, init=False, repr=False)
    _visible: list[bool] = field(default_factory=list, init=False, repr=False)

    def __post_init__(self) -> None:
        self._ranked = np.where(self.visible, self.density_sum, -np.inf)
        self._visible = self.visible.tolist()

    def best(self, element: int) -> int:
        """The node of largest DensitySum in the subtree (the first in document order).

        A subtree is a range, so the first few questions are one argmax each (a page
        asks a handful); a page that keeps asking (a deep chain of dense nodes, where
        that would be quadratic) gets every answer at once from one linear pass."""
        if self._best:
            return self._best[element]
        self._queries += 1
        if self._queries > _ARGMAX_QUERIES:
            self._best = self._all_best()
            return self._best[element]
        return element + int(self._ranked[element:self.page.last[element] + 1].argmax())

    def _all_best(self) -> list[int]:
        """best() of every element, children reporting to their parents in reverse
        document order: a tie goes to the node itself, then to the earlier child."""
        ranked = self._ranked.tolist()
        parents = self.page.parents
        best = [-1] * len(ranked)
        best_sum = [-math.inf] * len(ranked)
        for element in range(len(ranked) - 1, -1, -1):
            if ranked[element] == -math.inf:  # not visible
                continue
            if best[element] < 0 or ranked[element] >= best_sum[element]:
                best[element], best_sum[element] = element, ranked[element]
            parent = parents[element]
            if parent >= 0 and (best[parent] < 0 or best_sum[element] >= best_sum[parent]):
                best[parent], best_sum[parent] = best[element], best_sum[element]
        return best

    def children(self, element: int) -> list[int]:
        """The visible children, in document order (a subtree is a contiguous range)."""
        found = []
        child = element + 1
        last, visible = self.page.last, self._visible
        while child <= last[element]:
            if visible[child]:
                found.append(child)
            child = last[child] + 1
        return found

    def body(self) -> int:
        """The <body> element (the root's first visible <body> child), else the root."""
        return _body_of(self.page.names, self.visible, self.page.last)


def text_characters(texts: list[str]) -> list[int]:
    """The non-whitespace characters of each text (what str.split() keeps).

    The ASCII texts all at once in C: joined by NULs, encoded, their whitespace
    deleted, split again (into more parts than texts where a text holds a NUL itself:
    then each is counted alone). Texts with other characters are counted one by one
    (their UTF-8 bytes are not their characters, and no-break spaces and the like are
    whitespace too)."""
    joined = "\0".join(texts)
    data = joined.encode("utf-8", "surrogatepass").translate(None, _ASCII_WHITESPACE)
    counts = list(map(len, data.split(b"\0")))
    if len(counts) != len(texts):
        return [len("".join(text.split())) for text in texts]
    if not joined.isascii():  # the non-ASCII texts, picked out in C
        for k in compress(range(len(texts)), map(operator.not_, map(str.isascii, texts))):
            counts[k] = len("".join(texts[k].split()))
    return counts


def piece_characters(page: FlatPage) -> list[int]:
    """The non-whitespace characters of each of the page's texts. A block of one text
    (four in five) has them from its normalised text, which the extraction needs anyway
    (its length less the spaces between its words); the others are counted by
    text_characters."""
    texts = page.texts
    counts = [0] * len(texts)
    several: list[FlatBlock] = []  # the blocks of several texts
    their_texts: list[str] = []
    for block, text, words in zip(page.blocks, *page.block_texts(), strict=True):
        if block.end - block.first == 1:
            counts[block.first] = len(text) - words + 1 if words else 0
        else:
            several.append(block)
            their_texts += texts[block.first:block.end]
    if several:
        found, offset = text_characters(their_texts), 0
        for block in several:
            counts[block.first:block.end] = found[offset:offset + block.end - block.first]
            offset += block.end - block.first
    return counts


def int_array(values: list[int]) -> Ints:
    """A list of ints as a writable int64 array, packed by struct: fewer instructions
    per item than np.array(values, dtype=np.int64) takes."""
    return np.frombuffer(bytearray(struct.pack(f"{len(values)}q", *values)), dtype=np.int64)


def int_arrays(*lists: list[int]) -> list[Ints]:
    """Several lists of ints as int64 arrays: views on one buffer, so that a page's
    lists take one conversion instead of one each."""
    every: list[int] = []
    for values in lists:
        every += values
    joined = int_array(every)
    views, start = [], 0
    for values in lists:
        views.append(joined[start:start + len(values)])
        start += len(values)
    return views


def _in_ranges(starts: Ints, last: Ints, count: int) -> npt.NDArray[np.bool_]:
    """Which elements lie in the subtree of any of `starts` (ranges start..last[start]):
    +1 where a range opens, -1 after it closes, summed up."""
    marks = (np.bincount(starts, minlength=count + 1)
             - np.bincount(last.take(starts) + 1, minlength=count + 1))
    inside: npt.NDArray[np.bool_] = np.cumsum(marks[:count]) > 0
    return inside


def measure_page(page: FlatPage, options: CetdOptions,
                 importance: Floats | None = None) -> PageMeasures:
    """C, T, LC, LT, densities and DensitySums of every visible element of a page
    flattened with `drop_hidden` as in the options; `htd` needs `importance`, the
    visual importance of every element (a text piece has its holder's).

    The walk (shared.flatpage) left invisible and dropped hidden elements empty and
    gave each text piece with its holder. Sums over subtrees are differences of
    cumulative sums over the document-order element ranges i..last[i] (C and LC count
    the element's own text, T and LT only what is below it). The figures of the
    elements and of the text pieces (leaves: no tags, no links) sit side by side in
    one matrix, so each density formula runs once over both."""
    names = page.names
    count, pieces = len(names), len(page.texts)
    # The <a> and <button> elements, found by a loop in C (compress and map). A hidden
    # one holds nothing, so only its own count as a link tag is to be left out.
    links = list(compress(range(count), map(LINKS.__contains__, names)))
    last, parents, holders, piece_chars, link_starts = int_arrays(
        page.last, page.parents, page.holders, piece_characters(page), links)
    visible = np.ones(count, dtype=np.bool_)
    visible[page.emptied] = False  # nothing below them
    in_link = _in_ranges(link_starts, last, count)
    # Per element: its own characters, visible, its own characters inside a link, a
    # visible link.
    own = np.zeros((4, count), dtype=np.int64)
    own[0] = np.bincount(holders, weights=piece_chars, minlength=count)
    own[1] = visible
    np.multiply(own[0], in_link, out=own[2])
    own[3][link_starts] = own[1].take(link_starts)
    running = np.cumsum(own, axis=1)
    # Rows C, T, LC, LT; columns the elements, then the text pieces. take() rather than
    # fancy indexing: a fraction of its overhead on a 2-d array.
    figures = np.zeros((4, count + pieces), dtype=np.int64)
    nodes = figures[:, :count]
    np.subtract(running.take(last, axis=1), running, out=nodes)  # over i+1..last[i]
    nodes[0::2] += own[0::2]  # C and LC count the node's own text too
    figures[0, count:] = piece_chars
    np.multiply(piece_chars, in_link.take(holders), out=figures[2, count:])
    chars, tags, link_chars, link_tags = nodes
    all_chars, all_tags, all_link_chars, all_link_tags = figures
    root_or_body = _body_of(names, visible, page.last)
    ratio = float(link_chars[root_or_body] / chars[root_or_body]) if chars[root_or_body] else 0.0
    both: Floats  # the densities of the elements, then of the text pieces
    if options.measure == "htd":
        if importance is None:
            raise ValueError("htd needs the visual importance of every element")
        piece_hybrid = piece_chars * importance[holders]
        running_hybrid = np.zeros(count + 1)
        np.cumsum(np.bincount(holders, weights=piece_hybrid, minlength=count),
                  out=running_hybrid[1:])
        hybrid = running_hybrid[last + 1] - running_hybrid[:-1]
        body_hybrid = float(hybrid[root_or_body])
        hybrid_ratio = float(link_chars[root_or_body] / body_hybrid) if body_hybrid > 0 else 0.0
        both = hybrid_text_densities(np.concatenate((hybrid, piece_hybrid)), all_chars,
                                     all_tags, all_link_chars, all_link_tags, hybrid_ratio)
    elif options.measure == "ctd":
        both = composite_text_densities(all_chars, all_tags, all_link_chars, all_link_tags,
                                        ratio)
    else:  # a text piece's TD is its C
        both = np.where(all_chars == 0, 0.0, all_chars / np.maximum(all_tags, 1))
    # An invisible element has no characters, so its density is 0 already; the root
    # has no parent and adds to nothing.
    density, piece_density = both[:count], both[count:]
    density_sum: Floats = np.add(
        np.bincount(parents[1:], weights=density[1:], minlength=count),
        np.bincount(holders, weights=piece_density, minlength=count))
    return PageMeasures(page, visible, chars, tags, link_chars, link_tags, density,
                        density_sum, holders, piece_chars)


def _body_of(names: list[str], visible: npt.NDArray[np.bool_], last: Sequence[int] | Ints) -> int:
    """The <body> element (the root's first visible <body> child), else the root."""
    child = 1
    while child <= last[0]:
        if visible[child] and names[child] == "body":
            return child
        child = int(last[child]) + 1
    return 0


def mark_content(measures: PageMeasures, options: CetdOptions) -> tuple[npt.NDArray[np.bool_],
                                                                        float]:
    """The paper's threshold and ExtractContent: which elements are content."""
    start = measures.body()
    target = measures.best(start)
    density = measures.density
    threshold = float(density[start])
    if options.threshold == "path":
        parents = measures.page.parents
        index = target
        while index != start and index >= 0:
            threshold = min(threshold, float(density[index]))
            index = parents[index]
    roots = {target}  # the content subtree itself, whatever the threshold
    # A child whose subtree holds its parent's best node has that node as its own best
    # too (the first largest of the parent's range is the first of the child's), so
    # the walk down towards the content asks for few argmaxes.
    known = {start: target}
    stack = [start]
    while stack:
        index = stack.pop()
        if index in roots or density[index] < threshold:
            continue
        best = known[index] if index in known else measures.best(index)
        roots.add(best)
        children = measures.children(index)
        if best != index:
            known[children[bisect_right(children, best) - 1]] = best
        stack.extend(reversed(children))
    count = len(density)
    marks = np.zeros(count + 1, dtype=np.int64)  # +1 at a root, -1 past its subtree
    for root in roots:
        marks[root] += 1
        marks[measures.page.last[root] + 1] -= 1
    content: npt.NDArray[np.bool_] = (np.cumsum(marks[:-1]) > 0) & measures.visible
    return content, threshold


def visual_importance(page: FlatPage, rendered: Layout) -> Floats:
    """VI in [0, 1] of every element of `page`, from its box in `rendered` (joined by
    XPath).

    The paper (Song, Sun, Liao 2015, section 3) weights a leaf's characters by the
    visual importance of its DOM node as a WebKit rendering draws it; its exact
    formula was not available to us, so VI here is a documented choice from the
    rendered boxes:

        VI = rendered * (1 + centrality) / 2 * min(1, font size / the page's text size)

    rendered: 0 for an element not drawn (display:none, visibility:hidden, zero size,
    entirely outside the page); centrality: the share of the element's width inside
    the central half of the viewport (x from width/4 to 3 width/4; an element wider
    than that half counts against the half), so a narrow side column far from the
    centre line weighs half what the main column does; the page's text size is the
    median font size of its characters, so small print weighs less. An element
    without a box (one the two parsers placed differently, or nested too deep for a
    path) takes its parent's VI; the root's default is 1."""
    count = len(page.names)
    importance = np.ones(count)
    holders, chars = page.holders, piece_characters(page)
    boxes = rendered.boxes
    found: list[Box | None] = [boxes.get(path) if (path := page.path(e)) else None
                               for e in range(count)]
    sizes = [(box.font_size, n) for holder, n in zip(holders, chars, strict=True)
             if n and (box := found[holder]) is not None and box.rendered]
    text_size = weighted_median(sizes) if sizes else 16.0
    band_left, band_right = rendered.viewport_width / 4, rendered.viewport_width * 3 / 4
    parents = page.parents
    for element in range(count):
        box = found[element]
        if box is None:
            importance[element] = importance[parents[element]] if element else 1.0
            continue
        if not box.rendered:
            importance[element] = 0.0
            continue
        inside = max(0.0, min(box.x + box.width, band_right) - max(box.x, band_left))
        centrality = inside / min(box.width, band_right - band_left)
        font = min(1.0, box.font_size / text_size) if text_size > 0 else 1.0
        importance[element] = (1.0 + centrality) / 2.0 * font
    return importance


def weighted_median(values: list[tuple[float, int]]) -> float:
    """The value below and above which lie half the weight each."""
    ordered = sorted(values)
    half, seen = sum(weight for _, weight in ordered) / 2, 0
    for value, weight in ordered:
        seen += weight
        if seen >= half:
            return value
    return ordered[-1][0]


def page_layout(html: str, options: CetdOptions) -> Layout:
    """The rendered layout for htd, a 503 where no browser can run, or a 422 for a page
    the browser could not lay out (past its memory, crashed, its scripts broke it):
    the page's doing, so not logged as the extractor's failure."""
    try:
        return layout(html, javascript=options.javascript)
    except BrowserUnavailableError as exc:
        raise ServiceError(503, "no_browser", f"measure htd needs a browser: {exc}") from None
    except LayoutFailedError as exc:
        raise PageError(f"the browser could not lay the page out: {exc}") from None


def extract(html: str, options: CetdOptions, url: str | None = None) -> Extraction:
    page = flatten_html(html, drop_hidden=options.drop_hidden)
    importance = (visual_importance(page, page_layout(html, options))
                  if options.measure == "htd" else None)
    measures = measure_page(page, options, importance)
    content = mark_content(measures, options)[0]
    # Content when most of its characters sit in content nodes (the marked node can be
    # an inline element inside a paragraph as well as the paragraph's ancestor).
    starts = [block.first for block in page.blocks]
    chars = measures.piece_chars
    totals = np.add.reduceat(chars, starts).tolist() if starts else []
    inside = np.add.reduceat(chars * content[measures.holders], starts).tolist() if starts else []
    # Scores: the containers' densities, rounded in one numpy call (Python's round()
    # takes a decimal conversion per block, a visible share of the whole extraction).
    containers = [block.container for block in page.blocks]
    scores = np.round(measures.density[containers], 4).tolist()
    texts = page.block_texts()[0]
    path = page.path
    return Extraction([
        Block(texts[n], inside[n] * 2 > totals[n], scores[n], path(containers[n]))
        for n in range(len(containers)) if totals[n]], details=tree_details(page.tree))


def engine() -> str:
    """The parser, and whether measure htd can run here (a browser is available)."""
    problem = browser_problem()
    if problem:
        return f"lexbor; htd unavailable: {problem}"
    return f"lexbor; htd: headless Chromium ({chromium_path()}) through Playwright"


ALGORITHM = Algorithm(
    name="cetd",
    version=version("boilerbench"),
    description="Content Extraction via Text Density: per DOM node Text Density, Composite "
    "Text Density or Hybrid Text Density (characters weighted by their visual importance in "
    "a headless Chromium layout; VI = rendered x (1 + share of the width in the viewport's "
    "central half) / 2 x min(1, font size / the page's median text size), a documented "
    "choice: the paper's exact VI formula was not available), DensitySum to find the content "
    "subtree, the density of <body> as threshold. `engine` says whether a browser is "
    "available for htd.",
    reference="Sun, F., Song, D., Liao, L. DOM based content extraction via text density "
    "(SIGIR 2011), doi:10.1145/2009916.2009952; Song, D., Sun, F., Liao, L. A hybrid "
    "approach for content extraction with text density and visual importance of DOM nodes "
    "(Knowledge and Information Systems 42, 2015), doi:10.1007/s10115-013-0687-x",
    options_model=CetdOptions,
    extract=extract,
    score="The density of the block's container element under the chosen measure (TD: "
    "characters per tag of its subtree; CTD and HTD weigh that by its links, HTD its "
    "characters by visual importance too), the figure compared with the page's threshold; "
    "not a probability, no upper bound.",
    score_range=(0.0, None),
    path_tree="html5",
    engine=engine,
)
