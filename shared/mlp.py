"""A small neural network (multi-layer perceptron) evaluated in plain numpy, stored as JSON.

Inputs are standardised (mean and scale from the training rows), hidden layers use
tanh, the single output is a logit. Trained elsewhere (shared.learners, with
scikit-learn) and exported here, so the services need no machine-learning library.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from shared.gbdt import LogitClassifier

Matrix = npt.NDArray[np.float64]


@dataclass(frozen=True)
class Mlp(LogitClassifier):
    """Dense layers with tanh hidden units and one linear output (the logit)."""

    mean: Matrix
    scale: Matrix
    weights: list[Matrix]
    biases: list[Matrix]

    def __post_init__(self) -> None:
        if not self.weights or len(self.weights) != len(self.biases) \
                or self.weights[-1].shape[1] != 1:
            raise ValueError("a network needs matching layers and one output")

    def logits(self, features: Matrix) -> Matrix:
        h = (features - self.mean) / self.scale
        for i, (w, b) in enumerate(zip(self.weights, self.biases, strict=True)):
            h = h @ w + b
            if i < len(self.weights) - 1:
                h = np.tanh(h)
        result: Matrix = h[:, 0]
        return result

    def to_json(self) -> dict[str, Any]:
        return {"mean": self.mean.tolist(), "scale": self.scale.tolist(),
                "layers": [{"weights": w.tolist(), "bias": b.tolist()}
                           for w, b in zip(self.weights, self.biases, strict=True)]}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Mlp:
        layers = data["layers"]
        return cls(np.asarray(data["mean"], dtype=np.float64),
                   np.asarray(data["scale"], dtype=np.float64),
                   [np.asarray(layer["weights"], dtype=np.float64) for layer in layers],
                   [np.asarray(layer["bias"], dtype=np.float64) for layer in layers])
