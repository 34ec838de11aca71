"""fusion: boilerbench's own extractor, a learned block classifier over published measures.

Every text block of the page (one parse and one walk: shared.flatpage) gets the figures
the published algorithms decide by (jusText's stopword and link density, Boilerpipe's
word counts and neighbours, CETD's composite text density, BTE's window, readability's
class/id hints and candidate scores, position) and a few that carry across sites
(nearby headings, how often the page repeats the block's markup; see
services/fusion/features.py), and gradient-boosted trees trained on gold-labelled pages
(services/fusion/training.py, `boilerbench train fusion`) turn them into a probability
of being content. The probabilities are smoothed over neighbouring blocks with the
model's kernel, which training chooses leave-one-dataset-out (one block wide, so no
smoothing, where smoothing does not help), and cut (services/fusion/model.py).
The model is a JSON file evaluated in numpy: no machine-learning library at runtime.
"""

from __future__ import annotations

from importlib.metadata import version

from pydantic import Field

from services.fusion.features import page_features, stoplists
from services.fusion.model import default_model
from shared.contract import Algorithm, Block, Extraction, Options
from shared.flatpage import tree_details
from shared.modelfile import model_info


class FusionOptions(Options):
    cut: float | None = Field(
        None, ge=0, le=1, description="Keep blocks whose probability (after the model's "
        "smoothing) reaches this; default: the cut chosen leave-one-dataset-out at training "
        "time (in the model file).")
    smooth: bool = Field(
        True, description="Smooth the probabilities over neighbouring blocks with the "
        "model's kernel before the cut (off: each block on its own; the same where the "
        "kernel is one block wide).")


def extract(html: str, options: FusionOptions, url: str | None = None) -> Extraction:
    page = page_features(html)
    model = default_model()
    smoothed, keep = model.decide(page.matrix, cut=options.cut,
                                  smoothing=None if options.smooth else (1.0,))
    blocks = [
        Block(text=block.text, is_content=bool(kept), score=round(float(p), 4), path=block.path)
        for block, p, kept in zip(page.blocks, smoothed, keep, strict=True)
    ]
    return Extraction(blocks, details=tree_details(page.tree))


def _warm_up() -> None:
    """Load the model and the stoplists before the first request."""
    default_model()
    stoplists()
    page_features("<html><body><p>warm up</p></body></html>")


ALGORITHM = Algorithm(
    name="fusion",
    version=version("boilerbench"),
    description="boilerbench's own extractor: gradient-boosted trees over each text block's "
    "text, link, stopword, markup, CETD-density, BTE-window, readability-score, position, "
    "neighbour and page-structure features, probabilities smoothed over neighbours where "
    "the model's kernel is wider than one block. Block score: that probability of being "
    "content.",
    reference="boilerbench (services/fusion); features after jusText (Pomikálek 2011), "
    "Boilerpipe (Kohlschütter et al., WSDM 2010), CETD (Sun et al., SIGIR 2011), BTE (Finn "
    "et al. 2001) and readability (Arc90)",
    options_model=FusionOptions,
    extract=extract,
    score="The probability that the block is content (gradient-boosted trees), smoothed over "
    "neighbouring blocks with the model's kernel (where it is wider than one block) unless "
    "option smooth is off.",
    score_range=(0.0, 1.0),
    path_tree="html5",
    warm_up=_warm_up,
    model=model_info("fusion", default_model),
)
