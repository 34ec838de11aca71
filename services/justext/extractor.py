"""jusText (Pomikálek 2011) as a pure extractor: its paragraphs become the blocks.

We run jusText's own pipeline (preprocess, make paragraphs, classify, revise) on
the tree from shared.html.parse_html instead of calling justext.justext(), whose
own parsing fails on pages with control characters or an XML declaration.
"""

from __future__ import annotations

import functools
from importlib.metadata import version

import justext
import justext.core as jt
from pydantic import Field, field_validator

from shared.contract import Algorithm, Block, Extraction, Options
from shared.html import parse_html

ALL_LANGUAGES = "all"


@functools.cache
def stoplist_names() -> frozenset[str]:
    return frozenset(justext.get_stoplists())


@functools.cache
def load_stoplist(language: str) -> frozenset[str]:
    """One stoplist by jusText's name, or every stoplist merged for `all`."""
    if language == ALL_LANGUAGES:
        words: set[str] = set()
        for name in stoplist_names():
            words |= justext.get_stoplist(name)
        return frozenset(words)
    return frozenset(justext.get_stoplist(language))


class JustextOptions(Options):
    language: str = Field(
        "English",
        description="A jusText stoplist name (e.g. English, German, Czech) or 'all' for every "
        "stoplist merged (language-independent mode).",
    )
    length_low: int = Field(jt.LENGTH_LOW_DEFAULT, ge=0, description="Shorter ones are short.")
    length_high: int = Field(jt.LENGTH_HIGH_DEFAULT, ge=0, description="Longer ones may be good.")
    stopwords_low: float = Field(jt.STOPWORDS_LOW_DEFAULT, ge=0, le=1)
    stopwords_high: float = Field(jt.STOPWORDS_HIGH_DEFAULT, ge=0, le=1)
    max_link_density: float = Field(jt.MAX_LINK_DENSITY_DEFAULT, ge=0, le=1)
    max_heading_distance: int = Field(jt.MAX_HEADING_DISTANCE_DEFAULT, ge=0)
    no_headings: bool = Field(jt.NO_HEADINGS_DEFAULT, description="Skip the heading revision.")

    @field_validator("language")
    @classmethod
    def _known_stoplist(cls, value: str) -> str:
        if value != ALL_LANGUAGES and value not in stoplist_names():
            raise ValueError(f"unknown stoplist {value!r}; use 'all' or one of jusText's names")
        return value


def extract(html: str, options: JustextOptions, url: str | None = None) -> Extraction:
    dom = jt.preprocessor(parse_html(html))
    paragraphs = jt.ParagraphMaker.make_paragraphs(dom)
    jt.classify_paragraphs(
        paragraphs, load_stoplist(options.language), options.length_low, options.length_high,
        options.stopwords_low, options.stopwords_high, options.max_link_density,
        options.no_headings,
    )
    jt.revise_paragraph_classification(paragraphs, options.max_heading_distance)
    blocks = [
        Block(
            text=p.text,
            is_content=p.class_type == "good",
            score=round(p.stopwords_density(load_stoplist(options.language)), 4),
            path=p.xpath,
            label=p.class_type,
        )
        for p in paragraphs
        if p.text.strip()
    ]
    return Extraction(blocks)


def _warm_up() -> None:
    """Load the default stoplist before the first request."""
    load_stoplist("English")


ALGORITHM = Algorithm(
    name="justext",
    version=version("justext"),
    description="jusText: paragraphs classified by length, stopword density and link "
    "density, then revised by their neighbours. Block score: stopword density.",
    reference="Pomikálek, J. Removing Boilerplate and Duplicate Content from Web Corpora "
    "(PhD thesis, Masaryk University, 2011); https://github.com/miso-belica/jusText",
    options_model=JustextOptions,
    extract=extract,
    warm_up=_warm_up,
)
