"""FlatPage: the same events from lexbor and lxml, paths, hidden elements, deep pages."""

from __future__ import annotations

from pathlib import Path

from shared.flatpage import (
    MAX_PATH_DEPTH,
    SPACE,
    FlatPage,
    _slow_for_lexbor,
    flatten_html,
    flatten_tree,
)
from shared.html import parse_html
from tests.helpers import dataset_pages

PAGE = ("<!doctype html><html><head><title>T</title><style>p {}</style></head><body>"
        "<!-- a comment -->Intro &amp; more<div id='a'><p>One <b>two</b></p><p hidden>Three</p>"
        "</div><div style='Display : NONE'>Four</div><div style='color: red'>Five</div>"
        "<script>var x = '<p>not text</p>';</script>tail</body></html>")


def texts(page: FlatPage) -> list[str]:
    return [e for e in page.events if isinstance(e, str)]


def test_events_by_hand() -> None:
    page = flatten_html(PAGE, find_hidden=True)
    assert page.names == ["html", "head", "body", "div", "p", "b", "p", "div", "div", "script"]
    assert page.parents == [-1, 0, 0, 2, 3, 4, 3, 2, 2, 2]
    assert page.last == [9, 1, 9, 6, 5, 5, 6, 7, 8, 9]
    # Invisible elements open and close with nothing inside; comments are gone; entities
    # are decoded.
    assert page.events == [0, 1, ~1, 2, "Intro & more", 3, 4, "One ", 5, "two", ~5, ~4,
                           6, "Three", ~6, ~3, 7, "Four", ~7, 8, "Five", ~8, 9, ~9, "tail",
                           ~2, ~0]
    assert page.hidden == {6, 7}
    assert flatten_html(PAGE).hidden == set()  # only looked for when asked
    # Text of ASCII whitespace only is the one SPACE event, from either parser.
    spaced = "<html><head></head><body><p>a</p>\n  \t<p>b\xa0</p> <b>c</b>\xa0</body></html>"
    for page in (flatten_html(spaced), flatten_tree(parse_html(spaced))):
        assert texts(page) == ["a", " ", "b\xa0", " ", "c", "\xa0"]
        assert all(text is SPACE for text in texts(page) if not text.strip(" \t\n"))


def test_lexbor_and_lxml_agree_on_a_clean_page() -> None:
    lexbor = flatten_html(PAGE, find_hidden=True)
    lxml = flatten_tree(parse_html(PAGE))
    assert (lexbor.names, lexbor.parents, lexbor.last, lexbor.events, lexbor.hidden) == (
        lxml.names, lxml.parents, lxml.last, lxml.events, lxml.hidden)


def test_paths_in_getpath_form() -> None:
    page = flatten_html(PAGE)
    paths = [page.path(element) for element in range(len(page.names))]
    assert paths == ["/html", "/html/head", "/html/body", "/html/body/div[1]",
                     "/html/body/div[1]/p[1]", "/html/body/div[1]/p[1]/b",
                     "/html/body/div[1]/p[2]", "/html/body/div[2]", "/html/body/div[3]",
                     "/html/body/script"]
    # Asked in any order, the answer is the same.
    fresh = flatten_html(PAGE)
    assert [fresh.path(e) for e in reversed(range(len(fresh.names)))] == paths[::-1]


def test_paths_point_at_their_element(scrapinghub: Path) -> None:
    """Each path, evaluated on lxml's tree of the page re-serialised by lexbor (the same
    tree), finds an element of the same name; and paths are unique."""
    from lxml import etree
    from selectolax.lexbor import LexborHTMLParser

    for html, _ in dataset_pages(scrapinghub, 5):
        page = flatten_html(html)
        paths = [page.path(element) for element in range(len(page.names))]
        assert len(set(paths)) == len(paths)
        serialised = LexborHTMLParser(html).html or ""
        tree = etree.fromstring(serialised.encode(), etree.HTMLParser(huge_tree=True))
        for element in range(0, len(paths), 7):
            if page.names[element] in ("svg", "math"):
                continue
            found = tree.xpath(paths[element])
            assert found, paths[element]
            assert found[0].tag == page.names[element], paths[element]


def test_deep_nesting_goes_to_lxml() -> None:
    """lexbor takes quadratic time over deeply nested <div>s: such pages are parsed by
    lxml (linear); wide pages with as many tags stay with lexbor."""
    deep = "<div>" * 9000 + "deep text" + "</div>" * 9000
    wide = "<div><p>x</p></div>" * 9000
    assert _slow_for_lexbor(deep)
    assert not _slow_for_lexbor(wide)
    assert not _slow_for_lexbor("<div>" * 900 + "</div>" * 900)
    page = flatten_html(deep)
    assert "deep text" in texts(page)
    assert page.events == flatten_tree(parse_html(deep)).events
    options = "<select>" + "<option>choice" * 2500 + "</select>"
    assert _slow_for_lexbor(options)
    assert not _slow_for_lexbor("<select>" + "<option>choice" * 100 + "</select>")
    assert not _slow_for_lexbor("<p>text</p>" * 1500)  # few tags: not even counted


def test_paths_of_very_deep_elements_are_left_out() -> None:
    """A path 50,000 steps long would outweigh the text: elements deeper than
    MAX_PATH_DEPTH get None, the others their path."""
    page = flatten_html("<table><tr><td>x" * 2000)
    deepest = len(page.names) - 1
    assert page.path(deepest) is None
    assert page.path(deepest - 1) is None  # the climb is remembered, not repeated
    shallow = next(e for e in range(len(page.names)) if page.names[e] == "td")
    assert page.path(shallow) == "/html/body/table/tbody/tr/td"
    assert all(len((page.path(e) or "").split("/")) <= MAX_PATH_DEPTH + 1
               for e in range(len(page.names)))
