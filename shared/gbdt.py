"""Gradient-boosted decision trees: trained and evaluated in plain numpy, stored as JSON.

The learned services (density's `learned` threshold, fusion) ship their models as
JSON, which loads without executing code (no pickle), and evaluate them with a few
vectorised numpy operations, so no machine-learning library is needed at runtime.

Every tree is a complete binary tree of one depth: inner node k splits on
`x[feature[t, k]] > threshold[t, k]` (left child 2k+1, right 2k+2), and a node
without a useful split sends everything left (threshold +inf). Training: logistic
loss, Newton leaves with L2, histogram splits on quantile bin edges; deterministic
(no threads of our own; row subsampling, when asked for, draws from a seeded
generator).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

Matrix = npt.NDArray[np.float64]


def sigmoid(x: Matrix) -> Matrix:
    """The logistic function, written with tanh so it never overflows."""
    result: Matrix = 0.5 * (1.0 + np.tanh(0.5 * x))
    return result


@dataclass(frozen=True)
class Gbdt:
    """Complete binary trees of one depth: node k splits on `feature[t, k] > threshold[t, k]`
    (right child 2k+2, left 2k+1); leaves hold the (already shrunk) logit increments."""

    base: float
    feature: npt.NDArray[np.int64]  # trees x (2^depth - 1)
    threshold: Matrix  # trees x (2^depth - 1)
    leaf: Matrix  # trees x 2^depth

    @property
    def depth(self) -> int:
        return int(self.leaf.shape[1]).bit_length() - 1

    @functools.cached_property
    def _compiled(self) -> _Compiled:
        return _Compiled.of(self)

    def logits(self, features: Matrix) -> Matrix:
        """Every row down every tree at once, one level at a time (see _Compiled)."""
        c = self._compiled
        x = np.ascontiguousarray(features, dtype=np.float64)
        n = x.shape[0]
        # goes_right[row * splits + s]: does the row pass split s (a feature and threshold)?
        # The splits are sorted by feature, so repeating each column once per split on it
        # lines the values up with the thresholds (a copy, cheaper than a gather).
        per_feature = np.bincount(c.split_feature, minlength=x.shape[1])
        goes_right = (np.repeat(x, per_feature, axis=1) > c.split_threshold).ravel()
        row_start = (np.arange(n, dtype=np.intp) * c.split_feature.size)[:, None]
        node = np.repeat(c.root, n, axis=0)  # rows x trees, flat node indices
        for _ in range(self.depth):
            right = goes_right.take(row_start + c.node_split.take(node, mode="wrap"), mode="wrap")
            node *= 2
            node += c.child_step
            node += right
        # The leaves' values summed from one C-ordered (rows x trees) array, as always:
        # the same floats in the same order give the same sums, bit for bit.
        leaves = self.leaf.ravel().take(node + c.leaf_step, mode="wrap")
        total: Matrix = self.base + leaves.sum(axis=1)
        return total

    def probabilities(self, features: Matrix) -> Matrix:
        """P(positive) of each row; an empty matrix gives an empty vector."""
        if features.shape[0] == 0:
            return np.zeros(0)
        return sigmoid(self.logits(features))

    def to_json(self) -> dict[str, Any]:
        return {"base": self.base, "feature": self.feature.tolist(),
                "threshold": self.threshold.tolist(), "leaf": self.leaf.tolist()}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Gbdt:
        return cls(float(data["base"]), np.asarray(data["feature"], dtype=np.int64),
                   np.asarray(data["threshold"], dtype=np.float64),
                   np.asarray(data["leaf"], dtype=np.float64))


@dataclass(frozen=True)
class _Compiled:
    """A Gbdt laid out for evaluation with few numpy calls on flat arrays.

    Nodes are numbered across trees (tree t's node k is t * inner + k), so that a
    (rows x trees) array of node numbers walks all trees at once: a level costs two
    gathers and three in-place operations. Two tricks, both exact:
    - the trees share few distinct splits (feature, threshold), since thresholds are
      quantile bin edges: every row is compared with each split once, and a node
      looks its split's answer up instead of gathering a feature and a threshold;
    - np.take with mode="wrap" (the indices are in range by construction) skips the
      bounds check of the default mode, a good part of a gather's cost.
    Together they take the evaluation to about three quarters of 2-D fancy indexing
    (`a[rows, cols]`), for the same comparisons and the same leaves."""

    split_feature: npt.NDArray[np.intp]  # distinct splits, sorted by feature (np.unique)
    split_threshold: Matrix
    node_split: npt.NDArray[np.intp]  # each node's split
    root: npt.NDArray[np.intp]  # 1 x trees: each tree's root
    child_step: npt.NDArray[np.intp]  # left child of node n is 2n + child_step
    leaf_step: npt.NDArray[np.intp]  # the leaf under node n (last level) is n + leaf_step

    @classmethod
    def of(cls, model: Gbdt) -> _Compiled:
        trees, inner = model.feature.shape
        pairs = np.stack([model.feature.ravel().astype(np.float64), model.threshold.ravel()])
        splits, node_split = np.unique(pairs, axis=1, return_inverse=True)
        tree = np.arange(trees, dtype=np.intp)[None, :]
        return cls(splits[0].astype(np.intp), splits[1], node_split.astype(np.intp).ravel(),
                   tree * inner, 1 - tree * inner, tree - inner)


def train_gbdt(x: Matrix, y: npt.NDArray[np.float64], w: npt.NDArray[np.float64], *,
               trees: int, depth: int, learning_rate: float, l2: float = 1.0, bins: int = 64,
               min_child_weight: float = 1e-3, subsample: float = 1.0, seed: int = 0) -> Gbdt:
    """Gradient-boosted trees on rows `x`, labels `y` in {0, 1} and row weights `w`.

    Each tree's splits are chosen on histograms over at most `bins` quantile bins per
    feature. With `subsample` below 1 each tree sees a random share of the rows (drawn
    from `seed`), which makes the trees less alike and the ensemble generalise better.
    """
    n, n_features = x.shape
    edges = [np.unique(np.quantile(x[:, f], np.linspace(0, 1, bins + 1)[1:-1]))
             for f in range(n_features)]
    n_bins = max(len(e) for e in edges) + 1
    # Bin indices feature by feature (one contiguous row per feature): one bincount per
    # feature and level is several times faster than one over a rows x features index.
    binned = np.stack([np.searchsorted(edges[f], x[:, f], side="left")
                       for f in range(n_features)])
    valid = np.zeros((n_features, n_bins), dtype=bool)
    for f in range(n_features):
        valid[f, :len(edges[f])] = True
    prior = float(np.clip(np.average(y, weights=w), 1e-6, 1 - 1e-6))
    base = float(np.log(prior / (1 - prior)))
    logit = np.full(n, base)
    inner = 2**depth - 1
    features_out = np.zeros((trees, inner), dtype=np.int64)
    thresholds_out = np.full((trees, inner), np.inf)
    leaves_out = np.zeros((trees, inner + 1))
    rng = np.random.default_rng(seed)
    every_row = np.arange(n)
    for t in range(trees):
        p = sigmoid(logit)
        g = (p - y) * w
        h = np.maximum(p * (1 - p), 1e-6) * w
        rows = every_row if subsample >= 1.0 else np.flatnonzero(rng.random(n) < subsample)
        g_rows, h_rows, binned_rows = g[rows], h[rows], binned[:, rows]
        node = np.zeros(n, dtype=np.int64)  # index within the current level, every row
        for level in range(depth):
            width = 2**level
            offset = node[rows] * n_bins
            shape = (width, n_features, n_bins)
            hist_g, hist_h = np.empty(shape), np.empty(shape)
            for f in range(n_features):
                index = offset + binned_rows[f]
                hist_g[:, f] = np.bincount(index, g_rows, width * n_bins).reshape(width, -1)
                hist_h[:, f] = np.bincount(index, h_rows, width * n_bins).reshape(width, -1)
            gl, hl = np.cumsum(hist_g, axis=2), np.cumsum(hist_h, axis=2)
            gt, ht = gl[:, :, -1:], hl[:, :, -1:]
            gr, hr = gt - gl, ht - hl
            gain = gl**2 / (hl + l2) + gr**2 / (hr + l2) - gt**2 / (ht + l2)
            ok = valid[None] & (hl >= min_child_weight) & (hr >= min_child_weight)
            gain = np.where(ok, gain, -np.inf).reshape(width, -1)
            best = gain.argmax(axis=1)
            for k in range(width):
                slot = width - 1 + k
                if gain[k, best[k]] > 1e-12:
                    f, b = divmod(int(best[k]), n_bins)
                    features_out[t, slot] = f
                    thresholds_out[t, slot] = edges[f][b]
            slots = width - 1 + node
            right = x[every_row, features_out[t, slots]] > thresholds_out[t, slots]
            node = 2 * node + right
        leaf_g = np.bincount(node[rows], g_rows, inner + 1)
        leaf_h = np.bincount(node[rows], h_rows, inner + 1)
        leaves_out[t] = -learning_rate * leaf_g / (leaf_h + l2)
        logit += leaves_out[t, node]
    return Gbdt(base, features_out, thresholds_out, leaves_out)


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
