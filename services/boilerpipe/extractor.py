"""Boilerpipe (Kohlschütter et al. 2010) with two engines behind one extractor.

`java`: the original Boilerpipe 1.2 from Debian's libboilerpipe-java, called
through JPype; the JVM starts once per process (a worker process of the service).
`python`: the boilerpy3 port. Both parse the page into Boilerpipe's text blocks,
run the chosen extractor's filter chain and report every block with its content
flag, so blocks are exactly what Boilerpipe classified.
"""

from __future__ import annotations

import functools
import glob
import os
import re
from importlib.metadata import version
from typing import Any, Literal

import lxml.html
from pydantic import Field

from shared.contract import Algorithm, Block, Extraction, Options
from shared.html import INVISIBLE, clean_text, parse_html, tag_name

JAVA_DIR = os.environ.get("BOILERBENCH_JAVA_DIR", "/usr/share/java")
# Boilerpipe 1.2 and what it needs (Debian: libboilerpipe-java pulls in the other two).
JARS = ("boilerpipe.jar", "nekohtml.jar", "xercesImpl.jar")
# The JIT's first tier only, and one GC thread: the full tiered JIT spends a short run
# compiling, on the core the other services need, and pays that back only after many
# hundreds of pages, by little. Override with _JAVA_OPTIONS.
JVM_OPTIONS = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")
JAVA_VERSION = "1.2.0"

ExtractorName = Literal["article", "default", "largest-content", "canola", "keep-everything",
                        "article-sentences", "num-words-rules"]
EXTRACTOR_CLASSES: dict[str, str] = {
    "article": "ArticleExtractor",
    "default": "DefaultExtractor",
    "largest-content": "LargestContentExtractor",
    "canola": "CanolaExtractor",
    "keep-everything": "KeepEverythingExtractor",
    "article-sentences": "ArticleSentencesExtractor",
    "num-words-rules": "NumWordsRulesExtractor",
}


def java_available() -> bool:
    """True where the Boilerpipe jars and a JVM are installed."""
    try:
        import jpype
    except ImportError:
        return False
    if not all(os.path.exists(os.path.join(JAVA_DIR, jar)) for jar in JARS):
        return False
    try:
        jpype.getDefaultJVMPath()
    except Exception:  # jpype raises its own JVMNotFoundException and friends
        return False
    return True


@functools.cache
def default_engine() -> str:
    return "java" if java_available() else "python"


class BoilerpipeOptions(Options):
    extractor: ExtractorName = Field("article", description="Which Boilerpipe extractor runs.")
    engine: Literal["auto", "java", "python"] = Field(
        "auto", description="auto: java where the jars are present, else python (boilerpy3)."
    )


@functools.cache
def _java() -> Any:
    """Start the JVM once and return the Java classes the extractor needs."""
    import jpype

    if not jpype.isJVMStarted():
        classpath = [os.path.join(JAVA_DIR, jar) for jar in JARS]
        extra = glob.glob(os.path.join(JAVA_DIR, "nekohtmlXni.jar"))
        jpype.startJVM(*JVM_OPTIONS, classpath=classpath + extra, convertStrings=True)
    return jpype


def _covered(offsets: list[int], survivors: list[tuple[int, int, bool]]) -> list[bool]:
    """Content flag of each original block from the blocks left after filtering.

    Boilerpipe's filters fuse neighbouring blocks (the survivor's offsets then span
    the blocks it absorbed) and drop boilerplate blocks from the document, so an
    original block is content when a surviving content block's offset range holds it.
    """
    spans = [(start, end) for start, end, is_content in survivors if is_content]
    return [any(start <= offset <= end for start, end in spans) for offset in offsets]


# A numeric character reference to a UTF-16 surrogate: NekoHTML makes a lone surrogate
# of it, which no Python string can take back from Java.
_CHARACTER_REFERENCE = re.compile(r"&#(?:[xX]([0-9a-fA-F]{1,8})|([0-9]{1,10}));?")


def _surrogate_as_replacement(match: re.Match[str]) -> str:
    """HTML's rule for a reference to a surrogate: U+FFFD (WHATWG HTML, "numeric
    character reference end state"); any other reference is left as it stands."""
    code = int(match.group(1), 16) if match.group(1) else int(match.group(2))
    return "&#xFFFD;" if 0xD800 <= code <= 0xDFFF else match.group(0)


def _java_extraction(html: str, extractor: str) -> Extraction:
    if "&#" in html:
        html = _CHARACTER_REFERENCE.sub(_surrogate_as_replacement, html)
    jpype = _java()
    string_reader = jpype.JClass("java.io.StringReader")
    input_source = jpype.JClass("org.xml.sax.InputSource")
    sax_input = jpype.JClass("de.l3s.boilerpipe.sax.BoilerpipeSAXInput")
    extractor_class = jpype.JClass(f"de.l3s.boilerpipe.extractors.{EXTRACTOR_CLASSES[extractor]}")
    document = sax_input(input_source(string_reader(html))).getTextDocument()
    original = [(str(b.getText()), int(b.getOffsetBlocksStart()), float(b.getLinkDensity()))
                for b in document.getTextBlocks()]
    extractor_class.INSTANCE.process(document)
    survivors = [(int(b.getOffsetBlocksStart()), int(b.getOffsetBlocksEnd()), bool(b.isContent()))
                 for b in document.getTextBlocks()]
    flags = _covered([offset for _, offset, _ in original], survivors)
    blocks = [Block(text=text, is_content=flag, score=round(density, 4))
              for (text, _, density), flag in zip(original, flags, strict=True)]
    return Extraction(blocks, text=str(document.getContent()))


@functools.cache
def _python_extractor(extractor: str) -> Any:
    import boilerpy3.extractors

    return getattr(boilerpy3.extractors, EXTRACTOR_CLASSES[extractor])(raise_on_failure=False)


def _python_extraction(html: str, extractor: str) -> Extraction:
    engine = _python_extractor(extractor)
    document = engine.parse_doc(html)
    original = [(b.text, b.offset_blocks_start, b.link_density) for b in document.text_blocks]
    engine.filter.process(document)
    survivors = [(b.offset_blocks_start, b.offset_blocks_end, b.is_content)
                 for b in document.text_blocks]
    flags = _covered([offset for _, offset, _ in original], survivors)
    blocks = [Block(text=text, is_content=flag, score=round(float(density), 4))
              for (text, _, density), flag in zip(original, flags, strict=True)]
    return Extraction(blocks, text=document.content)


# The elements whose text no browser shows, as every service leaves them out (shared.html);
# both of Boilerpipe's parsers keep the text of some (<template>, <svg>, <math>, <textarea>,
# <iframe>, ...). <head> and its <title> stay: Boilerpipe reads the page's title.
_HIDDEN = INVISIBLE - {"head", "title"}


def _without_hidden(html: str) -> str:
    """The page without the elements whose text no browser shows."""
    root = parse_html(html)
    for element in [e for e in root.iter() if tag_name(e) in _HIDDEN]:
        element.drop_tree()
    return str(lxml.html.tostring(root, encoding="unicode"))


def engine_for(options: BoilerpipeOptions) -> str:
    return default_engine() if options.engine == "auto" else options.engine


def extract(html: str, options: BoilerpipeOptions, url: str | None = None) -> Extraction:
    page = _without_hidden(clean_text(html))
    if engine_for(options) == "java":
        extraction = _java_extraction(page, options.extractor)
    else:
        extraction = _python_extraction(page, options.extractor)
    blocks = [b for b in extraction.blocks if b.text.strip()]
    return Extraction(blocks, text=extraction.text)


def _warm_up() -> None:
    if default_engine() == "java":
        _java_extraction("<html><body><p>warm up</p></body></html>", "article")


ALGORITHM = Algorithm(
    name="boilerpipe",
    version=f"java {JAVA_VERSION} / boilerpy3 {version('boilerpy3')}",
    description="Boilerpipe: shallow text features (word counts, link density, text "
    "density) of text blocks and their neighbours, classified by hand-built decision "
    "rules per extractor. Blocks: Boilerpipe's text blocks before fusion (its own parse, "
    "without paths); text: Boilerpipe's own output.",
    reference="Kohlschütter, Fankhauser, Nejdl. Boilerplate Detection using Shallow Text "
    "Features. WSDM 2010; https://github.com/kohlschutter/boilerpipe",
    options_model=BoilerpipeOptions,
    extract=extract,
    score="Link density: the share of the block's words inside links, one of the figures "
    "Boilerpipe's rules decide by (not a probability).",
    score_range=(0.0, 1.0),
    path_tree=None,
    engine=default_engine,
    warm_up=_warm_up,
)
