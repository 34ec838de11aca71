"""What the learned services' training commands share: pages, protocol, word F1, files.

density (lines) and fusion (blocks) both learn a per-unit content classifier from
gold-labelled dataset folders (html/<id>.html + content/<id>.txt, paired as the
orchestrator pairs a test set: shared.pairing) and are scored by
the mean per-page bag-of-words F1 of the units they keep. They share one skeleton
(`train_model`): load and label the pages (a unit is content when more than half of
its tokens align with the gold: shared.blockmap.block_support), weigh the units
(`stack`), evaluate every candidate classifier and decision rule leave-one-dataset-out
(train on the other datasets, score the one left out: pages of one dataset share
sites, years and annotation habits, so folds of pages would measure memory of those),
ship the best candidate refitted on every page, and write a model file whose
metadata holds the datasets, the digests of the pages trained on, the leave-one-out
figures and the recorded checks that the reproduction tests replay. What a unit is,
its features, the candidates and the model file's layout stay with each service (a
`Learner`).

Training only: no service imports this at runtime.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
import os
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

import numpy as np
import numpy.typing as npt
from threadpoolctl import threadpool_limits

from shared.blockmap import CONTENT_SHARE, token_support
from shared.decoding import NotHTMLError, decode_gold, decode_html
from shared.gbdt import decide
from shared.modelfile import PAGE_DIGESTS, page_digest, read_json, write_json
from shared.pairing import PairedFolders, pair_folders
from shared.tokens import tokenize

Matrix = npt.NDArray[np.float64]
Mask = npt.NDArray[np.bool_]
# A page's units as a labeller sees them: (features, tokens), one row/entry per unit.
Units = tuple[Matrix, list[list[str]]]
Labeller = Callable[[str], Units]

CHECK_PAGES = 3  # pages per dataset whose word F1 is recorded for the reproduction test


class TrainingDataError(ValueError):
    """Datasets that load but cannot train a model (the command reports it as a usage
    error: the fix is in the data, not the code)."""


def require_usable(dataset: str, pages: int, content_units: int, unit_name: str) -> None:
    """Refuse a dataset left with no page (every one refused as not HTML) or with no unit
    labelled content (gold texts empty or not these pages'): a model trained on it would
    be scored on nothing, or learn that nothing is content."""
    if pages == 0:
        raise TrainingDataError(f"{dataset}: no page to train on (every page is empty, "
                                "binary or without HTML markup)")
    if content_units == 0:
        raise TrainingDataError(f"{dataset}: none of its {unit_name} is labelled content "
                                "(are the gold texts in content/ empty, or of other pages?)")


@dataclass
class TrainingPage:
    """One labelled page: its units' features, labels and tokens, and the gold words."""

    dataset: str
    page_id: str
    features: Matrix
    labels: npt.NDArray[np.float64]
    tokens: list[list[str]]
    gold: Counter[str] = field(repr=False)
    html_digest: str = ""  # shared.modelfile.page_digest of the HTML file, as it was read
    notes: tuple[str, ...] = ()  # read_page's notes on the gold

    @functools.cached_property
    def bag(self) -> WordBag:
        return WordBag.of(self.tokens, self.gold)


class Classifier(Protocol):
    def probabilities(self, features: Matrix) -> Matrix: ...


class Decider(Classifier, Protocol):
    def decide(self, features: Matrix) -> tuple[Matrix, Mask]: ...


class Model(Decider, Protocol):
    """A service's trained model: a classifier with its decision rule, as a file."""

    def to_json(self) -> dict[str, Any]: ...


def pair_dataset(dataset: Path) -> PairedFolders:
    """A dataset folder's files paired into pages as the orchestrator pairs a test set
    (shared.pairing), so that training learns from the pages a run scores. Kept while
    the folders hold the same names: reading a dataset page by page pairs it once."""
    listings = []
    for sub in ("html", "content"):
        if not (dataset / sub).is_dir():
            raise TrainingDataError(f"{dataset.name}: no {sub}/ folder in {dataset}")
        listings.append(tuple(sorted(os.listdir(dataset / sub))))
    return _paired_folders(dataset.absolute(), *listings)


@functools.lru_cache(maxsize=8)
def _paired_folders(dataset: Path, *listings: tuple[str, ...]) -> PairedFolders:
    """pair_folders for pair_dataset, keyed by the folders' listings as well."""
    return pair_folders(dataset.name, dataset / "html", dataset / "content")


def paired_pages(dataset: Path, log: Callable[[str], None] = lambda _: None
                 ) -> PairedFolders:
    """pair_dataset, its warnings logged (a file left out is said, not skipped in
    silence); refused when no page has both its files."""
    folders = pair_dataset(dataset)
    for warning in folders.warnings:
        log(warning)
    if not folders.ids:
        raise TrainingDataError(f"{dataset.name}: no page has both an html/ file and a "
                                "content/ .txt file of the same name")
    return folders


def page_ids(dataset: Path) -> list[str]:
    """The ids of the dataset's HTML pages as the pairing names them, with gold text or
    not (what the train command checks for gold before any work)."""
    return sorted(pair_dataset(dataset).pairing.html)


def read_page(html_file: Path, gold_file: Path) -> tuple[str, str, str, tuple[str, ...]]:
    """Decoded HTML and gold text of one page (gold that is not UTF-8 decoded as pages
    are, as the orchestrator reads it), the digest of its HTML bytes
    (shared.modelfile.page_digest) and notes on its gold for the log, as a run warns of
    them (not UTF-8, empty): each file is read once."""
    data = html_file.read_bytes()
    html = decode_html(data)
    gold, note = decode_gold(gold_file.read_bytes())
    notes: tuple[str, ...] = (f"content/{gold_file.name} is {note}",) if note else ()
    if not gold.strip():
        notes += ("the gold text is empty: trained on as a page without content",)
    return html, gold, page_digest(data), notes


def load_page(dataset: Path, page_id: str) -> tuple[str, str]:
    """Decoded HTML and gold text of one page of a dataset folder, read from the files
    the pairing chose for `page_id`."""
    folders = pair_dataset(dataset)
    if page_id not in folders.pairing.ids:
        raise TrainingDataError(f"{dataset.name}: no page {page_id!r} with both an html/ "
                                "and a content/ file")
    html, gold, *_ = read_page(folders.html_file(page_id), folders.gold_file(page_id))
    return html, gold


def training_digests(digests: Iterable[str]) -> dict[str, list[str]]:
    """The model-file metadata that names the pages trained on by content: the sorted,
    distinct digests of their HTML files' bytes (shared.modelfile.page_digest, taken
    as the pages were read), so that figures on these pages are flagged in-sample under
    any test set's name (orchestrator.insample)."""
    return {PAGE_DIGESTS: sorted(set(digests))}


def _labelled(job: tuple[Labeller, str, str, Path, Path]) -> TrainingPage | str:
    """A labelled page, or its id when the page is not HTML."""
    units, dataset, page_id, html_file, gold_file = job
    try:
        html, gold, digest, notes = read_page(html_file, gold_file)
    except NotHTMLError:
        return page_id
    features, tokens = units(html)
    gold_tokens = tokenize(gold)
    return TrainingPage(dataset, page_id, features, unit_labels(tokens, gold_tokens),
                        tokens, Counter(gold_tokens), digest, notes)


def unit_labels(tokens: Sequence[Sequence[str]], gold_tokens: Sequence[str]
                ) -> npt.NDArray[np.float64]:
    """1.0 for each unit (tokens of a block or line) that label_rule calls content."""
    return np.array([float(s > CONTENT_SHARE) for s in token_support(tokens, gold_tokens)])


def label_rule(unit: str) -> str:
    """How `load_datasets` labels a `unit` ("line", "block"), for a model file's metadata."""
    return (f"a {unit} is content when more than half of its tokens align with the gold "
            "tokens (shared.blockmap.block_support)")


def load_datasets(datasets: Sequence[Path], units: Labeller, unit_name: str,
                  limit: int | None = None, workers: int = 1,
                  log: Callable[[str], None] = lambda _: None
                  ) -> tuple[list[TrainingPage], list[dict[str, Any]]]:
    """Labelled pages of each dataset folder (the first `limit` paired ids, paired_pages)
    and their metadata (`unit_name`: what a row is, "lines" or "blocks"). Pages are
    computed in `workers` processes (`units` must then be a module-level function) but
    kept in id order."""
    paired = {d: paired_pages(d, log) for d in datasets}
    jobs = [(units, d.name, page_id, folders.html_file(page_id), folders.gold_file(page_id))
            for d, folders in paired.items() for page_id in folders.ids[:limit]]
    if workers > 1:
        with ProcessPoolExecutor(workers) as pool:
            results = list(pool.map(_labelled, jobs, chunksize=8))
    else:
        results = [_labelled(job) for job in jobs]
    pages = [r for r in results if isinstance(r, TrainingPage)]
    for page in pages:
        for note in page.notes:
            log(f"{page.dataset}/{page.page_id}: {note}")
    meta = []
    for d in datasets:
        mine = [p for p in pages if p.dataset == d.name]
        refused = [r for (_, name, *_), r in zip(jobs, results, strict=True)
                   if name == d.name and isinstance(r, str)]
        ids = "\n".join(p.page_id for p in mine)
        meta.append({"name": d.name, "pages": len(mine), "refused": refused,
                     unit_name: int(sum(len(p.labels) for p in mine)),
                     f"content_{unit_name}": int(sum(p.labels.sum() for p in mine)),
                     "ids_sha256": hashlib.sha256(ids.encode()).hexdigest()})
    return pages, meta


def overlap_warnings(pages: Iterable[tuple[str, str]]) -> list[str]:
    """A warning for each two datasets that hold the same pages, from (dataset, page
    digest) pairs: leaving one out still trains on its pages in the other, so the
    leave-one-dataset-out figures of both are partly in-sample (a user's set drawn from
    one it is trained beside, say)."""
    holders: dict[str, set[str]] = {}
    for dataset, digest in pages:
        holders.setdefault(digest, set()).add(dataset)
    shared: Counter[tuple[str, str]] = Counter()
    for names in holders.values():
        shared.update(itertools.combinations(sorted(names), 2))
    return [f"{a} and {b} hold {n} of the same pages (the same HTML bytes): their "
            "leave-one-dataset-out figures are partly in-sample"
            for (a, b), n in sorted(shared.items())]


class DigestedPage(Protocol):
    """A labelled page of any service's training: its dataset and its HTML's digest."""

    @property
    def dataset(self) -> str: ...

    @property
    def html_digest(self) -> str: ...


def log_overlaps(pages: Iterable[DigestedPage], log: Callable[[str], None]) -> None:
    """Log overlap_warnings for the training pages, before their leave-one-dataset-out
    figures are computed: every service's training says the same."""
    for warning in overlap_warnings((p.dataset, p.html_digest) for p in pages):
        log(warning)


def word_f1(extracted: Counter[str], gold: Counter[str]) -> float:
    """Bag-of-words F1 (multiset intersection; 0 for an empty extract or no overlap,
    but 1 for an empty extract of an empty gold, as a run scores it: a page labelled
    as holding no content is then a page kept empty, not one lost whatever is kept).
    Counters of tokens rather than orchestrator.scoring, which works on text; a set of
    a page's units is scored through its WordBag, by the same rule (f1_of_counts)."""
    return f1_of_counts(sum((extracted & gold).values()), sum(extracted.values()),
                        sum(gold.values()))


def f1_of_counts(overlap: int, extracted: int, gold: int) -> float:
    """word_f1 from the size of the multiset intersection and of each side."""
    if not extracted and not gold:
        return 1.0
    if overlap == 0:
        return 0.0
    precision, recall = overlap / extracted, overlap / gold
    return 2 * precision * recall / (precision + recall)


@dataclass(frozen=True)
class WordBag:
    """A page's unit tokens as integer codes (one per distinct word) and the gold's
    count of each code: the word F1 of any set of units is then one bincount, where a
    Counter per set would cost a dictionary update per token (rule and member choices
    score every page thousands of times)."""

    codes: npt.NDArray[np.intp]  # the units' tokens, in order
    unit: npt.NDArray[np.intp]  # the unit of each token
    gold: npt.NDArray[np.int64]  # how often the gold holds each code's word
    gold_size: int  # the gold's tokens, those no unit holds included
    units: int

    @classmethod
    def of(cls, tokens: Sequence[Sequence[str]], gold: Counter[str]) -> WordBag:
        index: dict[str, int] = {}
        codes = [index.setdefault(token, len(index)) for unit in tokens for token in unit]
        return cls(np.array(codes, dtype=np.intp),
                   np.repeat(np.arange(len(tokens), dtype=np.intp), [len(u) for u in tokens]),
                   np.array([gold[word] for word in index], dtype=np.int64),
                   sum(gold.values()), len(tokens))

    def f1(self, keep: Mask) -> float:
        """word_f1 of the tokens of the units that `keep` marks (one flag per unit)."""
        flags = np.asarray(keep, dtype=bool)
        if flags.shape != (self.units,):
            raise ValueError(f"{flags.size} flags for {self.units} units")
        kept = self.codes[flags[self.unit]]
        extracted = np.bincount(kept, minlength=self.gold.size)
        return f1_of_counts(int(np.minimum(extracted, self.gold).sum()), kept.size,
                            self.gold_size)


def page_f1(page: TrainingPage, keep: Mask) -> float:
    """Word F1 of the units of `page` that `keep` marks."""
    return page.bag.f1(keep)


def mean_f1_by_dataset(pages: Sequence[TrainingPage], keep: Sequence[Mask]) -> dict[str, float]:
    """Mean word F1 per dataset of the units kept (keep[i] for pages[i])."""
    scores: dict[str, list[float]] = {}
    for page, mask in zip(pages, keep, strict=True):
        scores.setdefault(page.dataset, []).append(page_f1(page, mask))
    return {name: round(float(np.mean(v)), 4) for name, v in sorted(scores.items())}


def overall(scores: dict[str, float]) -> float:
    """Datasets weigh the same."""
    return float(np.mean(list(scores.values())))


def stack(pages: Sequence[TrainingPage], n_features: int
          ) -> tuple[Matrix, npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """Training rows of the units with tokens, their labels and weights: a unit weighs
    its share of its page's tokens and each dataset weighs the same, because the score
    is a per-page mean of word F1 (a unit counts by its words, a dataset as one of the
    means). Units without tokens cannot change a word score and are left out."""
    per_dataset = Counter(page.dataset for page in pages)
    xs, ys, ws = [], [], []
    for page in pages:
        counts = np.array([len(t) for t in page.tokens], dtype=np.float64)
        has = counts > 0
        if not has.any():
            continue
        xs.append(page.features[has])
        ys.append(page.labels[has])
        ws.append(counts[has] / counts.sum() / per_dataset[page.dataset])
    if not xs:
        return np.zeros((0, n_features)), np.zeros(0), np.zeros(0)
    w = np.concatenate(ws)
    return np.vstack(xs), np.concatenate(ys), w * len(w) / w.sum()


def leave_one_dataset_out(pages: Sequence[TrainingPage],
                          fit: Callable[[Sequence[TrainingPage]], Classifier]
                          ) -> list[Matrix]:
    """Each page's unit probabilities from the model `fit` on the pages of every other
    dataset. With a single dataset nothing can be held out: every page gets an empty
    vector."""
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


def pairs_left_out(names: Sequence[str]) -> list[tuple[str, str]]:
    """The pairs of datasets that nested choices leave out together (none below three
    datasets: a pair left out of two leaves nothing to fit on)."""
    return list(itertools.combinations(sorted(names), 2)) if len(names) >= 3 else []


def leave_two_datasets_out(pages: Sequence[TrainingPage],
                           fit: Callable[[Sequence[TrainingPage]], Classifier]
                           ) -> dict[str, list[Matrix]]:
    """For each dataset D, the probabilities of every other page from a model fitted
    without D and without the page's own dataset (D's own pages get empty vectors).

    What a choice made for D's held-out model (its rule, its candidate, the ensemble's
    members) is scored on: models that, like D's, never saw D. Scoring it on the other
    datasets' leave-one-out probabilities instead would score it on models fitted on
    D's labels. One model per pair of datasets serves both of its datasets. Below
    three datasets there is no such model: empty (nested_rule then takes the default)."""
    names = sorted({p.dataset for p in pages})
    inner: dict[str, list[Matrix]] = {}
    for pair in pairs_left_out(names):
        model = fit([p for p in pages if p.dataset not in pair])
        for left_out, scored in (pair, pair[::-1]):
            held = inner.setdefault(left_out, [np.zeros(0)] * len(pages))
            for i, page in enumerate(pages):
                if page.dataset == scored:
                    held[i] = model.probabilities(page.features)
    return inner


@dataclass(frozen=True)
class Rule:
    """How unit probabilities become decisions (shared.gbdt.decide): smooth with
    `smoothing`, keep at `cut` or at `relative_cut` x the page's highest if lower."""

    cut: float
    smoothing: tuple[float, ...]
    relative_cut: float = 0.5

    def keep(self, probabilities: Matrix) -> Mask:
        return decide(probabilities, self.smoothing, self.cut, self.relative_cut)[1]

    def to_json(self) -> dict[str, Any]:
        return {"cut": self.cut, "smoothing": list(self.smoothing),
                "relative_cut": self.relative_cut}


def rules(cuts: Sequence[float], kernels: Sequence[tuple[float, ...]],
          relative_cut: float = 0.5) -> list[Rule]:
    """Every cut with every kernel; on equal scores the earlier rule wins, so list the
    plainer kernel and the cut nearer 0.5 first."""
    by_plainness = sorted(cuts, key=lambda c: (abs(c - 0.5), c))
    return [Rule(cut, kernel, relative_cut) for kernel in kernels for cut in by_plainness]


def rule_scores(pages: Sequence[TrainingPage], probabilities: Sequence[Matrix],
                candidates: Sequence[Rule]) -> list[dict[str, float]]:
    """Mean word F1 per dataset of each rule applied to the pages' probabilities."""
    return [mean_f1_by_dataset(pages, [rule.keep(p) for p in probabilities])
            for rule in candidates]


def best_rule(scores: Sequence[dict[str, float]], candidates: Sequence[Rule],
              datasets: Sequence[str]) -> int:
    """Index of the rule of best mean word F1 over `datasets` (the first on a tie)."""
    means = [float(np.mean([s[d] for d in datasets])) for s in scores]
    return int(np.argmax(np.round(means, 6)))


def lodo_record(scores: dict[str, float]) -> dict[str, Any]:
    """The model-file record of leave-one-dataset-out figures (`scores`: the word F1 of
    every dataset, each scored by a model trained on the others), as
    benchmarks/quality.py reads it from `metadata.leave_one_dataset_out`."""
    names = sorted(scores)
    return {"word_f1": dict(sorted(scores.items())), "mean": round(overall(scores), 4),
            "trained_on": {name: [n for n in names if n != name] for name in sorted(scores)}}


def nested_rule(pages: Sequence[TrainingPage], inner: Mapping[str, Sequence[Matrix]],
                candidates: Sequence[Rule], name: str) -> tuple[int, float | None]:
    """The rule for dataset `name`'s held-out model, chosen without its labels: the best
    mean over the other datasets of their probabilities from models fitted without
    `name` too (leave_two_datasets_out), and that mean. Without such models (fewer
    than three datasets) nothing can be chosen: the first candidate, the plainest, and
    no mean."""
    if name not in inner:
        return 0, None
    others = sorted({p.dataset for p in pages} - {name})
    kept = [i for i, p in enumerate(pages) if p.dataset != name]
    scores = rule_scores([pages[i] for i in kept], [inner[name][i] for i in kept], candidates)
    best = best_rule(scores, candidates, others)
    return best, round(float(np.mean([scores[best][d] for d in others])), 6)


def lodo_evaluation(pages: Sequence[TrainingPage], probabilities: Sequence[Matrix],
                    inner: Mapping[str, Sequence[Matrix]], candidates: Sequence[Rule]
                    ) -> dict[str, Any]:
    """Leave-one-dataset-out figures of held-out `probabilities`: the word F1 of each
    dataset at the rule chosen without its labels (nested_rule, on `inner`), their
    mean, and the rule chosen on every dataset's held-out pages, which a model trained
    on every page ships."""
    names = sorted({p.dataset for p in pages})
    scores = rule_scores(pages, probabilities, candidates)
    per_dataset: dict[str, float] = {}
    chosen: dict[str, dict[str, Any]] = {}
    nested: dict[str, float | None] = {}
    for name in names:
        rule, nested[name] = nested_rule(pages, inner, candidates, name)
        per_dataset[name] = scores[rule][name]
        chosen[name] = candidates[rule].to_json()
    shipped = best_rule(scores, candidates, names)
    return {**lodo_record(per_dataset), "rule": chosen, "nested_mean": nested,
            "shipped_rule": shipped, "word_f1_at_shipped_rule": scores[shipped]}


def evaluate_candidates(pages: Sequence[TrainingPage],
                        candidates: Mapping[str, Callable[[Sequence[TrainingPage]], Classifier]],
                        rules: Sequence[Rule], log: Callable[[str], None] = lambda _: None
                        ) -> dict[str, dict[str, Any]]:
    """Each candidate's lodo_evaluation (none when fewer than two datasets are given)."""
    evaluations: dict[str, dict[str, Any]] = {}
    if len({p.dataset for p in pages}) < 2:
        return evaluations
    for name, fit in candidates.items():
        evaluations[name] = lodo_evaluation(pages, leave_one_dataset_out(pages, fit),
                                            leave_two_datasets_out(pages, fit), rules)
        log(f"{name}: leave-one-dataset-out word F1 {evaluations[name]['word_f1']}, "
            f"mean {evaluations[name]['mean']}")
    return evaluations


def held_out_choice(evaluations: Mapping[str, dict[str, Any]], names: Sequence[str]
                    ) -> dict[str, Any]:
    """The leave-one-dataset-out figures of the training as a whole: for each dataset,
    the candidate whose models fitted without it score best on the other datasets
    (`nested_mean`; the first candidate where there are none, below three datasets)
    and the figure that candidate gives it, at its rule chosen without it too. No
    choice sees the labels of the dataset it is scored on."""
    scores, rule, candidate = {}, {}, {}
    for name in names:
        nested = {c: e["nested_mean"][name] for c, e in evaluations.items()}
        pick = next(iter(evaluations)) if None in nested.values() \
            else max(nested, key=lambda c: nested[c])
        scores[name] = evaluations[pick]["word_f1"][name]
        rule[name] = evaluations[pick]["rule"][name]
        candidate[name] = pick
    return {**lodo_record(scores), "rule": rule, "candidate": candidate}


ServiceModel = TypeVar("ServiceModel", bound=Model)


@dataclass(frozen=True)
class Learner(Generic[ServiceModel]):
    """What a service plugs into the shared skeleton (`train_model`)."""

    service: str  # "density", "fusion": names the command in the metadata
    unit_name: str  # what a row is: "lines", "blocks"
    units: Labeller  # a module-level function, so pages can be labelled in processes
    n_features: int
    candidates: Mapping[str, Callable[[Sequence[TrainingPage]], Classifier]]
    rules: Sequence[Rule]
    # (candidate name, classifier fitted on every page, its rule, metadata) -> model
    build: Callable[[str, Classifier, Rule, dict[str, Any]], ServiceModel]
    load: Callable[[dict[str, Any]], ServiceModel]  # a model from its file's JSON
    check_rows: int = 12
    description: Mapping[str, Any] = field(default_factory=dict)  # features, labels, ...


def train_model(learner: Learner[ServiceModel], datasets: Sequence[Path], out: Path,
                seed: int = 0, limit: int | None = None, workers: int = 1,
                log: Callable[[str], None] = lambda _: None) -> ServiceModel:
    """Label the pages, evaluate each candidate leave-one-dataset-out, refit the best on
    every page with its rule and write the model file to `out` (the file, not the
    in-memory model, is what is returned, so recorded checks match what loads).
    One BLAS thread throughout, so one command gives one file byte for byte."""
    with threadpool_limits(1):
        pages, data_meta = load_datasets(datasets, learner.units, learner.unit_name,
                                         limit, workers, log)
        for meta in data_meta:
            log(f"{meta['name']}: {meta['pages']} pages, {meta[learner.unit_name]} "
                f"{learner.unit_name}")
        for meta in data_meta:
            require_usable(meta["name"], meta["pages"], meta[f"content_{learner.unit_name}"],
                           learner.unit_name)
        log_overlaps(pages, log)
        names = sorted({p.dataset for p in pages})
        evaluations = evaluate_candidates(pages, learner.candidates, learner.rules, log)
        shipped = max(evaluations, key=lambda n: evaluations[n]["mean"]) if evaluations \
            else next(iter(learner.candidates))
        rule = learner.rules[evaluations[shipped]["shipped_rule"]] if evaluations \
            else learner.rules[0]
        classifier = learner.candidates[shipped](pages)
        model = learner.load(json.loads(json.dumps(
            learner.build(shipped, classifier, rule, {}).to_json())))  # as the file loads
        lodo = held_out_choice(evaluations, names) if evaluations else {}
        metadata = {
            "trained_by": f"boilerbench train {learner.service}",
            "seed": seed,
            "trained_on": names,
            "datasets": data_meta,
            **training_digests(p.html_digest for p in pages),
            **learner.description,
            "metric": "mean per-page bag-of-words word F1 (shared.tokens.tokenize)",
            "candidates": evaluations,
            "shipped": shipped,
            "leave_one_dataset_out": lodo,
            "training_f1_in_sample": mean_f1_by_dataset(
                pages, [model.decide(p.features)[1] for p in pages]),
            "libraries": {name: version(name) for name in ("lightgbm", "scikit-learn")},
            "checks": checks(model, pages, learner.check_rows),
        }
        final = learner.build(shipped, classifier, rule, metadata)
        write_json(final.to_json(), out)
        log(f"shipped {shipped} ({rule}) to {out}")
        return learner.load(read_json(out))


def checks(model: Decider, pages: Sequence[TrainingPage], rows: int) -> dict[str, Any]:
    """Recorded outputs for the test that a model file reproduces its training: the word
    F1 of the first pages of each dataset and the probabilities of `rows` feature rows."""
    firsts: dict[str, list[TrainingPage]] = {}
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
