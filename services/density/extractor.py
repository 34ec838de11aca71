"""Line text density (Champandard 2007) with four thresholds: fixed, mean, Gaussian, learned.

The page is rendered to lines as a text-mode browser would (services/density/lines.py);
a line's density is its text length over the HTML characters it took. Content
lines are those whose density reaches the threshold; the `learned` mode instead
asks a classifier trained on gold text (`boilerbench train density`) about the
line and its two neighbours. Lines are the blocks; their score is the density,
or the classifier's smoothed probability in the `learned` mode.

`learned` is the default because it scores best, also on datasets it was not trained
on: its leave-one-dataset-out figures are in the model file's metadata, every mode's
in benchmarks/results/quality.md. The Gaussian threshold is C. Wenenr's optimal
threshold between two normal classes, from the comments on Champandard's article.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from services.density.lines import render_lines
from services.density.model import default_model, line_counts, line_features
from services.density.thresholds import gaussian_threshold, mean_threshold
from shared.contract import Algorithm, Block, Extraction, Options
from shared.modelfile import model_info

VERSION = "1.0.0"
Threshold = Literal["fixed", "mean", "gaussian", "learned"]


class DensityOptions(Options):
    threshold: Threshold = Field(
        "learned",
        description="fixed: density >= value; mean: the page's mean density; gaussian: the "
        "optimal threshold between two normal classes (Wenenr) fitted on the page; learned: "
        "the trained classifier on the line and its neighbours (the best-scoring mode, default).",
    )
    value: float = Field(0.5, ge=0.0, le=1.0, description="The density threshold of `fixed`.")

    def uses_model(self) -> bool:
        """Only `learned` reads the trained classifier; the other thresholds come from
        the page alone."""
        return self.threshold == "learned"


def extract(html: str, options: DensityOptions, url: str | None = None) -> Extraction:
    lines = render_lines(html)
    if options.threshold == "learned":
        scores, keep = default_model().decide(line_features(lines))
    else:
        text_length, html_bytes = line_counts(lines)
        density = text_length / html_bytes
        if options.threshold == "fixed":
            threshold = options.value
        elif options.threshold == "mean":
            threshold = mean_threshold(density)
        else:
            threshold = gaussian_threshold(density)
        scores = density
        keep = density >= threshold
    blocks = [Block(text=line.text, is_content=k, score=round(s, 4))
              for line, k, s in zip(lines, keep.tolist(), scores.tolist(), strict=True)]
    return Extraction(blocks)


def _warm_up() -> None:
    """Load the model file before the worker is marked ready."""
    default_model()


ALGORITHM = Algorithm(
    name="density",
    version=VERSION,
    description="Line text density: the page rendered to lines, each line's text length over "
    "the HTML it took; content lines pass a fixed, mean, Gaussian-optimal or learned "
    "threshold.",
    reference="Champandard, A. J. The Easy Way to Extract Useful Text from Arbitrary HTML "
    "(ai-depot.com, 2007), with C. Wenenr's Gaussian optimal threshold from its comments",
    options_model=DensityOptions,
    extract=extract,
    score="threshold learned (the default): the classifier's probability that the line is "
    "content, smoothed over the line and its neighbours; fixed, mean, gaussian: the line's "
    "text density, its text length over the HTML bytes it took.",
    score_range=(0.0, 1.0),
    path_tree=None,
    warm_up=_warm_up,
    model=model_info("density", default_model),
)
