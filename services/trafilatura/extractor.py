"""trafilatura (Barbaresi 2021) as a peer: its plain-text output, mapped onto our blocks.

trafilatura gets the page text (control characters removed by
shared.html.clean_text) and loads it itself, as its users call it, so results
equal trafilatura.extract's (benchmarks/peer_parity.py). Its loader refuses a page
whose first 50 characters lack "html" and whose tree has fewer than two children
(CleanEval's <text> envelope, for one); option `shared_parser` hands it the tree of
shared.html.parse_html instead (trafilatura copies it before cleaning), which skips
that check. The reply text is trafilatura's own output; the
blocks are the page's text blocks, marked content when most of their tokens align
with that output (shared.blockmap). Deduplication uses a fresh LRU cache per page,
so it drops segments repeated within the page and the result never depends on the
pages the worker saw before (trafilatura's default cache is process-wide).
"""

from __future__ import annotations

import logging
from importlib.metadata import version
from typing import Annotated

import lxml.etree
import lxml.html
import trafilatura
from pydantic import Field, field_validator
from trafilatura.deduplication import LRUCache

from shared.blockmap import SUPPORT_SCORE, TextPeerOptions, text_extraction
from shared.contract import Algorithm, Extraction
from shared.html import clean_text, parse_html

# trafilatura logs an error for every page it finds nothing in; those are results here.
logging.getLogger("trafilatura").setLevel(logging.CRITICAL)


class TrafilaturaOptions(TextPeerOptions):
    """trafilatura.extract's options that change which text is kept (defaults are its own),
    and our choice of parser."""

    include_comments: bool = Field(True, description="Keep the comments section.")
    include_tables: bool = Field(True, description="Keep text inside tables.")
    favor_precision: bool = Field(False, description="Prefer less text, less noise.")
    favor_recall: bool = Field(False, description="Prefer more text (wins over precision).")
    fast: bool = Field(False, description="Skip the fallback extractors (readability, jusText).")
    target_language: str | None = Field(
        None, pattern=r"^[a-z]{2}$", description="ISO 639-1 code in lower case (en, de), the "
        "only form trafilatura matches; pages in another language give no content (checked "
        "on the page's declared language unless a language detector is installed).")
    deduplicate: bool = Field(False, description="Drop segments repeated within the page.")
    prune_xpath: list[Annotated[str, Field(min_length=1)]] | None = Field(
        None, description="XPath expressions of elements to remove before extraction.")
    shared_parser: bool = Field(
        False, description="Not trafilatura's: give it the tree of our shared parser instead of "
        "the page text, skipping its loader's is-this-HTML check.")

    @field_validator("prune_xpath")
    @classmethod
    def _valid_xpath(cls, expressions: list[str] | None) -> list[str] | None:
        """An expression libxml2 cannot compile is the caller's error (422), not a page
        with nothing to extract."""
        for expression in expressions or []:
            try:
                lxml.etree.XPath(expression)
            except lxml.etree.XPathSyntaxError as exc:
                raise ValueError(f"not an XPath expression: {expression!r} ({exc})") from None
        return expressions


def run_trafilatura(tree_or_html: lxml.html.HtmlElement | str, options: TrafilaturaOptions,
                    url: str | None) -> str:
    """trafilatura.extract with our options (plain text); '' where it finds nothing or fails."""
    try:
        text = trafilatura.extract(
            tree_or_html,
            url=url,
            fast=options.fast,
            favor_precision=options.favor_precision,
            favor_recall=options.favor_recall,
            include_comments=options.include_comments,
            include_tables=options.include_tables,
            target_language=options.target_language,
            deduplicate=LRUCache() if options.deduplicate else False,
            prune_xpath=options.prune_xpath,
            output_format="txt",
        )
    except Exception:  # a library failure on an odd page is "nothing extracted"
        return ""
    return text or ""


def extract(html: str, options: TrafilaturaOptions, url: str | None = None) -> Extraction:
    source = parse_html(html) if options.shared_parser else clean_text(html)
    return text_extraction(html, run_trafilatura(source, options, url), options.blocks)


ALGORITHM = Algorithm(
    name="trafilatura",
    version=version("trafilatura"),
    description="trafilatura: rule-based main-text extraction with readability and jusText "
    "fallbacks (peer). Text: trafilatura's output; blocks: the page's text blocks, content "
    "when most of their tokens align with it.",
    reference="Barbaresi, A. Trafilatura: A Web Scraping Library and Command-Line Tool for "
    "Text Discovery and Extraction (ACL 2021 demos); https://github.com/adbar/trafilatura",
    score=SUPPORT_SCORE,
    score_range=(0.0, 1.0),
    path_tree="html5",
    options_model=TrafilaturaOptions,
    extract=extract,
)
