"""The shared trainer: LightGBM's and scikit-learn's own predictions against the numpy
evaluators that the services run, on the features of real pages, and the
leave-one-dataset-out split."""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from orchestrator.scoring import bag_f1
from services.density.training import page_lines
from services.fusion.training import page_blocks
from shared.gbdt import Gbdt
from shared.learners import (
    NetworkParams,
    TreeParams,
    export_booster,
    export_network,
    fit_booster,
    fit_network,
)
from shared.mlp import Mlp
from shared.tokens import tokenize
from shared.training import (
    TrainingPage,
    held_out_choice,
    leave_one_dataset_out,
    leave_two_datasets_out,
    load_datasets,
    page_f1,
    word_f1,
)
from tests.helpers import walk_trees

PAGES_PER_DATASET = 5


@pytest.fixture(scope="module")
def pages(four_datasets: list[Path]) -> list[TrainingPage]:
    return load_datasets(four_datasets, page_blocks, "blocks", PAGES_PER_DATASET)[0]


@pytest.mark.dataset
def test_exported_trees_give_lightgbm_logits_on_real_rows(pages: list[TrainingPage]) -> None:
    x = np.vstack([p.features for p in pages])
    y = np.concatenate([p.labels for p in pages])
    w = np.linspace(0.5, 1.5, len(y))
    params = TreeParams(trees=40, leaves=24, learning_rate=0.2, min_child_samples=5,
                        feature_fraction=0.8, bagging_fraction=0.7, l2=1.0)
    booster = fit_booster(x, y, w, params, seed=7)
    model = Gbdt.from_json(export_booster(booster).to_json())  # as a model file loads it
    assert model.roots.size == 40
    assert (model.feature >= 0).sum() > 40 * 5  # real trees, not stumps
    # Rows on the split points themselves: `<=` goes left, in float64 as LightGBM does.
    on_edges = x[: model.roots.size].copy()
    inner = np.flatnonzero(model.feature >= 0)
    for i, node in enumerate(inner[: len(on_edges)]):
        on_edges[i, model.feature[node]] = model.threshold[node]
    rows = np.vstack([x, on_edges])
    expected = booster.predict(rows, raw_score=True)
    assert np.abs(model.logits(rows) - expected).max() < 1e-9
    assert [walk_trees(model, row) for row in rows[:50]] == pytest.approx(expected[:50], abs=1e-9)
    assert model.logits(rows[:0]).shape == (0,)


@pytest.mark.dataset
def test_exported_network_gives_scikit_learn_probabilities_on_real_rows(
        four_datasets: list[Path]) -> None:
    lines = load_datasets(four_datasets, page_lines, "lines", PAGES_PER_DATASET)[0]
    x = np.vstack([p.features for p in lines])
    y = np.concatenate([p.labels for p in lines])
    params = NetworkParams(hidden=(16, 8), epochs=5, batch=64)
    network, mean, scale = fit_network(x, y, np.linspace(0.5, 1.5, len(y)), params, seed=3)
    model = Mlp.from_json(export_network(network, mean, scale).to_json())
    expected = network.predict_proba((x - mean) / scale)[:, 1]
    assert 0.05 < expected.mean() < 0.95  # it learned something of both classes
    assert np.abs(model.probabilities(x) - expected).max() < 1e-12
    moderate = (expected > 1e-6) & (expected < 1 - 1e-6)
    logits = np.log(expected[moderate] / (1 - expected[moderate]))
    assert np.abs(model.logits(x[moderate]) - logits).max() < 1e-9
    again = export_network(*fit_network(x, y, np.linspace(0.5, 1.5, len(y)), params, seed=3))
    assert again.to_json() == model.to_json()


@pytest.mark.dataset
def test_training_is_deterministic(pages: list[TrainingPage]) -> None:
    x = np.vstack([p.features for p in pages])
    y = np.concatenate([p.labels for p in pages])
    params = TreeParams(trees=10, bagging_fraction=0.5, feature_fraction=0.5)
    first, second, other = (export_booster(fit_booster(x, y, np.ones(len(y)), params, seed))
                            for seed in (1, 1, 2))
    assert first.to_json() == second.to_json()
    assert first.to_json() != other.to_json()


def test_unfinite_rows_are_refused() -> None:
    x = np.array([[0.0], [np.nan], [1.0], [2.0]])
    with pytest.raises(ValueError, match="finite"):
        fit_booster(x, np.array([0.0, 0.0, 1.0, 1.0]), np.ones(4), TreeParams(trees=1), 0)


class Majority:
    """A classifier that gives every unit its training units' content share."""

    def __init__(self, share: float) -> None:
        self.share = share

    def probabilities(self, features: np.ndarray) -> np.ndarray:
        return np.full(len(features), self.share)


def share_of(pages: Sequence[TrainingPage]) -> float:
    return float(np.concatenate([p.labels for p in pages]).mean())


class RecordingFit:
    """Fits a Majority, recording the datasets each fit was given."""

    def __init__(self) -> None:
        self.seen: list[set[str]] = []

    def __call__(self, train: Sequence[TrainingPage]) -> Majority:
        self.seen.append({p.dataset for p in train})
        return Majority(share_of(train))


@pytest.mark.dataset
def test_leave_one_dataset_out_never_sees_the_held_out_dataset(pages: list[TrainingPage]) -> None:
    fit = RecordingFit()
    held = leave_one_dataset_out(pages, fit)
    names = {"scrapinghub", "cleaneval", "chaos", "cleanportaleval"}
    assert fit.seen == [names - {name} for name in sorted(names)]
    for page, probabilities in zip(pages, held, strict=True):
        others = [p for p in pages if p.dataset != page.dataset]
        assert probabilities == pytest.approx(np.full(len(page.labels), share_of(others)))


@pytest.mark.dataset
def test_choices_for_a_held_out_dataset_are_scored_by_models_that_never_saw_it(
        pages: list[TrainingPage]) -> None:
    """For dataset D, each other page is scored by a model fitted without D and without
    the page's own dataset: one model per pair of datasets, six for four."""
    fit = RecordingFit()
    inner = leave_two_datasets_out(pages, fit)
    names = {"scrapinghub", "cleaneval", "chaos", "cleanportaleval"}
    assert len(fit.seen) == 6
    assert all(len(s) == 2 for s in fit.seen)
    assert set(inner) == names
    for left_out, probabilities in inner.items():
        for page, scored in zip(pages, probabilities, strict=True):
            if page.dataset == left_out:
                assert scored.size == 0
                continue
            trained = [p for p in pages if p.dataset not in (left_out, page.dataset)]
            assert scored == pytest.approx(np.full(len(page.labels), share_of(trained)))
    assert leave_two_datasets_out([p for p in pages if p.dataset in ("chaos", "cleaneval")],
                                  fit) == {}


def test_a_held_out_figure_comes_from_the_candidate_chosen_without_its_dataset() -> None:
    """The candidate scored on a dataset is the one whose models fitted without it score
    best on the other datasets (`nested_mean`), never the best on that dataset itself:
    "deep" wins on the leave-one-out figures only through scrapinghub, and without
    scrapinghub "shallow" does better, so scrapinghub is scored by "shallow"."""
    def evaluation(scores: dict[str, float], nested: dict[str, float | None]
                   ) -> dict[str, object]:
        return {"word_f1": scores, "nested_mean": nested,
                "rule": {name: {"cut": 0.5} for name in scores}}

    evaluations = {
        "shallow": evaluation({"chaos": 0.90, "cleaneval": 0.90, "scrapinghub": 0.70},
                              {"chaos": 0.80, "cleaneval": 0.80, "scrapinghub": 0.90}),
        "deep": evaluation({"chaos": 0.89, "cleaneval": 0.89, "scrapinghub": 0.99},
                           {"chaos": 0.94, "cleaneval": 0.94, "scrapinghub": 0.88}),
    }
    chosen = held_out_choice(evaluations, ["chaos", "cleaneval", "scrapinghub"])
    assert chosen["candidate"] == {"chaos": "deep", "cleaneval": "deep",
                                   "scrapinghub": "shallow"}
    assert chosen["word_f1"] == {"chaos": 0.89, "cleaneval": 0.89, "scrapinghub": 0.70}
    assert chosen["mean"] == pytest.approx(np.mean([0.89, 0.89, 0.70]), abs=1e-4)
    assert chosen["trained_on"]["scrapinghub"] == ["chaos", "cleaneval"]
    # Two datasets leave nothing to choose on: the first candidate, for both.
    two = {name: evaluation({"chaos": f, "cleaneval": f}, {"chaos": None, "cleaneval": None})
           for name, f in (("shallow", 0.7), ("deep", 0.9))}
    assert held_out_choice(two, ["chaos", "cleaneval"])["candidate"] == {
        "chaos": "shallow", "cleaneval": "shallow"}


def test_training_word_f1_is_the_runs_bag_of_words_f1() -> None:
    """Training chooses by the figure a run reports, also on a page whose gold is empty
    (a page labelled as holding no content): there an empty extract scores 1."""
    texts = ["", "Some words here", "words here and more", "other text"]
    for extracted in texts:
        for gold in texts:
            assert word_f1(Counter(tokenize(extracted)), Counter(tokenize(gold))) == \
                pytest.approx(bag_f1(extracted, gold)), (extracted, gold)


@pytest.mark.dataset
def test_a_pages_coded_word_bag_scores_any_units_as_counters_do(pages: list[TrainingPage]
                                                                ) -> None:
    """page_f1 counts integer codes (shared.training.WordBag); its figure must be the
    Counters' float for float, or a rule or member chosen by it could differ."""
    rng = np.random.default_rng(0)
    for page in pages:
        n = len(page.tokens)
        masks = [np.zeros(n, dtype=bool), np.ones(n, dtype=bool),
                 *(rng.random(n) < share for share in (0.1, 0.5, 0.9))]
        for keep in masks:
            extracted: Counter[str] = Counter()
            for tokens, kept in zip(page.tokens, keep, strict=True):
                if kept:
                    extracted.update(tokens)
            assert page_f1(page, keep) == word_f1(extracted, page.gold), page.page_id
    with pytest.raises(ValueError, match="flags for"):
        page_f1(pages[0], np.ones(len(pages[0].tokens) + 1, dtype=bool))


def test_a_word_bag_scores_empty_units_and_an_empty_gold_as_counters_do() -> None:
    tokens = [["a", "b"], ["b"], []]  # the last unit holds no token
    for gold in (Counter(), Counter(["b", "c"])):
        page = TrainingPage("set", "page", np.zeros((3, 1)), np.zeros(3), tokens, gold)
        for keep in itertools.product([False, True], repeat=3):
            extracted = Counter(t for unit, kept in zip(tokens, keep, strict=True)
                                for t in unit if kept)
            assert page_f1(page, np.array(keep)) == word_f1(extracted, gold), (gold, keep)
