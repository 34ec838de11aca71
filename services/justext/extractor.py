"""jusText (Pomikálek 2011) as a pure extractor: its paragraphs become the blocks.

We run jusText's own pipeline (preprocess, make paragraphs, classify, revise) on
the tree from shared.html.parse_html instead of calling justext.justext(), whose
own parsing fails on pages with control characters or an XML declaration.

A paragraph's XPath, as jusText gives it, names an element of jusText's cleaned copy
of the page (every step indexed, `<form>`, `<object>`, `<iframe>` removed with their
children moved up) and is no use to a client. Each element of the parsed page is
numbered before the copy is made (_PagePaths), so a paragraph's element in the copy
leads back to the page's own element, whose path is then given in the contract's
form (shared.html.ElementPaths).

`language: auto` picks the stoplist per page: the language of `<html lang>` (its
English name through Babel's locale data, e.g. `de-AT` -> German) when jusText has
a stoplist of that name, else the stoplist that covers the most of the page's words
(stopwords are a language's most frequent words, so the right list covers the most;
the first few thousand words are counted). A page none of them covers (a script
without a stoplist, such as Chinese) gets every stoplist merged, as with `all`.
"""

from __future__ import annotations

import functools
import unicodedata
from collections import Counter
from importlib.metadata import version

import justext
import justext.core as jt
from lxml import etree
from pydantic import Field, field_validator
from pydantic.config import JsonDict

from shared.contract import Algorithm, Block, Extraction, Options
from shared.html import INVISIBLE, ElementPaths, parse_html, tag_name

ALL_LANGUAGES = "all"
AUTO = "auto"
_DETECTION_WORDS = 3000
# Where the page's elements are numbered for the way back from jusText's copy: their
# source line (libxml2 keeps it in 16 bits), or this attribute on larger pages.
_MAX_SOURCE_LINE = 65535
_MARK = "data-boilerbench-element"


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


@functools.cache
def _stoplists_by_word() -> dict[str, tuple[str, ...]]:
    """Each stopword with the stoplists that hold it (to count a page's words once)."""
    index: dict[str, list[str]] = {}
    for name in sorted(stoplist_names()):
        for word in justext.get_stoplist(name):
            index.setdefault(word, []).append(name)
    return {word: tuple(names) for word, names in index.items()}


def stoplist_of_code(code: str) -> str | None:
    """jusText's stoplist for a language tag (`de`, `pt-BR`, `nb`), if it has one."""
    from babel import Locale, UnknownLocaleError

    try:
        language = Locale.parse(code.strip().replace("-", "_")).language
        name = Locale(language).get_language_name("en")
    except (UnknownLocaleError, ValueError, TypeError):
        return None
    if not name:
        return None
    plain = "".join(c for c in unicodedata.normalize("NFKD", name)
                    if not unicodedata.combining(c))
    candidate = plain.replace(" ", "_")
    return candidate if candidate in stoplist_names() else None


def stoplist_of_words(words: list[str]) -> str:
    """The stoplist that covers the most of `words`; `all` when none covers any."""
    index = _stoplists_by_word()
    counts: Counter[str] = Counter()
    for word in words[:_DETECTION_WORDS]:
        counts.update(index.get(word.lower(), ()))
    if not counts:
        return ALL_LANGUAGES
    return max(sorted(counts), key=lambda name: counts[name])


def _language_names(schema: JsonDict) -> None:
    """The names `language` takes, listed in /info's schema (the 422 names them too)."""
    schema["enum"] = [AUTO, ALL_LANGUAGES, *sorted(stoplist_names())]


class JustextOptions(Options):
    language: str = Field(
        "English",
        description="A jusText stoplist name (e.g. English, German, Czech), 'all' for every "
        "stoplist merged (language-independent mode), or 'auto': the stoplist of the "
        "page's <html lang>, else the one that covers most of its words.",
        json_schema_extra=_language_names,
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
        if value not in (ALL_LANGUAGES, AUTO) and value not in stoplist_names():
            raise ValueError(f"unknown stoplist {value!r}; use 'auto', 'all' or one of: "
                             f"{', '.join(sorted(stoplist_names()))}")
        return value


class _PagePaths:
    """Contract paths of the page's elements from jusText's paths into its cleaned copy.

    Made before the copy: it numbers the page's elements in their source-line field,
    which a copy keeps and jusText does not read (an attribute would do too, but would
    travel through jusText's SAX events and cost more than the numbering), or in an
    attribute on pages with more elements than that field can count.
    jusText's path `/html[1]/body[1]/div[2]` counts, per step, the elements of that
    name among the children of the step before (as XPath does); each parent's children
    are counted once, when a path first passes through it."""

    def __init__(self, root: etree._Element) -> None:
        self._originals = list(root.iter(etree.Element))
        self._by_line = len(self._originals) <= _MAX_SOURCE_LINE
        if self._by_line:
            for number, element in enumerate(self._originals, 1):
                element.sourceline = number
        else:
            for number, element in enumerate(self._originals, 1):
                element.set(_MARK, str(number))
        self._children: dict[etree._Element, dict[tuple[str, int], etree._Element]] = {}
        self._found: dict[str, etree._Element] = {}
        self._paths = ElementPaths()

    def path(self, copy: etree._Element, justext_xpath: str) -> str | None:
        """The page's path of the element that `justext_xpath` names in `copy`."""
        element = self._element(copy, justext_xpath)
        if element is None:
            return None
        number = element.sourceline if self._by_line else int(element.get(_MARK) or 0)
        return self._paths.path(self._originals[number - 1]) if number else None

    def _element(self, copy: etree._Element, justext_xpath: str) -> etree._Element | None:
        """The element of `copy` at `justext_xpath`, found from the nearest ancestor
        found before (paragraphs follow each other, so most are one step away)."""
        found = self._found
        if not found:
            found[f"/{copy.tag}[1]"] = copy
        steps: list[str] = []
        prefix = justext_xpath
        while prefix not in found:
            prefix, _, step = prefix.rpartition("/")
            if not prefix:
                return None
            steps.append(step)
        element = found[prefix]
        for step in reversed(steps):
            name, _, order = step.rpartition("[")
            element = self._named_children(element).get((name, int(order[:-1])))
            if element is None:
                return None
            prefix = f"{prefix}/{step}"
            found[prefix] = element
        return element

    def _named_children(self, parent: etree._Element
                        ) -> dict[tuple[str, int], etree._Element]:
        named = self._children.get(parent)
        if named is None:
            named = {}
            seen: dict[str, int] = {}
            for child in parent:
                if isinstance(child.tag, str):
                    seen[child.tag] = order = seen.get(child.tag, 0) + 1
                    named[(child.tag, order)] = child
            self._children[parent] = named
        return named


def extract(html: str, options: JustextOptions, url: str | None = None) -> Extraction:
    root = parse_html(html)
    declared = root.get("lang") or root.get("{http://www.w3.org/XML/1998/namespace}lang")
    page_paths = _PagePaths(root)
    dom = jt.preprocessor(root)
    # jusText's cleaning keeps <noscript>, <template>, <svg> and the like: text no
    # browser shows, left out here as every service leaves it out (shared.html).
    for element in [e for e in dom.iter() if tag_name(e) in INVISIBLE]:
        element.drop_tree()
    paragraphs = jt.ParagraphMaker.make_paragraphs(dom)
    language = options.language
    if language == AUTO:
        language = (stoplist_of_code(declared) if declared else None) or stoplist_of_words(
            [word for p in paragraphs for word in p.text.split()])
    jt.classify_paragraphs(
        paragraphs, load_stoplist(language), options.length_low, options.length_high,
        options.stopwords_low, options.stopwords_high, options.max_link_density,
        options.no_headings,
    )
    jt.revise_paragraph_classification(paragraphs, options.max_heading_distance)
    blocks = [
        Block(
            text=p.text,
            is_content=p.class_type == "good",
            score=round(p.stopwords_density(load_stoplist(language)), 4),
            path=page_paths.path(dom, p.xpath),
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
    "density, then revised by their neighbours.",
    reference="Pomikálek, J. Removing Boilerplate and Duplicate Content from Web Corpora "
    "(PhD thesis, Masaryk University, 2011); https://github.com/miso-belica/jusText",
    options_model=JustextOptions,
    extract=extract,
    score="Stopword density: the share of the paragraph's words in the stoplist used, "
    "jusText's main feature (not a probability); its final class, good or bad, is `label`.",
    score_range=(0.0, 1.0),
    path_tree="libxml2",
    warm_up=_warm_up,
)
