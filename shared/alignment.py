"""Token alignment by longest common subsequence (rapidfuzz, bit-parallel).

Used to score extracted text against gold text and to label page lines or blocks
from gold text for training: a token "aligns" when it is part of one longest
common subsequence of the two token lists.
"""

from __future__ import annotations

from collections.abc import Sequence

from rapidfuzz.distance import LCSseq


def lcs_length(a: Sequence[str], b: Sequence[str]) -> int:
    """Length of the longest common subsequence of two token lists."""
    if not a or not b:
        return 0
    return int(LCSseq.similarity(a, b))


def aligned_mask(tokens: Sequence[str], reference: Sequence[str]) -> list[bool]:
    """For each token of `tokens`, whether it is matched in an LCS with `reference`."""
    mask = [False] * len(tokens)
    if not tokens or not reference:
        return mask
    for op in LCSseq.opcodes(tokens, reference):
        if op.tag == "equal":
            mask[op.src_start:op.src_end] = [True] * (op.src_end - op.src_start)
    return mask
