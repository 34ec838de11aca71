"""The ensemble's combiner under two protocols: held out by dataset, and by page.

    python benchmarks/ensemble_protocols.py [--seed 0] [--folds 5] [--out benchmarks/results]

Leave-one-dataset-out is how every learned model here is chosen and reported: the
pages of a held-out dataset are scored by trees fitted on the other datasets, so the
figure says what a user gets on pages nobody tuned for. Folds by page draw the test
pages from every dataset at once, so the trees have seen each dataset's annotation
habits (and its sites) while training. The gap between the two is what the held-out
datasets' own habits are worth; it is a diagnostic, never a way to choose a model.

Both fit the shipped training code (services/ensemble/training.py: the same rows,
tree shape and seed) and score with the shipped model's members and rule, so only the
split differs. Beside them: every member service's own figure (in-process, default
options). Member answers come from the training cache (services/ensemble/cache.py),
computed on the first run. Writes ensemble_protocols.md and .json.
"""

from __future__ import annotations

import argparse
import datetime
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from common import command_line, machine, positive_int, require_dataset, write_results

from services.ensemble.model import DEFAULT_MODEL, read_model
from services.ensemble.training import (
    EnsemblePage,
    Hyperparameters,
    fit,
    load_pages,
    lodo_models,
    scores_at,
    single_service_f1,
)
from shared.datasets import DATASETS
from shared.learners import Matrix
from shared.training import Rule, overall

RESULTS = Path(__file__).resolve().parent / "results"


def page_fold_probabilities(pages: Sequence[EnsemblePage], members: Sequence[str],
                            kept: Sequence[str], folds: int, seed: int) -> list[Matrix]:
    """Each page's probabilities from trees fitted on the pages of the other folds
    (folds drawn at random over every dataset at once)."""
    fold = np.random.default_rng(seed).integers(0, folds, len(pages))
    probabilities: list[Matrix] = [np.zeros(0)] * len(pages)
    for k in range(folds):
        model = fit([p for p, f in zip(pages, fold, strict=True) if f != k], members,
                    Hyperparameters(), seed)
        for i, page in enumerate(pages):
            if fold[i] == k:
                probabilities[i] = model.probabilities(page.matrix(members, kept))
    return probabilities


def markdown(rows: list[tuple[str, dict[str, float]]], kept: Sequence[str], rule: Rule,
             seed: int, host: dict[str, Any]) -> str:
    datasets = sorted(rows[0][1])
    lines = [
        "# Ensemble: held out by dataset and by page",
        "",
        f"`{command_line(__file__, None)}`, {datetime.date.today().isoformat()}, "
        f"{host['nproc']} cores ({host['cpu']}), Python {host['python']}. Bag-of-words "
        "word F1, mean per page; the mean column is the mean of the datasets. The combiner "
        f"rows fit the shipped training code with seed {seed} and ask {', '.join(kept)} "
        "with the shipped rule "
        f"(cut {rule.cut}, smoothing {list(rule.smoothing)}), both chosen on all four "
        "datasets, so that only the split differs (the model file's held-out figures choose "
        "them without the dataset scored, and are lower); the member rows are each "
        "service's own output. By page is a diagnostic: its training folds hold every "
        "dataset's annotation habits and sites.",
        "",
        "| row | " + " | ".join(datasets) + " | mean |",
        "|---|" + "---:|" * (len(datasets) + 1),
    ]
    for name, scores in rows:
        lines.append(f"| {name} | " + " | ".join(f"{scores[d]:.4f}" for d in datasets)
                     + f" | {overall(scores):.4f} |")
    return "\n".join(lines) + "\n"


def at_least_two(text: str) -> int:
    """An argparse type for --folds: with one fold no page has trees fitted without it."""
    value = positive_int(text)
    if value < 2:
        raise argparse.ArgumentTypeError(f"{value} is less than 2")
    return value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--folds", type=at_least_two, default=5)
    parser.add_argument("--workers", type=positive_int, default=2)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    # In the order of the training command (README): the seed's draws follow the pages'
    # order, so this order gives the shipped model's held-out figures.
    datasets = [require_dataset(name) for name in sorted(DATASETS)]
    model = read_model(DEFAULT_MODEL)
    members, kept = model.members, model.default_members
    rule = Rule(model.cut, model.smoothing, model.relative_cut)
    pages = load_pages(datasets, members, args.workers, print)
    print(f"{len(pages)} pages")
    lodo = lodo_models(pages, members, Hyperparameters(), args.seed, print)
    rows = [("combiner, leave one dataset out", scores_at(pages, lodo.probabilities(kept),
                                                          rule))]
    print("held out by dataset:", rows[0][1])
    rows.append((f"combiner, {args.folds} folds by page", scores_at(
        pages, page_fold_probabilities(pages, members, kept, args.folds, args.seed), rule)))
    print("held out by page:", rows[1][1])
    singles = single_service_f1(pages, members)
    rows += sorted(((f"member: {m}", s) for m, s in singles.items()),
                   key=lambda row: -overall(row[1]))
    host = machine()
    write_results(args.out, "ensemble_protocols", markdown(rows, kept, rule, args.seed, host),
                  {"machine": host, "seed": args.seed, "folds": args.folds,
                   "members": list(kept), "rule": rule.to_json(), "rows": dict(rows)})


if __name__ == "__main__":
    main()
