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
