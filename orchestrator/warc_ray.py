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
import socket
import subprocess
import sys
import tempfile
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
    with `job.workers` CPUs, gone with its files when the job ends, however
    it ends (_local_ray); anything else is a running cluster's address."""
    if address == "auto":
        _use_token_of_own()
    import ray

    with _local_ray(job.workers) if address == "auto" else _ray_at(address):
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


@contextlib.contextmanager
def _ray_at(address: str) -> Iterator[None]:
    """Connected to the running cluster at `address` for the job."""
    import ray

    with contextlib.chdir(_PACKAGES_ROOT):
        ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False)
    try:
        yield
    finally:
        ray.shutdown()


@contextlib.contextmanager
def _local_ray(cpus: int) -> Iterator[None]:
    """A local Ray for the job, whose processes and files go when the job ends, however
    it ends. ray.init has the kernel end its GCS server and raylet with this process (on
    Linux), but a driver killed without a chance to clean up leaves the cluster's agents
    for a minute (they try to tell the dead GCS that the raylet died), a worker that had
    not connected yet for good, and the session folder too. So the cluster gets a temp
    folder of its own, and a guard process, started first, waits for the end of its
    stdin, whose other end only this process holds: EOF means the job ended or was
    killed, and the guard ends what is left of the cluster (orchestrator/ray_guard.py).
    It runs in a session of its own, so a signal to this process's group (Ctrl-C)
    spares it."""
    import ray

    # In the folder where Ray puts its own (RAY_TMPDIR, else /tmp, not TMPDIR: the
    # cluster's socket paths, below it, may have 107 bytes); ray.init's _temp_dir is
    # what Ray's logging docs name for a temp folder of one's own.
    ray_root = os.path.join(os.environ.get("RAY_TMPDIR") or "/tmp", "ray")
    os.makedirs(ray_root, exist_ok=True)
    folder = tempfile.mkdtemp(prefix="job-", dir=ray_root)
    guard = subprocess.Popen(
        [sys.executable, "-c", "from orchestrator.ray_guard import guard_local_ray; "
         "guard_local_ray()", folder, str(os.getpid())], cwd=_PACKAGES_ROOT,
        stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, start_new_session=True)
    try:
        with contextlib.chdir(_PACKAGES_ROOT):
            ray.init(num_cpus=cpus, include_dashboard=False, logging_level=logging.WARNING,
                     log_to_driver=False, _temp_dir=folder)
        try:
            yield
        finally:
            ray.shutdown()
    finally:
        if guard.stdin is not None:
            guard.stdin.close()
        guard.wait()


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
