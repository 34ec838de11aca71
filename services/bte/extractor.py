"""Body Text Extraction (Finn, Kushmerick, Smyth 2001) as a pure extractor.

The page is a sequence of tokens, B_n = 1 for a tag and B_n = 0 for a word. BTE
chooses the window i..j maximising

    T(i, j) = sum_{n<i} B_n + sum_{i<=n<=j} (1 - B_n) + sum_{n>j} B_n.

Writing the tags outside the window as (all tags) - (tags inside) gives

    T(i, j) = N_tags + sum_{i<=n<=j} (1 - 2 B_n),

so with a gain of +1 per word and -1 per tag the best window is the maximum-sum
subarray of the gains (N_tags is a constant): Kadane's algorithm finds it exactly in
one linear pass. An optimal window never starts or ends on a tag when the page has a
word (dropping the tag raises the sum), nor inside a run of words (extending to the
whole run raises it), so the extractor runs Kadane over runs (a text piece of k words
gains +k, m consecutive tags gain -m) with the same optimum and the same tie-break.

Tokens come from a shared.flatpage.FlatPage (parsed by lexbor and flattened in one
walk, which costs about as much as lxml's bare parse of the page; walking lxml's own
tree made BTE five to eight times that parse). The tags between two texts are
differences of running sums over the elements in document and in closing order, so
the extractor loops over texts, not over every tag. Every element
gives its start tag and, unless it is void (br, img, ...), its end tag; words are
the whitespace-separated pieces of visible text, except that in scripts written
without spaces (Chinese, Japanese kana and kanji) each character is a word, as
otherwise a whole paragraph would weigh as little as one tag. Comments never count.
Text inside invisible elements (script, style, ...) is never words; whether such
elements count as tags is the `invisible_tags` option.
By default every tag counts, as in the paper's source-level token stream.

Blocks are the page's visible text between block-level boundaries (cut by the walk
as shared.html.text_blocks cuts them; each knows its texts, so its word runs).
Block paths are XPaths in the HTML5 tree lexbor builds (as a browser's), which
has the <tbody> and <head> that libxml2 leaves out.
A block is content when at least `min_inside` (default: half) of its words lie in
the window; the window is contiguous, so only the blocks at its two ends can be
partial.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from importlib.metadata import version
from itertools import accumulate
from operator import add

from pydantic import Field

from shared.contract import Algorithm, Block, Extraction, Options
from shared.flatpage import FlatPage, flatten_html, tree_details
from shared.html import INVISIBLE

# Elements without an end tag in HTML source: they are one tag token, not two.
VOID = frozenset({"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta",
                  "param", "source", "track", "wbr", "keygen", "frame", "basefont", "isindex"})
# Text-level formatting elements, counted as tags only when `inline_tags` is on.
INLINE_FORMATTING = frozenset({"b", "i", "u", "s", "em", "strong", "span", "font", "small", "big",
                               "sub", "sup", "abbr", "acronym", "cite", "code", "dfn", "kbd",
                               "mark", "q", "samp", "strike", "tt", "var", "time", "bdi", "bdo",
                               "ins", "del", "nobr"})
# A word: one character of a script written without spaces, or a run of other non-space.
_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff66-\uff9f"
_WORD = re.compile(f"[{_CJK}]|[^\\s{_CJK}]+")
_CJK_FIRST = "\u3040"


def _below_cjk(text: str) -> bool:
    """Whether all of a text lies below the first CJK block (max() in C): its words are
    then its whitespace-separated pieces, no regex needed."""
    return text.isascii() or max(text) < _CJK_FIRST


def count_words(text: str) -> int:
    """BTE's words in a text piece (whitespace-separated; CJK characters one by one)."""
    if _below_cjk(text):
        return len(text.split())
    return len(_WORD.findall(text))


class BteOptions(Options):
    end_tags: bool = Field(
        True, description="Count end tags as tag tokens, as they appear in the HTML source "
        "(void elements such as <br> and <img> are always one token).")
    invisible_tags: bool = Field(
        True, description="Count invisible elements (script, style, iframe, ...) as tag tokens; "
        "their text is never words either way.")
    inline_tags: bool = Field(
        True, description="Count text-level formatting elements (b, i, em, strong, span, font, "
        "...) as tags. Off, only structural tags and links break up the body text.")
    min_inside: float = Field(
        0.5, gt=0, le=1, description="A block is content when at least this fraction of its "
        "words lies inside the window (only the two blocks at the window's edges can be "
        "partial).")


def best_window(gains: Sequence[int]) -> tuple[int, int, int]:
    """The non-empty window i..j with the largest sum of `gains`, and that sum.

    Kadane's algorithm: O(n), exact. Among optimal windows it returns the one with
    the smallest j and, for that j, the smallest i (a running sum of exactly zero is
    kept, not restarted). An empty sequence gives (0, -1, 0).
    """
    if not gains:
        return 0, -1, 0
    best_i = best_j = 0
    best = gains[0]
    start, running = 0, 0
    for n, gain in enumerate(gains):
        if running < 0:
            start, running = n, 0
        running += gain
        if running > best:
            best, best_i, best_j = running, start, n
    return best_i, best_j, best


def _tags(name: str, options: BteOptions) -> tuple[int, int]:
    """Per element name: tag tokens at its start and at its end. An invisible element
    is one or two tags at its start (the FlatPage gives it no content)."""
    if name in INVISIBLE:
        return (0 if not options.invisible_tags else 1 if name in VOID or not options.end_tags
                else 2), 0
    counted = options.inline_tags or name not in INLINE_FORMATTING
    return int(counted), int(counted and options.end_tags and name not in VOID)


def tokenize_page(page: FlatPage, options: BteOptions) -> tuple[list[int], list[int], list[int]]:
    """The run-length gains (+k for k words, -m for m tags) and, per text of the page
    (FlatPage.texts), its words and the index of its run in the gains (-1 for a text
    without words). The tags before a text are the start tags of the elements opened
    before it and the end tags closed before it (FlatPage.opened, .closes): running
    sums of both give each stretch of tags without a walk."""
    names = page.names
    at_start: dict[str, int] = {}
    at_end: dict[str, int] = {}
    for name in set(names):
        at_start[name], at_end[name] = _tags(name, options)
    # Running sums over the elements in document order and in closing order (map and
    # accumulate loop in C).
    start_tags = list(accumulate(map(at_start.__getitem__, names), initial=0))
    end_tags = list(accumulate(map(at_end.__getitem__, map(names.__getitem__, page.closed)),
                               initial=0))
    texts = page.texts
    text_words = [0] * len(texts)
    for block, words in zip(page.blocks, page.block_texts()[1], strict=True):
        first, end = block.first, block.end
        if end - first == 1 and _below_cjk(texts[first]):
            text_words[first] = words  # the block's one text: its words are counted
        else:
            text_words[first:end] = map(count_words, texts[first:end])
    tags_before = map(add, map(start_tags.__getitem__, page.opened),
                      map(end_tags.__getitem__, page.closes))
    gains: list[int] = []
    text_runs = [-1] * len(texts)
    before = 0  # tags before the last text with words
    for k, (words, tags) in enumerate(zip(text_words, tags_before, strict=True)):
        if words:
            if tags > before:
                gains.append(before - tags)
                before = tags
            text_runs[k] = len(gains)
            gains.append(words)
    if start_tags[-1] + end_tags[-1] > before:
        gains.append(before - start_tags[-1] - end_tags[-1])
    return gains, text_words, text_runs


def extract(html: str, options: BteOptions, url: str | None = None) -> Extraction:
    page = flatten_html(html)
    gains, text_words, text_runs = tokenize_page(page, options)
    first, last, _ = best_window(gains)
    words_inside = [words if first <= run <= last else 0
                    for words, run in zip(text_words, text_runs, strict=True)]
    path = page.path
    blocks = []
    for block, text in zip(page.blocks, page.block_texts()[0], strict=True):
        start, end = block.first, block.end
        if end - start == 1:  # four blocks in five: one text
            total, inside = text_words[start], words_inside[start]
        else:
            total, inside = sum(text_words[start:end]), sum(words_inside[start:end])
        if not total:
            continue
        share = inside / total
        content = share >= options.min_inside
        if inside == total:
            label = "inside"
        elif not inside:
            label = "outside"
        else:  # one of the window's two edge blocks: the only shares that need rounding
            label, share = "partial", round(share, 4)
        blocks.append(Block(text, content, share, path(block.container), label))
    return Extraction(blocks, details=tree_details(page.tree))


ALGORITHM = Algorithm(
    name="bte",
    version=version("boilerbench"),
    description="Body Text Extraction: the page as a tag/word token sequence; the window "
    "maximising tags outside plus words inside (found exactly, in linear time) is the body.",
    reference="Finn, A., Kushmerick, N., Smyth, B. Fact or fiction: Content classification for "
    "digital libraries (DELOS Workshop, 2001), section 'Body Text Extraction'",
    options_model=BteOptions,
    extract=extract,
    score="The share of the block's words inside the body-text window: 1 inside, 0 outside, "
    "in between only for the window's two edge blocks; content from `min_inside` up.",
    score_range=(0.0, 1.0),
    path_tree="html5",
)
