"""Boilerpipe on real pages: the text no browser shows stays out of its blocks."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.boilerpipe.extractor import ALGORITHM, default_engine
from shared.decoding import decode_html
from shared.html import normalize_space, parse_html, tag_name
from tests.helpers import visible_text_of

ENGINES = ["python", *(["java"] if default_engine() == "java" else [])]
# Pages whose <template> or <svg> elements hold text that both engines used to return:
# an ad-blocker notice and photo captions in templates, icon titles in SVG.
PAGES = [("chaos", "terror-6.html"), ("chaos", "kong-8.html"),
         ("scrapinghub", "06e5123e4ef7cfb4533250dc45d1e03d0838fc66223f45c583c4d12f48b4da85.html")]


def hidden_texts(html: str) -> list[str]:
    """The texts of the page's <template> and <svg> elements that it shows nowhere else."""
    shown = normalize_space(visible_text_of(html))
    texts = {normalize_space("".join(element.itertext()))
             for element in parse_html(html).iter() if tag_name(element) in ("template", "svg")}
    return sorted(text for text in texts if len(text) > 10 and text not in shown)


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize(("dataset", "page"), PAGES)
def test_template_and_svg_text_is_not_extracted(dataset: str, page: str, engine: str,
                                                request: pytest.FixtureRequest) -> None:
    folder: Path = request.getfixturevalue(dataset)
    html = decode_html((folder / "html" / page).read_bytes())
    hidden = hidden_texts(html)
    assert hidden, "the page has no hidden text to look for"
    reply = ALGORITHM.run(html, {"engine": engine})
    extracted = normalize_space(" ".join([reply.text, *(block.text for block in reply.blocks)]))
    found = [text for text in hidden if text in extracted]
    assert not found, found
