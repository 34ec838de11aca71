"""Training the `learned` threshold: line labels from gold text, an MLP and boosted trees.

Labels: a line is content when most of its tokens align (LCS over the whole page's
tokens against the gold tokens; page loading, labels, folds and scores are
shared.training's, the same as fusion's). Each line's loss is
weighted by its share of its page's tokens, and each dataset gets the same total
weight, because the score is a per-page mean of word F1 in which a line counts by
its words. Both classifiers are trained deterministically (fixed seed, full passes,
no threads of our own); their k-fold cross-validated word F1 (folds by a hash of
the page id) picks the one shipped, which is then refitted on all pages. The
probability cut is chosen on the out-of-fold predictions too; the decision rule
around it (smoothing, relative cut) is described in services/density/model.py.
"""

from __future__ import annotations

import functools
import json
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from services.density.lines import render_lines
from services.density.model import (
    FEATURES,
    DensityModel,
    Gbdt,
    Matrix,
    Mlp,
    decide,
    dump_model,
    line_features,
)
from shared.gbdt import sigmoid
from shared.learners import TreeParams, train_gbdt
from shared.tokens import tokenize
from shared.training import (
    Page,
    Units,
    checks,
    load_datasets,
    mean_f1_by_dataset,
    out_of_fold,
    overall,
)

CUTS = (0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6, 0.65, 0.7)
CHECK_ROWS = 12  # feature rows whose probabilities are recorded


@dataclass(frozen=True)
class Hyperparameters:
    folds: int = 5
    mlp_hidden: tuple[int, ...] = (16, 8)
    mlp_epochs: int = 12
    mlp_batch: int = 256
    mlp_learning_rate: float = 0.003
    trees: TreeParams = field(default_factory=lambda: TreeParams(
        trees=150, leaves=16, max_depth=4, learning_rate=0.1, l2=1.0))
    smoothing: tuple[float, ...] = (0.25, 0.5, 0.25)
    relative_cut: float = 0.5


def page_lines(html: str) -> Units:
    """A page's lines as training units: features, texts and tokens."""
    lines = render_lines(html)
    return line_features(lines), [line.text for line in lines], [
        tokenize(line.text) for line in lines]


def line_weights(pages: Sequence[Page]) -> npt.NDArray[np.float64]:
    """Each line weighs its share of its page's tokens; each dataset weighs the same."""
    per_dataset = Counter(page.dataset for page in pages)
    total_lines = sum(len(page.labels) for page in pages)
    scale = total_lines / len(per_dataset)
    parts = []
    for page in pages:
        counts = np.array([len(t) for t in page.tokens], dtype=np.float64)
        page_total = counts.sum() or 1.0
        parts.append(counts / page_total * scale / per_dataset[page.dataset])
    return np.concatenate(parts) if parts else np.zeros(0)


def stack(pages: Sequence[Page]) -> tuple[Matrix, npt.NDArray[np.float64],
                                          npt.NDArray[np.float64]]:
    features = np.vstack([p.features for p in pages]) if pages else np.zeros((0, len(FEATURES)))
    labels = np.concatenate([p.labels for p in pages]) if pages else np.zeros(0)
    return features, labels, line_weights(pages)


# -- the two classifiers ---------------------------------------------------------------


def train_mlp(x: Matrix, y: npt.NDArray[np.float64], w: npt.NDArray[np.float64],
              hp: Hyperparameters, seed: int) -> Mlp:
    """Seed 003's multi-layer perceptron: tanh layers, weighted cross-entropy, Adam."""
    rng = np.random.default_rng(seed)
    mean = x.mean(axis=0)
    scale = x.std(axis=0)
    scale[scale == 0] = 1.0
    h0 = (x - mean) / scale
    sizes = (x.shape[1], *hp.mlp_hidden, 1)
    weights = [rng.normal(0.0, np.sqrt(1.0 / m), (m, n)) for m, n in pairwise(sizes)]
    biases = [np.zeros(n) for n in sizes[1:]]
    params = [*weights, *biases]
    moments = [np.zeros_like(p) for p in params]
    squares = [np.zeros_like(p) for p in params]
    beta1, beta2, eps = 0.9, 0.999, 1e-8
    step = 0
    depth = len(weights)
    for _ in range(hp.mlp_epochs):
        order = rng.permutation(len(y))
        for start in range(0, len(y), hp.mlp_batch):
            batch = order[start:start + hp.mlp_batch]
            wb = w[batch]
            total = wb.sum()
            if total <= 0:
                continue
            activations = [h0[batch]]
            for i in range(depth):
                z = activations[-1] @ weights[i] + biases[i]
                activations.append(np.tanh(z) if i < depth - 1 else z)
            p = sigmoid(activations[-1][:, 0])
            delta = ((p - y[batch]) * wb / total)[:, None]
            grads_w: list[Matrix] = [np.zeros(0)] * depth
            grads_b: list[Matrix] = [np.zeros(0)] * depth
            for i in reversed(range(depth)):
                grads_w[i] = activations[i].T @ delta
                grads_b[i] = delta.sum(axis=0)
                if i:
                    delta = (delta @ weights[i].T) * (1.0 - activations[i] ** 2)
            step += 1
            for j, g in enumerate([*grads_w, *grads_b]):
                moments[j] = beta1 * moments[j] + (1 - beta1) * g
                squares[j] = beta2 * squares[j] + (1 - beta2) * g * g
                m_hat = moments[j] / (1 - beta1**step)
                v_hat = squares[j] / (1 - beta2**step)
                params[j] -= hp.mlp_learning_rate * m_hat / (np.sqrt(v_hat) + eps)
    return Mlp(mean, scale, weights, biases)


def fit(kind: str, pages: Sequence[Page], hp: Hyperparameters, seed: int) -> Mlp | Gbdt:
    x, y, w = stack(pages)
    if kind == "mlp":
        return train_mlp(x, y, w, hp, seed)
    return train_gbdt(x, y, w, hp.trees, seed)


def _fit_model(kind: str, hp: Hyperparameters, seed: int, pages: Sequence[Page]
               ) -> DensityModel:
    """A model of `kind` fitted on `pages`, deciding at cut 0.5 (for out-of-fold use)."""
    return DensityModel(kind, fit(kind, pages, hp, seed), 0.5, {})


def _round_trip(model: DensityModel) -> DensityModel:
    """The model as its file will load it (JSON floats), so recorded scores match the file."""
    return DensityModel.from_json(json.loads(json.dumps(model.to_json())))


# -- training ------------------------------------------------------------------------


def train(datasets: Sequence[Path], out: Path, seed: int = 0,
          hp: Hyperparameters | None = None, limit: int | None = None,
          log: Callable[[str], None] = lambda _: None) -> DensityModel:
    """Train both classifiers, ship the better by cross-validated word F1, write `out`."""
    hp = hp or Hyperparameters()
    pages, data_meta = load_datasets(datasets, page_lines, "lines", limit)
    for meta in data_meta:
        log(f"{meta['name']}: {meta['pages']} pages, {meta['lines']} lines")
    if not pages:
        raise ValueError("no pages to train on")
    fixed = mean_f1_by_dataset(pages, [p.features[:, 3] >= 0.5 for p in pages])
    candidates: dict[str, dict[str, Any]] = {}
    for kind in ("mlp", "gbdt"):
        oof = out_of_fold(pages, hp.folds, functools.partial(_fit_model, kind, hp, seed))
        by_cut = {cut: mean_f1_by_dataset(pages, [decide(o, hp.smoothing, cut, hp.relative_cut)[1]
                                                  for o in oof]) for cut in CUTS}
        cut = max(CUTS, key=lambda c: (overall(by_cut[c]), -abs(c - 0.5)))
        candidates[kind] = {"cut": cut, "cross_validated_f1": by_cut[cut],
                            "cross_validated_f1_at_0.5": by_cut[0.5]}
        log(f"{kind}: cross-validated word F1 {by_cut[cut]} at cut {cut}")
    kind = max(candidates, key=lambda k: overall(candidates[k]["cross_validated_f1"]))
    model = _round_trip(DensityModel(kind, fit(kind, pages, hp, seed),
                                     candidates[kind]["cut"], {}, hp.smoothing,
                                     hp.relative_cut))
    metadata = {
        "trained_by": "boilerbench train density",
        "seed": seed,
        "datasets": data_meta,
        "hyperparameters": asdict(hp),
        "features": "density, log1p(HTML bytes), log1p(text length) of the previous, "
                    "current and next line (zeros where there is none)",
        "labels": "a line is content when most of its tokens align with the gold tokens "
                  "(LCS over the page)",
        "candidates": candidates,
        "shipped": kind,
        "training_f1": mean_f1_by_dataset(pages, [model.decide(p.features)[1] for p in pages]),
        "fixed_0.5_f1": fixed,
        "checks": checks(model, pages, CHECK_ROWS),
    }
    model = DensityModel(model.kind, model.classifier, model.cut, metadata, model.smoothing,
                         model.relative_cut)
    dump_model(model, out)
    log(f"shipped {kind} (cut {model.cut}) to {out}")
    return model
