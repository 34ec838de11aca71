"""HTTP clients: the orchestrator's CPU per /extract request, httpx against aiohttp.

    python benchmarks/http_clients.py [--service resiliparse] [--pages 100]
                                      [--rounds 3] [--concurrency 2] [--out DIR]

One service as a real process (orchestrator.launcher.LocalStack on a free loopback
port); the client process posts the JSON body the orchestrator sends for each of the
first --pages pages of ../shared/datasets/scrapinghub (orchestrator/sample without
it), twice each, --concurrency at a time over keep-alive connections, and counts its
own CPU time (time.process_time: user and system) per request. The clients take
turns, round after round, so a slow spell of the machine hits each of them alike.
Only the client's work is counted: sending the body, reading the reply's bytes; not
the service's, nor parsing the reply (the same for every client).

Writes http_clients.json and http_clients.md into --out (default: print only).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import statistics
import time
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any

import aiohttp
import httpx
from common import REPO, command_line, machine, positive_int, service_name, write_results

from orchestrator.launcher import LocalStack
from orchestrator.runner import _encode_json, _request_body
from orchestrator.testsets import open_dataset_dir
from shared.datasets import dataset_dir
from tests.servers import free_port

SAMPLE = REPO / "orchestrator" / "sample"
HEADERS = {"content-type": "application/json"}
Post = Callable[[bytes], Awaitable[bytes]]


def request_bodies(limit: int) -> tuple[str, list[bytes]]:
    """The orchestrator's /extract bodies for the first `limit` pages of a test set."""
    source = dataset_dir("scrapinghub") or SAMPLE
    dataset = open_dataset_dir(source)
    bodies = []
    for page_id in dataset.ids[:limit]:
        html = dataset.page(page_id).html_text()
        bodies.append(_request_body(_encode_json(html), {}))
    return source.name, bodies


async def with_httpx(url: str, bodies: list[bytes], concurrency: int) -> float:
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(limits=limits) as client:
        async def post(body: bytes) -> bytes:
            reply = await client.post(url, content=body, headers=HEADERS)
            reply.raise_for_status()
            return reply.content

        return await cpu_per_request(post, bodies, concurrency)


async def with_aiohttp(url: str, bodies: list[bytes], concurrency: int) -> float:
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:
        async def post(body: bytes) -> bytes:
            async with session.post(url, data=body, headers=HEADERS) as reply:
                reply.raise_for_status()
                return await reply.read()

        return await cpu_per_request(post, bodies, concurrency)


CLIENTS: dict[str, Callable[[str, list[bytes], int], Coroutine[Any, Any, float]]] = {
    f"httpx {httpx.__version__}": with_httpx,
    f"aiohttp {aiohttp.__version__}": with_aiohttp,
}


async def cpu_per_request(post: Post, bodies: list[bytes], concurrency: int) -> float:
    """The client process's CPU milliseconds per request, over every body twice."""
    for body in bodies[:concurrency * 2]:  # connections open, caches warm
        await post(body)
    queue = iter(bodies * 2)

    async def lane() -> None:
        for body in queue:
            await post(body)

    started = time.process_time()
    await asyncio.gather(*(lane() for _ in range(concurrency)))
    return (time.process_time() - started) * 1000 / (len(bodies) * 2)


def main(argv: list[str] | None = None) -> dict[str, object]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--service", type=service_name, default="resiliparse")
    parser.add_argument("--pages", type=positive_int, default=100)
    parser.add_argument("--rounds", type=positive_int, default=3)
    parser.add_argument("--concurrency", type=positive_int, default=2)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    dataset, bodies = request_bodies(args.pages)
    figures: dict[str, list[float]] = {name: [] for name in CLIENTS}
    stack = LocalStack([args.service], ports={args.service: free_port()})
    try:
        url = stack.start(timeout=180)[args.service] + "/extract"
        for _ in range(args.rounds):
            for name, client in CLIENTS.items():
                figures[name].append(asyncio.run(client(url, bodies, args.concurrency)))
    finally:
        stack.stop()
    result: dict[str, object] = {
        "measured": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "command": command_line(__file__, argv),
        "service": args.service, "dataset": dataset, "pages": len(bodies),
        "requests_per_round": len(bodies) * 2, "concurrency": args.concurrency,
        "cpu_ms_per_request": {name: [round(v, 3) for v in values]
                               for name, values in figures.items()},
    }
    table = markdown(result, figures)
    if args.out is not None:
        write_results(args.out, "http_clients", table, result)
    else:
        print(table)
    return result


def markdown(result: dict[str, object], figures: dict[str, list[float]]) -> str:
    m: dict[str, object] = result["machine"]  # type: ignore[assignment]
    lines = [
        "# HTTP clients: the orchestrator's CPU per /extract request", "",
        f"Measured {result['measured']} on {m['nproc']} cores ({m['cpu']}), "
        f"Python {m['python']}.",
        f"Command: `{result['command']}`. Service: {result['service']}; "
        f"{result['requests_per_round']} requests a round ({result['pages']} pages of "
        f"{result['dataset']}, twice each), {result['concurrency']} at a time. CPU: the "
        "client process's user and system time per request, each round.", "",
        "| client | CPU ms/request, each round | median |",
        "|---|---|---:|",
    ]
    for name, values in figures.items():
        rounds = ", ".join(f"{v:.2f}" for v in values)
        lines.append(f"| {name} | {rounds} | {statistics.median(values):.2f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
