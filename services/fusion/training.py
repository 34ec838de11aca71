"""Training and evaluating the fusion block classifier on gold-labelled datasets.

Labels: a block is content when most of its tokens align with the gold
(shared.blockmap.block_support). Each block's loss weighs its share of its page's
tokens and each dataset weighs the same in total, because the score is a per-page
mean of word F1 in which a block counts by its words; blocks without tokens are left
out (they cannot change a word score). Trees: shared.gbdt, fixed seed, so one
command gives one file. Page loading, labels, folds and scores are shared.training's,
the same as density's.

Evaluation, all on pages the model did not see:
- k-fold: folds by a hash of dataset/page id over all datasets pooled;
- cross-dataset (with two or more datasets): train on all but one dataset, test on
  the one left out, with a decision rule fixed beforehand (cut 0.5, smoothing
  0.25/0.5/0.25), so nothing is tuned on the test dataset.
The shipped model is fitted on every page with the rule chosen by the pooled k-fold.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from services.fusion.features import FEATURES, Matrix, page_features
from services.fusion.model import FusionModel, dump_model, read_model
from shared.gbdt import Gbdt, decide
from shared.learners import TreeParams, train_gbdt
from shared.training import (
    Page,
    Units,
    checks,
    load_datasets,
    mean_f1_by_dataset,
    out_of_fold,
    overall,
)

CUTS = (0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6, 0.65, 0.7)
KERNELS: tuple[tuple[float, ...], ...] = ((1.0,), (0.25, 0.5, 0.25), (0.15, 0.7, 0.15))
# The decision rule of the cross-dataset figures, fixed before looking at any score.
PRIOR_CUT = 0.5
PRIOR_SMOOTHING = (0.25, 0.5, 0.25)
CHECK_ROWS = 16  # feature rows whose probabilities are recorded


@dataclass(frozen=True)
class Hyperparameters:
    folds: int = 5
    trees: TreeParams = field(default_factory=lambda: TreeParams(
        trees=120, leaves=31, max_depth=5, learning_rate=0.1, l2=1.0, bagging_fraction=0.5))
    relative_cut: float = 0.5


def page_blocks(html: str) -> Units:
    """A page's blocks as training units: features, texts and tokens."""
    page = page_features(html)
    return page.matrix, [b.text for b in page.blocks], page.tokens


def stack(pages: Sequence[Page]) -> tuple[Matrix, npt.NDArray[np.float64],
                                          npt.NDArray[np.float64]]:
    """Rows of the blocks with tokens, labels, and weights (a block weighs its share of
    its page's tokens; each dataset weighs the same)."""
    per_dataset = Counter(page.dataset for page in pages)
    xs, ys, ws = [], [], []
    for page in pages:
        counts = np.array([len(t) for t in page.tokens], dtype=np.float64)
        has = counts > 0
        if not has.any():
            continue
        xs.append(page.features[has])
        ys.append(page.labels[has])
        ws.append(counts[has] / counts.sum() / per_dataset[page.dataset])
    if not xs:
        return np.zeros((0, len(FEATURES))), np.zeros(0), np.zeros(0)
    w = np.concatenate(ws)
    return np.vstack(xs), np.concatenate(ys), w * len(w) / w.sum()


def fit(pages: Sequence[Page], hp: Hyperparameters, seed: int) -> Gbdt:
    x, y, w = stack(pages)
    return train_gbdt(x, y, w, hp.trees, seed)


def choose_rule(pages: Sequence[Page], probabilities: Sequence[Matrix], hp: Hyperparameters
                ) -> tuple[float, tuple[float, ...], dict[str, float]]:
    """The cut and smoothing kernel of best mean word F1 (ties: the cut nearest 0.5, the
    first kernel), with the scores they give."""
    best: tuple[float, float, tuple[float, ...], dict[str, float]] | None = None
    for kernel in KERNELS:
        for cut in CUTS:
            scores = mean_f1_by_dataset(
                pages, [decide(p, kernel, cut, hp.relative_cut)[1] for p in probabilities])
            key = overall(scores) - 1e-6 * abs(cut - 0.5)
            if best is None or key > best[0] + 1e-12:
                best = (key, cut, kernel, scores)
    assert best is not None
    return best[1], best[2], best[3]


def cross_dataset(pages: Sequence[Page], hp: Hyperparameters, seed: int,
                  log: Callable[[str], None]) -> dict[str, Any]:
    """For each dataset: the word F1 of the model fitted on the other datasets. The
    decision rule is fixed beforehand (PRIOR_CUT, PRIOR_SMOOTHING), not tuned on any
    page, so the figure is what the model does on a dataset nobody tuned for."""
    names = sorted({p.dataset for p in pages})
    result: dict[str, Any] = {}
    if len(names) < 2:
        return result
    for name in names:
        train = [p for p in pages if p.dataset != name]
        test = [p for p in pages if p.dataset == name]
        model = fit(train, hp, seed)
        keep = [decide(model.probabilities(p.features), PRIOR_SMOOTHING, PRIOR_CUT,
                       hp.relative_cut)[1] for p in test]
        score = mean_f1_by_dataset(test, keep)[name]
        result[name] = {"trained_on": sorted({p.dataset for p in train}), "cut": PRIOR_CUT,
                        "smoothing": list(PRIOR_SMOOTHING), "word_f1": score}
        log(f"cross-dataset: trained without {name}, word F1 on {name} {score}")
    return result


def train(datasets: Sequence[Path], out: Path, seed: int = 0,
          hp: Hyperparameters | None = None, limit: int | None = None,
          workers: int | None = None, log: Callable[[str], None] = lambda _: None
          ) -> FusionModel:
    """Evaluate (k-fold, cross-dataset), fit on every page, write the model to `out`."""
    hp = hp or Hyperparameters()
    workers = workers or min(2, os.cpu_count() or 1)
    pages, data_meta = load_datasets(datasets, page_blocks, "blocks", limit, workers)
    for meta in data_meta:
        log(f"{meta['name']}: {meta['pages']} pages, {meta['blocks']} blocks")
    if not pages:
        raise ValueError("no pages to train on")
    oof = out_of_fold(pages, hp.folds, lambda train: fit(train, hp, seed))
    cut, kernel, kfold = choose_rule(pages, oof, hp)
    log(f"k-fold ({hp.folds}): word F1 {kfold} at cut {cut}, smoothing {kernel}")
    at_prior = mean_f1_by_dataset(
        pages, [decide(p, PRIOR_SMOOTHING, PRIOR_CUT, hp.relative_cut)[1] for p in oof])
    crossed = cross_dataset(pages, hp, seed, log)
    model = FusionModel(fit(pages, hp, seed), cut, kernel, hp.relative_cut, {})
    model = FusionModel.from_json(model.to_json())  # as the file will load it
    metadata = {
        "trained_by": "boilerbench train fusion",
        "seed": seed,
        "datasets": data_meta,
        "hyperparameters": asdict(hp),
        "features": list(FEATURES),
        "labels": "a block is content when more than half of its tokens align with the gold "
                  "tokens (shared.blockmap.block_support)",
        "evaluation": {
            "metric": "mean per-page bag-of-words word F1 (shared.tokens.tokenize)",
            "kfold": {"folds": hp.folds, "cut": cut, "smoothing": list(kernel),
                      "word_f1": kfold, "word_f1_at_prior_rule": at_prior},
            "cross_dataset": crossed,
            "peers": "the other services' figures on the same pages and metric (bag-of-words "
                     "F1, in-process, default options): benchmarks/quality.py",
        },
        "training_f1": mean_f1_by_dataset(pages, [model.decide(p.features)[1] for p in pages]),
        "checks": checks(model, pages, CHECK_ROWS),
    }
    model = FusionModel(model.gbdt, model.cut, model.smoothing, model.relative_cut, metadata)
    dump_model(model, out)
    log(f"wrote {out}")
    return read_model(out)

