"""Label a page's text blocks by a reference text, through token alignment.

Peer libraries (trafilatura, readability, resiliparse) return text, not blocks,
and the rss service holds a feed item's text; all of them need the page's own
blocks marked content or boilerplate by that text, the same way the scoring marks
a block gold content. One longest common subsequence is taken between the tokens
of all blocks, concatenated in document order, and the reference's tokens (so a
word repeated on the page aligns once, where its order fits); a block's support
is the share of its tokens in that alignment, and it is content when most of its
tokens align (support above one half).

The peers' blocks are the visible blocks of the page's FlatPage (shared.flatpage:
one lexbor parse and walk, hidden elements left out), the blocks bte, cetd, fusion
and the ensemble cut too; walking an lxml tree for them took longer than the parse.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from pydantic import Field

from shared.alignment import TokenCodes, aligned_ranges
from shared.contract import Block, Extraction, Options
from shared.flatpage import flatten_html, tree_details
from shared.tokens import tokenize

CONTENT_SHARE = 0.5
# /info's `score` of the services whose blocks text_extraction marks.
SUPPORT_SCORE = ("The share of the block's tokens that align with the library's output text "
                 "(one longest common subsequence over the page); content above one half.")


class TextPeerOptions(Options):
    """Base of the options of a service whose blocks text_extraction marks."""

    blocks: bool = Field(
        True, description="False: the library's text alone, with an empty block list. For "
        "callers that map the text onto blocks themselves (the ensemble does); it saves "
        "the page's second parse and the alignment.")


def support_mark(share: float) -> tuple[bool, float]:
    """A block's label and score from its support (the share of its tokens that align
    with the text): content above CONTENT_SHARE, the share rounded as replies give it."""
    return share > CONTENT_SHARE, round(share, 4)


def block_support(block_texts: Sequence[str], reference: Sequence[str]) -> list[float]:
    """Share of each block's tokens that align with `reference` tokens (0.0 when it has none)."""
    return token_support([tokenize(text) for text in block_texts], reference)


class BlockTokens:
    """A page's blocks' tokens laid end to end, to align texts against. `coded`: as one
    string (TokenCodes), which costs more to build than it saves on one alignment and
    pays from the second on (the ensemble maps each member's text onto one page's
    blocks)."""

    def __init__(self, tokens_per_block: Sequence[Sequence[str]], coded: bool = False) -> None:
        flat = list(itertools.chain.from_iterable(tokens_per_block))
        self.codes = TokenCodes(flat) if coded else None
        self.sequence = self.codes.encode(flat) if self.codes is not None else flat
        self.lengths = [len(tokens) for tokens in tokens_per_block]

    def support(self, reference: Sequence[str]) -> list[float]:
        """Share of each block's tokens that align with `reference` tokens (0.0 when it
        has none): the aligned runs and the blocks, both in page order, walked together."""
        if self.codes is not None:
            reference = self.codes.encode(reference)
        runs = aligned_ranges(self.sequence, reference)
        shares: list[float] = []
        first = start = 0  # the first run that may reach the block; the block's start
        for length in self.lengths:
            end = start + length
            while first < len(runs) and runs[first][1] <= start:
                first += 1
            aligned = 0
            for run_start, run_end in itertools.islice(runs, first, None):
                if run_start >= end:
                    break
                aligned += min(run_end, end) - max(run_start, start)
            shares.append(aligned / length if length else 0.0)
            start = end
        return shares


def token_support(tokens_per_block: Sequence[Sequence[str]], reference: Sequence[str]
                  ) -> list[float]:
    """block_support of blocks already tokenized."""
    return BlockTokens(tokens_per_block).support(reference)


def text_extraction(html: str, text: str, blocks: bool = True) -> Extraction:
    """A peer library's output text as an extraction: the text as it is, and the page's
    visible blocks (module docstring) marked by their support of it (support_mark).
    `blocks` False: no blocks (TextPeerOptions.blocks)."""
    if not blocks:
        return Extraction([], text=text)
    page = flatten_html(html, drop_hidden=True)
    all_texts, _ = page.block_texts()
    kept = [(block.container, block_text)
            for block, block_text in zip(page.blocks, all_texts, strict=True) if block_text]
    support = block_support([block_text for _, block_text in kept], tokenize(text))
    marked = [Block(text=block_text, is_content=is_content, score=score,
                    path=page.path(container))
              for (container, block_text), (is_content, score)
              in zip(kept, map(support_mark, support), strict=True)]
    return Extraction(marked, text=text, details=tree_details(page.tree))
