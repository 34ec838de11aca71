"""FlatPage: the same lists from lexbor and lxml, blocks, paths, hidden elements, deep pages."""

from __future__ import annotations

import random
from pathlib import Path

from shared.flatpage import (
    MAX_PATH_DEPTH,
    SPACE,
    FlatPage,
    _slow_for_lexbor,
    flatten_html,
    flatten_tree,
)
from shared.html import parse_html, tag_name, text_blocks
from tests.helpers import dataset_pages

PAGE = ("<!doctype html><html><head><title>T</title><style>p {}</style></head><body>"
        "<!-- a comment -->Intro &amp; more<div id='a'><p>One <b>two</b></p><p hidden>Three</p>"
        "</div><div style='Display : NONE'>Four</div><div style='color: red'>Five</div>"
        "<script>var x = '<p>not text</p>';</script>tail</body></html>")


def fields(page: FlatPage) -> tuple[object, ...]:
    return (page.names, page.parents, page.last, page.closed, page.emptied, page.pieces,
            page.texts, page.holders, page.opened, page.closes, page.blocks)


def test_flat_page_by_hand() -> None:
    page = flatten_html(PAGE, drop_hidden=True)
    assert page.names == ["html", "head", "body", "div", "p", "b", "p", "div", "div", "script"]
    assert page.parents == [-1, 0, 0, 2, 3, 4, 3, 2, 2, 2]
    assert page.last == [9, 1, 9, 6, 5, 5, 6, 7, 8, 9]
    assert page.closed == [1, 5, 4, 6, 3, 7, 8, 9, 2, 0]
    # Invisible and hidden elements are empty; comments are gone; entities are decoded.
    assert page.emptied == [1, 6, 7, 9]
    assert page.texts == page.pieces == ["Intro & more", "One ", "two", "Five", "tail"]
    assert page.holders == [2, 4, 5, 8, 2]
    # "Five" follows the start tags of <html> ... <div style='color: red'> (9) and the end
    # tags of <head>, <b>, <p>, <p hidden>, <div id='a'> and <div style='display: none'>.
    assert page.opened == [3, 5, 6, 9, 10]
    assert page.closes == [1, 1, 1, 6, 8]
    assert [b.container for b in page.blocks] == [2, 4, 8, 2]
    assert page.block_texts() == (["Intro & more", "One two", "Five", "tail"], [3, 2, 1, 1])
    shown = flatten_html(PAGE)  # hidden elements only dropped when asked
    assert shown.emptied == [1, 9]
    assert shown.block_texts()[0] == [
        "Intro & more", "One two", "Three", "Four", "Five", "tail"]
    # Text of ASCII whitespace only is the one SPACE piece, from either parser, and no text.
    spaced = "<html><head></head><body><p>a</p>\n  \t<p>b\xa0</p> <b>c</b>\xa0</body></html>"
    for page in (flatten_html(spaced), flatten_tree(parse_html(spaced))):
        assert page.pieces == ["a", " ", "b\xa0", " ", "c", "\xa0"]
        assert page.pieces[1] is SPACE
        assert page.pieces[3] is SPACE
        assert page.texts == ["a", "b\xa0", "c", "\xa0"]
        assert page.block_texts()[0] == ["a", "b", "c"]


def test_noframes_and_noembed_are_not_shown() -> None:
    # lexbor keeps their content as raw text ("<b>fallback</b>"), libxml2 as elements:
    # neither is drawn by a browser with frames and plugins, so neither is text.
    html = ("<html><body><p>Shown text</p><noembed><b>fallback</b></noembed>"
            "<noframes><p>no frames</p></noframes></body></html>")
    for page in (flatten_html(html), flatten_tree(parse_html(html))):
        assert page.block_texts()[0] == ["Shown text"]
    assert [b.text for b in text_blocks(parse_html(html))] == ["Shown text"]


def test_content_after_the_closing_html_tag_is_in_the_body() -> None:
    # libxml2 puts it in a second <html> beside the root; browsers at the end of <body>.
    html = ("<html><head><title>t</title></head><body><p>First paragraph</p></body></html>"
            "\n<p>Second paragraph</p> and a tail")
    root = parse_html(html)
    assert [(b.text, b.path) for b in text_blocks(root)] == [
        ("First paragraph", "/html/body/p[1]"), ("Second paragraph", "/html/body/p[2]"),
        ("and a tail", "/html/body")]
    assert list(root.itersiblings()) == []
    assert flatten_tree(root).block_texts()[0] == flatten_html(html).block_texts()[0]


def test_paths_through_prefixed_names_are_valid_xpath() -> None:
    # lxml's getpath would give /html/body/fb:like/div, whose prefix no namespace binds.
    html = ("<html><body><fb:like><div>first widget</div></fb:like>"
            "<fb:like><div>second widget</div></fb:like><o:p><p>office</p></o:p></body></html>")
    root = parse_html(html)
    tree = root.getroottree()
    lexbor = flatten_html(html)
    lexbor_paths = [lexbor.path(b.container) for b in lexbor.blocks]
    blocks = text_blocks(root)
    assert [b.path for b in blocks] == lexbor_paths == [
        "/html/body/*[name()='fb:like'][1]/div", "/html/body/*[name()='fb:like'][2]/div",
        "/html/body/*[name()='o:p']/p"]
    for block in blocks:
        assert tree.xpath(block.path) == [block.element]


def test_lexbor_and_lxml_agree_on_a_clean_page() -> None:
    for drop_hidden in (True, False):
        lexbor = flatten_html(PAGE, drop_hidden=drop_hidden)
        lxml = flatten_tree(parse_html(PAGE), drop_hidden=drop_hidden)
        assert fields(lexbor) == fields(lxml)


def test_blocks_are_cut_as_text_blocks_cuts_them(cleaneval: Path) -> None:
    """On the same (lxml) tree, the walk's blocks are shared.html.text_blocks' blocks:
    the same texts in the same kind of container, in order, on real pages."""
    for html, _ in dataset_pages(cleaneval, 60, 3):
        root = parse_html(html)
        expected = text_blocks(root)
        page = flatten_tree(root)
        texts = page.block_texts()[0]
        found = [(text, page.names[block.container])
                 for block, text in zip(page.blocks, texts, strict=True) if text]
        assert found == [(block.text, tag_name(block.element)) for block in expected]


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
    assert "deep text" in page.texts
    assert fields(page) == fields(flatten_tree(parse_html(deep)))
    options = "<select>" + "<option>choice" * 2500 + "</select>"
    assert _slow_for_lexbor(options)
    assert not _slow_for_lexbor("<select>" + "<option>choice" * 100 + "</select>")
    assert not _slow_for_lexbor("<p>text</p>" * 1500)  # few tags: not even counted


def test_markup_that_hides_slow_pages_does_not_keep_them_from_lxml() -> None:
    """Options in any letter case count; end tags in a comment or a script are text, and
    do not take from the depth of the elements around them."""
    assert _slow_for_lexbor("<select>" + "<Option>choice" * 2500 + "</select>")
    hidden_in_comment = "<body><!-- " + "</div>" * 9000 + " -->" + "<div>" * 9000 + "x"
    assert _slow_for_lexbor(hidden_in_comment)
    hidden_in_script = "<div><script>'</div>'</script>" * 9000 + "x"
    assert _slow_for_lexbor(hidden_in_script)
    commented_out = "<!-- " + "<div>" * 9000 + " -->" + "<p>x</p>" * 9000
    assert not _slow_for_lexbor(commented_out)


def test_paths_of_very_deep_elements_are_left_out() -> None:
    """A path 50,000 steps long would outweigh the text: elements deeper than
    MAX_PATH_DEPTH get None, the others their path."""
    page = flatten_html("<table><tr><td>x" * 2000)
    deepest = len(page.names) - 1
    assert page.path(deepest) is None
    assert page.path(deepest - 1) is None
    shallow = next(e for e in range(len(page.names)) if page.names[e] == "td")
    assert page.path(shallow) == "/html/body/table/tbody/tr/td"
    assert all(len((page.path(e) or "").split("/")) <= MAX_PATH_DEPTH + 1
               for e in range(len(page.names)))


def test_which_paths_are_left_out_does_not_depend_on_the_order_asked() -> None:
    """On a page nested past MAX_PATH_DEPTH, an element's path is None exactly when it
    has MAX_PATH_DEPTH ancestors or more, whether elements are asked root first, deepest
    first or shuffled (a climb from a deep element must not leave its shallow ancestors
    without a path)."""
    html = "<table><tr><td>x" * 2000
    expected = flatten_html(html)
    count = len(expected.names)
    depths = [0] * count
    for element in range(1, count):
        depths[element] = depths[expected.parents[element]] + 1
    too_deep = {e for e in range(count) if depths[e] >= MAX_PATH_DEPTH}
    assert 0 < len(too_deep) < count
    shuffled = list(range(count))
    random.Random(7).shuffle(shuffled)
    for order in (range(count), reversed(range(count)), shuffled):
        page = flatten_html(html)
        paths = {e: page.path(e) for e in order}
        assert {e for e, path in paths.items() if path is None} == too_deep
        assert all(len(path.split("/")) == depths[e] + 2
                   for e, path in paths.items() if path is not None)
    # The blocks (one per <td>) in either order: the same paths.
    containers = [block.container for block in expected.blocks]
    forward = [expected.path(c) for c in containers]
    backward = flatten_html(html)
    assert [backward.path(c) for c in reversed(containers)] == forward[::-1]


def test_class_and_id_attributes_are_kept_when_asked() -> None:
    html = ('<html><body><div class="Main x" id="top"><p id="a">t</p>'
            '<span class="s">u</span><i>v</i></div></body></html>')
    for page in (flatten_html(html, attributes=True),
                 flatten_tree(parse_html(html), attributes=True)):
        assert {page.names[i]: marks for i, marks in page.marks.items()} == {
            "div": ("Main x", "top"), "p": ("", "a"), "span": ("s", "")}
    assert flatten_html(html).marks == {}
