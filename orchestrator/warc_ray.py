"""`boilerbench extract --warc ... --ray`: the pages spread over a Ray cluster's CPUs.

The driver (the `boilerbench` process) reads the WARC files and sends the pages in
batches to Ray tasks of one CPU each; each task runs shared.answer.answer_page,
the code the in-process job and every service run, and returns its rows, which the
driver writes to the output folder's shards as they arrive. So the cluster needs no
shared file system, only boilerbench with the service's extras on every node, and a
resumed job reads its progress from the shards as the local one does. At most
`2 x CPUs` batches are in flight, so memory stays bounded whatever the crawl's size.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import shutil
import socket
import sys
from collections.abc import Callable, Iterator
from functools import cache
from itertools import islice
from pathlib import Path
from typing import Any

import shared
from orchestrator.warc import WarcPage
from orchestrator.warc_job import JobAbortedError, Row, WarcJob, page_row
from shared.answer import answer_page, page_query
from shared.contract import Algorithm
from shared.registry import get_service

# Pages per task: enough that Ray's per-task cost (scheduling, object transfer) is
# small beside extraction, few enough that a killed job loses little.
BATCH_PAGES = 8
# Ray puts the driver's working directory first on its workers' sys.path, where a
# folder named shared/ would be taken for the package: ray.init runs from the folder
# that holds the project's packages instead (site-packages for an installed one).
_PACKAGES_ROOT = Path(shared.__file__).resolve().parent.parent


@cache
def _algorithm(service: str) -> Algorithm:
    """The algorithm, loaded and warmed once per Ray worker process."""
    algorithm = get_service(service).algorithm()
    algorithm.warm_up()
    return algorithm


def extract_batch(service: str, options: dict[str, str], blocks: bool,
                  pages: list[WarcPage]) -> list[Row]:
    """Rows of a batch of pages (the body of a Ray task)."""
    algorithm = _algorithm(service)
    return [page_row(page, answer_page(algorithm, page.body, page_query(page.uri, options),
                                       page.content_type), blocks) for page in pages]


def check_address(address: str, timeout_s: float = 5.0) -> None:
    """ValueError where nothing listens at a cluster's `host:port` (or `ray://host:port`):
    ray.init would retry such an address for many minutes instead of failing."""
    if address == "auto":
        return
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():  # no port to try: Ray's own default then
        return
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except OSError as exc:
        raise ValueError(f"--ray {address}: nothing answers there ({exc.strerror or exc}); "
                         "is the cluster up?") from None


def run_on_ray(job: WarcJob, address: str, pages: Iterator[WarcPage],
               write: Callable[[Row], None]) -> None:
    """Run the job's pages on Ray: `address` "auto" starts a local Ray for the job
    with `job.workers` CPUs, and removes its session folder at the end; anything else
    is a running cluster's address."""
    if address == "auto":
        _use_token_of_own()
    import ray

    session: str | None = None
    with contextlib.chdir(_PACKAGES_ROOT):
        if address == "auto":
            context = ray.init(num_cpus=job.workers, include_dashboard=False,
                               logging_level=logging.WARNING, log_to_driver=False)
            # A local start returns a RayContext, which Ray types as its base class.
            session = context.address_info["session_dir"]  # type: ignore[attr-defined]
        else:
            ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False)
    try:
        remote = ray.remote(num_cpus=1)(extract_batch)
        cpus = ray.cluster_resources().get("CPU", 1)  # type: ignore[no-untyped-call]
        window = 2 * max(1, int(cpus))
        in_flight: list[Any] = []
        batches = iter(lambda: list(islice(pages, BATCH_PAGES)), [])
        exhausted = False
        while in_flight or not exhausted:
            while not exhausted and len(in_flight) < window:
                batch = next(batches, None)
                if batch is None:
                    exhausted = True
                    break
                in_flight.append(remote.remote(job.service, job.options, job.blocks, batch))
            if not in_flight:
                break
            ready, in_flight = ray.wait(in_flight, num_returns=1)
            try:
                rows = ray.get(ready[0])
            except ray.exceptions.RayError as exc:  # a node, a worker or an import failed
                raise JobAbortedError(f"a Ray task failed: {exc}") from exc
            for row in rows:
                write(row)
    finally:
        ray.shutdown()
        if session is not None:
            _remove_session(session)


def _use_token_of_own() -> None:
    """Token authentication for the local Ray the job starts, with a token of its own.
    Since Ray 2.59 a local cluster turns it on when RAY_AUTH_MODE is unset, warns that
    it did, and writes a token to ~/.ray/auth_token if there is none: with the mode set
    (RAY_AUTH_MODE=token, before Ray is imported: it reads its configuration then) it
    does not warn, and with a token in RAY_AUTH_TOKEN (which comes first) it writes none.
    A mode or token the user set is left as it is."""
    if "RAY_AUTH_MODE" in os.environ or "ray" in sys.modules:
        return
    os.environ["RAY_AUTH_MODE"] = "token"
    if not (os.environ.get("RAY_AUTH_TOKEN") or os.environ.get("RAY_AUTH_TOKEN_PATH")):
        os.environ["RAY_AUTH_TOKEN"] = secrets.token_hex(32)


def _remove_session(session_dir: str) -> None:
    """Remove the session folder of a local Ray the job started and stopped (its logs
    and sockets, about 200 KB a run, which Ray keeps), and the `session_latest` link
    beside it where that still names it."""
    shutil.rmtree(session_dir, ignore_errors=True)
    latest = os.path.join(os.path.dirname(session_dir), "session_latest")
    with contextlib.suppress(OSError):
        if os.readlink(latest) == session_dir:
            os.unlink(latest)
