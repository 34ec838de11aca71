"""`boilerbench train ...`: train the services that learn from gold text."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from services.density.model import DEFAULT_MODEL
from services.density.training import train

console = Console(stderr=True)
train_app = typer.Typer(help="Train the learned parts of the services.", no_args_is_help=True)


@train_app.command()
def density(
    dataset: Annotated[list[Path], typer.Option(
        help="A dataset folder (html/ + content/); repeat for several.",
        exists=True, file_okay=False)],
    out: Annotated[Path, typer.Option(help="The model file to write.")] = DEFAULT_MODEL,
    seed: Annotated[int, typer.Option(help="Random seed (training is deterministic).")] = 0,
    limit: Annotated[int | None, typer.Option(
        help="Use only the first N pages (by id) of each dataset.")] = None,
) -> None:
    """Train the density service's `learned` threshold and write its model file."""
    model = train(dataset, out, seed=seed, limit=limit, log=console.print)
    scores = model.metadata["candidates"][model.kind]["cross_validated_f1"]
    console.print(f"{model.kind}: cross-validated word F1 {scores}; wrote {out}")


@train_app.command()
def fusion(
    dataset: Annotated[list[Path], typer.Option(
        help="A dataset folder (html/ + content/); repeat for several.",
        exists=True, file_okay=False)],
    out: Annotated[Path | None, typer.Option(
        help="The model file to write (default: services/fusion/model/fusion-v2.json).")
    ] = None,
    seed: Annotated[int, typer.Option(help="Random seed (training is deterministic).")] = 0,
    limit: Annotated[int | None, typer.Option(
        help="Use only the first N pages (by id) of each dataset.")] = None,
    workers: Annotated[int | None, typer.Option(
        help="Processes that compute the pages' features (default: up to 2).")] = None,
) -> None:
    """Train the fusion service's block classifier: k-fold and cross-dataset evaluation,
    then the model on every page, written to its model file."""
    # Imported here: fusion needs the jusText stoplists, which an image without the
    # fusion extra (the orchestrator's) lacks; the other commands must still load.
    from services.fusion.model import DEFAULT_MODEL
    from services.fusion.training import train as train_fusion

    out = out or DEFAULT_MODEL
    model = train_fusion(dataset, out, seed=seed, limit=limit, workers=workers,
                         log=console.print)
    evaluation = model.metadata["evaluation"]
    console.print(f"k-fold word F1 {evaluation['kfold']['word_f1']}; cross-dataset "
                  f"{ {k: v['word_f1'] for k, v in evaluation['cross_dataset'].items()} }; "
                  f"wrote {out}")


@train_app.command()
def ensemble(
    dataset: Annotated[list[Path], typer.Option(
        help="A dataset folder (html/ + content/); repeat for several (at least two: "
        "every choice is made leave-one-dataset-out).", exists=True, file_okay=False)],
    out: Annotated[Path | None, typer.Option(
        help="The model file to write (default: services/ensemble/model/ensemble-v1.json).")
    ] = None,
    seed: Annotated[int, typer.Option(help="Random seed (training is deterministic).")] = 0,
    workers: Annotated[int, typer.Option(
        help="Processes that compute the members' answers and the pages' features.")] = 2,
    costs_from: Annotated[Path | None, typer.Option(
        help="Choose the members by the CPU costs recorded in this model file instead of "
        "the ones measured now (reproduces that file byte for byte).",
        exists=True, dir_okay=False)] = None,
) -> None:
    """Train the ensemble's combiner leave-one-dataset-out, choose its default members by
    cost, fit it on every page and write its model file. The members' answers are cached
    under .cache/ensemble-members (computed once, reused while unchanged)."""
    from services.ensemble.model import DEFAULT_MODEL
    from services.ensemble.training import train as train_ensemble

    if len(dataset) < 2:
        raise typer.BadParameter("give at least two datasets", param_hint="--dataset")
    out = out or DEFAULT_MODEL
    costs = None
    if costs_from is not None:
        from services.ensemble.model import read_model

        costs = read_model(costs_from).metadata["member_cpu_ms"]
    model = train_ensemble(dataset, out, seed=seed, workers=workers, costs=costs,
                           log=console.print)
    evaluation = model.metadata["evaluation"]
    console.print(f"leave-one-dataset-out word F1 (default members "
                  f"{', '.join(model.default_members)}): {evaluation['default_members']}; "
                  f"wrote {out}")
