"""Resiliparse's HTML2Text main-content extraction (Bevendorff et al.) as a peer.

resiliparse.extract.html2text.extract_plain_text renders the page's visible text
(lexbor DOM) and, with `main_content`, drops elements its rules call boilerplate
(navigation, headers, footers, sidebars, hidden and ad-like elements). This service
is the main-content extractor, so `main_content` defaults to True, the one default
that differs from the function's (False: a plain full-text rendering); every other
option keeps the function's default. The reply text is its output; the blocks are
the page's text blocks, marked content when most of their tokens align with it
(shared.blockmap).
"""

from __future__ import annotations

from importlib.metadata import version
from typing import Annotated

from pydantic import Field, field_validator
from resiliparse.extract.html2text import extract_plain_text
from resiliparse.parse.html import CSSParserException, HTMLTree

from shared.blockmap import SUPPORT_SCORE, TextPeerOptions, text_extraction
from shared.contract import Algorithm, Extraction
from shared.html import clean_text


class ResiliparseOptions(TextPeerOptions):
    """extract_plain_text's options; defaults are its own except main_content (True here)."""

    main_content: bool = Field(True, description="Keep main content only (the point of this "
                               "service; False renders all visible text).")
    preserve_formatting: bool = Field(True, description="Keep line breaks between blocks.")
    list_bullets: bool = Field(True, description="Bullets before list items.")
    alt_texts: bool = Field(True, description="Keep images' alt texts.")
    links: bool = Field(False, description="Append link target URLs.")
    form_fields: bool = Field(False, description="Keep form fields' values.")
    noscript: bool = Field(False, description="Keep <noscript> contents.")
    comments: bool = Field(True, description="Treat comment sections as "
                           "main content.")
    post_meta: bool = Field(True, description="Keep article meta data (by-"
                            "line, date) in the main content.")
    hidden_elements: bool = Field(False, description="Keep elements "
                                  "with hidden class names in main-content mode.")
    skip_elements: list[Annotated[str, Field(min_length=1)]] | None = Field(
        None, description="CSS selectors of elements to skip.")

    @field_validator("skip_elements")
    @classmethod
    def _valid_selectors(cls, selectors: list[str] | None) -> list[str] | None:
        """A selector lexbor cannot parse is the caller's error (422), not a page with
        nothing to extract (extract_plain_text joins them with commas: each must parse)."""
        body = HTMLTree.parse("<p></p>").body
        for selector in selectors or []:
            try:
                if body is not None:
                    body.query_selector_all(selector)
            except CSSParserException as exc:
                raise ValueError(f"not a CSS selector: {selector!r} ({exc})") from None
        return selectors


def run_resiliparse(html: str, options: ResiliparseOptions) -> str:
    """extract_plain_text with our options; '' where it fails."""
    try:
        return str(extract_plain_text(clean_text(html), **options.model_dump(exclude={"blocks"})))
    except Exception:  # parser or selector errors on odd input are "nothing extracted"
        return ""


def extract(html: str, options: ResiliparseOptions, url: str | None = None) -> Extraction:
    text = run_resiliparse(html, options)
    return text_extraction(html, text, options.blocks)


ALGORITHM = Algorithm(
    name="resiliparse",
    version=version("resiliparse"),
    description="Resiliparse HTML2Text main-content extraction (peer). Text: its plain-text "
    "output; blocks: the page's text blocks, content when most of their tokens align with "
    "it.",
    reference="Bevendorff, J., Gupta, S., Kiesel, J., Stein, B. An Empirical Comparison of Web "
    "Content Extraction Algorithms (SIGIR 2023); https://github.com/chatnoir-eu/chatnoir-"
    "resiliparse",
    score=SUPPORT_SCORE,
    score_range=(0.0, 1.0),
    path_tree="html5",
    options_model=ResiliparseOptions,
    extract=extract,
)
