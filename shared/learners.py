"""Training the learned services' classifiers with well-kept libraries, exported for numpy.

Boosted trees with LightGBM, the small neural network with scikit-learn's
MLPClassifier. Training only (the `train` extra): the services evaluate the
exported JSON with shared.gbdt and shared.mlp and never import either library.
Training is deterministic for a given seed, data and library version: one thread
(LightGBM's own, and the BLAS under scikit-learn's matrix products), LightGBM's
`deterministic` mode with row-wise histograms, and every random draw (bagging,
feature sampling, initial weights, batch order) from the seed. Every feature is
numerical and finite (`use_missing` off), so each split is LightGBM's plain
`x <= threshold`, which the export keeps as it is.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

import lightgbm
import numpy as np
import numpy.typing as npt
from sklearn.exceptions import ConvergenceWarning
from sklearn.neural_network import MLPClassifier
from threadpoolctl import threadpool_limits

from shared.gbdt import Gbdt
from shared.mlp import Mlp
from shared.training import TrainingPage, stack

Matrix = npt.NDArray[np.float64]


@dataclass(frozen=True)
class TreeParams:
    """LightGBM's main knobs for a binary classifier (logistic loss)."""

    trees: int = 200
    learning_rate: float = 0.05
    leaves: int = 31
    max_depth: int = -1  # -1: limited by `leaves` only
    min_child_samples: int = 20
    min_child_weight: float = 1e-3
    l2: float = 0.0
    feature_fraction: float = 1.0
    bagging_fraction: float = 1.0
    max_bin: int = 255

    def lightgbm(self, seed: int) -> dict[str, Any]:
        """The LightGBM parameters of these knobs, with everything that makes a run
        reproducible."""
        return {
            "objective": "binary", "learning_rate": self.learning_rate,
            "num_leaves": self.leaves, "max_depth": self.max_depth,
            "min_data_in_leaf": self.min_child_samples,
            "min_sum_hessian_in_leaf": self.min_child_weight, "lambda_l2": self.l2,
            "feature_fraction": self.feature_fraction,
            "bagging_fraction": self.bagging_fraction,
            "bagging_freq": 1 if self.bagging_fraction < 1.0 else 0,
            "max_bin": self.max_bin, "seed": seed, "num_threads": 1, "deterministic": True,
            "force_row_wise": True, "use_missing": False, "zero_as_missing": False,
            "verbosity": -1,
        }

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def fit_booster(x: Matrix, y: npt.NDArray[np.float64], w: npt.NDArray[np.float64],
                params: TreeParams, seed: int) -> lightgbm.Booster:
    """LightGBM's binary classifier on rows `x`, labels `y` in {0, 1}, row weights `w`."""
    if not np.isfinite(x).all():
        raise ValueError("training rows must be finite (the exported trees have no "
                         "missing-value branch)")
    data = lightgbm.Dataset(x, label=y, weight=w, params={"max_bin": params.max_bin,
                                                          "verbosity": -1},
                            free_raw_data=True)
    if int(len(x) * params.bagging_fraction) < 1:  # a bag of no row stops LightGBM
        params = replace(params, bagging_fraction=1.0)
    return lightgbm.train(params.lightgbm(seed), data, num_boost_round=params.trees)


def export_booster(booster: lightgbm.Booster) -> Gbdt:
    """The booster's trees as a shared.gbdt model giving the same raw scores (logits).

    Nodes are numbered tree by tree in depth-first order. Only LightGBM's numerical
    `<=` splits without a missing-value branch are accepted; anything else raises
    rather than exporting a model that would decide differently."""
    dump = booster.dump_model()
    if dump.get("num_tree_per_iteration", 1) != 1:
        raise ValueError("only a binary classifier (one tree per iteration) exports")
    feature: list[int] = []
    threshold: list[float] = []
    left: list[int] = []
    right: list[int] = []
    value: list[float] = []

    def add(node: dict[str, Any]) -> int:
        index = len(feature)
        feature.append(-1)
        threshold.append(0.0)
        left.append(-1)
        right.append(-1)
        value.append(0.0)
        if "leaf_value" in node:
            value[index] = float(node["leaf_value"])
            return index
        if node["decision_type"] != "<=" or node["missing_type"] != "None":
            raise ValueError(f"unsupported split {node['decision_type']!r} with missing "
                             f"type {node['missing_type']!r}")
        feature[index] = int(node["split_feature"])
        threshold[index] = float(node["threshold"])
        left[index] = add(node["left_child"])
        right[index] = add(node["right_child"])
        return index

    # Leaf values are stored already shrunk, and the first tree's hold the starting
    # score (boost_from_average): the raw score is the plain sum of one leaf per tree.
    roots = [add(tree["tree_structure"]) for tree in dump["tree_info"]]
    return Gbdt(0.0, np.array(roots, dtype=np.int64), np.array(feature, dtype=np.int64),
                np.array(threshold), np.array(left, dtype=np.int64),
                np.array(right, dtype=np.int64), np.array(value))


def train_gbdt(x: Matrix, y: npt.NDArray[np.float64], w: npt.NDArray[np.float64],
               params: TreeParams, seed: int) -> Gbdt:
    """Boosted trees trained by LightGBM (fit_booster) and exported (export_booster)."""
    return export_booster(fit_booster(x, y, w, params, seed))


@dataclass(frozen=True)
class NetworkParams:
    """scikit-learn MLPClassifier's knobs: tanh hidden layers, Adam, a fixed number of
    passes over the data (no early stopping, so the seed alone decides the result)."""

    hidden: tuple[int, ...] = (16, 8)
    epochs: int = 12
    batch: int = 256
    learning_rate: float = 0.003
    l2: float = 1e-4

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def standardisation(x: Matrix) -> tuple[Matrix, Matrix]:
    """Column means and standard deviations (1 where a column is constant)."""
    mean = x.mean(axis=0)
    scale = x.std(axis=0)
    scale[scale == 0] = 1.0
    return mean, scale


def fit_network(x: Matrix, y: npt.NDArray[np.float64], w: npt.NDArray[np.float64],
                params: NetworkParams, seed: int) -> tuple[MLPClassifier, Matrix, Matrix]:
    """scikit-learn's MLPClassifier on standardised rows, and the standardisation."""
    mean, scale = standardisation(x)
    # At most the number of rows: scikit-learn clips it so too, with a warning.
    batch = max(1, min(params.batch, len(x)))
    network = MLPClassifier(
        hidden_layer_sizes=params.hidden, activation="tanh", solver="adam",
        alpha=params.l2, batch_size=batch, learning_rate_init=params.learning_rate,
        max_iter=params.epochs, shuffle=True, random_state=seed, tol=0.0,
        n_iter_no_change=params.epochs + 1, early_stopping=False)
    with threadpool_limits(1), warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # a fixed number of passes
        network.fit((x - mean) / scale, y.astype(np.int64), sample_weight=w)
    return network, mean, scale


def export_network(network: MLPClassifier, mean: Matrix, scale: Matrix) -> Mlp:
    """The network as a shared.mlp model giving the same probabilities."""
    if network.activation != "tanh" or network.out_activation_ != "logistic":
        raise ValueError("only a tanh network with one logistic output exports")
    return Mlp(mean.copy(), scale.copy(), [np.array(c, dtype=np.float64) for c in network.coefs_],
               [np.array(b, dtype=np.float64) for b in network.intercepts_])


def train_mlp(x: Matrix, y: npt.NDArray[np.float64], w: npt.NDArray[np.float64],
              params: NetworkParams, seed: int) -> Mlp:
    """A neural network trained by scikit-learn (fit_network) and exported (export_network)."""
    return export_network(*fit_network(x, y, w, params, seed))


def fit_gbdt(params: TreeParams, seed: int, n_features: int,
             pages: Sequence[TrainingPage]) -> Gbdt:
    """train_gbdt on the training pages' weighted units (shared.training.stack)."""
    x, y, w = stack(pages, n_features)
    return train_gbdt(x, y, w, params, seed)


def fit_mlp(params: NetworkParams, seed: int, n_features: int,
            pages: Sequence[TrainingPage]) -> Mlp:
    """train_mlp on the training pages' weighted units (shared.training.stack)."""
    x, y, w = stack(pages, n_features)
    return train_mlp(x, y, w, params, seed)
