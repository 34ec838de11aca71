"""A parsed page as one flat list of events: the fast input of the tree-walking extractors.

Why: BTE and CETD need one walk over every element and text of a page. Walking an
lxml tree from Python costs more than libxml2's whole parse (every `.tag`, `.text`
and `.tail` builds a Python object), so those extractors sat at 5-8 times lxml's
parse time. lexbor (through selectolax) parses two to three times faster than
libxml2, builds the tree a browser would (HTML5 tree construction), and one
iterative walk of its nodes turns the page into plain lists that the extractors then
loop over without touching a parser object again.

A FlatPage has, per element i (document order, 0 = <html>): `names[i]`, the
lower-case tag name, `parents[i]`, its parent (-1 for the root), and `last[i]`, the
last element of its subtree (which is the range i..last[i]). `events` is the
page in document order: an int i >= 0 opens element i, ~i (that is -i - 1) closes
it, and a str is a piece of text (text of ASCII whitespace only is the one SPACE).
Comments and doctypes are left out; invisible elements (shared.html.INVISIBLE:
script, style, head, ...) open and close with nothing in between, as their content
is never shown. `hidden` holds the elements
a browser would not render because of a `hidden` attribute or an inline
display:none / visibility:hidden (their content is kept: whether it counts is the
extractor's choice).

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

from lxml import etree
from selectolax.lexbor import LexborHTMLParser, LexborNode

from shared.html import INVISIBLE, parse_html, tag_name

_HIDDEN_STYLE = re.compile(r"display\s*:\s*none|visibility\s*:\s*hidden", re.IGNORECASE)
# Start and end tags of the elements whose nesting costs lexbor quadratic time.
_NESTING_TAG = re.compile(
    r"<(/?)(?:div|p|section|article|aside|nav|header|footer|main|blockquote|center|ul|ol|dl"
    r"|li|dd|dt|form|fieldset|figure|figcaption|details|summary|address|menu|dir|hgroup"
    r"|h[1-6]|pre|listing|dialog|search)[\s/>]",
    re.IGNORECASE,
)
# Pages with fewer tags than this cannot nest deeply enough to be slow in lexbor.
_FEW_TAGS = 8000
# Nor can fewer than this be slow at all: 2,000 options or nested <div>s cost lexbor at
# most some 50 ms (measured 5,000 options: 0.3 s; 2,000 nested <div>s: 7 ms).
_HARMLESS_TAGS = 2000
_MAX_LEXBOR_DEPTH = 1000
# lexbor's tag ids (lexbor/tag/const.h): 2 text, 3 document, 4 comment, 5 doctype;
# elements come after.
_LEXBOR_TEXT = 2
_LEXBOR_DOCTYPE = 5
_MAX_LEXBOR_OPTIONS = 1000  # a <select> of 5,000 options takes lexbor 0.3 s, 20,000 2.5 s
MAX_PATH_DEPTH = 256
# The one event for all text of ASCII whitespace only (two thirds of a page's text
# nodes are indentation): consumers test `event is SPACE` instead of splitting it.
SPACE = " "
_ASCII_SPACE = " \t\n\r\f"


@dataclass
class FlatPage:
    """Elements (names, parents), the document-order events and the hidden elements."""

    names: list[str] = field(default_factory=list)
    parents: list[int] = field(default_factory=list)
    last: list[int] = field(default_factory=list)
    events: list[int | str] = field(default_factory=list)
    hidden: set[int] = field(default_factory=set)
    _paths: dict[int, str] = field(default_factory=dict, repr=False)
    _too_deep: set[int] = field(default_factory=set, repr=False)
    _siblings: dict[int, dict[str, list[int]]] = field(default_factory=dict, repr=False)

    def path(self, element: int) -> str | None:
        """XPath of an element, in lxml's getpath form (/html/body/div[2]/p: an index
        only where the parent has several children of that name); None for an element
        nested deeper than MAX_PATH_DEPTH, whose path would outweigh its text. Paths
        are kept, so the blocks of a page share their ancestors' work, and only
        asked-for elements and their ancestors are named."""
        paths = self._paths
        if not paths:
            paths[0] = "/" + self.names[0]
        found = paths.get(element)
        if found is not None:
            return found
        missing = [element]
        while (element := self.parents[element]) not in paths:
            missing.append(element)
            if len(missing) > MAX_PATH_DEPTH or element in self._too_deep:
                self._too_deep.update(missing)  # each element is climbed past once
                return None
        known = paths[element]  # a step takes 2+ characters: count them only if it matters
        if (len(known) // 2 + len(missing) > MAX_PATH_DEPTH
                and known.count("/") + len(missing) > MAX_PATH_DEPTH):
            self._too_deep.update(missing)
            return None
        names, parents, siblings = self.names, self.parents, self._siblings
        for element in reversed(missing):
            parent = parents[element]
            name = names[element]
            same = (siblings.get(parent) or self._children_by_name(parent))[name]
            paths[element] = (f"{paths[parent]}/{name}" if len(same) == 1 else
                              f"{paths[parent]}/{name}[{bisect_left(same, element) + 1}]")
        return paths[missing[0]]

    def _children_by_name(self, parent: int) -> dict[str, list[int]]:
        """The children of `parent` by name, in document order, found by hopping from
        subtree to subtree (a child's next sibling follows its last descendant) and
        remembered in _siblings, where path() looks first."""
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
    if html.count("<option") + html.count("<OPTION") > _MAX_LEXBOR_OPTIONS:
        return True
    if tags < _FEW_TAGS:
        return False
    depth = deepest = 0
    for closing in _NESTING_TAG.findall(html):
        depth += -1 if closing else 1
        deepest = max(deepest, depth)
    return deepest > _MAX_LEXBOR_DEPTH


def flatten_html(html: str, find_hidden: bool = False) -> FlatPage:
    """Parse decoded page text (lexbor, or lxml for deeply nested pages) into a FlatPage;
    `find_hidden` fills `hidden` (a CSS query first, so only likely elements are read)."""
    if _slow_for_lexbor(html):
        return flatten_tree(parse_html(html))
    tree = LexborHTMLParser(html)
    root = tree.root
    if root is None:
        return flatten_tree(parse_html(html))
    hidden_nodes: set[int] = set()
    if find_hidden:
        for candidate in tree.css('[hidden],[style*="none" i],[style*="hidden" i]'):
            attributes = candidate.attributes
            if "hidden" in attributes or _HIDDEN_STYLE.search(attributes.get("style") or ""):
                hidden_nodes.add(candidate.mem_id)
    page = FlatPage()
    names, parents, last = page.names, page.parents, page.last
    events, hidden = page.events, page.hidden
    names.append(root.tag or "html")
    parents.append(-1)
    last.append(0)
    events.append(0)
    # Names by lexbor tag id, read once per page: node.tag decodes a new string each time.
    tag_names: dict[int, str] = {}
    open_elements: list[tuple[LexborNode, int]] = [(root, 0)]
    node: LexborNode | None = root.child
    while open_elements:
        if node is None:  # the last child is done: close its parent
            closed, index = open_elements.pop()
            events.append(~index)
            last[index] = len(names) - 1
            node = closed.next
            continue
        kind = node.tag_id  # an int: no string built for the many text nodes
        if kind == _LEXBOR_TEXT:
            events.append(SPACE if node.is_empty_text_node else node.text_content or "")
        elif kind > _LEXBOR_DOCTYPE and (tag := tag_names.get(kind) or node.tag):  # an element
            tag_names[kind] = tag
            index = len(names)
            names.append(tag)
            parents.append(open_elements[-1][1])
            last.append(index)
            events.append(index)
            if hidden_nodes and node.mem_id in hidden_nodes:
                hidden.add(index)
            if tag in INVISIBLE:
                events.append(~index)
            else:
                open_elements.append((node, index))
                node = node.child
                continue
        node = node.next
    return page


def _text_event(text: str) -> str:
    return SPACE if not text.strip(_ASCII_SPACE) else text


def flatten_tree(root: etree._Element) -> FlatPage:
    """The FlatPage of an lxml tree from shared.html.parse_html (text and tails in
    document order, comments dropped, invisible elements empty)."""
    page = FlatPage()
    names, parents, last = page.names, page.parents, page.last
    events, hidden = page.events, page.hidden
    open_elements: list[int] = []
    walker = etree.iterwalk(root, events=("start", "end"))
    for event, element in walker:
        name = tag_name(element)
        if not name:  # comments and processing instructions: only their tail shows
            if event == "end" and element.tail:
                events.append(_text_event(element.tail))
            continue
        if event == "start":
            index = len(names)
            names.append(name)
            parents.append(open_elements[-1] if open_elements else -1)
            last.append(index)
            events.append(index)
            style = element.get("style")
            if element.get("hidden") is not None or (style and _HIDDEN_STYLE.search(style)):
                hidden.add(index)
            open_elements.append(index)
            if name in INVISIBLE and element is not root:
                walker.skip_subtree()  # its end event still comes, for the tail
            elif element.text:
                events.append(_text_event(element.text))
        else:
            index = open_elements.pop()
            events.append(~index)
            last[index] = len(names) - 1
            if element.tail and element is not root:
                events.append(_text_event(element.tail))
    return page
