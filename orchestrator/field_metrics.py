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
it: the figure Google's `rouge-score` package computes (a test checks they agree
exactly), with lines as its sentences and the project's scoring tokenizer
(shared.tokens), since rouge-score's own tokenizer drops every character outside
a-z and 0-9 and so every non-Latin word. rouge-score fills its LCS tables cell by
cell in Python, a tenth of a second to seconds per page; here numpy fills one
table row for all candidate lines at once, and only where the union can still grow:
a gold line held whole by one extract line needs no table (rapidfuzz gives the LCS
lengths), lines are taken longest LCS first and dropped once they hold no token of a
position still missing, and rows of tokens no line of a group has are not computed.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict
from rapidfuzz import process
from rapidfuzz.distance import LCSseq

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

_TABLE_CELLS = 4_000_000
"""Most LCS table cells held at once (int32): candidate lines are taken in groups."""
ROUGE_MAX_CELLS = 100_000_000
"""Gold tokens x extract tokens beyond which ROUGE-LSum is not computed (None): its
time grows with that product (about a second per 10^8 on one core), and a few
pages of 20,000 words would otherwise take most of a run's scoring time."""


def _lcs_tables(ref: np.ndarray[Any, Any], cand: np.ndarray[Any, Any],
                firsts: np.ndarray[Any, Any], segment: np.ndarray[Any, Any]
                ) -> np.ndarray[Any, Any]:
    """LCS tables of one reference line against several candidate lines at once.

    `cand` holds the candidate lines one after another, each led by a column of its
    own (at `firsts`, token -1) that stays 0, so row i of the result is row i
    of every line's own table side by side. A row is max(previous row, previous
    row shifted by one plus the match), then a running maximum within each line
    (the `segment` offsets keep it from carrying across lines). Every step writes
    into arrays made once: a row costs a few numpy calls and no allocation."""
    table = np.zeros((len(ref) + 1, len(cand)), dtype=np.int32)
    matches = (ref[:, None] == cand[None, 1:]).astype(np.int32)
    offset = segment.astype(np.int32) * np.int32(len(ref) + 1)
    work = np.empty(len(cand), dtype=np.int32)
    for i in range(1, len(ref) + 1):
        above, row = table[i - 1], table[i]
        np.add(above[:-1], matches[i - 1], out=row[1:])
        np.maximum(row, above, out=row)
        row[firsts] = 0
        np.add(row, offset, out=work)
        np.maximum.accumulate(work, out=work)
        np.subtract(work, offset, out=row)
    return table


class _Candidates:
    """The extract's lines, prepared once for all gold lines: each as an array led by
    its own zero column (token -1, see _lcs_tables), and which lines hold each token."""

    def __init__(self, lines: list[list[int]]) -> None:
        self.lines = lines
        self.arrays = [np.asarray([-1, *line], dtype=np.int64) for line in lines]
        self.sets = [set(line) for line in lines]
        self.holding: dict[int, set[int]] = {}
        for k, line in enumerate(lines):
            for token in line:
                self.holding.setdefault(token, set()).add(k)

    def sharing(self, ref: list[int]) -> list[int]:
        """The lines that hold a token of `ref`, in order (no other has an LCS with it)."""
        found: set[int] = set()
        for token in set(ref):
            found |= self.holding.get(token, set())
        return sorted(found)


def _union_lcs(ref: list[int], candidates: _Candidates) -> set[int]:
    """Indices of `ref` in the union of its LCS with each candidate line, each LCS
    read out of its table as Lin's ROUGE-1.5.5 (and rouge-score) read it: from the
    end, a match when the tokens are equal, else left when the cell to the left is
    larger than the one above, else up."""
    everything = set(range(len(ref)))
    lines = candidates.lines
    # The union does not depend on the order of the lines: the longest LCS (found in
    # C by rapidfuzz) first, so that later lines can be dropped once the union holds
    # every position whose token they have. A line whose LCS is all of `ref` makes
    # the union complete, whichever path the readout takes.
    sharing = candidates.sharing(ref)
    lcs_lengths = process.cdist([ref], [lines[k] for k in sharing],
                                scorer=LCSseq.similarity)[0].tolist() if sharing else []
    longest = sorted(zip(lcs_lengths, sharing, strict=True), reverse=True)
    if longest and longest[0][0] == len(ref):
        return everything
    useful = [k for _, k in longest]
    union: set[int] = set()
    missing = everything  # positions not in the union yet
    ref_array = np.asarray(ref, dtype=np.int64)
    width = max(1, _TABLE_CELLS // (len(ref) + 1))
    start, most = 0, 1
    while start < len(useful) and missing:
        # Groups of 1, 2, 4... lines: the first few lines often leave the rest nothing
        # to add, and a group's table costs a numpy pass per row of `ref`.
        group: list[int] = []
        columns = 0
        while start < len(useful) and len(group) < most and (
                not group or columns + len(lines[useful[start]]) + 1 <= width):
            k = useful[start]
            start += 1
            if any(ref[p] in candidates.sets[k] for p in missing):
                group.append(k)
                columns += len(lines[k]) + 1
        most *= 2
        if not group:
            break
        cand = np.concatenate([candidates.arrays[k] for k in group])
        lengths = np.array([len(lines[k]) + 1 for k in group])
        segment = np.repeat(np.arange(len(group)), lengths)
        firsts = np.concatenate(([0], np.cumsum(lengths)[:-1]))
        # A row of `ref` whose token no line of the group has equals the row above:
        # only the other rows are computed, and row[i] says where row i is.
        held = set().union(*(candidates.sets[k] for k in group))
        kept = np.fromiter((token in held for token in ref), dtype=bool, count=len(ref))
        row = np.concatenate(([0], np.cumsum(kept))).tolist()
        table = _lcs_tables(ref_array[kept], cand, firsts, segment)
        cell = table.item
        ends = (firsts + lengths - 1).tolist()
        found = table[row[len(ref)], ends].tolist()
        for first, k, lcs in zip(firsts.tolist(), group, found, strict=True):
            line, line_set = lines[k], candidates.sets[k]
            # This line's LCS can only add positions whose token the line holds: when
            # the union has all of them already, reading it out changes nothing.
            targets = [p for p in missing if ref[p] in line_set]
            if lcs == 0 or not targets:
                continue
            lowest = min(targets)
            i, j = len(ref), len(line)
            column = first + j
            # The walk stops at a cell of 0 (no match left above or to its left) or
            # past the last position it could still add. A row whose token the line
            # lacks equals the row above: the walk always goes up through it.
            tokens = candidates.arrays[k]
            while i > lowest and j > 0 and cell(row[i], column):
                if ref[i - 1] not in line_set:
                    i -= 1
                elif ref[i - 1] == line[j - 1]:
                    union.add(i - 1)
                    i -= 1
                    j -= 1
                    column -= 1
                elif cell(row[i], column - 1) > cell(row[i - 1], column):
                    # Left, and on along the row while it stays a left step: to the
                    # last column before it where the tokens match or the walk turns up.
                    turns = np.flatnonzero(
                        (table[row[i], first:column - 1] <= table[row[i - 1], first + 1:column])
                        | (tokens[1:j] == ref[i - 1]))
                    j = int(turns[-1]) + 1 if len(turns) else 0
                    column = first + j
                else:
                    i -= 1
            missing = everything - union
    return union


def _lines(text: str, vocabulary: dict[str, int]) -> list[list[int]]:
    return [[vocabulary.setdefault(token, len(vocabulary)) for token in tokenize(line)]
            for line in text.split("\n") if line]


def rouge_lsum_f1(gold: str, text: str) -> float | None:
    """ROUGE-LSum F1 of an extract against the gold, lines as sentences: the
    summary-level LCS of Lin (2004) with ROUGE-1.5.5's guard against counting a
    token more often than either text holds it, as rouge-score computes it (a test
    checks the two agree), with the LCS tables built by numpy a row at a time.
    1.0 when neither text has a word; None beyond ROUGE_MAX_CELLS."""
    vocabulary: dict[str, int] = {}
    ref_lines, cand_lines = _lines(gold, vocabulary), _lines(text, vocabulary)
    m, n = sum(map(len, ref_lines)), sum(map(len, cand_lines))
    if not m or not n:
        return 1.0 if m == n == 0 else 0.0
    if m * n > ROUGE_MAX_CELLS:
        return None
    ref_left = Counter(token for line in ref_lines for token in line)
    cand_left = Counter(token for line in cand_lines for token in line)
    hits = 0
    candidates = _Candidates(cand_lines)
    for ref in ref_lines:
        if not ref:
            continue
        for index in sorted(_union_lcs(ref, candidates)):
            token = ref[index]
            if ref_left[token] > 0 and cand_left[token] > 0:
                hits += 1
                ref_left[token] -= 1
                cand_left[token] -= 1
    precision, recall = hits / n, hits / m
    return 0.0 if hits == 0 else 2 * precision * recall / (precision + recall)
