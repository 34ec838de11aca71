"""readability-lxml (the Python port of Arc90 Readability) as a peer, mapped onto our blocks.

readability scores paragraphs' parents by text length, commas and class/id hints,
takes the best candidate and its qualifying siblings, and retries with relaxed
cleaning when the result is shorter than `retry_length`. It gets the page text
(control characters removed by shared.html.clean_text) and parses it itself: its
retry re-parses the input, and a tree would come back already pruned. The reply
text is the visible text of its summary HTML, one block per line; the blocks are
the page's text blocks, marked content when most of their tokens align with that
text (shared.blockmap).
"""

from __future__ import annotations

import logging
from importlib.metadata import version

from pydantic import Field
from readability import Document

from shared.blockmap import SUPPORT_SCORE, TextPeerOptions, text_extraction
from shared.contract import Algorithm, Extraction
from shared.html import clean_text, parse_html, visible_text

logging.getLogger("readability").setLevel(logging.CRITICAL)


class ReadabilityOptions(TextPeerOptions):
    """readability.Document's candidate thresholds and class/id hints; defaults are its own."""

    min_text_length: int = Field(
        25, ge=0,
        description="Paragraphs shorter than this (characters) do not score their parents.")
    retry_length: int = Field(
        250, ge=0,
        description="A summary shorter than this (characters) is retried without the "
        "unlikely-candidate cleaning.")
    positive_keywords: list[str] | None = Field(
        None,
        description="Class/id words that add weight to an element (e.g. 'article', 'story').")
    negative_keywords: list[str] | None = Field(
        None,
        description="Class/id words that take weight from an element (e.g. 'comment', 'ad').")


def run_readability(html: str, options: ReadabilityOptions, url: str | None) -> str:
    """The visible text of readability's summary; '' where it finds nothing or fails."""
    try:
        summary = Document(
            clean_text(html),
            positive_keywords=options.positive_keywords,
            negative_keywords=options.negative_keywords,
            url=url,
            min_text_length=options.min_text_length,
            retry_length=options.retry_length,
        ).summary()
    except Exception:  # readability raises Unparseable (and worse) on odd pages
        return ""
    return visible_text(parse_html(summary)) if summary and summary.strip() else ""


def extract(html: str, options: ReadabilityOptions, url: str | None = None) -> Extraction:
    text = run_readability(html, options, url)
    return text_extraction(html, text, options.blocks)


ALGORITHM = Algorithm(
    name="readability",
    version=version("readability-lxml"),
    description="readability-lxml: Arc90 Readability's candidate scoring (peer). Text: the "
    "visible text of its summary; blocks: the page's text blocks, content when most of "
    "their tokens align with it.",
    reference="Arc90 Readability (2009); Python port readability-lxml, "
    "https://github.com/buriy/python-readability",
    score=SUPPORT_SCORE,
    score_range=(0.0, 1.0),
    path_tree="html5",
    options_model=ReadabilityOptions,
    extract=extract,
)
