"""The fusion model file: boosted trees over the block features plus the decision rule.

JSON (loads without executing code), evaluated in numpy (shared.gbdt). The decision
smooths the blocks' probabilities over their neighbours (`smoothing` kernel, content
comes in runs) and keeps a block when its smoothed probability reaches `cut`, or
`relative_cut` times the page's highest where that is lower (shared.gbdt.decide).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from services.fusion.features import FEATURES, Matrix
from shared.gbdt import Gbdt, decide
from shared.modelfile import check_header, load_model, read_json

FORMAT = "boilerbench-fusion-model"
FORMAT_VERSION = 2
MODEL_DIR = Path(__file__).resolve().parent / "model"
DEFAULT_MODEL = MODEL_DIR / "fusion-v2.json"


@dataclass(frozen=True)
class FusionModel:
    """A trained block classifier, its decision rule and its metadata."""

    gbdt: Gbdt
    cut: float
    smoothing: tuple[float, ...]
    relative_cut: float
    metadata: dict[str, Any]

    def probabilities(self, features: Matrix) -> Matrix:
        """Each block's probability of being content (before smoothing)."""
        return self.gbdt.probabilities(features)

    def decide(self, features: Matrix, cut: float | None = None,
               smoothing: tuple[float, ...] | None = None
               ) -> tuple[Matrix, npt.NDArray[np.bool_]]:
        """Smoothed probabilities and the content decision of each block; `cut` and
        `smoothing` override the trained rule."""
        return decide(self.probabilities(features),
                      self.smoothing if smoothing is None else smoothing,
                      self.cut if cut is None else cut, self.relative_cut)

    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT, "version": FORMAT_VERSION, "features": list(FEATURES),
                "cut": self.cut, "smoothing": list(self.smoothing),
                "relative_cut": self.relative_cut, "gbdt": self.gbdt.to_json(),
                "metadata": self.metadata}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> FusionModel:
        check_header(data, FORMAT, FORMAT_VERSION, FEATURES)
        return cls(Gbdt.from_json(data["gbdt"]), float(data["cut"]),
                   tuple(float(v) for v in data["smoothing"]), float(data["relative_cut"]),
                   dict(data["metadata"]))


def read_model(path: Path) -> FusionModel:
    return FusionModel.from_json(read_json(path))


@functools.cache
def default_model() -> FusionModel:
    """The model the service uses, loaded once per process: the file
    BOILERBENCH_FUSION_MODEL names (shared.modelfile.load_model), else the shipped one."""
    return load_model("fusion", DEFAULT_MODEL, FusionModel.from_json)
