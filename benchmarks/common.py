"""What the benchmark scripts share: the repository on sys.path, a service to measure.

Scripts run as `python benchmarks/<name>.py`, which puts benchmarks/ on sys.path, so
`import common` (first, before the project's imports) finds this module, and this
module puts the repository there too.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import httpx  # noqa: E402

from shared.registry import SERVICES  # noqa: E402
from shared.service import create_service_app  # noqa: E402
from shared.settings import ServiceSettings  # noqa: E402
from tests.servers import serve_app  # noqa: E402


@contextmanager
def served(name: str, settings: ServiceSettings) -> Iterator[tuple[str, httpx.Client]]:
    """Service `name`'s real app (worker processes and all) under uvicorn on a free
    loopback port with `settings`, until the block ends: its base URL and a client."""
    app = create_service_app(SERVICES[name].algorithm(), settings)
    with serve_app(app) as url, httpx.Client() as client:
        yield url, client
