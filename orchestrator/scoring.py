"""Scoring an extract against the gold text at word and block level (Rolli 2014, B.4.4).

One tokenizer for every side (shared.tokens.tokenize). A page is prepared once
(`prepare_page`) and then scored for every service (`score_extraction`).

Word level by alignment (the headline figure), with P the page's own visible
tokens, G the gold tokens and E the extracted tokens:

- TP = |LCS(E, G)|: extracted words that align, in order, with the gold;
- FP = |E| - TP; FN = |G| - TP;
- TN = max(0, B - FP), where B = |P| - |LCS(P, G)| is the page's boilerplate:
  the page tokens that do not align with the gold. Every non-gold word the
  extract keeps is taken from that boilerplate, so what is left of it was
  rightly dropped. This keeps FP + TN = B (fallout = FP / B, the share of the
  page's boilerplate that was kept), and costs one alignment per service instead
  of aligning the whole page with every extract. TN is 0, never negative, when
  an extract holds more non-gold words than the page has boilerplate (text from
  attributes, repeated text).

Word level by bag of words (order ignored), with multisets:
TP = |E ∩ G|, FP = |E| - TP, FN = |G| - TP, TN = |P - (G ∪ E)| (page words
that neither the gold nor the extract hold, counted with multiplicity).

Block level: the tokens of all blocks, concatenated in order, are aligned with
the gold once; a block is gold content when more than half of its tokens align
(ties are boilerplate). Blocks without tokens are ignored. TP/FP/FN/TN then
compare each block's `is_content` with that label.

The field's figures (orchestrator.field_metrics) come with every score of a page
prepared with its gold text: the article-extraction benchmark's shingle counts on
the raw texts, and ROUGE-LSum F1.

Speed: tokens are encoded as one character each (code points by frequency
rank on the page, so the common words fall in rapidfuzz's fast table for code
points below 256), and rapidfuzz's bit-parallel LCS runs on those strings:
a 20,000-token page scores in tens of milliseconds (benchmarks/scoring_speed.py).
Block texts are tokenized once per page (`PageReference.block_tokens`): the
services of a page mostly share their blocks' texts. An extract that is its
content blocks joined by newlines takes their tokens: no token spans a newline,
and NFKC and casefolding never join characters across one, so tokenizing the
joined text would give exactly the concatenation.
"""

from __future__ import annotations

import pickle
import time
import traceback
from collections import Counter, OrderedDict
from collections.abc import Sequence
from functools import cached_property
from typing import Any

from orchestrator.field_metrics import GoldShingles, rouge_lsum_f1, shingle_counts
from orchestrator.models import Counts, PageScores
from shared.alignment import TokenCodes, aligned_mask, lcs_length
from shared.contract import Block
from shared.html import parse_html, visible_text
from shared.tokens import tokenize
from shared.workers import Handler

# Pages a scoring worker keeps unpickled. A run's rows move through the pages at their
# own pace; a row that lags further behind has its page unpickled again.
REFERENCES_KEPT = 64


class PageReference:
    """What scoring needs from one page and its gold text, computed once per page."""

    def __init__(self, page_tokens: list[str], gold_tokens: list[str],
                 gold_text: str | None = None) -> None:
        self.page_tokens = page_tokens
        self.gold_text = gold_text
        """The raw gold, for the field's metrics (none for word figures alone)."""
        self.gold_tokens = gold_tokens
        self.page_counts: Counter[str] = Counter(page_tokens)
        self.gold_counts: Counter[str] = Counter(gold_tokens)
        self._codes = TokenCodes(
            word for word, _ in (self.page_counts + self.gold_counts).most_common())
        self.page_seq = self.encode(page_tokens)
        self.gold_seq = self.encode(gold_tokens)
        self.page_gold_lcs = lcs_length(self.page_seq, self.gold_seq)
        self._block_tokens: dict[str, list[str]] = {}

    def __getstate__(self) -> dict[str, Any]:
        """Pickled for a scoring worker without what it remembers of services' blocks."""
        return {**self.__dict__, "_block_tokens": {}}

    def block_tokens(self, text: str) -> list[str]:
        """tokenize(text), remembered for the page's other services."""
        tokens = self._block_tokens.get(text)
        if tokens is None:
            tokens = self._block_tokens[text] = tokenize(text)
        return tokens

    @property
    def boilerplate(self) -> int:
        """Page tokens that do not align with the gold (B in the module docstring)."""
        return len(self.page_tokens) - self.page_gold_lcs

    def encode(self, tokens: list[str]) -> Sequence[str]:
        """Tokens as one string, a character per token (shared.alignment.TokenCodes);
        words the page and gold lack all become one sentinel that matches nothing on the
        page or in the gold."""
        return self._codes.encode(tokens)

    @cached_property
    def gold_shingles(self) -> GoldShingles:
        return GoldShingles(self.gold_text or "")

    @cached_property
    def page_gold_mask(self) -> list[bool]:
        """Which page tokens align with the gold; reused for blocks that hold
        exactly the page's tokens (most block-based services)."""
        return aligned_mask(self.page_seq, self.gold_seq)


def prepare_page(html: str, gold: str) -> PageReference:
    """Tokenize a page's visible text and its gold text once, for all services."""
    return PageReference(tokenize(visible_text(parse_html(html))), tokenize(gold), gold)


def word_counts(ref: PageReference, tokens: list[str]) -> Counts:
    """Word-level counts by alignment (see the module docstring)."""
    tp = lcs_length(ref.encode(tokens), ref.gold_seq)
    fp = len(tokens) - tp
    return Counts(tp=tp, fp=fp, fn=len(ref.gold_tokens) - tp, tn=max(0, ref.boilerplate - fp))


def bag_counts(ref: PageReference, tokens: list[str]) -> Counts:
    """Word-level counts by bag of words (multiset arithmetic)."""
    extracted = Counter(tokens)
    tp = (extracted & ref.gold_counts).total()
    tn = (ref.page_counts - (ref.gold_counts | extracted)).total()
    return Counts(tp=tp, fp=len(tokens) - tp, fn=len(ref.gold_tokens) - tp, tn=tn)


def bag_f1(text: str, gold: str) -> float:
    """Bag-of-words word F1 of `text` against `gold` (score_extraction's word_bag.f1;
    F1 needs no page), for benchmarks and tests that score a text without a run."""
    return bag_counts(PageReference([], tokenize(gold)), tokenize(text)).f1


def _block_counts(ref: PageReference, blocks: list[tuple[bool, list[str]]]) -> Counts | None:
    """Block-level counts of (kept, tokens) blocks (blocks without a token do not
    count), or None when no block holds a token."""
    tokenized = [(kept, tokens) for kept, tokens in blocks if tokens]
    if not tokenized:
        return None
    all_tokens = [token for _, tokens in tokenized for token in tokens]
    seq = ref.encode(all_tokens)
    mask = ref.page_gold_mask if seq == ref.page_seq else aligned_mask(seq, ref.gold_seq)
    tp = fp = fn = tn = 0
    start = 0
    for kept, tokens in tokenized:
        end = start + len(tokens)
        is_gold = 2 * sum(mask[start:end]) > len(tokens)
        start = end
        if kept and is_gold:
            tp += 1
        elif kept:
            fp += 1
        elif is_gold:
            fn += 1
        else:
            tn += 1
    return Counts(tp=tp, fp=fp, fn=fn, tn=tn)


def block_marks(blocks: Sequence[Block] | None) -> list[tuple[bool, str]] | None:
    """Each block as (is_content, text), all that scoring reads of a block; None
    without blocks."""
    return [(b.is_content, b.text) for b in blocks] if blocks else None


def score_extraction(ref: PageReference, text: str, blocks: Sequence[Block] | None) -> PageScores:
    """Score one service's extract of a page (text and, where it has them, blocks)."""
    return score_marks(ref, text, block_marks(blocks))


def score_marks(ref: PageReference, text: str, marks: Sequence[tuple[bool, str]] | None
                ) -> PageScores:
    """score_extraction with the blocks as block_marks gives them."""
    block = None
    if marks:
        tokenized = [(kept, ref.block_tokens(block_text)) for kept, block_text in marks]
        block = _block_counts(ref, tokenized)
        if text == "\n".join([block_text for kept, block_text in marks if kept]):
            tokens = [token for kept, words in tokenized if kept for token in words]
        else:
            tokens = tokenize(text)
    else:
        tokens = tokenize(text)
    scores = PageScores(word=word_counts(ref, tokens), word_bag=bag_counts(ref, tokens),
                        block=block)
    if ref.gold_text is not None:
        scores.shingle = shingle_counts(ref.gold_shingles, text)
        scores.rouge_lsum = rouge_lsum_f1(ref.gold_text, text)
    return scores


def score_empty(ref: PageReference) -> PageScores:
    """The scores of a failed page: empty output (every gold word missed)."""
    return score_extraction(ref, "", None)


def scoring_handler(_: str) -> Handler:
    """A scoring worker process's handler (shared.workers.ProcessPool; the run's
    ScoringPool sends the work). A frame's meta is (page key, size of the pickled
    PageReference), its payload that reference followed by the pickled (text, marks);
    the reply is ("ok", seconds spent scoring) and the pickled PageScores, or
    ("error", detail). The last
    REFERENCES_KEPT references stay unpickled here by key, with what they remember
    (block tokens, the gold mask and shingles), for the page's other services."""
    references: OrderedDict[int, PageReference] = OrderedDict()

    def handle(meta: tuple[Any, ...], payload: bytes) -> tuple[tuple[Any, ...], bytes]:
        key, size = meta
        view = memoryview(payload)
        ref = references.get(key)
        if ref is None:
            ref = references[key] = pickle.loads(view[:size])
            if len(references) > REFERENCES_KEPT:
                references.popitem(last=False)
        else:
            references.move_to_end(key)
        text, marks = pickle.loads(view[size:])
        started = time.perf_counter()
        try:
            scores = score_marks(ref, text, marks)
        except Exception as exc:  # a scoring bug fails the run, as it would in-process
            return ("error", f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=3)}"), b""
        return (("ok", time.perf_counter() - started),
                pickle.dumps(scores, protocol=pickle.HIGHEST_PROTOCOL))

    return handle
