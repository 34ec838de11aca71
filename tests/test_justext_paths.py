"""jusText's block paths name elements of the parsed page, not of jusText's cleaned copy."""

from __future__ import annotations

import lxml.html
import pytest

import services.justext.extractor as justext
from shared.html import normalize_space

# A <form> around the text, which jusText's cleaning removes from its copy (moving its
# children up), and a <script> and a <button> it drops.
PAGE = """<html><head><title>t</title></head><body>
<div><p>Menu</p></div>
<form action="/post"><script>var x = 1;</script><button>Go</button>
<div><p>The committee met on Tuesday and agreed on the budget for the coming year,
which the members had discussed for many weeks in the town hall of the old city.</p>
<p>It will now go to the council, where a vote is expected before the end of the
month, according to the chairwoman of the committee and several of its members.</p></div>
</form></body></html>"""


def page_paths() -> list[str | None]:
    extraction = justext.extract(PAGE, justext.JustextOptions())
    return [block.path for block in extraction.blocks]


def test_paths_name_the_parsed_pages_elements() -> None:
    extraction = justext.extract(PAGE, justext.JustextOptions())
    tree = lxml.html.document_fromstring(PAGE).getroottree()
    by_text = {normalize_space(b.text)[:20]: b.path for b in extraction.blocks}
    assert by_text["The committee met on"] == "/html/body/form/div/p[1]"
    assert by_text["It will now go to th"] == "/html/body/form/div/p[2]"
    assert by_text["Menu"] == "/html/body/div/p"
    for block in extraction.blocks:
        assert block.path is not None
        (element,) = tree.xpath(block.path)
        assert normalize_space(block.text) in normalize_space(element.text_content())


def test_pages_too_large_to_number_by_source_line_get_the_same_paths(
        monkeypatch: pytest.MonkeyPatch) -> None:
    by_line = page_paths()
    monkeypatch.setattr(justext, "_MAX_SOURCE_LINE", 3)  # numbered by attribute instead
    assert page_paths() == by_line


def test_text_no_browser_shows_is_no_paragraph() -> None:
    words = "This paragraph is the main text of the page and it is written in English. " * 3
    html = (f"<html><body><p>{words}</p><template><p>Hidden template text.</p></template>"
            "<noscript><p>Please enable JavaScript</p></noscript>"
            "<svg><text>Label of a drawing</text></svg><p>Last words.</p></body></html>")
    reply = justext.ALGORITHM.run(html, {}, None)
    assert [b.path for b in reply.blocks] == ["/html/body/p[1]", "/html/body/p[2]"]
