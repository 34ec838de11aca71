"""Parsing pages and cutting them into visible text blocks, shared by the services.

`parse_html` never raises on real-world input: it strips the control characters
libxml2 refuses, hands libxml2 UTF-8 bytes (so an XML declaration with a bogus
encoding is harmless) and turns an empty document into an empty <html>.
`text_blocks` walks the tree once, without recursion, and yields the visible text
between block-level boundaries in document order, each with the XPath of the
block element that holds it: the unit most services report as their blocks.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator
from dataclasses import dataclass

import lxml.html
from lxml import etree

# Elements whose text is never shown.
INVISIBLE = frozenset(
    {"script", "style", "noscript", "template", "head", "title", "meta", "link", "iframe",
     "object", "embed", "svg", "math", "select", "option", "datalist", "textarea", "canvas",
     "noframes", "noembed"}
)
# Elements that start a new line in a text-mode rendering.
BLOCK_LEVEL = frozenset(
    {"html", "body", "address", "article", "aside", "blockquote", "dd", "details", "dialog",
     "div", "dl", "dt", "fieldset", "figcaption", "figure", "footer", "form", "h1", "h2",
     "h3", "h4", "h5", "h6", "header", "hgroup", "hr", "li", "main", "nav", "ol", "p", "pre",
     "section", "summary", "table", "tbody", "thead", "tfoot", "tr", "td", "th", "caption",
     "ul", "br", "center", "menu", "dir", "frameset", "frame", "legend", "text"}
)
_XML_BAD = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")
_SPACE = re.compile(r"\s+")
# Every byte but the C0 controls _XML_BAD removes (its other characters, U+FFFE,
# U+FFFF and surrogates, are multi-byte in UTF-8 and are looked for apart).
_NOT_BAD_BYTES = bytes(b for b in range(256) if not (b < 0x20 and b not in (0x09, 0x0A, 0x0D)))

_PARSER = lxml.html.HTMLParser(encoding="utf-8", remove_comments=True, remove_pis=True,
                               huge_tree=True)
# libxml2 stops parsing at 2048 nested elements and silently drops the rest of the
# page, text after the deep part included. Its SAX events have no such limit, so a
# page that hits it is parsed again through _DepthCappedBuilder, which keeps every
# piece of text but no element deeper than this (browsers flatten too; Chrome at 512).
_MAX_DEPTH = 2000


def _new_parser() -> lxml.html.HTMLParser:
    """A parser of our own per call: its error log then tells about this parse only."""
    return lxml.html.HTMLParser(encoding="utf-8", remove_comments=True, remove_pis=True,
                                huge_tree=True)


class _DepthCappedBuilder:
    """Parser target building the tree libxml2 would, with elements deeper than
    _MAX_DEPTH flattened: their tags dropped, their text kept in the deepest kept one."""

    def __init__(self) -> None:
        self._builder = etree.TreeBuilder(parser=_PARSER)  # HtmlElement classes
        self._depth = 0

    def start(self, tag: str, attrib: dict[str, str]) -> None:
        self._depth += 1
        if self._depth <= _MAX_DEPTH:
            self._builder.start(tag, attrib)

    def end(self, tag: str) -> None:
        if self._depth <= _MAX_DEPTH:
            self._builder.end(tag)
        self._depth -= 1

    def data(self, data: str) -> None:
        self._builder.data(data)

    def close(self) -> etree._Element:
        return self._builder.close()


def clean_text(text: str) -> str:
    """Remove the characters libxml2 cannot hold (controls, lone surrogates)."""
    return _XML_BAD.sub(" ", text)


def _utf8_for_libxml2(html: str) -> bytes:
    """The page as UTF-8 without the characters libxml2 refuses.

    Most pages hold none: checking the encoded bytes in C (translate, memchr)
    costs a tenth of the regex substitution, which only runs when needed."""
    try:
        data = html.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates
        return clean_text(html).encode("utf-8", errors="replace")
    if data.translate(None, _NOT_BAD_BYTES) or b"\xef\xbf\xbe" in data or b"\xef\xbf\xbf" in data:
        return clean_text(html).encode("utf-8", errors="replace")
    return data


def parse_html(html: str) -> lxml.html.HtmlElement:
    """Parse decoded page text into an lxml tree rooted at <html>; never raises."""
    data = _utf8_for_libxml2(html)
    parser = _new_parser()
    try:
        root = lxml.html.document_fromstring(data, parser=parser)
    except (etree.ParserError, ValueError):
        root = lxml.html.document_fromstring(b"<html><body></body></html>", parser=_PARSER)
    if any("Excessive depth" in entry.message for entry in parser.error_log):
        capped = lxml.html.HTMLParser(encoding="utf-8", target=_DepthCappedBuilder())
        try:
            deep_root = etree.fromstring(data, parser=capped)
        except (etree.LxmlError, ValueError, AssertionError):
            deep_root = None  # keep what the normal parse gave
        if isinstance(deep_root, lxml.html.HtmlElement) and tag_name(deep_root) == "html":
            root = deep_root
    if any(isinstance(e.tag, str) for e in root.itersiblings()):
        root = _with_trailing_content(root)
    return root


def _with_trailing_content(root: lxml.html.HtmlElement) -> lxml.html.HtmlElement:
    """libxml2 puts what follows </html> into <html> siblings of the root, which no walk
    from the root sees; browsers show it at the end of <body>. It is moved there and the
    root copied out of the document (the siblings cannot be removed in place)."""
    body = root.find("body")
    if body is None:
        body = etree.SubElement(root, "body")
    for sibling in [e for e in root.itersiblings() if isinstance(e.tag, str)]:
        _append_text(body, sibling.text)
        for child in list(sibling):
            if tag_name(child) == "head":
                continue
            if tag_name(child) == "body":
                _append_text(body, child.text)
                body.extend(list(child))
            else:
                body.append(child)
    copied: lxml.html.HtmlElement = copy.deepcopy(root)
    return copied


def _append_text(element: etree._Element, text: str | None) -> None:
    """Add text at the end of an element's content."""
    if not text:
        return
    if len(element):
        element[-1].tail = (element[-1].tail or "") + text
    else:
        element.text = (element.text or "") + text


def tag_name(element: etree._Element) -> str:
    """Lower-case local tag name; '' for comments and processing instructions."""
    tag = element.tag
    return tag.rsplit("}", 1)[-1].lower() if isinstance(tag, str) else ""


def normalize_space(text: str) -> str:
    return _SPACE.sub(" ", text).strip()


@dataclass(frozen=True)
class TextBlock:
    """Visible text between two block-level boundaries."""

    text: str
    element: etree._Element
    path: str
    link_chars: int


# A name an XPath 1.0 name test can spell (an NCName; ASCII here, the rest goes by name()).
_NAME_TEST = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*\Z")


def xpath_step(name: str, position: int | None = None) -> str:
    """One step of an element's path: /name, or /name[k] for the k-th child of that
    name. A name that is no valid name test (`fb:like`, whose prefix no namespace
    binds, or `http:`) is matched by name(): /*[name()='fb:like'][k], a valid XPath
    1.0 that any engine evaluates."""
    if _NAME_TEST.match(name):
        test = name
    elif "'" not in name:
        test = f"*[name()='{name}']"
    elif '"' not in name:
        test = f'*[name()="{name}"]'
    else:
        test = "*[name()=concat('" + "', \"'\", '".join(name.split("'")) + "')]"
    return f"/{test}[{position}]" if position else f"/{test}"


class ElementPaths:
    """XPaths of elements in lxml's getpath form (/html/body/div[2]/p: an index only
    where the parent has several children of that name), in time linear in the page.

    lxml's getpath counts an element's same-name siblings on every call, so naming
    every block of a page of n siblings costs n squared steps. Here each parent's
    children are counted once, and each element's path is its parent's (kept) plus
    one step."""

    def __init__(self) -> None:
        self._paths: dict[etree._Element, str] = {}
        self._steps: dict[etree._Element, str] = {}

    def path(self, element: etree._Element) -> str:
        missing: list[etree._Element] = []
        node: etree._Element | None = element
        while node is not None and node not in self._paths:
            missing.append(node)
            node = node.getparent()
        prefix = "" if node is None else self._paths[node]
        for item in reversed(missing):
            prefix = self._paths[item] = prefix + self._step(item)
        return self._paths[element]

    def _step(self, element: etree._Element) -> str:
        step = self._steps.get(element)
        if step is None:
            parent = element.getparent()
            if parent is None:  # the root: its siblings are the document's top level
                tag = element.tag
                before = sum(1 for e in element.itersiblings(preceding=True) if e.tag == tag)
                after = sum(1 for e in element.itersiblings() if e.tag == tag)
                return xpath_step(tag, before + 1 if before + after else None)
            self._name_children(parent)
            step = self._steps[element]
        return step

    def _name_children(self, parent: etree._Element) -> None:
        """The last step of every element child of `parent`, in one pass over them."""
        children = [child for child in parent if isinstance(child.tag, str)]
        totals: dict[str, int] = {}
        for child in children:
            totals[child.tag] = totals.get(child.tag, 0) + 1
        seen: dict[str, int] = {}
        for child in children:
            tag = child.tag
            if totals[tag] == 1:
                self._steps[child] = xpath_step(tag)
            else:
                seen[tag] = seen.get(tag, 0) + 1
                self._steps[child] = xpath_step(tag, seen[tag])


def text_blocks(root: etree._Element) -> list[TextBlock]:
    """The visible text blocks of a parsed page in document order (empty ones dropped)."""
    paths = ElementPaths()
    blocks: list[TextBlock] = []
    parts: list[str] = []
    link_chars = 0
    containers: list[etree._Element] = [root]
    link_depth = 0

    def flush() -> None:
        nonlocal link_chars
        text = normalize_space("".join(parts))
        if text:
            container = containers[-1]
            blocks.append(TextBlock(text, container, paths.path(container),
                                    min(link_chars, len(text))))
        parts.clear()
        link_chars = 0

    def add(text: str | None) -> None:
        nonlocal link_chars
        if text:
            parts.append(text)
            if link_depth:
                link_chars += len(normalize_space(text))

    for event, element in _walk(root):
        name = tag_name(element)
        if event == "start":
            if name in BLOCK_LEVEL:
                flush()
                containers.append(element)
            if name == "a":
                link_depth += 1
            add(element.text)
        elif event == "end":
            if name == "a":
                link_depth -= 1
            if name in BLOCK_LEVEL:
                flush()
                containers.pop()
            add(element.tail)
        else:  # a skipped (invisible) element: only its tail shows
            add(element.tail)
    flush()
    return blocks


def _walk(root: etree._Element) -> Iterator[tuple[str, etree._Element]]:
    """Depth-first start/end events without recursion; invisible subtrees come as
    one 'skip' event so their tails still count."""
    stack: list[tuple[etree._Element, bool]] = [(root, False)]
    while stack:
        element, closing = stack.pop()
        if closing:
            yield "end", element
            continue
        if not isinstance(element.tag, str) or tag_name(element) in INVISIBLE:
            if element is not root:
                yield "skip", element
            continue
        yield "start", element
        stack.append((element, True))
        stack.extend((child, False) for child in reversed(element))


def visible_text(root: etree._Element) -> str:
    """All visible text of the page, one block per line (the 'keep everything' baseline)."""
    return "\n".join(block.text for block in text_blocks(root))
