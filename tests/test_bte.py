"""BTE: the linear-time window against brute force, the token sequence, real pages."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.bte.extractor import ALGORITHM, BteOptions, best_window, count_words, tokenize_page
from shared.flatpage import FlatPage, flatten_html, flatten_tree
from shared.html import parse_html
from tests.helpers import (
    assert_beats_visible_text,
    assert_odd_pages_do_not_raise,
)


def objective(bits: list[int], i: int, j: int) -> int:
    """T(i, j) of Finn et al., straight from its definition (B_n = 1 tag, 0 word)."""
    return (sum(bits[n] for n in range(i))
            + sum(1 - bits[n] for n in range(i, j + 1))
            + sum(bits[n] for n in range(j + 1, len(bits))))


def brute_force(bits: list[int]) -> tuple[int, int, int]:
    """Every window i <= j, its T counted from tag prefix counts; ties go to the smallest
    j, then the smallest i."""
    before = [0]
    for bit in bits:
        before.append(before[-1] + bit)  # before[k]: tags among the first k tokens
    best: tuple[int, int, int] | None = None
    for j in range(len(bits)):
        for i in range(j + 1):
            words_inside = (j + 1 - i) - (before[j + 1] - before[i])
            value = before[i] + words_inside + (before[-1] - before[j + 1])
            if best is None or value > best[2]:
                best = (i, j, value)
    assert best is not None
    return best


@settings(max_examples=400, deadline=None)
@given(st.lists(st.integers(0, 1), min_size=1, max_size=40))
def test_window_matches_brute_force_on_token_bits(bits: list[int]) -> None:
    i, j, gain = best_window([1 - 2 * b for b in bits])
    expected = brute_force(bits)
    assert (i, j) == expected[:2]
    # The maximised sum plus the page's tag count is the paper's objective.
    assert gain + sum(bits) == expected[2] == objective(bits, i, j)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(1, 6), min_size=1, max_size=16), st.booleans())
def test_run_length_window_has_the_token_optimum(runs: list[int], words_first: bool) -> None:
    """The extractor runs Kadane over runs (+k words, -m tags): same optimum as tokens,
    on any page with a word (a page of tags alone has no content either way)."""
    gains = [r if (n % 2 == 0) == words_first else -r for n, r in enumerate(runs)]
    if max(gains) < 0:
        gains.append(1)
    bits = [b for g in gains for b in ([0] * g if g > 0 else [1] * -g)]
    first, last, total = best_window(gains)
    assert total == sum(gains[first:last + 1])
    assert total + sum(bits) == brute_force(bits)[2]


def test_window_edge_cases() -> None:
    assert best_window([]) == (0, -1, 0)
    assert best_window([-1, -1, -1]) == (0, 0, -1)  # a page of tags: one tag, no words
    assert best_window([-5, 3, -1, 4, -9, 2]) == (1, 3, 6)
    # A zero-sum stretch before the best window is kept (smallest i for the same j).
    assert best_window([1, -1, 2]) == (0, 2, 2)


@pytest.mark.parametrize("flatten", [flatten_html, lambda html: flatten_tree(parse_html(html))],
                         ids=["lexbor", "lxml"])
def test_token_sequence_by_hand(flatten: Callable[[str], FlatPage]) -> None:
    """The same tokens from both parsers' trees (the page has the <head> lexbor adds)."""
    page = flatten("<html><head><title>t</title></head><body><p>one two</p><a href='/'>x</a>"
                   "<script>var a = 1;</script><br>three</body></html>")
    gains, words, runs = tokenize_page(page, BteOptions())
    # <html><head></head><body><p> | one two | </p><a> | x | </a><script></script><br> | three
    # | </body></html>  (head is invisible: its two tags at its start, its title not seen)
    assert gains == [-5, 2, -2, 1, -4, 1, -2]
    assert page.texts == ["one two", "x", "three"]
    assert (words, runs) == ([2, 1, 1], [1, 3, 5])
    gains, _, _ = tokenize_page(page, BteOptions(end_tags=False, invisible_tags=False))
    # <html><body><p> | one two | <a> | x | <br> | three
    assert gains == [-3, 2, -1, 1, -1, 1]
    gains, words, runs = tokenize_page(flatten("<html><head></head><body><p>a <b>b</b> c</p>"),
                                       BteOptions(inline_tags=False))
    assert gains == [-5, 1, 1, 1, -3]
    assert (words, runs) == ([1, 1, 1], [1, 2, 3])


def test_count_words() -> None:
    assert count_words("  two words ") == 2
    assert count_words("café au lait") == 3
    assert count_words("日本語のテキスト") == 8  # no spaces: one word per character
    assert count_words("iPhoneを販売") == 4


NAV = "".join(f"<li><a href='/s{n}'>Section {n}</a></li>" for n in range(12))
FOOT = "".join(f"<a href='/f{n}'>Link{n}</a>" for n in range(8))
ARTICLE = [
    "The council met on Tuesday evening to discuss the new library building and its budget.",
    "Several residents spoke in favour of longer opening hours and a larger children's section.",
    "The final plan will be put to a vote next month after a period of public consultation.",
]
PAGE = (f"<html><head><title>News</title><script>var x = '{'y' * 50}';</script></head><body>"
        f"<div id='menu'><ul>{NAV}</ul></div>"
        "<div id='story'><h1>Library plans</h1>"
        + "".join(f"<p>{p}</p>" for p in ARTICLE)
        + f"</div><div id='foot'>{FOOT}<span>Copyright 2024</span></div></body></html>")


def test_known_page() -> None:
    reply = ALGORITHM.run(PAGE)
    content = [b.text for b in reply.blocks if b.is_content]
    assert content == ["Library plans", *ARTICLE]
    assert reply.text == "\n".join(content)
    boiler = [b for b in reply.blocks if not b.is_content]
    assert any(b.text == "Section 0" for b in boiler)
    assert all(b.score == 0 and b.label == "outside" for b in boiler)
    assert [b.path for b in reply.blocks if b.is_content][:2] == [
        "/html/body/div[2]/h1", "/html/body/div[2]/p[1]"]


def test_partial_blocks_follow_min_inside() -> None:
    # The window ends inside the last block: "tail" words after many tags stay outside.
    page = ("<html><body>" + "<i></i>" * 20 + "<p>w1 w2 w3 w4 w5 w6 w7 w8"
            + "<b></b>" * 12 + "x1 x2 x3 x4</p>" + "<i></i>" * 20 + "</body></html>")
    blocks = ALGORITHM.run(page).blocks
    assert len(blocks) == 1
    assert blocks[0].label == "partial"
    assert blocks[0].score == round(8 / 12, 4)
    assert blocks[0].is_content
    assert not ALGORITHM.run(page, {"min_inside": 0.9}).blocks[0].is_content


def test_odd_pages_do_not_raise() -> None:
    assert_odd_pages_do_not_raise(ALGORITHM)


def test_beats_visible_text_on_scrapinghub_sample(scrapinghub: Path) -> None:
    """On a fixed sample, BTE's bag-of-words F1 is well above keeping all visible text."""
    assert_beats_visible_text(lambda html: ALGORITHM.run(html).text, scrapinghub)
