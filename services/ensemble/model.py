"""The ensemble's model file: boosted trees over the combiner's features, the member
list the features were built for, the decision rule and the default members.

JSON (loads without executing code), evaluated in numpy (shared.gbdt): no machine
learning library at runtime. The decision smooths the blocks' probabilities over their
neighbours and cuts them (shared.gbdt.decide), the rule chosen leave-one-dataset-out.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from services.ensemble.features import Matrix, feature_names, fusion_columns
from services.fusion.features import FEATURES as FUSION_FEATURES
from shared.gbdt import Gbdt, decide
from shared.modelfile import load_model, read_json

FORMAT = "boilerbench-ensemble-model"
FORMAT_VERSION = 1
MODEL_DIR = Path(__file__).resolve().parent / "model"
DEFAULT_MODEL = MODEL_DIR / "ensemble-v1.json"


@dataclass(frozen=True)
class EnsembleModel:
    """A trained combiner: the members its features describe (in column order), the
    members asked by default (the cheapest set that keeps its accuracy), the rule."""

    gbdt: Gbdt
    members: tuple[str, ...]
    default_members: tuple[str, ...]
    cut: float
    smoothing: tuple[float, ...]
    relative_cut: float
    metadata: dict[str, Any]
    fusion_features: tuple[str, ...] = FUSION_FEATURES

    def probabilities(self, features: Matrix) -> Matrix:
        return self.gbdt.probabilities(features)

    def decide(self, features: Matrix) -> tuple[Matrix, npt.NDArray[np.bool_]]:
        """Smoothed probabilities and the content decision of each block."""
        return decide(self.probabilities(features), self.smoothing, self.cut, self.relative_cut)

    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT, "version": FORMAT_VERSION,
                "features": list(feature_names(self.members, self.fusion_features)),
                "members": list(self.members),
                "default_members": list(self.default_members), "cut": self.cut,
                "smoothing": list(self.smoothing), "relative_cut": self.relative_cut,
                "gbdt": self.gbdt.to_json(), "metadata": self.metadata}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> EnsembleModel:
        if data.get("format") != FORMAT or data.get("version") != FORMAT_VERSION:
            raise ValueError(f"not a {FORMAT} file of version {FORMAT_VERSION}")
        members = tuple(str(m) for m in data["members"])
        names = tuple(str(f) for f in data["features"])
        fusion = names[:len(names) - len(feature_names(members, ()))]
        if names != feature_names(members, fusion) or not set(fusion) <= set(FUSION_FEATURES):
            raise ValueError("the model's features are not the ones this code computes")
        return cls(Gbdt.from_json(data["gbdt"]), members,
                   tuple(str(m) for m in data["default_members"]), float(data["cut"]),
                   tuple(float(v) for v in data["smoothing"]), float(data["relative_cut"]),
                   dict(data["metadata"]), fusion)

    @functools.cached_property
    def fusion_columns(self) -> list[int]:
        """The columns of fusion's matrix this model was trained on."""
        return fusion_columns(self.fusion_features)


def read_model(path: Path) -> EnsembleModel:
    return EnsembleModel.from_json(read_json(path))


@functools.cache
def default_model() -> EnsembleModel:
    """The model the service uses, loaded once per process: the file
    BOILERBENCH_ENSEMBLE_MODEL names (shared.modelfile.load_model), else the shipped one."""
    return load_model("ensemble", DEFAULT_MODEL, EnsembleModel.from_json)
