"""`boilerbench train ...`: train the services that learn from gold text.

Both commands evaluate their candidates leave-one-dataset-out over the datasets given
(train on all but one, score the one left out) and write the best, refitted on every
page, to the model file; the same command on the same datasets writes the same file
byte for byte. Training needs the `train` extra (LightGBM, scikit-learn).

"Byte for byte" holds on any x86-64 machine because a training command runs in a fixed
numeric environment (NUMERIC_PINS): numpy picks its loops by the CPU at import time, and
on a machine with AVX-512 its log1p and tanh differ from those of one without in the
last bit; OpenBLAS picks its matrix kernels by the CPU too, which changes the order of
the network's sums. Pinned, numpy takes its baseline loops (the C library's log1p, exp
and tanh) and OpenBLAS one kernel on every machine. Both are read once, when the
libraries load, so a command started without them runs itself again with them.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from orchestrator.terminal import escape

console = Console(stderr=True)
app = typer.Typer(help="Train the learned parts of the services.", no_args_is_help=True)

DatasetOption = Annotated[list[Path], typer.Option(
    help="A dataset folder (html/ + content/); repeat for several (leave-one-dataset-out "
         "needs two or more; the shipped models use all four development datasets).",
    exists=True, file_okay=False)]
# scikit-learn's network takes seeds of 0 to 2**32 - 1 only; refused up front rather
# than after the pages are labelled.
SeedOption = Annotated[int, typer.Option(
    min=0, max=2**32 - 1, help="Random seed (training is deterministic).")]
LimitOption = Annotated[int | None, typer.Option(
    min=1, help="Use only the first N pages (by id) of each dataset.")]
WorkersOption = Annotated[int | None, typer.Option(
    min=1, help="Processes that compute the pages' features (default: up to 2).")]


# numpy 2.4's dispatch targets above its baseline (x86-64-v2), and OpenBLAS's kernel for
# that baseline (SSE4.2): what every x86-64-v2 machine runs alike.
NUMERIC_PINS = {"NPY_DISABLE_CPU_FEATURES": "X86_V3 X86_V4 AVX512_ICL AVX512_SPR",
                "OPENBLAS_CORETYPE": "Nehalem"}


def _pin_numerics() -> None:
    """Run this `boilerbench train` process again in the pinned environment (module
    docstring) unless it runs in it already. Only the process whose own command line is
    this command is run again; one that calls the command from inside (a test's
    CliRunner) trains as it is."""
    if all(os.environ.get(k) == v for k, v in NUMERIC_PINS.items()):
        return
    if sys.argv[1:2] != ["train"]:
        return
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, "-m", "orchestrator.cli", *sys.argv[1:]],
              {**os.environ, **NUMERIC_PINS})


@app.callback()
def _train() -> None:
    """Train the learned parts of the services (in the pinned numeric environment)."""
    _pin_numerics()


def _check_datasets(datasets: list[Path]) -> None:
    """Refuse, before any work, what training cannot use: fewer than two datasets (no
    dataset to leave out), one named twice, a folder without html/ or content/, or a
    page without its gold text."""
    from shared.training import TrainingDataError, pair_dataset  # as training pairs

    if len(datasets) < 2:
        raise typer.BadParameter("give at least two datasets: each is scored by a model "
                                 "trained on the others", param_hint="--dataset")
    names = [folder.resolve().name for folder in datasets]
    if len(set(names)) != len(names):
        raise typer.BadParameter(f"datasets named twice: {', '.join(names)}",
                                 param_hint="--dataset")
    for folder in datasets:
        try:
            paired = pair_dataset(folder)
        except TrainingDataError as exc:
            raise typer.BadParameter(str(exc), param_hint="--dataset") from None
        if not paired.pairing.html:
            raise typer.BadParameter(f"{folder}/html holds no .html page",
                                     param_hint="--dataset")
        missing = sorted(set(paired.pairing.html) - set(paired.ids))
        if missing:
            shown = ", ".join(missing[:5]) + (" ..." if len(missing) > 5 else "")
            pages = "a page" if len(missing) == 1 else f"{len(missing)} pages"
            raise typer.BadParameter(f"{folder}: {pages} without gold text in content/ "
                                     f"({shown})", param_hint="--dataset")


def _check_out(out: Path) -> None:
    """Refuse, before any work, a model file that could not be written at the end: a
    folder in its place, or a nearest existing parent that is a file or not writable."""
    if out.exists() and not out.is_file():
        raise typer.BadParameter(f"{out} exists and is not a file", param_hint="--out")
    parent = out.absolute().parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise typer.BadParameter(f"{parent} is not a folder", param_hint="--out")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise typer.BadParameter(f"cannot write in {parent}", param_hint="--out")


@contextmanager
def _data_errors() -> Iterator[None]:
    """Unusable datasets found while loading them, as a usage error rather than a trace."""
    from shared.training import TrainingDataError

    try:
        yield
    except TrainingDataError as exc:
        raise typer.BadParameter(str(exc), param_hint="--dataset") from None


def _log(line: str) -> None:
    """A training log line, shown as it is (a file name may hold `[...]`)."""
    console.print(escape(line))


def _summary(metadata: dict[str, Any], out: Path) -> None:
    lodo = metadata["leave_one_dataset_out"]
    console.print(f"shipped {metadata['shipped']}: leave-one-dataset-out word F1 "
                  f"{lodo.get('word_f1')}, mean {lodo.get('mean')}; wrote {out}")


@app.command()
def density(
    dataset: DatasetOption,
    out: Annotated[Path | None, typer.Option(
        help="The model file to write (default: the shipped density model; "
             "BOILERBENCH_DENSITY_MODEL=FILE makes the service load another).")] = None,
    seed: SeedOption = 0,
    limit: LimitOption = None,
    workers: WorkersOption = None,
) -> None:
    """Train the density service's `learned` threshold and write its model file.

    A neural network and boosted trees compete for it."""
    # Imported here: training needs the `train` extra, which the service images lack;
    # the other commands must still load without it.
    from services.density.model import DEFAULT_MODEL
    from services.density.training import train as train_density

    _check_datasets(dataset)
    out = out or DEFAULT_MODEL
    _check_out(out)
    with _data_errors():
        model = train_density(dataset, out, seed=seed, limit=limit, workers=workers or 2,
                              log=_log)
    _summary(model.metadata, out)


@app.command()
def fusion(
    dataset: DatasetOption,
    out: Annotated[Path | None, typer.Option(
        help="The model file to write (default: the shipped fusion model; "
             "BOILERBENCH_FUSION_MODEL=FILE makes the service load another).")] = None,
    seed: SeedOption = 0,
    limit: LimitOption = None,
    workers: WorkersOption = None,
) -> None:
    """Train the fusion service's block classifier and write its model file."""
    # Imported here: fusion needs the jusText stoplists and the `train` extra, which an
    # image without them (the orchestrator's) lacks; the other commands must still load.
    from services.fusion.model import DEFAULT_MODEL
    from services.fusion.training import train as train_fusion

    _check_datasets(dataset)
    out = out or DEFAULT_MODEL
    _check_out(out)
    with _data_errors():
        model = train_fusion(dataset, out, seed=seed, limit=limit, workers=workers,
                             log=_log)
    _summary(model.metadata, out)


@app.command()
def ensemble(
    dataset: DatasetOption,
    out: Annotated[Path | None, typer.Option(
        help="The model file to write (default: services/ensemble/model/ensemble-v1.json; "
             "BOILERBENCH_ENSEMBLE_MODEL=FILE makes the service load another).")
    ] = None,
    seed: SeedOption = 0,
    limit: LimitOption = None,
    workers: Annotated[int, typer.Option(
        min=1, help="Processes that compute the members' answers and the pages' features.")
    ] = 2,
    costs_from: Annotated[Path | None, typer.Option(
        help="Choose the members by the CPU costs recorded in this model file instead of "
        "the ones measured now (reproduces that file byte for byte).",
        exists=True, dir_okay=False)] = None,
) -> None:
    """Train the ensemble's combiner and write its model file.

    Leave-one-dataset-out first, then the default members chosen by cost, then a fit on
    every page. The members' answers are cached in ensemble-members under
    BOILERBENCH_CACHE_DIR, else $XDG_CACHE_HOME/boilerbench, else ~/.cache/boilerbench
    (computed once, reused while unchanged)."""
    from services.ensemble.model import DEFAULT_MODEL
    from services.ensemble.training import train as train_ensemble

    _check_datasets(dataset)
    out = out or DEFAULT_MODEL
    _check_out(out)
    costs = None if costs_from is None else _recorded_costs(costs_from)
    with _data_errors():
        model = train_ensemble(dataset, out, seed=seed, workers=workers, costs=costs,
                               log=_log, limit=limit)
    evaluation = model.metadata["evaluation"]
    console.print(f"leave-one-dataset-out word F1 (default members "
                  f"{', '.join(model.default_members) or 'none'}): "
                  f"{evaluation['default_members']}; wrote {out}")


def _recorded_costs(path: Path) -> dict[str, float]:
    """The members' CPU costs recorded in an ensemble model file, refused up front when
    the file is not one or lacks a member training asks (it would fail after the
    members' answers were computed)."""
    from services.ensemble.members import TRAINING_MEMBERS
    from services.ensemble.model import read_model

    try:
        costs: dict[str, float] = dict(read_model(path).metadata["member_cpu_ms"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise typer.BadParameter(f"{path} is not an ensemble model file with the members' "
                                 f"costs ({type(exc).__name__}: {exc})",
                                 param_hint="--costs-from") from None
    missing = [m for m in TRAINING_MEMBERS
               if not isinstance(costs.get(m), int | float) or isinstance(costs[m], bool)]
    if missing:
        raise typer.BadParameter(f"{path} records no cost for {', '.join(missing)}",
                                 param_hint="--costs-from")
    return costs
