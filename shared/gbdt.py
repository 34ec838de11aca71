"""Gradient-boosted decision trees evaluated in plain numpy, stored as JSON.

The learned services (density's `learned` threshold, fusion) ship their models as
JSON, which loads without executing code (no pickle), and evaluate them with a few
vectorised numpy operations, so no machine-learning library is needed at runtime.
The trees are trained elsewhere (shared.learners, with LightGBM) and exported here.

A tree is any binary tree: an inner node sends a row left when `x[feature] <=
threshold` and right otherwise (LightGBM's numerical split with no missing values),
a leaf holds a logit increment. The file keeps every node of every tree in flat
arrays (a leaf has feature -1 and no children), so trees grown leaf-wise, of uneven
depth, are evaluated exactly. Features must be finite: a NaN would go left here,
wherever the trainer would have sent it.
"""

from __future__ import annotations

import functools
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

Matrix = npt.NDArray[np.float64]
Indices = npt.NDArray[np.intp]


def sigmoid(x: Matrix) -> Matrix:
    """The logistic function, written with tanh so it never overflows."""
    result: Matrix = 0.5 * (1.0 + np.tanh(0.5 * x))
    return result


class LogitClassifier(ABC):
    """A binary classifier whose logits (one per row) a sigmoid turns into probabilities."""

    @abstractmethod
    def logits(self, features: Matrix) -> Matrix: ...

    def probabilities(self, features: Matrix) -> Matrix:
        """P(positive) of each row; an empty matrix gives an empty vector."""
        if features.shape[0] == 0:
            return np.zeros(0)
        return sigmoid(self.logits(features))


@dataclass(frozen=True)
class Gbdt(LogitClassifier):
    """Binary trees over flat node arrays: node i splits on `x[feature[i]] <= threshold[i]`
    (then `left[i]`, else `right[i]`) or, with feature -1, is a leaf worth `value[i]`;
    tree t starts at node `roots[t]`. The logit is `base` plus one leaf per tree."""

    base: float
    roots: npt.NDArray[np.int64]
    feature: npt.NDArray[np.int64]
    threshold: Matrix
    left: npt.NDArray[np.int64]
    right: npt.NDArray[np.int64]
    value: Matrix

    def __post_init__(self) -> None:
        n = self.feature.size
        inner = self.feature >= 0
        arrays = (self.threshold, self.left, self.right, self.value)
        if any(a.shape != (n,) for a in arrays) or self.roots.ndim != 1:
            raise ValueError("a tree model needs flat node arrays of one length")
        children = np.concatenate([self.left[inner], self.right[inner], self.roots])
        if children.size and (children.min() < 0 or children.max() >= n):
            raise ValueError("a tree node points outside the model")
        if not np.isfinite(self.value).all() or np.isnan(self.threshold[inner]).any():
            raise ValueError("a tree model holds a NaN or infinite value")

    @functools.cached_property
    def _compiled(self) -> _Compiled:
        return _Compiled.of(self)

    def logits(self, features: Matrix) -> Matrix:
        """Every row down every tree at once, one level at a time (see _Compiled)."""
        c = self._compiled
        x = np.ascontiguousarray(features, dtype=np.float64)
        n = x.shape[0]
        # goes_right[row * splits + s]: does the row fail split s (a feature and threshold)?
        # The splits are sorted by feature, so repeating each column once per split on it
        # lines the values up with the thresholds (a copy, cheaper than a gather).
        per_feature = np.bincount(c.split_feature, minlength=x.shape[1])
        goes_right = (np.repeat(x, per_feature, axis=1) > c.split_threshold).ravel()
        row_start = (np.arange(n, dtype=np.intp) * c.split_feature.size)[:, None]
        node = np.repeat(c.roots, n, axis=0)  # rows x trees
        for _ in range(c.depth):
            right = goes_right.take(row_start + c.node_split.take(node, mode="wrap"),
                                    mode="wrap")
            node = c.children.take(2 * node + right, mode="wrap")
        # The leaves' values summed from one C-ordered (rows x trees) array, as always:
        # the same floats in the same order give the same sums, bit for bit.
        leaves = self.value.take(node, mode="wrap")
        total: Matrix = self.base + leaves.sum(axis=1)
        return total

    def to_json(self) -> dict[str, Any]:
        return {"base": self.base, "roots": self.roots.tolist(), "feature": self.feature.tolist(),
                "threshold": self.threshold.tolist(), "left": self.left.tolist(),
                "right": self.right.tolist(), "value": self.value.tolist()}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Gbdt:
        def ints(key: str) -> npt.NDArray[np.int64]:
            return np.asarray(data[key], dtype=np.int64).reshape(-1)

        def floats(key: str) -> Matrix:
            return np.asarray(data[key], dtype=np.float64).reshape(-1)

        return cls(float(data["base"]), ints("roots"), ints("feature"), floats("threshold"),
                   ints("left"), ints("right"), floats("value"))


@dataclass(frozen=True)
class _Compiled:
    """A Gbdt laid out for evaluation with few numpy calls on flat arrays.

    A (rows x trees) array of node numbers walks all trees at once; a leaf is its own
    child on both sides, so rows that reached a leaf stay there while deeper trees go
    on, and `depth` steps (the deepest tree's) bring every row to a leaf. A step costs
    three gathers. Two tricks, both exact:
    - the trees share few distinct splits (feature, threshold), since thresholds are
      histogram bin edges: every row is compared with each split once, and a node
      looks its split's answer up instead of gathering a feature and a threshold;
    - np.take with mode="wrap" (the indices are in range by construction) skips the
      bounds check of the default mode, a good part of a gather's cost."""

    split_feature: Indices  # distinct splits, sorted by feature (np.unique)
    split_threshold: Matrix
    node_split: Indices  # each node's split (0 for a leaf: its answer is not used)
    children: Indices  # node i's left child at 2i, right child at 2i + 1; a leaf: itself
    roots: Indices  # 1 x trees
    depth: int

    @classmethod
    def of(cls, model: Gbdt) -> _Compiled:
        n = model.feature.size
        inner = model.feature >= 0
        pairs = np.stack([model.feature[inner].astype(np.float64), model.threshold[inner]])
        splits, inverse = np.unique(pairs, axis=1, return_inverse=True)
        node_split = np.zeros(n, dtype=np.intp)
        node_split[inner] = inverse.ravel()
        itself = np.arange(n, dtype=np.intp)
        children = np.stack([np.where(inner, model.left, itself),
                             np.where(inner, model.right, itself)], axis=1).ravel()
        return cls(splits[0].astype(np.intp), splits[1], node_split, children.astype(np.intp),
                   model.roots.astype(np.intp)[None, :], _depth(model))


def _depth(model: Gbdt) -> int:
    """Splits on the longest path from a root to a leaf (0 for trees of one leaf)."""
    depth = 0
    level = np.unique(model.roots)
    while level.size:
        inner = level[model.feature[level] >= 0]
        if not inner.size:
            break
        depth += 1
        if depth > model.feature.size:
            raise ValueError("the tree model has a cycle")
        level = np.unique(np.concatenate([model.left[inner], model.right[inner]]))
    return depth


def smooth(values: Matrix, kernel: Sequence[float]) -> Matrix:
    """Convolve with an odd-length kernel, the sequence's first and last values repeated:
    content comes in runs, so a unit's probability should follow its neighbours'."""
    if values.size == 0 or len(kernel) == 1:
        return values
    half = len(kernel) // 2
    # np.pad(values, half, mode="edge"), built directly: np.pad's argument handling
    # costs more than the whole convolution on a page's lines
    padded = np.concatenate((np.repeat(values[:1], half), values, np.repeat(values[-1:], half)))
    result: Matrix = np.convolve(padded, np.asarray(kernel, dtype=np.float64), mode="valid")
    return result


def decide(probabilities: Matrix, kernel: Sequence[float], cut: float, relative_cut: float
           ) -> tuple[Matrix, npt.NDArray[np.bool_]]:
    """Smooth, then keep the units at `cut`, or at `relative_cut` x the page's maximum
    where that is lower, so a page whose best units all score under the cut still
    yields its likeliest ones instead of an empty extract."""
    smoothed = smooth(probabilities, kernel)
    if smoothed.size == 0:
        return smoothed, np.zeros(0, dtype=bool)
    keep: npt.NDArray[np.bool_] = smoothed >= min(cut, relative_cut * float(smoothed.max()))
    return smoothed, keep
