"""Load: concurrent clients against one service and the orchestrator, on loopback only.

    python benchmarks/load.py [--service justext] [--workers 2] [--clients 8]
                              [--seconds 20] [--page PATH] [--target both|service|orchestrator]

- service: the service as a real process (orchestrator.launcher.LocalStack on a
  free 127.0.0.1 port, --workers extraction workers); --clients concurrent httpx
  clients post the same real page (default: the lower-decile page by size of
  ../shared/datasets/scrapinghub, else orchestrator/sample) for --seconds.
- orchestrator: `uvicorn orchestrator.api:app_factory` as a real process on a
  free port, using that service; the clients create small runs (POST /runs with
  two inline pages) and read them back (GET /runs/{id}, GET /runs) in a loop.

For each: requests, throughput, latency p50/p95/p99/max, errors (transport errors
and non-2xx replies, by kind) and the peak resident memory of the process tree
(sampled from /proc every 0.2 s), plus for the orchestrator how many runs finished.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import httpx
from common import REPO, existing_file, positive_int, service_name

from orchestrator.launcher import LocalStack, wait_healthy
from shared.datasets import dataset_dir
from tests.processes import tree_memory_bytes
from tests.servers import free_port


@dataclass
class Stats:
    latencies: list[float] = field(default_factory=list)
    errors: collections.Counter[str] = field(default_factory=collections.Counter)
    peak_rss: int = 0
    seconds: float = 0.0
    extra: dict[str, object] = field(default_factory=dict)

    def row(self, name: str) -> str:
        lat = sorted(self.latencies)

        def pct(p: float) -> float:
            return lat[min(int(p * len(lat)), len(lat) - 1)] * 1000 if lat else float("nan")

        total = len(lat) + sum(self.errors.values())
        errors = ", ".join(f"{k}: {v}" for k, v in sorted(self.errors.items())) or "0"
        extra = "".join(f", {k} {v}" for k, v in self.extra.items())
        mean = statistics.fmean(lat) * 1000 if lat else float("nan")
        return (f"{name}: {total} requests in {self.seconds:.1f} s "
                f"({total / self.seconds:.1f}/s); latency ms p50 {pct(0.5):.1f}, "
                f"p95 {pct(0.95):.1f}, p99 {pct(0.99):.1f}, max {pct(1.0):.1f}, "
                f"mean {mean:.1f}; errors {errors}; peak RSS "
                f"{self.peak_rss / 2**20:.1f} MB{extra}")


class MemorySampler(threading.Thread):
    """Peak RSS of a process tree, sampled until stopped."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid, self.peak = pid, 0
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            self.peak = max(self.peak, tree_memory_bytes(self.pid))
            self.done.wait(0.2)


async def drive(clients: int, seconds: float, one: Callable[[httpx.AsyncClient], Awaitable[None]],
                stats: Stats) -> None:
    """`clients` loops calling `one` until `seconds` have passed."""
    stop = time.monotonic() + seconds
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(timeout=120, limits=limits) as client:
        async def loop() -> None:
            while time.monotonic() < stop:
                started = time.perf_counter()
                try:
                    await one(client)
                except httpx.HTTPError as exc:
                    stats.errors[type(exc).__name__] += 1
                    continue
                except StatusError as exc:
                    stats.errors[str(exc)] += 1
                    continue
                stats.latencies.append(time.perf_counter() - started)

        started = time.monotonic()
        await asyncio.gather(*(loop() for _ in range(clients)))
        stats.seconds = time.monotonic() - started


class StatusError(Exception):
    """A reply that is not the 2xx expected."""


def check(reply: httpx.Response) -> httpx.Response:
    if not 200 <= reply.status_code < 300:
        try:
            code = reply.json().get("error", "")
        except ValueError:
            code = ""
        raise StatusError(f"HTTP {reply.status_code} {code}".strip())
    return reply


def default_page() -> bytes:
    dataset = dataset_dir("scrapinghub")
    folder = (dataset if dataset is not None else REPO / "orchestrator" / "sample") / "html"
    pages = sorted(folder.glob("*.html"), key=lambda p: (p.stat().st_size, p.name))
    return pages[len(pages) // 10].read_bytes()


def load_service(url: str, pid: int, page: bytes, clients: int, seconds: float) -> Stats:
    stats = Stats()
    sampler = MemorySampler(pid)
    sampler.start()

    async def one(client: httpx.AsyncClient) -> None:
        check(await client.post(f"{url}/extract", content=page,
                                headers={"content-type": "text/html"}))

    asyncio.run(drive(clients, seconds, one, stats))
    sampler.done.set()
    sampler.join()
    stats.peak_rss = sampler.peak
    return stats


def load_orchestrator(service: str, service_url: str, page: bytes, clients: int,
                      seconds: float) -> Stats:
    with tempfile.TemporaryDirectory(prefix="boilerbench-load-") as work:
        port = free_port()
        env = {**os.environ, "BOILERBENCH_STORE": f"{work}/store.sqlite",
               "BOILERBENCH_OUTPUT_FOLDER": f"{work}/out", "BOILERBENCH_SERVICES": service,
               "BOILERBENCH_URLS": json.dumps({service: service_url}),
               "BOILERBENCH_API_RESUME": "false"}
        process = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "orchestrator.api:app_factory", "--factory",
             "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning",
             "--no-access-log"], env=env, cwd=REPO, stdin=subprocess.DEVNULL)
        url = f"http://127.0.0.1:{port}"
        try:
            wait_healthy(url, 60, process)
            stats = Stats()
            sampler = MemorySampler(process.pid)
            sampler.start()
            html = page.decode("utf-8", errors="replace")
            run_ids: list[str] = []

            async def one(client: httpx.AsyncClient) -> None:
                kind = len(stats.latencies) % 4
                if kind == 0 or not run_ids:
                    body = {"pages": {"name": "load", "pages": [
                        {"id": "a", "html": html, "gold": "x"},
                        {"id": "b", "html": html, "gold": "y"}]}}
                    reply = check(await client.post(f"{url}/runs", json=body))
                    run_ids.append(reply.json()["id"])
                elif kind == 3:
                    check(await client.get(f"{url}/runs"))
                else:
                    check(await client.get(f"{url}/runs/{run_ids[-1]}"))

            asyncio.run(drive(clients, seconds, one, stats))
            # Let the runs created finish (bounded), then count them.
            deadline = time.monotonic() + 120
            finished = 0
            while time.monotonic() < deadline:
                runs = httpx.get(f"{url}/runs", timeout=60).json()["runs"]
                finished = sum(r["status"] == "finished" for r in runs)
                if all(r["status"] in ("finished", "failed") for r in runs):
                    break
                time.sleep(0.5)
            sampler.done.set()
            sampler.join()
            stats.peak_rss = sampler.peak
            results = [r for r in runs if r["status"] == "finished"]
            page_errors = sum(r["counts"].get("error", 0) for r in results)
            stats.extra = {"runs created": len(run_ids), "runs finished": finished,
                           "page errors in runs": page_errors}
            return stats
        finally:
            process.terminate()
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                process.kill()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--service", type=service_name, default="justext")
    parser.add_argument("--workers", type=positive_int, default=2)
    parser.add_argument("--clients", type=positive_int, default=8)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--page", type=existing_file)
    parser.add_argument("--target", choices=["both", "service", "orchestrator"], default="both")
    args = parser.parse_args()
    page = args.page.read_bytes() if args.page else default_page()
    stack = LocalStack([args.service], ports={args.service: free_port()},
                       env={"BOILERBENCH_WORKERS": str(args.workers)})
    print(f"page: {len(page)} bytes; {args.clients} clients for {args.seconds:g} s each; "
          f"{args.service} with {args.workers} workers on loopback", flush=True)
    with stack:
        url = stack.urls()[args.service]
        pid = stack.processes[args.service].process.pid
        if args.target in ("both", "service"):
            print(load_service(url, pid, page, args.clients, args.seconds).row(args.service),
                  flush=True)
        if args.target in ("both", "orchestrator"):
            stats = load_orchestrator(args.service, url, page, args.clients, args.seconds)
            print(stats.row("orchestrator"), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
