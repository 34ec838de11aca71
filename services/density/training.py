"""Training the `learned` threshold (`boilerbench train density`): a line classifier.

The network is the one of Champandard's "The Easy Way to Extract Useful Text from
Arbitrary HTML" (a multi-layer perceptron on the line's and its neighbours' density,
HTML bytes and text length), trained by scikit-learn's MLPClassifier; boosted trees
(LightGBM) on the same nine inputs compete with it (shared.learners). The shared
skeleton (shared.training.train_model) labels the lines (content when most of their
tokens align with the gold), weighs them by their share of the page's tokens with each
dataset weighing the same, evaluates both candidates and every decision rule
leave-one-dataset-out and ships the better, refitted on every page.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from services.density.lines import render_lines
from services.density.model import FEATURES, DensityModel, line_features
from shared.gbdt import Gbdt
from shared.learners import NetworkParams, TreeParams, fit_gbdt, fit_mlp
from shared.mlp import Mlp
from shared.tokens import tokenize
from shared.training import (
    Classifier,
    Learner,
    Rule,
    Units,
    label_rule,
    rules,
    train_model,
)

CUTS = (0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6, 0.65, 0.7)
KERNELS: tuple[tuple[float, ...], ...] = ((1.0,), (0.25, 0.5, 0.25))
NETWORK = NetworkParams(hidden=(16, 8), epochs=12, batch=256, learning_rate=0.003)
TREES = TreeParams(trees=150, leaves=8, max_depth=3, learning_rate=0.1,
                   min_child_samples=100, l2=1.0)
CHECK_ROWS = 12  # feature rows whose probabilities are recorded


def page_lines(html: str) -> Units:
    """A page's lines as training units: features and tokens."""
    lines = render_lines(html)
    return line_features(lines), [tokenize(line.text) for line in lines]


def _build(kind: str, classifier: Classifier, rule: Rule, metadata: dict[str, Any]
           ) -> DensityModel:
    assert isinstance(classifier, Mlp | Gbdt)
    return DensityModel(kind, classifier, rule.cut, metadata, rule.smoothing, rule.relative_cut)


def learner(seed: int, network: NetworkParams, trees: TreeParams) -> Learner[DensityModel]:
    return Learner(
        service="density", unit_name="lines", units=page_lines, n_features=len(FEATURES),
        candidates={"mlp": functools.partial(fit_mlp, network, seed, len(FEATURES)),
                    "gbdt": functools.partial(fit_gbdt, trees, seed, len(FEATURES))},
        rules=rules(CUTS, KERNELS), build=_build, load=DensityModel.from_json,
        check_rows=CHECK_ROWS,
        description={
            "features": "density, log1p(HTML bytes), log1p(text length) of the previous, "
                        "current and next line (zeros where there is none)",
            "hyperparameters": {"mlp": network.to_json(), "gbdt": trees.to_json()},
            "labels": label_rule("line"),
        })


def train(datasets: Sequence[Path], out: Path, seed: int = 0,
          network: NetworkParams = NETWORK, trees: TreeParams = TREES,
          limit: int | None = None, workers: int = 1,
          log: Callable[[str], None] = lambda _: None) -> DensityModel:
    """Evaluate both classifiers leave-one-dataset-out, ship the better refitted on every
    page, write `out` and return the model as the file loads."""
    return train_model(learner(seed, network, trees), datasets, out, seed, limit, workers, log)
