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
import socket
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
    with `job.workers` CPUs, anything else is a running cluster's address."""
    import ray

    with contextlib.chdir(_PACKAGES_ROOT):
        if address == "auto":
            ray.init(num_cpus=job.workers, include_dashboard=False,
                     logging_level=logging.WARNING, log_to_driver=False)
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
