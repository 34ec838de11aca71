"""The two Boilerpipe engines (original Java, boilerpy3 port) side by side."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from orchestrator.scoring import bag_f1
from services.boilerpipe.extractor import ALGORITHM, default_engine
from shared.decoding import decode_html
from tests.conftest import report

pytestmark = pytest.mark.skipif(
    default_engine() != "java", reason="the java engine needs Debian libboilerpipe-java and a JRE"
)


def test_engines_agree_on_scrapinghub(scrapinghub: Path) -> None:
    mutual = []
    for path in sorted((scrapinghub / "html").glob("*.html")):
        html = decode_html(path.read_bytes())
        java = ALGORITHM.run(html, {"engine": "java", "extractor": "article"}).text
        python = ALGORITHM.run(html, {"engine": "python", "extractor": "article"}).text
        mutual.append(bag_f1(python, java))
    mean = statistics.mean(mutual)
    report(f"boilerpipe java vs boilerpy3 (ArticleExtractor) on scrapinghub ({len(mutual)} "
           f"pages): mutual word F1 mean {mean:.4f}, median {statistics.median(mutual):.4f}, "
           f"pages identical {sum(f == 1.0 for f in mutual)}")
    # The port follows the original closely; a large gap means one engine is broken.
    assert mean > 0.9


@pytest.mark.parametrize("extractor", ["article", "default", "largest-content", "canola",
                                       "keep-everything", "article-sentences",
                                       "num-words-rules"])
def test_every_extractor_runs_on_both_engines(extractor: str, scrapinghub: Path) -> None:
    path = sorted((scrapinghub / "html").glob("*.html"))[1]
    html = decode_html(path.read_bytes())
    for engine in ("java", "python"):
        body = ALGORITHM.run(html, {"engine": engine, "extractor": extractor})
        assert body.blocks
        content = [b for b in body.blocks if b.is_content]
        if extractor == "keep-everything":
            assert len(content) == len(body.blocks)
        else:
            assert 0 < len(content) < len(body.blocks)


@pytest.mark.parametrize("reference", ["&#xD800;", "&#55296;", "&#xdfff"])
def test_reference_to_a_surrogate_reads_as_replacement_character(reference: str) -> None:
    page = (f"<html><body><p>bad {reference} reference in a paragraph of words.</p>"
            "</body></html>")
    for engine in ("java", "python"):
        reply = ALGORITHM.run(page, {"engine": engine}, None)
        assert [b.text for b in reply.blocks] == [
            "bad \ufffd reference in a paragraph of words."], engine
