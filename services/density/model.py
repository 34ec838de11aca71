"""The learned threshold's features and its model file, evaluated in plain numpy.

Champandard's "The Easy Way to Extract Useful Text from Arbitrary HTML" feeds a
neural network the density, HTML bytes and text length of a line and of its
previous and next lines (9 inputs). Byte and length counts are
log-scaled (log1p) because they span five orders of magnitude; a missing
neighbour (first or last line) is all zeros.

A model file is JSON (loads without executing code): `kind` is `mlp` (shared.mlp:
dense layers, tanh hidden units, sigmoid output, inputs standardised) or `gbdt`
(shared.gbdt: gradient-boosted trees on the raw features, logistic link). Both give
the probability that a line is content. The decision
then smooths the probabilities over neighbouring lines (`smoothing` kernel),
because content comes in runs and a short line inside an article (a caption, a
dateline) should follow its neighbours; and a line is content when its smoothed
probability reaches `cut`, or reaches `relative_cut` times the page's highest one
when that is lower, so a page whose best lines all score under the cut still
yields its likeliest lines instead of an empty extract. The classifier and the
rule were chosen by leave-one-dataset-out word F1 (services/density/training.py).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from services.density.lines import Line
from shared.gbdt import Gbdt as Gbdt  # re-exported: the density model format names it
from shared.gbdt import decide as decide
from shared.gbdt import sigmoid as _sigmoid
from shared.gbdt import smooth as smooth
from shared.mlp import Mlp as Mlp  # re-exported: the density model format names it
from shared.modelfile import check_header, load_model, read_json

FORMAT = "boilerbench-density-model"
FORMAT_VERSION = 2
MODEL_DIR = Path(__file__).resolve().parent / "model"
DEFAULT_MODEL = MODEL_DIR / "density-v2.json"
FEATURES = tuple(
    f"{name}_{where}" for where in ("prev", "line", "next")
    for name in ("density", "log_html_bytes", "log_text_length")
)

Matrix = npt.NDArray[np.float64]


def line_counts(lines: Sequence[Line]) -> tuple[Matrix, Matrix]:
    """Each line's text length and HTML bytes, as floats (exact: both are far below 2^53)."""
    text_length = np.array([len(line.text) for line in lines], dtype=np.float64)
    html_bytes = np.array([line.html_bytes for line in lines], dtype=np.float64)
    return text_length, html_bytes


def line_features(lines: Sequence[Line]) -> Matrix:
    """The (lines x 9) feature matrix: previous, current and next line's three values.

    Computed column by column (one numpy call per column, not per line); the values
    are those of Line.density and np.log1p on each line, bit for bit, since a float
    division is correctly rounded either way and log1p runs the same loop."""
    text_length, html_bytes = line_counts(lines)
    own = np.column_stack([text_length / html_bytes, np.log1p(html_bytes),
                           np.log1p(text_length)])
    features = np.zeros((len(lines), 9))
    features[1:, 0:3] = own[:-1]
    features[:, 3:6] = own
    features[:-1, 6:9] = own[1:]
    return features


@dataclass(frozen=True)
class DensityModel:
    """A trained line classifier plus the probability cut and its metadata."""

    kind: str
    classifier: Mlp | Gbdt
    cut: float
    metadata: dict[str, Any]
    smoothing: tuple[float, ...] = (0.25, 0.5, 0.25)
    relative_cut: float = 0.5

    def probabilities(self, features: Matrix) -> Matrix:
        """Each line's probability of being content (before smoothing)."""
        if features.shape[0] == 0:
            return np.zeros(0)
        return _sigmoid(self.classifier.logits(features))

    def decide(self, features: Matrix) -> tuple[Matrix, npt.NDArray[np.bool_]]:
        """Smoothed probabilities and the content decision of each line."""
        probabilities = self.probabilities(features)
        return decide(probabilities, self.smoothing, self.cut, self.relative_cut)

    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT, "version": FORMAT_VERSION, "kind": self.kind,
                "features": list(FEATURES), "cut": self.cut, "smoothing": list(self.smoothing),
                "relative_cut": self.relative_cut,
                self.kind: self.classifier.to_json(), "metadata": self.metadata}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> DensityModel:
        check_header(data, FORMAT, FORMAT_VERSION, FEATURES)
        kind = data["kind"]
        classifier: Mlp | Gbdt
        if kind == "mlp":
            classifier = Mlp.from_json(data["mlp"])
        elif kind == "gbdt":
            classifier = Gbdt.from_json(data["gbdt"])
        else:
            raise ValueError(f"unknown model kind {kind!r}")
        return cls(kind, classifier, float(data["cut"]), dict(data["metadata"]),
                   tuple(float(v) for v in data["smoothing"]), float(data["relative_cut"]))


def read_model(path: Path) -> DensityModel:
    return DensityModel.from_json(read_json(path))


@functools.cache
def default_model() -> DensityModel:
    """The model the service uses, loaded once per process: the file
    BOILERBENCH_DENSITY_MODEL names (shared.modelfile.load_model), else the shipped one."""
    return load_model("density", DEFAULT_MODEL, DensityModel.from_json)
