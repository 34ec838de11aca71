"""What the learned services' training commands share: labelled pages, folds, word F1.

density (lines) and fusion (blocks) both learn a per-unit content classifier from
gold-labelled dataset folders (html/<id>.html + content/<id>.txt) and are scored by
the mean per-page bag-of-words F1 of the units they keep. So they share how a page
is loaded and labelled (a unit is content when more than half of its tokens align
with the gold: shared.blockmap.block_support), the folds (a hash of dataset/page id,
so a page's fold never depends on which other pages are present), the per-dataset
scores, the dataset metadata and the recorded checks that the reproduction tests
replay. What they learn and how they weight units stays in each service's training.

Training only: no service imports this at runtime.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from shared.blockmap import CONTENT_SHARE, block_support
from shared.decoding import NotHTMLError, decode_html
from shared.tokens import tokenize

Matrix = npt.NDArray[np.float64]
Mask = npt.NDArray[np.bool_]
# A page's units as a labeller sees them: (features, texts, tokens), one row/entry per unit.
Units = tuple[Matrix, Sequence[str], list[list[str]]]
Labeller = Callable[[str], Units]

CHECK_PAGES = 3  # pages per dataset whose word F1 is recorded for the reproduction test


@dataclass
class Page:
    """One labelled page: its units' features, labels and tokens, and the gold words."""

    dataset: str
    page_id: str
    features: Matrix
    labels: npt.NDArray[np.float64]
    tokens: list[list[str]]
    gold: Counter[str] = field(repr=False)


class Classifier(Protocol):
    def probabilities(self, features: Matrix) -> Matrix: ...


class Decider(Classifier, Protocol):
    def decide(self, features: Matrix) -> tuple[Matrix, Mask]: ...


def page_ids(dataset: Path) -> list[str]:
    return sorted(p.stem for p in (dataset / "html").glob("*.html"))


def load_page(dataset: Path, page_id: str) -> tuple[str, str]:
    """Decoded HTML and gold text of one page."""
    html = decode_html((dataset / "html" / f"{page_id}.html").read_bytes())
    gold = (dataset / "content" / f"{page_id}.txt").read_text(encoding="utf-8")
    return html, gold


def _labelled(job: tuple[Labeller, Path, str]) -> Page | str:
    """A labelled page, or its id when the page is not HTML."""
    units, dataset, page_id = job
    try:
        html, gold = load_page(dataset, page_id)
    except NotHTMLError:
        return page_id
    features, texts, tokens = units(html)
    gold_tokens = tokenize(gold)
    labels = np.array([float(s > CONTENT_SHARE) for s in block_support(texts, gold_tokens)])
    return Page(dataset.name, page_id, features, labels, tokens, Counter(gold_tokens))


def load_datasets(datasets: Sequence[Path], units: Labeller, unit_name: str,
                  limit: int | None = None, workers: int = 1
                  ) -> tuple[list[Page], list[dict[str, Any]]]:
    """Labelled pages of each dataset folder (the first `limit` ids) and their metadata
    (`unit_name`: what a row is, "lines" or "blocks"). Pages are computed in `workers`
    processes (`units` must then be a module-level function) but kept in id order."""
    jobs = [(units, d, page_id) for d in datasets for page_id in page_ids(d)[:limit]]
    if workers > 1:
        with ProcessPoolExecutor(workers) as pool:
            results = list(pool.map(_labelled, jobs, chunksize=8))
    else:
        results = [_labelled(job) for job in jobs]
    pages = [r for r in results if isinstance(r, Page)]
    meta = []
    for d in datasets:
        mine = [p for p in pages if p.dataset == d.name]
        refused = [r for (_, dd, _), r in zip(jobs, results, strict=True)
                   if dd == d and isinstance(r, str)]
        ids = "\n".join(p.page_id for p in mine)
        meta.append({"name": d.name, "pages": len(mine), "refused": refused,
                     unit_name: int(sum(len(p.labels) for p in mine)),
                     f"content_{unit_name}": int(sum(p.labels.sum() for p in mine)),
                     "ids_sha256": hashlib.sha256(ids.encode()).hexdigest()})
    return pages, meta


def word_f1(extracted: Counter[str], gold: Counter[str]) -> float:
    """Bag-of-words F1 (multiset intersection; 0 for an empty extract or no overlap).
    Counters rather than orchestrator.scoring, which works on text: training scores
    thousands of unit subsets of already-tokenized pages."""
    tp = sum((extracted & gold).values())
    if tp == 0:
        return 0.0
    precision, recall = tp / sum(extracted.values()), tp / sum(gold.values())
    return 2 * precision * recall / (precision + recall)


def page_f1(page: Page, keep: Mask) -> float:
    """Word F1 of the units of `page` that `keep` marks."""
    extracted: Counter[str] = Counter()
    for tokens, kept in zip(page.tokens, keep, strict=True):
        if kept:
            extracted.update(tokens)
    return word_f1(extracted, page.gold)


def mean_f1_by_dataset(pages: Sequence[Page], keep: Sequence[Mask]) -> dict[str, float]:
    """Mean word F1 per dataset of the units kept (keep[i] for pages[i])."""
    scores: dict[str, list[float]] = {}
    for page, mask in zip(pages, keep, strict=True):
        scores.setdefault(page.dataset, []).append(page_f1(page, mask))
    return {name: round(float(np.mean(v)), 4) for name, v in sorted(scores.items())}


def overall(scores: dict[str, float]) -> float:
    """Datasets weigh the same."""
    return float(np.mean(list(scores.values())))


def fold_of(page: Page, folds: int) -> int:
    digest = hashlib.sha256(f"{page.dataset}/{page.page_id}".encode()).hexdigest()
    return int(digest, 16) % folds


def out_of_fold(pages: Sequence[Page], folds: int,
                fit: Callable[[Sequence[Page]], Classifier]) -> list[Matrix]:
    """Each page's unit probabilities from the model `fit` on the other folds."""
    probabilities: list[Matrix] = [np.zeros(0)] * len(pages)
    for k in range(folds):
        train = [p for p in pages if fold_of(p, folds) != k]
        held = [i for i, p in enumerate(pages) if fold_of(p, folds) == k]
        if not train or not held:
            continue
        model = fit(train)
        for i in held:
            probabilities[i] = model.probabilities(pages[i].features)
    return probabilities


DATASETS = ("scrapinghub", "cleaneval", "chaos", "cleanportaleval")


def leave_one_dataset_out(pages: Sequence[Page], fit: Callable[[Sequence[Page]], Classifier]
                          ) -> list[Matrix]:
    """Each page's unit probabilities from the model `fit` on the pages of every other
    dataset: the honest figure of a learned method, since pages of one dataset share
    sites, years and annotation habits that folds of pages would let it memorise.
    With a single dataset nothing is held out and every page gets an empty vector."""
    probabilities: list[Matrix] = [np.zeros(0)] * len(pages)
    names = sorted({p.dataset for p in pages})
    if len(names) < 2:
        return probabilities
    for name in names:
        model = fit([p for p in pages if p.dataset != name])
        for i, page in enumerate(pages):
            if page.dataset == name:
                probabilities[i] = model.probabilities(page.features)
    return probabilities


def lodo_record(scores: dict[str, float], pages: Sequence[Page]) -> dict[str, Any]:
    """The model-file record of leave-one-dataset-out figures (`scores`: word F1 of each
    dataset scored by the model trained on the others), read by benchmarks/quality.py."""
    names = sorted({p.dataset for p in pages})
    return {"metric": "mean per-page bag-of-words word F1",
            "word_f1": dict(sorted(scores.items())), "mean": round(overall(scores), 4),
            "trained_on": {name: [n for n in names if n != name] for name in sorted(scores)}}


def checks(model: Decider, pages: Sequence[Page], rows: int) -> dict[str, Any]:
    """Recorded outputs for the test that a model file reproduces its training: the word
    F1 of the first pages of each dataset and the probabilities of `rows` feature rows."""
    firsts: dict[str, list[Page]] = {}
    for page in pages:
        chosen = firsts.setdefault(page.dataset, [])
        if len(chosen) < CHECK_PAGES:
            chosen.append(page)
    page_scores = {name: {p.page_id: round(page_f1(p, model.decide(p.features)[1]), 6)
                          for p in chosen} for name, chosen in firsts.items()}
    matrix = np.vstack([p.features for p in pages])
    matrix = matrix[:: max(1, len(matrix) // rows)][:rows]
    return {"page_word_f1": page_scores, "rows": matrix.tolist(),
            "probabilities": model.probabilities(matrix).tolist()}
