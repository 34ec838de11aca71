"""Training the ensemble's combiner, leave-one-dataset-out, and choosing its members.

Pages: every labelled page of the datasets given; a block is content when more than
half of its tokens align with the gold (shared.training, as for fusion). Members'
answers come from services/ensemble/cache.py (computed once, in-process).

Learned members are left out of the combiner's features: fusion's and density's shipped
models were fitted on these datasets, so their answers on a held-out dataset would
carry what they learned from it. fusion's block features (not its model) are in.

Every row is used twice: with every member's answer, and with a random subset of the
members kept (each subset size equally likely, down to none), so the trees learn what
to do when members are missing; the draw comes from the seed.

Every choice is made leave-one-dataset-out: for each dataset, the trees are fitted on
the others and its pages are scored; the smoothing and cut are the pair of best mean
over the held-out datasets, and the members are chosen by cost on those held-out
scores (`frontier`: greedy backward removal of the member whose loss costs least F1
per CPU millisecond saved; the default is the cheapest set within DEFAULT_TOLERANCE of
the full set's mean). The shipped model makes both choices on every dataset and is
fitted on every page; a dataset's reported figure makes them on the other datasets
alone, each scored by trees fitted without it as well (`held_out_figures`,
`inner_models`), so no choice behind it saw its labels.

Training only: no service imports this at runtime.
"""

from __future__ import annotations

import functools
import multiprocessing
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from services.ensemble.cache import member_answers
from services.ensemble.features import (
    Matrix,
    MemberFigures,
    combine,
    member_figures,
    token_counts,
)
from services.ensemble.members import TRAINING_MEMBERS, MemberAnswer
from services.ensemble.model import EnsembleModel, read_model
from services.fusion.features import page_features
from shared.decoding import NotHTMLError
from shared.gbdt import Gbdt
from shared.learners import TreeParams, fit_gbdt
from shared.modelfile import write_json
from shared.tokens import tokenize
from shared.training import (
    CHECK_PAGES,
    Rule,
    TrainingPage,
    best_rule,
    lodo_record,
    log_overlaps,
    overall,
    page_f1,
    paired_pages,
    pairs_left_out,
    read_page,
    require_usable,
    rule_scores,
    rules,
    training_digests,
    unit_labels,
    word_f1,
)

LEARNED_MEMBERS = ("fusion", "density")
CUTS = (0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6, 0.65)
KERNELS: tuple[tuple[float, ...], ...] = ((1.0,), (0.25, 0.5, 0.25), (0.15, 0.7, 0.15))
DEFAULT_TOLERANCE = 0.005
CHECK_ROWS = 16  # feature rows whose probabilities are recorded


@dataclass(frozen=True)
class Hyperparameters:
    """Chosen leave-one-dataset-out (the default members' mean held-out word F1): many
    small, shallow trees carry from three datasets to the fourth at least as well as
    fewer deep ones, and a depth of 6 bounds the numpy evaluator's steps per page."""

    trees: TreeParams = field(default_factory=lambda: TreeParams(
        trees=300, learning_rate=0.05, leaves=15, max_depth=6, min_child_samples=50, l2=1.0,
        feature_fraction=0.8, bagging_fraction=0.5))
    relative_cut: float = 0.5


@dataclass
class EnsemblePage:
    """A labelled page: fusion's block matrix, each member's figures on its blocks,
    the members' CPU time on it."""

    dataset: str
    page_id: str
    fusion: Matrix
    figures: dict[str, MemberFigures | None]
    labels: Matrix
    tokens: list[list[str]]
    gold: Counter[str] = field(repr=False)
    cpu_ms: dict[str, float] = field(default_factory=dict)
    member_f1: dict[str, float] = field(default_factory=dict)
    html_digest: str = ""  # shared.modelfile.page_digest of the HTML file, as it was read
    notes: tuple[str, ...] = ()  # shared.training.read_page's notes on the gold

    def matrix(self, members: Sequence[str], kept: Sequence[str] | None = None) -> Matrix:
        """The combiner's matrix with only `kept` members answering (default: all)."""
        keep = set(members if kept is None else kept)
        return combine(self.fusion, token_counts(self.tokens),
                       [self.figures[m] if m in keep else None for m in members])

    def as_page(self, features: Matrix) -> TrainingPage:
        return TrainingPage(self.dataset, self.page_id, features, self.labels, self.tokens,
                            self.gold, self.html_digest)

    @functools.cached_property
    def scored(self) -> TrainingPage:
        """The page as the rule and member choices score it (its word bag built once)."""
        return self.as_page(self.fusion)


def _build_page(job: tuple[str, str, Path, Path, dict[str, MemberAnswer]]
                ) -> EnsemblePage | None:
    dataset, page_id, html_file, gold_file, answers = job
    try:
        html, gold, digest, notes = read_page(html_file, gold_file)
    except NotHTMLError:
        return None
    page = page_features(html)
    gold_tokens = tokenize(gold)
    gold_counts = Counter(gold_tokens)
    labels = unit_labels(page.tokens, gold_tokens)
    figures = {m: member_figures(page, a) for m, a in answers.items()}
    return EnsemblePage(dataset, page_id, page.matrix, figures, labels, page.tokens,
                        gold_counts, {m: a.cpu_ms for m, a in answers.items()},
                        {m: word_f1(Counter(tokenize(a.text or "")), gold_counts)
                         for m, a in answers.items()}, digest, notes)


def load_pages(datasets: Sequence[Path], members: Sequence[str], workers: int,
               log: Callable[[str], None], limit: int | None = None) -> list[EnsemblePage]:
    """The labelled pages of the datasets (the first `limit` paired ids of each), paired
    as the orchestrator pairs a test set (the pairing's warnings logged, a dataset
    without a paired page refused before any member is asked), with the members'
    answers."""
    paired = {d: paired_pages(d, log) for d in datasets}
    answers = member_answers(datasets, members, workers, log, limit)
    jobs = [(d.name, page_id, folders.html_file(page_id), folders.gold_file(page_id),
             answers[(d.name, page_id)])
            for d, folders in paired.items() for page_id in folders.ids[:limit]
            if (d.name, page_id) in answers]
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(workers, mp_context=context) as pool:
        pages = [p for p in pool.map(_build_page, jobs, chunksize=8) if p is not None]
    for page in pages:
        for note in page.notes:
            log(f"{page.dataset}/{page.page_id}: {note}")
    return pages


def training_rows(pages: Sequence[EnsemblePage], members: Sequence[str], seed: int
                  ) -> list[TrainingPage]:
    """Each page twice: every member answering, then a random subset (module docstring)."""
    rng = np.random.default_rng(seed)
    rows = []
    for page in pages:
        rows.append(page.as_page(page.matrix(members)))
        size = int(rng.integers(0, len(members) + 1))
        kept = [members[i] for i in sorted(rng.choice(len(members), size, replace=False))]
        rows.append(page.as_page(page.matrix(members, kept)))
    return rows


def fit(pages: Sequence[EnsemblePage], members: Sequence[str], hp: Hyperparameters,
        seed: int) -> Gbdt:
    rows = training_rows(pages, members, seed)
    return fit_gbdt(hp.trees, seed, rows[0].features.shape[1] if rows else 0, rows)


def single_service_f1(pages: Sequence[EnsemblePage], services: Sequence[str]
                      ) -> dict[str, dict[str, float]]:
    """Each member's own mean bag-of-words word F1 per dataset (an empty extract for a
    page it failed on), in-process with default options."""
    result: dict[str, dict[str, float]] = {}
    for service in services:
        scores: dict[str, list[float]] = {}
        for page in pages:
            scores.setdefault(page.dataset, []).append(page.member_f1.get(service, 0.0))
        result[service] = {d: round(float(np.mean(v)), 4) for d, v in sorted(scores.items())}
    return result


@dataclass
class Lodo:
    """Leave-one-dataset-out probabilities of every page (each scored by the model fitted
    without its dataset), per member subset answering, and their scores; each computed
    once."""

    models: dict[str, Gbdt]
    pages: Sequence[EnsemblePage]
    members: Sequence[str]
    _computed: dict[tuple[str, ...], list[Matrix]] = field(default_factory=dict)
    _scores: dict[tuple[tuple[str, ...], Rule], dict[str, float]] = field(
        default_factory=dict)
    _rule_figures: dict[float, tuple[list[Rule], list[dict[str, float]]]] = field(
        default_factory=dict)

    def probabilities(self, kept: Sequence[str]) -> list[Matrix]:
        key = tuple(kept)
        if key not in self._computed:
            self._computed[key] = [self.models[p.dataset].probabilities(
                p.matrix(self.members, kept)) for p in self.pages]
        return self._computed[key]

    def scores(self, kept: Sequence[str], rule: Rule) -> dict[str, float]:
        """Each dataset's held-out word F1 with `kept` answering, decided by `rule`:
        computed once (each fold's frontier and the shipped one ask many of the same)."""
        key = (tuple(kept), rule)
        if key not in self._scores:
            self._scores[key] = scores_at(self.pages, self.probabilities(kept), rule)
        return self._scores[key]

    def rule_figures(self, relative_cut: float) -> tuple[list[Rule], list[dict[str, float]]]:
        """Every cut and kernel with each dataset's held-out word F1 under it, every
        member answering: computed once, whichever datasets a rule is then chosen on."""
        if relative_cut not in self._rule_figures:
            candidates = rules(CUTS, KERNELS, relative_cut)
            self._rule_figures[relative_cut] = candidates, rule_scores(
                [p.scored for p in self.pages], self.probabilities(self.members),
                candidates)
        return self._rule_figures[relative_cut]


def lodo_models(pages: Sequence[EnsemblePage], members: Sequence[str], hp: Hyperparameters,
                seed: int, log: Callable[[str], None]) -> Lodo:
    models = {}
    for name in sorted({p.dataset for p in pages}):
        models[name] = fit([p for p in pages if p.dataset != name], members, hp, seed)
        log(f"fitted without {name}")
    return Lodo(models, pages, members)


def scores_at(pages: Sequence[EnsemblePage], probabilities: Sequence[Matrix], rule: Rule
              ) -> dict[str, float]:
    return rule_scores([p.scored for p in pages], probabilities, [rule])[0]


def choose_rule(lodo: Lodo, hp: Hyperparameters, datasets: Sequence[str]) -> Rule:
    """The cut and kernel of best mean held-out F1 over `datasets`, every member
    answering (shared.training.best_rule)."""
    candidates, scores = lodo.rule_figures(hp.relative_cut)
    return candidates[best_rule(scores, candidates, datasets)]


def member_costs(pages: Sequence[EnsemblePage], members: Sequence[str]) -> dict[str, float]:
    """Each member's mean CPU milliseconds per page, as measured while its answers were
    computed (in-process)."""
    return {m: round(float(np.mean([p.cpu_ms.get(m, 0.0) for p in pages])), 3)
            for m in members}


def frontier(lodo: Lodo, cost: dict[str, float], rule: Rule, datasets: Sequence[str],
             log: Callable[[str], None]) -> list[dict[str, Any]]:
    """Greedy backward removal: from every member down to none, each step drops the
    member whose loss costs least held-out F1 (the mean over `datasets`) per CPU
    millisecond saved (`cost`)."""

    def evaluate(kept: Sequence[str]) -> dict[str, Any]:
        scores = {d: f1 for d, f1 in lodo.scores(kept, rule).items() if d in datasets}
        return {"members": list(kept), "word_f1": scores, "mean_f1": round(overall(scores), 4),
                "member_cpu_ms": round(sum(cost[m] for m in kept), 2)}

    kept = list(lodo.members)
    steps = [evaluate(kept)]
    log(f"frontier: {steps[-1]['members']} {steps[-1]['mean_f1']}")
    while kept:
        options = [evaluate([m for m in kept if m != drop]) for drop in kept]
        now = steps[-1]["mean_f1"]
        best = min(zip(kept, options, strict=True),
                   key=lambda pair: ((now - pair[1]["mean_f1"]) / max(cost[pair[0]], 1e-3),
                                     pair[0]))
        kept = best[1]["members"]
        steps.append({**best[1], "dropped": best[0]})
        log(f"frontier: -{best[0]} {steps[-1]['mean_f1']} at {steps[-1]['member_cpu_ms']} ms")
    return steps


def inner_models(pages: Sequence[EnsemblePage], members: Sequence[str], hp: Hyperparameters,
                 seed: int, log: Callable[[str], None]) -> dict[str, Lodo]:
    """For each dataset D, the other datasets' pages each scored by trees fitted without
    D and without the page's own dataset (shared.training.leave_two_datasets_out says
    why): what D's rule and default members are chosen on. Empty below three datasets."""
    names = sorted({p.dataset for p in pages})
    pair_models = {}
    for pair in pairs_left_out(names):
        pair_models[pair] = fit([p for p in pages if p.dataset not in pair], members, hp, seed)
        log(f"fitted without {' and '.join(pair)}")
    return {name: Lodo({other: pair_models[min(name, other), max(name, other)]
                        for other in names if other != name},
                       [p for p in pages if p.dataset != name], members)
            for name in names if pair_models}


def held_out_figures(lodo: Lodo, inner: dict[str, Lodo], cost: dict[str, float],
                     hp: Hyperparameters, log: Callable[[str], None]) -> dict[str, Any]:
    """Each dataset's figures with every choice made without its labels: the rule and
    the default members chosen, as for the shipped model, on the other datasets scored
    by trees fitted without it (`inner`); then its own held-out pages scored with them
    (by default members, by all, by none). Without `inner` (fewer than three datasets)
    nothing is chosen: the plainest rule and every member."""
    names = sorted({p.dataset for p in lodo.pages})
    figures: dict[str, Any] = {key: {} for key in (
        "default_members", "all_members", "no_member", "members", "rule")}
    for name in names:
        others = [n for n in names if n != name]
        if name in inner:
            rule = choose_rule(inner[name], hp, others)
            kept = default_members(frontier(inner[name], cost, rule, others, lambda _: None))
        else:
            rule, kept = rules(CUTS, KERNELS, hp.relative_cut)[0], list(lodo.members)
        log(f"without {name}: cut {rule.cut}, smoothing {rule.smoothing}")
        figures["members"][name] = kept
        figures["rule"][name] = rule.to_json()
        for key, asked in (("default_members", kept), ("all_members", lodo.members),
                           ("no_member", [])):
            figures[key][name] = lodo.scores(asked, rule)[name]
        log(f"{name}: members {kept}, word F1 {figures['default_members'][name]}")
    return figures


def checks(model: EnsembleModel, pages: Sequence[EnsemblePage], kept: Sequence[str]
           ) -> dict[str, Any]:
    """Recorded outputs for the test that the model file and the code reproduce training:
    the word F1 of the first pages of each dataset with the default members answering
    (in-process), and the probabilities of a few of their rows."""
    firsts: dict[str, list[EnsemblePage]] = {}
    for page in pages:
        chosen = firsts.setdefault(page.dataset, [])
        if len(chosen) < CHECK_PAGES:
            chosen.append(page)
    scores = {name: {p.page_id: round(page_f1(p.scored,
                                              model.decide(p.matrix(model.members, kept))[1]), 6)
                     for p in chosen} for name, chosen in firsts.items()}
    matrix = np.vstack([p.matrix(model.members, kept) for c in firsts.values() for p in c])
    matrix = matrix[:: max(1, len(matrix) // CHECK_ROWS)][:CHECK_ROWS]
    return {"page_word_f1": scores, "rows": matrix.tolist(),
            "probabilities": model.probabilities(matrix).tolist()}


def default_members(steps: Sequence[dict[str, Any]]) -> list[str]:
    """The cheapest set on the frontier within DEFAULT_TOLERANCE of the full set's F1."""
    full = steps[0]["mean_f1"]
    good = [s for s in steps if s["mean_f1"] >= full - DEFAULT_TOLERANCE]
    return list(min(good, key=lambda s: (s["member_cpu_ms"], len(s["members"])))["members"])


def train(datasets: Sequence[Path], out: Path, seed: int = 0, hp: Hyperparameters | None = None,
          workers: int = 2, costs: dict[str, float] | None = None,
          log: Callable[[str], None] = lambda _: None, limit: int | None = None
          ) -> EnsembleModel:
    """Evaluate and choose leave-one-dataset-out, fit on every page, write `out`.
    `costs`: the members' CPU ms per page to choose by (default: measured now, while
    their answers were computed; a model file's recorded ones reproduce that file).
    `limit`: only the first pages of each dataset, to try the command quickly."""
    hp = hp or Hyperparameters()
    members = TRAINING_MEMBERS
    pages = load_pages(datasets, (*members, *LEARNED_MEMBERS), workers, log, limit)
    log(f"{len(pages)} pages")
    for dataset in datasets:
        mine = [p for p in pages if p.dataset == dataset.name]
        require_usable(dataset.name, len(mine), int(sum(p.labels.sum() for p in mine)),
                       "blocks")
    log_overlaps(pages, log)
    lodo = lodo_models(pages, members, hp, seed, log)
    names = sorted({p.dataset for p in pages})
    costs = costs or member_costs(pages, members)
    held_out = held_out_figures(lodo, inner_models(pages, members, hp, seed, log), costs,
                                hp, log)
    # The shipped model's choices: the same, made on every dataset.
    rule = choose_rule(lodo, hp, names)
    log(f"rule: cut {rule.cut}, smoothing {rule.smoothing}")
    steps = frontier(lodo, costs, rule, names, log)
    chosen = default_members(steps)
    meta: dict[str, Any] = {
        "trained_by": "boilerbench train ensemble",
        "seed": seed,
        "trained_on": [d.name for d in datasets],
        "leave_one_dataset_out": {
            **lodo_record(held_out["default_members"]),
            "rule": held_out["rule"], "members": held_out["members"]},
        "member_cpu_ms": {m: costs[m] for m in members},
        "members_alone": single_service_f1(pages, (*members, *LEARNED_MEMBERS)),
        "datasets": [{"name": d.name, "pages": sum(p.dataset == d.name for p in pages)}
                     for d in datasets],
        **training_digests(p.html_digest for p in pages),
        "hyperparameters": asdict(hp),
        "learned_members": "left out of the features (their shipped models were fitted on "
                           "these datasets): " + ", ".join(LEARNED_MEMBERS),
        "evaluation": {
            "metric": "mean per-page bag-of-words word F1, leave-one-dataset-out (fitted on "
                      "the other datasets, scored on the one left out; the rule and the "
                      "default members chosen without it too)",
            "default_members": held_out["default_members"],
            "all_members": held_out["all_members"],
            "no_member": held_out["no_member"],
            "frontier_note": "the shipped model's member choice: held-out figures at the "
                             "rule chosen on every dataset",
            "frontier": steps,
        },
    }
    model = EnsembleModel(fit(pages, members, hp, seed), members, tuple(chosen), rule.cut,
                          rule.smoothing, rule.relative_cut, meta)
    model = EnsembleModel.from_json(model.to_json())  # as the file will load it
    meta["training_f1"] = scores_at(
        pages, [model.probabilities(p.matrix(members, chosen)) for p in pages], rule)
    meta["checks"] = checks(model, pages, chosen)
    model = EnsembleModel(model.gbdt, members, tuple(chosen), rule.cut, rule.smoothing,
                          rule.relative_cut, meta)
    write_json(model.to_json(), out)
    log(f"wrote {out}")
    return read_model(out)
