"""Token alignment by longest common subsequence (rapidfuzz, bit-parallel).

Used to score extracted text against gold text and to label page lines or blocks
from gold text for training: a token "aligns" when it is part of one longest
common subsequence of the two token lists.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from rapidfuzz.distance import LCSseq

_SURROGATES = 0xD800
_SURROGATE_SPAN = 0x800
_MAX_CODES = 0x110000 - _SURROGATE_SPAN - 1  # one code point is kept as the sentinel


def _code_point(rank: int) -> str:
    """The character for a vocabulary rank, skipping the surrogate range."""
    return chr(rank if rank < _SURROGATES else rank + _SURROGATE_SPAN)


class TokenCodes:
    """A character per word of a vocabulary (the first words get the smallest code
    points), so token lists align as strings: rapidfuzz compares the characters of a
    str directly, where a list of words costs a hash per word. The alignment is the
    same, since the code is one to one on the vocabulary; words outside it all become
    one sentinel character, which matches nothing coded, as such a word matches
    nothing in a sequence of the vocabulary's words. A vocabulary beyond Unicode's
    code points is not coded: `encode` then returns the tokens themselves."""

    def __init__(self, vocabulary: Iterable[str]) -> None:
        words = list(dict.fromkeys(vocabulary))
        self._codes: dict[str, str] | None = None
        self._sentinel = ""
        if len(words) <= _MAX_CODES:
            self._codes = {word: _code_point(rank) for rank, word in enumerate(words)}
            self._sentinel = _code_point(len(words))

    def encode(self, tokens: Sequence[str]) -> Sequence[str]:
        """The tokens as one string, a character per token (class docstring)."""
        if self._codes is None:
            return tokens
        codes, sentinel = self._codes, self._sentinel
        return "".join([codes.get(token, sentinel) for token in tokens])


def lcs_length(a: Sequence[str], b: Sequence[str]) -> int:
    """Length of the longest common subsequence of two token lists."""
    if not a or not b:
        return 0
    return int(LCSseq.similarity(a, b))


def aligned_ranges(tokens: Sequence[str], reference: Sequence[str]) -> list[tuple[int, int]]:
    """The runs [start, end) of `tokens` matched in one LCS with `reference`."""
    if not tokens or not reference:
        return []
    return [(op.src_start, op.src_end) for op in LCSseq.opcodes(tokens, reference)
            if op.tag == "equal"]


def aligned_mask(tokens: Sequence[str], reference: Sequence[str]) -> list[bool]:
    """For each token of `tokens`, whether it is matched in an LCS with `reference`."""
    mask = [False] * len(tokens)
    for start, end in aligned_ranges(tokens, reference):
        mask[start:end] = [True] * (end - start)
    return mask
