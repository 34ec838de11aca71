"""Gold and extract of one page side by side, with missed and extra words marked.

Words are the whitespace-separated pieces of each text, compared through the
scoring tokenizer (so case, Unicode form and punctuation do not count as
differences); the two word sequences are aligned by rapidfuzz's Indel opcodes
(an LCS alignment, as the word figures align tokens). A gold word outside the
alignment was missed, an extract word outside it is extra.
"""

from __future__ import annotations

from html import escape
from typing import Literal

from pydantic import BaseModel
from rapidfuzz.distance import Indel

from shared.tokens import tokenize


class Segment(BaseModel):
    """A run of words of one text: `same` in both, `missed` (gold only) or `extra`."""

    kind: Literal["same", "missed", "extra"]
    text: str


class PageDiff(BaseModel):
    gold: list[Segment]
    extract: list[Segment]
    missed_words: int
    extra_words: int


def _key(word: str) -> str:
    return " ".join(tokenize(word))


def page_diff(gold: str, text: str) -> PageDiff:
    """The two texts as segments (module docstring)."""
    gold_words, text_words = gold.split(), text.split()
    gold_keys = [_key(w) for w in gold_words]
    text_keys = [_key(w) for w in text_words]
    gold_parts: list[Segment] = []
    text_parts: list[Segment] = []
    missed = extra = 0

    def add(parts: list[Segment], kind: Literal["same", "missed", "extra"],
            words: list[str]) -> None:
        if not words:
            return
        if parts and parts[-1].kind == kind:
            parts[-1] = Segment(kind=kind, text=f"{parts[-1].text} {' '.join(words)}")
        else:
            parts.append(Segment(kind=kind, text=" ".join(words)))

    for op in Indel.opcodes(gold_keys, text_keys):
        gold_slice = gold_words[op.src_start:op.src_end]
        text_slice = text_words[op.dest_start:op.dest_end]
        if op.tag == "equal":
            add(gold_parts, "same", gold_slice)
            add(text_parts, "same", text_slice)
        else:
            missed += len(gold_slice)
            extra += len(text_slice)
            add(gold_parts, "missed", gold_slice)
            add(text_parts, "extra", text_slice)
    return PageDiff(gold=gold_parts, extract=text_parts, missed_words=missed, extra_words=extra)


def segments_html(segments: list[Segment]) -> str:
    """Segments as HTML: missed words in <del>, extra words in <ins>."""
    out = []
    for segment in segments:
        text = escape(segment.text)
        if segment.kind == "missed":
            out.append(f'<del class="missed">{text}</del>')
        elif segment.kind == "extra":
            out.append(f'<ins class="extra">{text}</ins>')
        else:
            out.append(text)
    return " ".join(out)
