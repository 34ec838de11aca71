"""Gold and extract of one page side by side, with missed and extra words marked.

Words are the scoring tokenizer's tokens (so case, Unicode form and punctuation do
not count as differences, and a character of Chinese or Thai is a word of its own),
each shown as it stands in the text with the punctuation after it; the two token
sequences are aligned by rapidfuzz's Indel opcodes (an LCS alignment, as the word
figures align tokens). A gold word outside the alignment was missed, an extract word
outside it is extra, so the counts are the page's word FN and FP.
"""

from __future__ import annotations

import re
from html import escape
from typing import Literal

from pydantic import BaseModel
from rapidfuzz.distance import Indel

from shared.tokens import normalize, tokenize, word_pattern

_PIECE = re.compile(r"\S+")
_SPACE = re.compile(r"\s+")


class Segment(BaseModel):
    """A run of words of one text: `same` in both, `missed` (gold only) or `extra`."""

    kind: Literal["same", "missed", "extra"]
    text: str


class PageDiff(BaseModel):
    gold: list[Segment]
    extract: list[Segment]
    missed_words: int
    extra_words: int


def _units(text: str) -> tuple[list[int], list[str], list[int]]:
    """The text's tokens as units: where each starts in the text, its key (the token)
    and how many tokens it holds. Where the tokenizer's matches on a raw
    whitespace-separated piece do not map one to one onto the piece's normalised
    tokens (NFKC can split a character in several), the piece is one unit."""
    starts: list[int] = []
    keys: list[str] = []
    sizes: list[int] = []
    for piece in _PIECE.finditer(text):
        tokens = tokenize(piece.group())
        if not tokens:
            continue
        matches = list(word_pattern().finditer(piece.group()))
        if len(matches) == len(tokens) and all(
                normalize(m.group()) == token for m, token in zip(matches, tokens, strict=True)):
            starts += [piece.start() + m.start() for m in matches]
            keys += tokens
            sizes += [1] * len(tokens)
        else:
            starts.append(piece.start())
            keys.append(" ".join(tokens))
            sizes.append(len(tokens))
    return starts, keys, sizes


def _segments(text: str, starts: list[int], runs: list[tuple[str, int, int]]
              ) -> list[Segment]:
    """Segments of the text from runs (kind, first unit, end unit) in order: a run
    reaches from its first unit to the next run's (so a word keeps the punctuation and
    the space after it), with what stands before the first word given to the first
    segment. Whitespace is one space; the segments joined give the text back."""
    segments: list[Segment] = []
    for n, (kind, first, end) in enumerate(runs):
        begin = 0 if n == 0 else starts[first]
        stop = starts[end] if end < len(starts) else len(text)
        piece = _SPACE.sub(" ", text[begin:stop].lstrip() if n == 0 else text[begin:stop])
        if segments and segments[-1].kind == kind:
            segments[-1] = Segment(kind=kind, text=segments[-1].text + piece)
        else:
            segments.append(Segment(kind=kind, text=piece))
    return segments


def page_diff(gold: str, text: str) -> PageDiff:
    """The two texts as segments (module docstring)."""
    gold_starts, gold_keys, gold_sizes = _units(gold)
    text_starts, text_keys, text_sizes = _units(text)
    gold_runs: list[tuple[str, int, int]] = []
    text_runs: list[tuple[str, int, int]] = []
    missed = extra = 0
    for op in Indel.opcodes(gold_keys, text_keys):
        same = op.tag == "equal"
        if op.src_end > op.src_start:
            gold_runs.append(("same" if same else "missed", op.src_start, op.src_end))
        if op.dest_end > op.dest_start:
            text_runs.append(("same" if same else "extra", op.dest_start, op.dest_end))
        if not same:
            missed += sum(gold_sizes[op.src_start:op.src_end])
            extra += sum(text_sizes[op.dest_start:op.dest_end])
    return PageDiff(gold=_segments(gold, gold_starts, gold_runs),
                    extract=_segments(text, text_starts, text_runs),
                    missed_words=missed, extra_words=extra)


def segments_html(segments: list[Segment]) -> str:
    """Segments as HTML: missed words in <del>, extra words in <ins> (the space after
    a segment outside its mark)."""
    out = []
    for segment in segments:
        words = segment.text.rstrip()
        text, space = escape(words), segment.text[len(words):]
        if segment.kind == "missed":
            out.append(f'<del class="missed">{text}</del>{space}')
        elif segment.kind == "extra":
            out.append(f'<ins class="extra">{text}</ins>{space}')
        else:
            out.append(text + space)
    return "".join(out).rstrip()
