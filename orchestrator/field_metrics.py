"""The figures the field publishes, so a run's rows compare with published tables.

Shingle metric of the article-extraction benchmark (Zyte, "Article extraction
benchmark: open-source libraries and commercial services", 2019), per page:

- tokens are the `\\w+` runs of the raw text (case kept, no normalisation), as
  upstream tokenizes; shingles are 4 consecutive tokens, and a text of fewer
  tokens is one shorter shingle (an empty text has none);
- gold and extract shingles are counted as multisets: TP the smaller count of each
  shingle, FP and FN the excesses; the three are divided by their sum, so every
  page weighs the same whatever its length;
- page precision TP / (TP + FP) and recall TP / (TP + FN), each 1 when FP = FN = 0;
- over pages: precision is the mean page precision over pages with TP + FP > 0,
  recall the mean page recall over pages with TP + FN > 0, F1 the harmonic mean of
  those two means (not a mean of page F1); each with the standard deviation over
  1,000 bootstrap resamples of the pages; accuracy is the share of pages whose
  token sequence equals the gold's.

ROUGE-LSum F1 (Lin 2004, summary-level LCS over lines), as Bevendorff et al.,
"An Empirical Comparison of Web Content Extraction Algorithms" (SIGIR 2023) report
it: through Google's `rouge-score` package, with lines as its sentences and the
project's scoring tokenizer (shared.tokens), since rouge-score's own tokenizer
drops every character outside a-z and 0-9 and so every non-Latin word.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from functools import cache
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict

from shared.tokens import tokenize

SHINGLE_SIZE = 4
SHINGLE_BOOTSTRAP = 1000
SHINGLE_SEED = 20191105
_UPSTREAM_WORD = re.compile(r"\w+")


class ShingleCounts(BaseModel):
    """One page's shingle TP/FP/FN, divided by their sum (all 0 when both texts are
    empty), and whether the extract's tokens equal the gold's."""

    model_config = ConfigDict(frozen=True)

    tp: float
    fp: float
    fn: float
    exact: bool

    @property
    def precision(self) -> float:
        if self.fp == self.fn == 0:
            return 1.0
        return 0.0 if self.tp == self.fp == 0 else self.tp / (self.tp + self.fp)

    @property
    def recall(self) -> float:
        if self.fp == self.fn == 0:
            return 1.0
        return 0.0 if self.tp == self.fn == 0 else self.tp / (self.tp + self.fn)


def shingle_tokens(text: str) -> list[str]:
    """Upstream's tokens: `\\w+` runs of the raw text."""
    return _UPSTREAM_WORD.findall(text)


def shingles(tokens: Sequence[str], size: int = SHINGLE_SIZE) -> Counter[tuple[str, ...]]:
    """Multiset of the `size`-token shingles; fewer tokens make one shorter shingle."""
    if len(tokens) <= size:
        return Counter([tuple(tokens)] if tokens else [])
    return Counter(tuple(tokens[i:i + size]) for i in range(len(tokens) - size + 1))


class GoldShingles:
    """What the shingle metric needs of a gold text, computed once per page."""

    def __init__(self, gold: str) -> None:
        self.tokens = shingle_tokens(gold)
        self.counts = shingles(self.tokens)
        self.total = self.counts.total()


def shingle_counts(gold: GoldShingles, text: str) -> ShingleCounts:
    """The page's normalised shingle counts for an extract (module docstring)."""
    tokens = shingle_tokens(text)
    extracted = shingles(tokens)
    tp = (extracted & gold.counts).total()
    fp = extracted.total() - tp
    fn = gold.total - tp
    total = tp + fp + fn
    scale = 1.0 / total if total else 0.0
    return ShingleCounts(tp=tp * scale, fp=fp * scale, fn=fn * scale, exact=tokens == gold.tokens)


class ShingleSummary(BaseModel):
    """The shingle metric over a row's pages, with bootstrap standard deviations."""

    pages: int
    f1: float | None
    precision: float | None
    recall: float | None
    accuracy: float | None
    f1_std: float | None
    precision_std: float | None
    recall_std: float | None
    accuracy_std: float | None


def _figures(tp: np.ndarray[Any, Any], fp: np.ndarray[Any, Any], fn: np.ndarray[Any, Any],
             exact: np.ndarray[Any, Any], weights: np.ndarray[Any, Any]
             ) -> tuple[np.ndarray[Any, Any], ...]:
    """Precision, recall, F1 and accuracy of (rows of) page weights: each row of
    `weights` says how often each page is counted (1 for the pages themselves,
    bootstrap draw counts for a resample)."""
    perfect = (fp == 0) & (fn == 0)
    with np.errstate(invalid="ignore", divide="ignore"):
        page_p = np.where(perfect, 1.0, np.where(tp + fp > 0, tp / (tp + fp), 0.0))
        page_r = np.where(perfect, 1.0, np.where(tp + fn > 0, tp / (tp + fn), 0.0))
        has_p = (tp + fp > 0).astype(np.float64)
        has_r = (tp + fn > 0).astype(np.float64)
        precision = (weights @ (page_p * has_p)) / (weights @ has_p)
        recall = (weights @ (page_r * has_r)) / (weights @ has_r)
        f1 = 2 * precision * recall / (precision + recall)
    accuracy = (weights @ exact) / weights.sum(axis=-1)
    return precision, recall, f1, accuracy


def _value(x: float) -> float | None:
    return None if np.isnan(x) else float(x)


def summarize_shingles(pages: Sequence[ShingleCounts], *, resamples: int = SHINGLE_BOOTSTRAP,
                       seed: int = SHINGLE_SEED) -> ShingleSummary:
    """Precision and recall means, F1 of the means, accuracy, and the standard
    deviation of each over `resamples` bootstrap resamples of the pages."""
    n = len(pages)
    if n == 0:
        return ShingleSummary(pages=0, f1=None, precision=None, recall=None, accuracy=None,
                              f1_std=None, precision_std=None, recall_std=None,
                              accuracy_std=None)
    tp = np.array([p.tp for p in pages])
    fp = np.array([p.fp for p in pages])
    fn = np.array([p.fn for p in pages])
    exact = np.array([float(p.exact) for p in pages])
    point = _figures(tp, fp, fn, exact, np.ones(n))
    draws = np.random.default_rng(seed).integers(0, n, size=(resamples, n))
    weights = np.zeros((resamples, n))
    np.add.at(weights, (np.arange(resamples)[:, None], draws), 1.0)
    spread = [float(np.nanstd(values, ddof=1)) if np.isfinite(values).sum() > 1 else np.nan
              for values in _figures(tp, fp, fn, exact, weights)]
    p, r, f1, acc = (_value(float(x)) for x in point)
    return ShingleSummary(pages=n, f1=f1, precision=p, recall=r, accuracy=acc,
                          precision_std=_value(spread[0]), recall_std=_value(spread[1]),
                          f1_std=_value(spread[2]), accuracy_std=_value(spread[3]))


# ---------------------------------------------------------------- ROUGE-LSum

class _ScoringTokenizer:
    """rouge-score's tokenizer interface over the project's scoring tokenizer."""

    def tokenize(self, text: str) -> list[str]:
        return tokenize(text)


@cache
def _rouge_scorer() -> Any:
    from rouge_score import rouge_scorer

    return rouge_scorer.RougeScorer(["rougeLsum"], tokenizer=_ScoringTokenizer())


def rouge_lsum_f1(gold: str, text: str) -> float:
    """ROUGE-LSum F1 of an extract against the gold, lines as sentences."""
    if not tokenize(gold) and not tokenize(text):
        return 1.0
    score = _rouge_scorer().score(gold, text)["rougeLsum"]
    return float(score.fmeasure)
