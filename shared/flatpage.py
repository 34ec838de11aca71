"""A parsed page as flat lists: the fast input of the tree-walking extractors.

Why: BTE and CETD need one walk over every element and text of a page. Walking an
lxml tree from Python costs more than libxml2's whole parse (every `.tag`, `.text`
and `.tail` builds a Python object), so those extractors sat at 5-8 times lxml's
parse time. lexbor (through selectolax) parses two to three times faster than
libxml2, builds the tree a browser would (HTML5 tree construction), and one
iterative walk of its nodes turns the page into plain lists that the extractors then
loop over without touching a parser object again.

A FlatPage has, per element i (document order, 0 = <html>): `names[i]`, the
lower-case tag name, `parents[i]`, its parent (-1 for the root), and `last[i]`, the
last element of its subtree (which is the range i..last[i]); `closed` lists the
elements in the order they close. Its text is `pieces`, the text nodes in document
order (text of ASCII whitespace only is the one SPACE), and `texts`, those that are
not SPACE, with `holders`, the element directly around each, and where each sits
among the tags: text k follows the first `opened[k]` elements' start tags and the
first `closes[k]` end tags of `closed`.
Comments and doctypes are left out; invisible elements (shared.html.INVISIBLE:
script, style, head, ...) open and close with nothing in between, as their content
is never shown. With `drop_hidden`, so do the elements a browser would not render
because of a `hidden` attribute or an inline display:none / visibility:hidden. Both
kinds are listed in `emptied`. With `attributes`, `marks` holds the class and id
attributes of the elements that have one (what readability-style scoring reads);
otherwise it stays empty, as attributes cost a lookup per element.

The same walk cuts the text into blocks, as shared.html.text_blocks cuts it (a
block-level element ends one and starts another; invisible and dropped elements do
not): a FlatBlock names its container element and its ranges of `pieces` and
`texts`. Extractors then loop over texts and elements, never over every node.

`flatten_tree` gives the same for an lxml tree, for callers that hold one already
(services/fusion) and for the pages lexbor is slow on, where shared.html.parse_html
stays linear: its tree construction checks the open-element stack at every
<div>/<p>/<section>... start tag, so thousands of such elements nested inside each
other take quadratic time (20,000 nested <div>s: 1.3 s; 200,000: minutes), and so do
thousands of <option>s. Both are found by counting in C before parsing.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from dataclasses import dataclass, field
from typing import Any

from lxml import etree
from selectolax.lexbor import LexborHTMLParser, LexborNode

from shared.contract import PathTree
from shared.html import BLOCK_LEVEL, INVISIBLE, parse_html, tag_name, xpath_step

_HIDDEN_STYLE = re.compile(r"display\s*:\s*none|visibility\s*:\s*hidden", re.IGNORECASE)
# Start and end tags of the elements whose nesting costs lexbor quadratic time.
_NESTING_TAG = re.compile(
    r"<(/?)(?:div|p|section|article|aside|nav|header|footer|main|blockquote|center|ul|ol|dl"
    r"|li|dd|dt|form|fieldset|figure|figcaption|details|summary|address|menu|dir|hgroup"
    r"|h[1-6]|pre|listing|dialog|search)[\s/>]",
    re.IGNORECASE,
)
# In any letter case (a regex scan is also quicker than str.count on non-ASCII pages).
_OPTION_TAG = re.compile("<option", re.IGNORECASE)
# What the nesting count skips: comments and the text of raw-text elements, where an
# end tag is only text (a comment full of </div> would hide the real depth).
_NOT_MARKUP = re.compile(
    r"<!--.*?(?:-->|\Z)|<(script|style|textarea|xmp|iframe|noembed|noframes|noscript|title)"
    r"\b.*?(?:</\1\s*>|\Z)",
    re.IGNORECASE | re.DOTALL,
)
# Pages with fewer tags than this cannot nest deeply enough to be slow in lexbor.
_FEW_TAGS = 8000
# Nor can fewer than this be slow at all: lexbor's time grows with the square of a
# select's options or of the nesting depth, which stays small below this many tags.
_HARMLESS_TAGS = 2000
_MAX_LEXBOR_DEPTH = 1000
# lexbor's tag ids (lexbor/tag/const.h): 2 text, 3 document, 4 comment, 5 doctype;
# elements come after.
_LEXBOR_TEXT = 2
_LEXBOR_DOCTYPE = 5
_MAX_LEXBOR_OPTIONS = 1000  # lexbor's time grows with the square of a select's options
MAX_PATH_DEPTH = 256
# The one event for all text of ASCII whitespace only (two thirds of a page's text
# nodes are indentation): consumers test `event is SPACE` instead of splitting it.
SPACE = " "
_ASCII_SPACE = " \t\n\r\f"
# What an element is to the walk: its content never shows (invisible, or hidden and
# dropped), it starts and ends a text block, or neither.
_EMPTIED, _BLOCK, _PLAIN = 2, 1, 0


def _kind(name: str) -> int:
    return _EMPTIED if name in INVISIBLE else _BLOCK if name in BLOCK_LEVEL else _PLAIN


@dataclass(slots=True)
class FlatBlock:
    """A text block: its container (the innermost block-level element around it), its
    text pieces page.pieces[first_piece:end_piece] (SPACE included) and, of those, the
    ones with text, page.texts[first:end] (at least one)."""

    container: int
    first_piece: int
    end_piece: int
    first: int
    end: int


@dataclass
class FlatPage:
    """Elements (names, parents, last, close order, the emptied ones) and text (pieces;
    texts with their holders and places; blocks)."""

    names: list[str] = field(default_factory=list)
    parents: list[int] = field(default_factory=list)
    last: list[int] = field(default_factory=list)
    closed: list[int] = field(default_factory=list)
    emptied: list[int] = field(default_factory=list)
    pieces: list[str] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    holders: list[int] = field(default_factory=list)
    opened: list[int] = field(default_factory=list)
    closes: list[int] = field(default_factory=list)
    blocks: list[FlatBlock] = field(default_factory=list)
    marks: dict[int, tuple[str, str]] = field(default_factory=dict)  # element: (class, id)
    tree: PathTree = "html5"  # the parse `path` names elements of: lexbor's, or lxml's
    _paths: dict[int, str] = field(default_factory=dict, repr=False)
    _depths: list[int] = field(default_factory=list, repr=False)  # ancestors; deep pages only
    _siblings: dict[int, dict[str, list[int]]] = field(default_factory=dict, repr=False)
    _plain_steps: dict[str, str] = field(default_factory=dict, repr=False)  # name: /name
    _block_texts: tuple[list[str], list[int]] | None = field(default=None, repr=False)

    def block_texts(self) -> tuple[list[str], list[int]]:
        """Each block's text, whitespace normalised as shared.html.normalize_space does,
        and its number of whitespace-separated words. Splitting text is what costs most
        after the walk, so it is done once per page: an extractor that counts per text
        takes a block of one text (four in five) from here."""
        if self._block_texts is None:
            pieces = self.pieces
            texts, counts = [], []
            for block in self.blocks:
                words = ("".join(pieces[block.first_piece:block.end_piece]).split()
                         if block.end_piece - block.first_piece > 1
                         else pieces[block.first_piece].split())
                texts.append(" ".join(words))
                counts.append(len(words))
            self._block_texts = texts, counts
        return self._block_texts

    def path(self, element: int) -> str | None:
        """XPath of an element, in lxml's getpath form (/html/body/div[2]/p: an index
        only where the parent has several children of that name); None for an element
        with MAX_PATH_DEPTH ancestors or more, whose path would outweigh its text. Paths
        are kept, so the blocks of a page share their ancestors' work, and only
        asked-for elements and their ancestors are named."""
        paths = self._paths
        found = paths.get(element)
        if found is not None:
            return found
        known = paths.get(self.parents[element])
        if known is not None and len(known) < 2 * MAX_PATH_DEPTH:  # one step (most blocks)
            found = paths[element] = known + self._step(element)
            return found
        return self._climb(element)

    def _climb(self, element: int) -> str | None:
        """path() where the parent has no short path: names the element and its
        ancestors up to the nearest named one, unless the element is too deep. That
        depends on its depth alone, whatever was asked before: the named ancestor's
        path bounds it (a step holds one "/" or more), and where that does not settle
        it, the page's depths are counted, once. A climb names what it passes or stops
        after MAX_PATH_DEPTH ancestors, so a deep page takes linear time."""
        paths, parents, depths = self._paths, self.parents, self._depths
        if not paths:
            paths[0] = "/" + self.names[0]
            if element == 0:
                return paths[0]
        if depths and depths[element] >= MAX_PATH_DEPTH:
            return None
        missing = [element]
        ancestor = parents[element]
        while ancestor not in paths:
            if len(missing) == MAX_PATH_DEPTH:  # that many ancestors: too deep
                self._count_depths()
                return None
            missing.append(ancestor)
            ancestor = parents[ancestor]
        if (paths[ancestor].count("/") + len(missing) > MAX_PATH_DEPTH
                and self._count_depths()[element] >= MAX_PATH_DEPTH):
            return None
        for climbed in reversed(missing):
            paths[climbed] = paths[parents[climbed]] + self._step(climbed)
        return paths[element]

    def _count_depths(self) -> list[int]:
        """Each element's number of ancestors (a parent comes before its children)."""
        if not self._depths:
            depths = self._depths = [0] * len(self.parents)
            parents = self.parents
            for element in range(1, len(parents)):
                depths[element] = depths[parents[element]] + 1
        return self._depths

    def _step(self, element: int) -> str:
        """The last step of an element's path: /name, or /name[k] where its parent has
        several children of that name."""
        parent, name = self.parents[element], self.names[element]
        same = (self._siblings.get(parent) or self._children_by_name(parent))[name]
        plain = self._plain_steps.get(name)
        if plain is None:  # the name test is a regex match: once per name
            plain = self._plain_steps[name] = xpath_step(name)
        return plain if len(same) == 1 else f"{plain}[{bisect_left(same, element) + 1}]"

    def _children_by_name(self, parent: int) -> dict[str, list[int]]:
        """The children of `parent` by name, in document order, found by hopping from
        subtree to subtree (a child's next sibling follows its last descendant) and
        remembered in _siblings, where _step() looks first."""
        found: dict[str, list[int]] = {}
        names, last = self.names, self.last
        child, end = parent + 1, last[parent]
        while child <= end:
            found.setdefault(names[child], []).append(child)
            child = last[child] + 1
        self._siblings[parent] = found
        return found


def _slow_for_lexbor(html: str) -> bool:
    """Whether lexbor would take quadratic time on the page: many <option>s, or block
    elements nested deeply. Counts in C, cheapest first: below _HARMLESS_TAGS tags
    nothing can cost much; the options are counted on bigger pages, and the depth
    (start minus end tags, at its highest) only on pages of many tags."""
    tags = html.count("<")
    if tags < _HARMLESS_TAGS:
        return False
    if len(_OPTION_TAG.findall(html)) > _MAX_LEXBOR_OPTIONS:
        return True
    if tags < _FEW_TAGS:
        return False
    depth = deepest = 0
    for closing in _NESTING_TAG.findall(_NOT_MARKUP.sub("", html)):
        depth += -1 if closing else 1
        deepest = max(deepest, depth)
    return deepest > _MAX_LEXBOR_DEPTH


def flatten_html(html: str, drop_hidden: bool = False, attributes: bool = False
                 ) -> FlatPage:
    """Parse decoded page text (lexbor, or lxml for deeply nested pages) into a FlatPage;
    `drop_hidden` empties hidden elements and `attributes` fills `marks` (CSS queries
    first, so only the elements that have such attributes are read)."""
    if _slow_for_lexbor(html):
        return flatten_tree(parse_html(html), drop_hidden, attributes)
    tree = LexborHTMLParser(html)
    root = tree.root
    if root is None:
        return flatten_tree(parse_html(html), drop_hidden, attributes)
    hidden_nodes: set[int] = set()
    if drop_hidden:
        for candidate in tree.css('[hidden],[style*="none" i],[style*="hidden" i]'):
            hidden_attrs = candidate.attributes
            if "hidden" in hidden_attrs or _HIDDEN_STYLE.search(hidden_attrs.get("style") or ""):
                hidden_nodes.add(candidate.mem_id)
    marked: dict[int, tuple[str, str]] = {}
    if attributes:
        for candidate in tree.css("[class],[id]"):
            attrs = candidate.attrs
            marked[candidate.mem_id] = (attrs.get("class") or "", attrs.get("id") or "")
    page = FlatPage()
    names, parents, last, closed, emptied = (page.names, page.parents, page.last, page.closed,
                                             page.emptied)
    pieces, texts, holders, opened, closes, blocks = (page.pieces, page.texts, page.holders,
                                                      page.opened, page.closes, page.blocks)
    marks = page.marks
    looked_up = bool(hidden_nodes or marked)  # else no element needs its mem_id
    names.append(root.tag or "html")
    if root.mem_id in marked:
        marks[0] = marked[root.mem_id]
    parents.append(-1)
    last.append(0)
    # Name and kind by lexbor tag id, read once per page: node.tag decodes a new string
    # each time.
    kinds: dict[int, tuple[str, int]] = {}
    open_nodes: list[LexborNode] = [root]
    current = 0  # the innermost open element
    containers = [0]  # the open block-level elements (the root holds the rest)
    first = first_piece = 0  # where the block being collected starts
    node: LexborNode | None = root.first_child
    while open_nodes:
        if node is None:  # the last child is done: close its parent
            done = open_nodes.pop()
            closed.append(current)
            last[current] = len(names) - 1
            if containers[-1] == current:  # a block ends here (the root's close: the last)
                if len(texts) > first:
                    blocks.append(FlatBlock(current, first_piece, len(pieces), first, len(texts)))
                    first = len(texts)
                first_piece = len(pieces)
                containers.pop()
            current = parents[current]
            node = done.next
            continue
        kind = node.tag_id  # an int: no string built for the many text nodes
        if kind == _LEXBOR_TEXT:
            if node.is_empty_text_node:
                pieces.append(SPACE)
            else:
                text = node.text_content or ""
                pieces.append(text)
                texts.append(text)
                holders.append(current)
                opened.append(len(names))
                closes.append(len(closed))
        elif kind > _LEXBOR_DOCTYPE:  # an element
            found = kinds.get(kind)
            if found is None:
                tag = node.tag or ""
                found = kinds[kind] = (tag, _kind(tag))
            tag, what = found
            if tag:
                index = len(names)
                names.append(tag)
                parents.append(current)
                last.append(index)
                if looked_up:
                    node_id = node.mem_id
                    if node_id in hidden_nodes:
                        what = _EMPTIED
                    if node_id in marked:
                        marks[index] = marked[node_id]
                if what == _EMPTIED:
                    closed.append(index)
                    emptied.append(index)
                else:
                    if what == _BLOCK:  # a block ends and another starts
                        if len(texts) > first:
                            blocks.append(FlatBlock(containers[-1], first_piece, len(pieces),
                                                    first, len(texts)))
                            first = len(texts)
                        first_piece = len(pieces)
                        containers.append(index)
                    open_nodes.append(node)
                    current = index
                    node = node.first_child
                    continue
        node = node.next
    return page


def flatten_tree(root: etree._Element, drop_hidden: bool = False, attributes: bool = False
                 ) -> FlatPage:
    """The FlatPage of an lxml tree from shared.html.parse_html (text and tails in
    document order, comments dropped, invisible elements empty): what flatten_html
    gives, built the same way."""
    page = FlatPage(tree="libxml2")
    names, parents, last, closed, emptied = (page.names, page.parents, page.last, page.closed,
                                             page.emptied)
    pieces, texts, holders, opened, closes, blocks = (page.pieces, page.texts, page.holders,
                                                      page.opened, page.closes, page.blocks)
    open_elements: list[int] = []
    containers = [0]
    first = first_piece = 0

    def add_text(text: str, holder: int) -> None:
        piece = SPACE if not text.strip(_ASCII_SPACE) else text
        pieces.append(piece)
        if piece is not SPACE:
            texts.append(piece)
            holders.append(holder)
            opened.append(len(names))
            closes.append(len(closed))

    def cut(container: int) -> None:
        nonlocal first, first_piece
        if len(texts) > first:
            blocks.append(FlatBlock(container, first_piece, len(pieces), first, len(texts)))
            first = len(texts)
        first_piece = len(pieces)

    walker = etree.iterwalk(root, events=("start", "end"))
    for event, element in walker:
        name = tag_name(element)
        if not name:  # comments and processing instructions: only their tail shows
            if event == "end" and element.tail:
                add_text(element.tail, open_elements[-1])
            continue
        if event == "start":
            index = len(names)
            names.append(name)
            parents.append(open_elements[-1] if open_elements else -1)
            last.append(index)
            what = _kind(name)
            if attributes:
                classes, ident = element.get("class"), element.get("id")
                if classes is not None or ident is not None:
                    page.marks[index] = (classes or "", ident or "")
            if drop_hidden and index:
                style = element.get("style")
                if element.get("hidden") is not None or (style and _HIDDEN_STYLE.search(style)):
                    what = _EMPTIED
            open_elements.append(index)
            if what == _EMPTIED and index:
                emptied.append(index)
                walker.skip_subtree()  # its end event still comes, for the tail
                continue
            if what == _BLOCK and index:
                cut(containers[-1])
                containers.append(index)
            if element.text:
                add_text(element.text, index)
        else:
            index = open_elements.pop()
            closed.append(index)
            last[index] = len(names) - 1
            if containers[-1] == index:
                cut(index)
                containers.pop()
            if element.tail and index:
                add_text(element.tail, parents[index])
    return page


def tree_details(tree: PathTree) -> dict[str, Any] | None:
    """A reply's `details` for a page of an html5 service (bte, cetd, fusion, ensemble)
    that was parsed by lxml instead (a page lexbor takes quadratic time on, module
    docstring): its block paths then name elements of that parse, not of the one /info
    states."""
    return None if tree == "html5" else {"path_tree": tree}
