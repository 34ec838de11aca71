"""What the benchmark scripts share: the repository on sys.path, where a dataset is.

Scripts run as `python benchmarks/<name>.py`, which puts benchmarks/ on sys.path, so
`import common` (first, before the project's imports) finds this module, and this
module puts the repository there too. A service to measure runs under
tests.servers.serve_service, as the tests run it.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from shared.datasets import dataset_dir, datasets_root  # noqa: E402


def require_dataset(name: str) -> Path:
    """The folder of development dataset `name`, or exit naming where it was looked for."""
    folder = dataset_dir(name)
    if folder is None:
        raise SystemExit(f"dataset {name!r} not found under {datasets_root()} "
                         "(set BOILERBENCH_DATASETS)")
    return folder
