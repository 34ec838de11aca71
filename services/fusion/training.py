"""Training the fusion block classifier on gold-labelled datasets (`boilerbench train fusion`).

The shared skeleton (shared.training.train_model) labels the blocks (content when most
of their tokens align with the gold), weighs them by their share of the page's tokens
with each dataset weighing the same, evaluates every candidate here and every decision
rule leave-one-dataset-out, and refits the best on every page. The candidates are
LightGBM boosted trees (shared.learners) of a few sizes; the rule smooths the
probabilities over neighbouring blocks and cuts them (services/fusion/model.py).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from services.fusion.features import FEATURES, page_features
from services.fusion.model import FusionModel
from shared.gbdt import Gbdt
from shared.learners import TreeParams, fit_gbdt
from shared.training import (
    Classifier,
    Learner,
    Rule,
    TrainingPage,
    Units,
    label_rule,
    rules,
    train_model,
)

CUTS = (0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6)
KERNELS: tuple[tuple[float, ...], ...] = ((1.0,), (0.25, 0.5, 0.25))
# Shallow, strongly regularised trees that see few features each: deeper or larger ones
# (depth 4-8, up to 31 leaves), ones with smaller leaves or more features per tree, and
# randomised split points scored lower leave-one-dataset-out, i.e. they learn more of
# the training datasets' sites and less of what carries over to others. Depth 2 was
# too little.
CANDIDATES: dict[str, TreeParams] = {
    "depth3-300": TreeParams(trees=300, leaves=8, max_depth=3, learning_rate=0.05,
                             min_child_samples=300, l2=5.0, feature_fraction=0.3,
                             bagging_fraction=0.7),
    "depth3-200": TreeParams(trees=200, leaves=8, max_depth=3, learning_rate=0.08,
                             min_child_samples=300, l2=5.0, feature_fraction=0.3,
                             bagging_fraction=0.7),
}
CHECK_ROWS = 16  # feature rows whose probabilities are recorded


def page_blocks(html: str) -> Units:
    """A page's blocks as training units: features and tokens."""
    page = page_features(html)
    return page.matrix, page.tokens


def _build(name: str, classifier: Classifier, rule: Rule, metadata: dict[str, Any]
           ) -> FusionModel:
    assert isinstance(classifier, Gbdt)
    return FusionModel(classifier, rule.cut, rule.smoothing, rule.relative_cut, metadata)


def learner(seed: int, candidates: Mapping[str, TreeParams]) -> Learner[FusionModel]:
    fits: dict[str, Callable[[Sequence[TrainingPage]], Classifier]] = {
        name: functools.partial(fit_gbdt, params, seed, len(FEATURES))
        for name, params in candidates.items()}
    return Learner(
        service="fusion", unit_name="blocks", units=page_blocks, n_features=len(FEATURES),
        candidates=fits, rules=rules(CUTS, KERNELS), build=_build,
        load=FusionModel.from_json, check_rows=CHECK_ROWS,
        description={
            "features": list(FEATURES),
            "hyperparameters": {name: params.to_json() for name, params in candidates.items()},
            "labels": label_rule("block"),
            "peers": "the other services' figures on the same pages and metric: "
                     "benchmarks/quality.py",
        })


def train(datasets: Sequence[Path], out: Path, seed: int = 0,
          candidates: Mapping[str, TreeParams] | None = None, limit: int | None = None,
          workers: int | None = None, log: Callable[[str], None] = lambda _: None
          ) -> FusionModel:
    """Evaluate the candidates leave-one-dataset-out, fit the best on every page, write
    the model to `out` and return it as the file loads."""
    return train_model(learner(seed, candidates or CANDIDATES), datasets, out, seed, limit,
                       workers or min(2, os.cpu_count() or 1), log)
