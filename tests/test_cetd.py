"""CETD: the figures of a small page worked out by hand, ExtractContent, real pages."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from services.cetd.extractor import (
    ALGORITHM,
    CetdOptions,
    PageMeasures,
    composite_text_density,
    int_array,
    int_arrays,
    mark_content,
    measure_page,
    piece_characters,
    text_characters,
    text_density,
)
from shared.flatpage import flatten_html
from tests.helpers import (
    ODD_PAGES,
    assert_beats_visible_text,
    assert_odd_pages_do_not_raise,
    dataset_pages,
)

# Characters are non-whitespace characters, tags the elements below a node.
SMALL = ("<html><body>"
         "<div id='nav'><a href='/'>Home</a> <a href='/n'>News</a></div>"
         "<div id='main'><p>Alpha beta gamma.</p><p>Delta <a href='/x'>link</a> epsilon.</p></div>"
         "</body></html>")
# Document order: 0 html, 1 body, 2 div#nav, 3 a, 4 a, 5 div#main, 6 p, 7 p, 8 a.
#   a Home / a News / a link: C = 4, T = 0, LC = 4, LT = 0
#   div#nav: C = 4 + 4 = 8 (the space between the links has no characters),
#            T = 2, LC = 8, LT = 2
#   p 1: "Alpha beta gamma." C = 5 + 4 + 6 = 15, T = 0, LC = 0, LT = 0
#   p 2: "Delta" 5 + "link" 4 + "epsilon." 8: C = 17, T = 1, LC = 4, LT = 1
#   div#main: C = 15 + 17 = 32, T = p + p + a = 3, LC = 4, LT = 1
#   body: C = 8 + 32 = 40, T = (1 + 2) + (1 + 3) = 7, LC = 8 + 4 = 12, LT = 2 + 1 = 3
#   html: C = 40, T = 8, LC = 12, LT = 3
FIGURES = {  # index: (C, T, LC, LT)
    0: (40, 8, 12, 3), 1: (40, 7, 12, 3), 2: (8, 2, 8, 2), 3: (4, 0, 4, 0), 4: (4, 0, 4, 0),
    5: (32, 3, 4, 1), 6: (15, 0, 0, 0), 7: (17, 1, 4, 1), 8: (4, 0, 4, 0),
}
RATIO = 12 / 40  # LC_b / C_b = 0.3


def measure(html: str, options: CetdOptions) -> tuple[PageMeasures, list[int]]:
    """The page's measures and its visible elements in document order (the parser's
    <head> is invisible, so the SMALL page's visible elements are numbered as above)."""
    measures = measure_page(flatten_html(html, drop_hidden=options.drop_hidden), options)
    return measures, [int(i) for i in measures.visible.nonzero()[0]]


def test_small_page_counts() -> None:
    measures, nodes = measure(SMALL, CetdOptions())
    assert [measures.page.names[n] for n in nodes] == [
        "html", "body", "div", "a", "a", "div", "p", "p", "a"]
    assert {i: (measures.chars[n], measures.tags[n], measures.link_chars[n],
                measures.link_tags[n]) for i, n in enumerate(nodes)} == FIGURES
    assert measures.body() == nodes[1]


def test_small_page_text_density() -> None:
    measures, nodes = measure(SMALL, CetdOptions(measure="td"))
    # TD = C / T, T = 0 taken as 1: nav 8/2 = 4, each link 4, p1 15, p2 17, main 32/3,
    # body 40/7 = 5.714, html 40/8 = 5.
    expected = [5.0, 40 / 7, 4.0, 4.0, 4.0, 32 / 3, 15.0, 17.0, 4.0]
    assert [measures.density[n] for n in nodes] == pytest.approx(expected)
    # DensitySum: the children's TD plus the node's own text pieces (C each as a leaf):
    # nav 4 + 4 = 8; main 15 + 17 = 32; body 4 + 32/3 = 14.667; p1 its text 15;
    # p2 "Delta" 5 + link 4 + "epsilon." 8 = 17; html TD(body) = 5.714; links 4.
    sums = [40 / 7, 4 + 32 / 3, 8.0, 4.0, 4.0, 32.0, 15.0, 17.0, 4.0]
    assert [measures.density_sum[n] for n in nodes] == pytest.approx(sums)
    assert measures.best(nodes[1]) == nodes[5]  # div#main: the largest DensitySum under body


def test_small_page_composite_text_density() -> None:
    measures, nodes = measure(SMALL, CetdOptions(measure="ctd"))
    density, density_sum = measures.density, measures.density_sum
    ln = math.log
    # CTD = C/T * ln(C*T / (LC*LT)) / ln(ln(C/nonLC * LC + LC_b/C_b * C + e)),
    # T, LC, LT, nonLC of 0 taken as 1.
    # Links and nav: C*T = LC*LT, so ln(1) = 0 and CTD = 0.
    # p1: 15 * ln 15 / ln ln(15/15 * 1 + 0.3*15 + e) = 40.621 / ln(2.1064) = 54.53
    p1 = 15 * ln(15) / ln(ln(1 + 4.5 + math.e))
    # p2: 17 * ln(17/4) / ln ln(17/13 * 4 + 5.1 + e) = 24.598 / ln(2.5687) = 26.07
    p2 = 17 * ln(17 / 4) / ln(ln(17 / 13 * 4 + 5.1 + math.e))
    # main: 32/3 * ln(32*3 / 4) / ln ln(32/28 * 4 + 9.6 + e) = 33.899 / ln(2.8267) = 32.62
    main = 32 / 3 * ln(24) / ln(ln(32 / 28 * 4 + 9.6 + math.e))
    # body: 40/7 * ln(280/36) / ln ln(40/28 * 12 + 12 + e) = 11.722 / ln(3.4614) = 9.44
    body = 40 / 7 * ln(280 / 36) / ln(ln(40 / 28 * 12 + 12 + math.e))
    assert (p1, p2, main, body) == pytest.approx((54.53, 26.07, 32.62, 9.44), abs=0.01)
    assert density[nodes[6]] == pytest.approx(p1)
    assert density[nodes[7]] == pytest.approx(p2)
    assert density[nodes[5]] == pytest.approx(main)
    assert density[nodes[1]] == pytest.approx(body)
    assert [density[nodes[i]] for i in (2, 3, 4, 8)] == [0.0, 0.0, 0.0, 0.0]
    # DensitySum of main = CTD(p1) + CTD(p2) = 80.60; of p2 its texts "Delta" (C = 5) and
    # "epsilon." (C = 8) as leaves, plus its link's 0:
    # 5 ln 5 / ln ln(1 + 1.5 + e) + 8 ln 8 / ln ln(1 + 2.4 + e) = 16.03 + 28.00
    assert density_sum[nodes[5]] == pytest.approx(80.60, abs=0.01)
    assert density_sum[nodes[7]] == pytest.approx(16.03 + 28.00, abs=0.01)
    assert density_sum[nodes[1]] == pytest.approx(main)  # nav 0 + main
    assert measures.best(nodes[1]) == nodes[5]


def test_composite_text_density_guards() -> None:
    assert composite_text_density(0, 5, 0, 0, 0.5) == 0.0  # no characters: no density
    assert text_density(0, 0) == 0.0
    assert text_density(7, 0) == 7.0  # a leaf: T counted as 1
    # A node of link text only: C*T = LC*LT, density 0, never negative or a division by 0.
    assert composite_text_density(9, 0, 9, 0, 1.0) == 0.0
    # No links at all: LC and LT taken as 1, nonLC = C.
    assert composite_text_density(10, 2, 0, 0, 0.0) == pytest.approx(
        5 * math.log(20) / math.log(math.log(1 + math.e)))


def test_small_page_content() -> None:
    for measure in ("td", "ctd"):
        for threshold in ("body", "path"):
            reply = ALGORITHM.run(SMALL, {"measure": measure, "threshold": threshold})
            assert [(b.text, b.is_content) for b in reply.blocks] == [
                ("Home News", False), ("Alpha beta gamma.", True), ("Delta link epsilon.", True)]
    blocks = ALGORITHM.run(SMALL, {"measure": "td"}).blocks
    assert [b.path for b in blocks] == ["/html/body/div[1]", "/html/body/div[2]/p[1]",
                                        "/html/body/div[2]/p[2]"]
    assert [b.score for b in blocks] == [4.0, 15.0, 17.0]  # the container's density


LONG = "This paragraph carries the story and is long enough to matter here."
MENU = "".join(f"<li><a href='/m{n}'>Menu {n}</a></li>" for n in range(6))


def test_extract_content_visits_children_over_the_threshold() -> None:
    """Below body, ExtractContent marks the best node of every subtree whose density
    reaches the threshold, not only the largest-DensitySum subtree."""
    page = ("<html><body><div id='story'>" + f"<p>{LONG}</p>" * 3 + "</div>"
            f"<ul>{MENU}</ul><div id='note'><p>A short aside note kept.</p></div></body></html>")
    for kind in ("td", "ctd"):
        measures, _ = measure(page, CetdOptions(measure=kind))
        body = measures.body()
        content, threshold = mark_content(measures, CetdOptions(measure=kind))
        assert threshold == measures.density[body]
        story, menu, note = measures.children(body)
        assert measures.best(body) == story
        assert measures.density[note] >= threshold > measures.density[menu]
        assert content[story]
        assert content[note]
        assert not content[menu]
        texts = [(b.text, b.is_content) for b in ALGORITHM.run(page, {"measure": kind}).blocks]
        assert texts == [*[(LONG, True)] * 3, *[(f"Menu {n}", False) for n in range(6)],
                         ("A short aside note kept.", True)]


def test_text_characters_are_what_split_keeps() -> None:
    """Characters are counted for all ASCII texts at once; the others, a text holding a
    NUL and lone surrogates still count as str.split() would have them."""
    texts = ["two words", " \xa0no-break\u2003em space ", "日本 語", "", "\x1c\x1f z\x0b",
             "café\n", "\ud800x"]
    assert text_characters(texts) == [8, 15, 3, 0, 1, 4, 2]
    assert text_characters(texts) == [len("".join(text.split())) for text in texts]
    assert text_characters(["a\0b", "c"]) == [3, 1]
    assert text_characters([]) == []


def test_piece_characters_match_counting_each_text() -> None:
    """Single-text blocks take theirs from the block text, the rest are counted."""
    page = flatten_html("<html><body><p> one\xa0 two </p><div>a <b>bb</b>\n<i> c</i></div>"
                        "<p>\u3000</p><p>日本 語</p></body></html>")
    assert [b.end - b.first for b in page.blocks] == [1, 3, 1, 1]
    assert piece_characters(page) == [len("".join(t.split())) for t in page.texts]
    assert piece_characters(page) == [6, 1, 2, 1, 0, 3]


def test_int_array_is_a_writable_int64_copy() -> None:
    values = [-1, 0, 2**40]
    array = int_array(values)
    assert array.dtype == np.int64
    assert array.tolist() == values
    array[0] = 7
    assert values[0] == -1
    assert int_array([]).tolist() == []


def test_int_arrays_are_views_of_one_conversion() -> None:
    first, empty, second = int_arrays([1, 2], [], [3, -4, 5])
    assert (first.tolist(), empty.tolist(), second.tolist()) == ([1, 2], [], [3, -4, 5])
    assert first.dtype == second.dtype == np.int64


def test_hidden_links_are_no_link_tags() -> None:
    """A hidden link holds nothing and is no tag: neither T nor LT counts it, and a link
    around visible text still makes that text link characters."""
    page = ("<html><body><div><a href='/h' hidden>gone</a><a href='/v'>seen</a>"
            "<p>Plain words</p></div></body></html>")
    measures, nodes = measure(page, CetdOptions())
    names = [measures.page.names[n] for n in nodes]
    assert names == ["html", "body", "div", "a", "p"]
    div = nodes[2]
    assert (measures.chars[div], measures.tags[div], measures.link_chars[div],
            measures.link_tags[div]) == (14, 2, 4, 1)
    shown, _ = measure(page, CetdOptions(drop_hidden=False))
    div = shown.visible.nonzero()[0][2]
    assert (shown.chars[div], shown.tags[div], shown.link_chars[div],
            shown.link_tags[div]) == (18, 3, 8, 2)


def test_hidden_elements_are_left_out() -> None:
    page = ("<html><body><div style='display: none'><p>" + "hidden words " * 50
            + "</p></div><div><p>Visible words that make the story.</p></div></body></html>")
    shown = ALGORITHM.run(page)
    assert shown.text == "Visible words that make the story."
    assert all("hidden" not in b.text for b in shown.blocks)
    # Without the option the hidden block is counted like any other (and wins).
    assert "hidden words" in ALGORITHM.run(page, {"drop_hidden": False}).text


def test_odd_pages_do_not_raise() -> None:
    assert_odd_pages_do_not_raise(ALGORITHM, (*ODD_PAGES, "<a href='/'>only a link</a>",
                                              "<frameset><frame src='x'></frameset>"))


def test_beats_visible_text_on_scrapinghub_sample(scrapinghub: Path) -> None:
    assert_beats_visible_text(lambda html: ALGORITHM.run(html).text, scrapinghub)


def test_path_threshold_keeps_a_superset(scrapinghub: Path) -> None:
    """The path threshold is never above body's, so ExtractContent keeps at least as much."""
    for html, _ in dataset_pages(scrapinghub, 15):
        measures, _ = measure(html, CetdOptions())
        by_body, body_threshold = mark_content(measures, CetdOptions(threshold="body"))
        by_path, path_threshold = mark_content(measures, CetdOptions(threshold="path"))
        assert path_threshold <= body_threshold
        assert all(p for b, p in zip(by_body, by_path, strict=True) if b)
