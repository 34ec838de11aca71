"""The orchestrator's records: confusion counts, a page's scores and result, a run.

Shared by the runner (which writes PageResults as pages arrive), the store, the
statistics and the reports, so each figure is computed in one place (Counts).

Figures whose denominator is zero are defined, not NaN, so that an empty extract
or an empty gold text still scores and means stay finite:

- precision with nothing extracted (TP + FP = 0): 1.0 when the gold is empty too
  (nothing to find, nothing claimed), else 0.0;
- recall with an empty gold (TP + FN = 0): 1.0 when nothing was extracted, else 0.0;
- F1: 0.0 when precision + recall is 0 (so an empty extract of a non-empty gold
  scores 0, and an empty extract of an empty gold scores 1);
- fallout with FP + TN = 0: 0.0 (no boilerplate on the page, none kept). TN is
  never below 0 (orchestrator.scoring), so an extract holding more non-gold words
  than the page has boilerplate (repeated or attribute text) has fallout 1.0;
- accuracy with no objects at all: 1.0 (nothing was misclassified).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from orchestrator.field_metrics import ShingleCounts

METRICS: tuple[str, ...] = ("precision", "recall", "f1", "fallout", "accuracy")
"""The per-page figures of B.4.5 plus accuracy, in report order."""

RANK_KEYS: dict[str, str] = {
    "f1": "word F1",  # by alignment, per-page mean (the headline figure)
    "micro_f1": "micro F1",  # word F1 by alignment from counts summed over pages
    "bag_f1": "bag F1",  # word F1 by bag of words, per-page mean
    "block_f1": "block F1",  # per-page mean
    "shingle_f1": "shingle F1",  # the article-extraction benchmark's (4-token shingles)
    "rouge_lsum": "ROUGE-LSum",  # F1, per-page mean
}
"""The figures a results table may rank by (orchestrator/statistics.py ranks), each with
the name of its column, for the tables to say what `#` ranks by (a rank beside a word F1
that does not fall with it reads as a mistake otherwise)."""


class Counts(BaseModel):
    """Confusion counts for one page, or summed over pages for micro figures."""

    model_config = ConfigDict(frozen=True)

    tp: int = Field(0, ge=0)
    fp: int = Field(0, ge=0)
    fn: int = Field(0, ge=0)
    tn: int = Field(0, ge=0)

    def __add__(self, other: Counts) -> Counts:
        return Counts(tp=self.tp + other.tp, fp=self.fp + other.fp,
                      fn=self.fn + other.fn, tn=self.tn + other.tn)

    @property
    def total(self) -> int:
        return self.tp + self.fp + self.fn + self.tn

    @property
    def precision(self) -> float:
        """TP / (TP + FP) (B.2); see the module docstring for 0/0."""
        claimed = self.tp + self.fp
        if claimed == 0:
            return 1.0 if self.fn == 0 else 0.0
        return self.tp / claimed

    @property
    def recall(self) -> float:
        """TP / (TP + FN) (B.1); see the module docstring for 0/0."""
        actual = self.tp + self.fn
        if actual == 0:
            return 1.0 if self.fp == 0 else 0.0
        return self.tp / actual

    @property
    def f1(self) -> float:
        """Harmonic mean of precision and recall (B.3); 0.0 when both are 0."""
        p, r = self.precision, self.recall
        return 0.0 if p + r == 0 else 2 * p * r / (p + r)

    @property
    def fallout(self) -> float:
        """FP / (FP + TN) (B.4); 0.0 when both are 0 (see the module docstring)."""
        negatives = self.fp + self.tn
        return 0.0 if negatives == 0 else self.fp / negatives

    @property
    def accuracy(self) -> float:
        """(TP + TN) / all: the share of correct outcomes; 1.0 with no objects."""
        total = self.total
        return 1.0 if total == 0 else (self.tp + self.tn) / total

    def metric(self, name: str) -> float:
        """One of METRICS by name (for tables and statistics)."""
        if name not in METRICS:
            raise KeyError(f"unknown metric {name!r}; known: {', '.join(METRICS)}")
        value: float = getattr(self, name)
        return value

    def figures(self) -> dict[str, float]:
        return {name: self.metric(name) for name in METRICS}


class PageScores(BaseModel):
    """A page's scores for one service at the three levels of B.4.4."""

    word: Counts
    """Word level by token alignment (LCS): the headline figure."""
    word_bag: Counts
    """Word level by bag of words (multiset intersection)."""
    block: Counts | None = None
    """Block level; None when the service returned no blocks with words."""
    shingle: ShingleCounts | None = None
    """The article-extraction benchmark's 4-token shingle counts (field_metrics)."""
    rouge_lsum: float | None = None
    """ROUGE-LSum F1 (field_metrics)."""


PageStatus = Literal["ok", "error", "skipped"]


class PageResult(BaseModel):
    """One page run through one service: what came back and how it scored.

    Errors are scored as empty output (they count against the service); skipped
    pages (not attempted, for example a service without an RSS feed to match)
    carry no scores and are left out of the figures, but counted.
    """

    run_id: str
    dataset: str
    page_id: str
    service: str
    status: PageStatus
    error: str | None = None
    elapsed_ms: float | None = None  # the service's own elapsed_ms (extraction time)
    text: str = ""
    scores: PageScores | None = None


RunStatus = Literal["pending", "running", "finished", "failed", "cancelled", "interrupted"]
"""`interrupted` is never stored: the store reports a `pending` or `running` run so
when the process that held it has ended (Store.run)."""


class RunInfo(BaseModel):
    """A run: what it evaluates and where it stands."""

    id: str
    created: datetime = Field(default_factory=lambda: datetime.now(UTC))
    datasets: list[str] = Field(default_factory=list)
    services: list[str] = Field(default_factory=list)
    options: dict[str, Any] = Field(default_factory=dict)
    """Per-service options and run settings, as given."""
    status: RunStatus = "pending"
    counts: dict[str, int] = Field(default_factory=dict)
    """Progress: e.g. total, ok, error, skipped page results."""
    owner: str | None = None
    """`host:pid:start` (`host:pid` in older stores) of the process that recorded the
    run or last set it pending or running: the one that has it queued or executes it."""
