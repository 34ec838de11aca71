"""Where the development datasets live (../shared/datasets beside the repository)."""

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
