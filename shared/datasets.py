"""Where the development datasets live (../shared/datasets beside the repository), and
how a test set named on the command line is found there."""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
DATASETS = ("scrapinghub", "cleaneval", "chaos", "cleanportaleval")
"""The development datasets, in the order training and the benchmarks list them."""


def datasets_root() -> Path:
    """BOILERBENCH_DATASETS, else ../shared/datasets beside the repository."""
    configured = os.environ.get("BOILERBENCH_DATASETS")
    return Path(configured) if configured else REPO_ROOT.parent / "shared" / "datasets"


def dataset_dir(name: str) -> Path | None:
    """The folder of a named development dataset, or None where it is absent."""
    path = datasets_root() / name
    return path if (path / "html").is_dir() and (path / "content").is_dir() else None


def dataset_places(path: Path) -> list[Path]:
    """Where a test set named `path` is looked for, in order: the path as given (from the
    working folder), then, for a relative one, the folder of that name under
    datasets_root() (`scrapinghub` from any folder, as the API resolves names)."""
    return [path] if path.is_absolute() else [path.absolute(), datasets_root() / path]


def named_dataset(path: Path) -> Path | None:
    """`path` where it exists as given, else the folder of that name under
    datasets_root(); None where neither exists."""
    if path.exists():
        return path
    under_root = dataset_places(path)[1:]
    return under_root[0] if under_root and under_root[0].is_dir() else None
