"""The ensemble's block features: fusion's measures plus what each member said.

A page is cut into fusion's text blocks (shared.html.text_blocks, one parse); every
member's answer is mapped onto those blocks:

- support: the share of the block's tokens that the member's text holds in order (one
  longest common subsequence between the page's tokens and the member's, as
  shared.blockmap labels blocks from a text);
- own label and score: the member's decision and score for the same block, where the
  member returns blocks of its own (matched in document order by text); a text peer's
  blocks would be its text mapped onto these blocks by the same rule, so its label and
  score are taken from its support here (shared.blockmap.support_mark, as the peer marks
  its blocks) and the peer is asked for its text alone;

and a few figures over the members that answered (how many, their mean support, the
share that keep the block, the mean support of the neighbouring blocks). A member that
did not answer gets MISSING for its figures and 0 for `answered`; the trees were
trained with members dropped at random, so they have a branch for it. MISSING is a
plain number below every real value (not NaN), so any tree evaluator handles it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from services.ensemble.members import MemberAnswer, is_text_peer
from services.fusion.features import FEATURES as FUSION_FEATURES
from services.fusion.features import PageFeatures
from shared.blockmap import support_mark
from shared.tokens import tokenize

Matrix = npt.NDArray[np.float64]
MISSING = -1.0
MEMBER_FIGURES = ("answered", "support", "support_prev", "support_next", "page_share",
                  "own_label", "own_score")
SUMMARY = ("members_answered", "mean_support", "vote_share", "mean_support_prev",
           "mean_support_next")
_LOOKAHEAD = 8
# A member that did not answer: `answered` 0, every other figure MISSING.
_NOT_ANSWERED = np.array([0.0, *[MISSING] * (len(MEMBER_FIGURES) - 1)])


def feature_names(members: Sequence[str], fusion: Sequence[str] = FUSION_FEATURES
                  ) -> tuple[str, ...]:
    """The columns of the combiner's matrix for a member list, in order: `fusion`, the
    fusion measures it uses (by default all that fusion computes)."""
    return (*fusion, *(f"{m}_{f}" for m in members for f in MEMBER_FIGURES), *SUMMARY)


def fusion_columns(names: Sequence[str]) -> list[int]:
    """Where fusion's measures `names` sit in fusion's matrix (KeyError for a measure
    fusion no longer computes): a model keeps working when fusion gains measures."""
    index = {name: i for i, name in enumerate(FUSION_FEATURES)}
    return [index[name] for name in names]


@dataclass(frozen=True)
class MemberFigures:
    """One member's figures on a page's blocks (rows), or None where it did not answer."""

    support: Matrix
    own_label: Matrix
    own_score: Matrix


def member_figures(page: PageFeatures, answer: MemberAnswer) -> MemberFigures | None:
    """A member's answer mapped onto the page's blocks."""
    if answer.text is None:
        return None
    n = len(page.blocks)
    shares = page.block_tokens.support(tokenize(answer.text))
    support = np.asarray(shares, dtype=np.float64)
    if is_text_peer(answer.member):
        marks = [support_mark(s) for s in shares]
        return MemberFigures(support, np.array([m[0] for m in marks], dtype=np.float64),
                             np.array([m[1] for m in marks], dtype=np.float64))
    label = np.full(n, MISSING)
    score = np.full(n, MISSING)
    if answer.blocks:
        theirs = answer.blocks
        j = 0
        for i, block in enumerate(page.blocks):
            end = min(j + _LOOKAHEAD, len(theirs))
            k = j
            while k < end and theirs[k].text != block.text:
                k += 1
            if k == end:
                continue
            label[i] = float(theirs[k].is_content)
            their_score = theirs[k].score
            if their_score is not None and math.isfinite(their_score):
                score[i] = min(max(float(their_score), -1e6), 1e6)
            j = k + 1
    return MemberFigures(support, label, score)


def _neighbours(values: Matrix) -> tuple[Matrix, Matrix]:
    """Each row's previous and next value (its own at the page's ends)."""
    if not len(values):
        return values, values
    return np.r_[values[:1], values[:-1]], np.r_[values[1:], values[-1:]]


def combine(fusion: Matrix, words: Matrix, figures: Sequence[MemberFigures | None]) -> Matrix:
    """The combiner's matrix: fusion's columns, each member's figures (MISSING where it
    did not answer), then the summary over the members that did. `words`: each block's
    number of tokens (a member's page share is the share of the page's words it keeps).
    Written into one array, column block by column block."""
    n, width = fusion.shape[0], len(MEMBER_FIGURES)
    matrix = np.empty((n, fusion.shape[1] + width * len(figures) + len(SUMMARY)))
    matrix[:, :fusion.shape[1]] = fusion
    total = max(float(words.sum()), 1.0)
    column = fusion.shape[1]
    for f in figures:
        block = matrix[:, column:column + width]
        column += width
        if f is None:
            block[:] = _NOT_ANSWERED
            continue
        block[:, 0] = 1.0
        block[:, 1] = f.support
        block[:, 2], block[:, 3] = _neighbours(f.support)
        block[:, 4] = float(f.support @ words) / total
        block[:, 5] = f.own_label
        block[:, 6] = f.own_score
    answered = [f.support for f in figures if f is not None]
    summary = matrix[:, column:]
    summary[:, 0] = float(len(answered))
    if answered:
        supports = np.column_stack(answered)
        summary[:, 1] = supports.mean(axis=1)
        summary[:, 2] = (supports > 0.5).mean(axis=1)
    else:
        summary[:, 1:3] = MISSING
    summary[:, 3], summary[:, 4] = _neighbours(summary[:, 1])
    return matrix


def figures_matrix(page: PageFeatures, figures: Mapping[str, MemberFigures | None],
                   members: Sequence[str], columns: Sequence[int] | None = None) -> Matrix:
    """The combiner's matrix of a page for the model's member list, from the members'
    answers mapped onto its blocks (member_figures; a member absent from `figures`
    counts as not answering); `columns`: of fusion's matrix, default all."""
    fusion = page.matrix if columns is None else page.matrix[:, list(columns)]
    return combine(fusion, token_counts(page.tokens), [figures.get(m) for m in members])


def token_counts(tokens: Sequence[Sequence[str]]) -> Matrix:
    return np.array([len(t) for t in tokens], dtype=np.float64)
