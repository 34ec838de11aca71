"""Content Extraction via Text Density (Sun, Song, Liao, SIGIR 2011) as a pure extractor.

The seed (../shared/seeds/001) is garbled: its Composite Text Density formula is cut
after `log_{ln`. We follow the paper (section 3) and its authors' code
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

Counting: characters are the non-whitespace characters of visible text (the
whitespace of HTML source is layout, not text); tags are visible elements (script,
style and the other shared.html.INVISIBLE elements are dropped first, as the
authors' code drops elements rendered with display:none, and so are elements hidden
by a `hidden` attribute or an inline display:none when `drop_hidden` is on); links
are <a> and <button>.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from importlib.metadata import version
from typing import Literal

from lxml import etree
from pydantic import Field

from shared.contract import Algorithm, Block, Extraction, Options
from shared.html import BLOCK_LEVEL, INVISIBLE, parse_html, tag_name

LINKS = frozenset({"a", "button"})
_HIDDEN_STYLE = re.compile(r"display\s*:\s*none|visibility\s*:\s*hidden", re.IGNORECASE)


class CetdOptions(Options):
    measure: Literal["td", "ctd"] = Field(
        "ctd", description="Text Density (C/T) or Composite Text Density (with link statistics).")
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


@dataclass(slots=True)
class NodeStats:
    """CETD's figures for one visible element; `texts` are its own text pieces' C."""

    element: etree._Element
    parent: int
    is_link: bool
    in_link: bool
    children: list[int] = field(default_factory=list)
    texts: list[int] = field(default_factory=list)
    chars: int = 0
    tags: int = 0
    link_chars: int = 0
    link_tags: int = 0
    density: float = 0.0
    density_sum: float = 0.0
    best: int = -1  # the node of largest DensitySum in this subtree


@dataclass(slots=True)
class TextBlock:
    """Visible text between block-level boundaries (cut as shared.html.text_blocks cuts
    it) with the node holding each piece of it, so content is decided piece by piece."""

    container: int
    parts: list[str] = field(default_factory=list)
    pieces: list[tuple[int, int]] = field(default_factory=list)  # (node, characters)

    @property
    def text(self) -> str:
        return " ".join("".join(self.parts).split())


@dataclass
class Page:
    nodes: list[NodeStats]
    blocks: list[TextBlock]


def _hidden(element: etree._Element) -> bool:
    style = element.get("style")
    return bool(style and _HIDDEN_STYLE.search(style)) or element.get("hidden") is not None


def _count(text: str) -> int:
    """C of a text piece: its non-whitespace characters."""
    return len("".join(text.split()))


def measure_tree(root: etree._Element, options: CetdOptions) -> Page:
    """One walk: every visible element under `root` in document order with C, T, LC, LT,
    its density, DensitySum and the largest-DensitySum node of its subtree; and the
    page's text blocks. They are cut here rather than by shared.html.text_blocks because
    they must know which node holds each piece of their text."""
    nodes: list[NodeStats] = []
    blocks: list[TextBlock] = []
    open_nodes: list[int] = []
    containers: list[int] = []
    block = TextBlock(0)
    names: dict[str, str] = {}
    drop_hidden = options.drop_hidden

    def add(text: str | None, holder: int) -> None:
        if text:
            block.parts.append(text)
            chars = _count(text)
            if chars:
                block.pieces.append((holder, chars))
                nodes[holder].texts.append(chars)

    walker = etree.iterwalk(root, events=("start", "end"))
    for event, element in walker:
        tag = element.tag
        name = names.get(tag) if isinstance(tag, str) else ""
        if name is None:
            name = names[tag] = tag_name(element)
        if event == "start":
            if nodes and (not name or name in INVISIBLE or (drop_hidden and _hidden(element))):
                walker.skip_subtree()  # its end event still comes, for the tail
                continue
            parent = open_nodes[-1] if open_nodes else -1
            is_link = name in LINKS
            index = len(nodes)
            nodes.append(NodeStats(element, parent, is_link,
                                   is_link or (parent >= 0 and nodes[parent].in_link)))
            if parent >= 0:
                nodes[parent].children.append(index)
            open_nodes.append(index)
            if name in BLOCK_LEVEL or parent < 0:
                if block.pieces:
                    blocks.append(block)
                containers.append(index)
                block = TextBlock(index)
            add(element.text, index)
        elif open_nodes and nodes[open_nodes[-1]].element is element:
            open_nodes.pop()
            if name in BLOCK_LEVEL or not open_nodes:
                if block.pieces:
                    blocks.append(block)
                containers.pop()
                block = TextBlock(containers[-1] if containers else 0)
            if open_nodes:
                add(element.tail, open_nodes[-1])
        elif open_nodes:  # the end of a left-out element: its tail is its parent's text
            add(element.tail, open_nodes[-1])
    if block.pieces:
        blocks.append(block)
    # Bottom-up (children come after their parent in document order): each node adds
    # its figures to its parent's, no second look at the children.
    for node in reversed(nodes):
        node.chars += sum(node.texts)
        if node.in_link:
            node.link_chars = node.chars
        if node.parent >= 0:
            up = nodes[node.parent]
            up.chars += node.chars
            up.tags += 1 + node.tags
            up.link_chars += node.link_chars
            up.link_tags += node.link_tags + node.is_link
    body = nodes[find_body(nodes)]
    ratio = body.link_chars / body.chars if body.chars else 0.0
    ctd = options.measure == "ctd"
    best_sum = [0.0] * len(nodes)  # the largest DensitySum in each subtree
    for index in range(len(nodes) - 1, -1, -1):
        node = nodes[index]
        if ctd:
            node.density = composite_text_density(node.chars, node.tags, node.link_chars,
                                                  node.link_tags, ratio)
            node.density_sum += sum(composite_text_density(c, 0, c if node.in_link else 0, 0,
                                                           ratio) for c in node.texts)
        else:
            node.density = text_density(node.chars, node.tags)
            node.density_sum += sum(node.texts)  # a text piece's TD is its C
        # Ties go to the first in document order: the node itself, then earlier children
        # (children report in reverse order, so a later report wins a tie).
        if node.best < 0 or node.density_sum >= best_sum[index]:
            node.best, best_sum[index] = index, node.density_sum
        if node.parent >= 0:
            nodes[node.parent].density_sum += node.density
            if nodes[node.parent].best < 0 or best_sum[index] >= best_sum[node.parent]:
                nodes[node.parent].best, best_sum[node.parent] = node.best, best_sum[index]
    return Page(nodes, blocks)


def find_body(nodes: list[NodeStats]) -> int:
    """Index of the <body> node (the root's first visible <body> child), else of the root."""
    for child in nodes[0].children:
        if tag_name(nodes[child].element) == "body":
            return child
    return 0


def mark_content(nodes: list[NodeStats], options: CetdOptions) -> tuple[list[bool], float]:
    """The paper's threshold and ExtractContent: which nodes are content."""
    start = find_body(nodes)
    target = nodes[start].best
    threshold = nodes[start].density
    if options.threshold == "path":
        index = target
        while index != start and index >= 0:
            threshold = min(threshold, nodes[index].density)
            index = nodes[index].parent
    roots = [False] * len(nodes)
    roots[target] = True  # the content subtree itself, whatever the threshold
    stack = [start]
    while stack:
        index = stack.pop()
        node = nodes[index]
        if roots[index] or node.density < threshold:
            continue
        roots[node.best] = True
        stack.extend(reversed(node.children))
    content = [False] * len(nodes)
    for index, node in enumerate(nodes):  # parents first: inherit the mark downwards
        content[index] = roots[index] or (node.parent >= 0 and content[node.parent])
    return content, threshold


def extract(html: str, options: CetdOptions, url: str | None = None) -> Extraction:
    root = parse_html(html)
    page = measure_tree(root, options)
    nodes = page.nodes
    content, _ = mark_content(nodes, options)
    tree = root.getroottree()
    blocks: list[Block] = []
    for block in page.blocks:
        # Content when most of its characters sit in content nodes (the marked node can
        # be an inline element inside a paragraph as well as the paragraph's ancestor).
        total = sum(chars for _, chars in block.pieces)
        inside = sum(chars for holder, chars in block.pieces if content[holder])
        container = nodes[block.container]
        blocks.append(Block(
            text=block.text,
            is_content=inside * 2 > total,
            score=round(container.density, 4),
            path=tree.getpath(container.element),
        ))
    return Extraction(blocks)


ALGORITHM = Algorithm(
    name="cetd",
    version=version("boilerbench"),
    description="Content Extraction via Text Density: per DOM node Text Density or Composite "
    "Text Density, DensitySum to find the content subtree, the density of <body> as threshold. "
    "Block score: the density of the block's container node.",
    reference="Sun, F., Song, D., Liao, L. DOM based content extraction via text density "
    "(SIGIR 2011), doi:10.1145/2009916.2009952",
    options_model=CetdOptions,
    extract=extract,
)
