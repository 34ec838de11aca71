"""Abuse: hostile clients against a service and the orchestrator, on loopback only.

    python benchmarks/abuse.py [--part all|slowloris|runs|bomb] [--service justext]
                               [--crowd 1000] [--clients 8] [--seconds 30] [--runs 100]
                               [--pages 10] [--bombs 4] [--server guarded|uvicorn]
                               [--open-files N]
                               [--out benchmarks/results/abuse.md]

- slowloris: the service as a real process (`python -m shared.serving`, as
  deployed; `--server uvicorn` starts plain `uvicorn` instead, for comparison) and
  a crowd of --crowd connections that send a request head a line at a time, a
  line a second, and reconnect whenever the server closes them; meanwhile
  --clients normal clients post a real page, each request on a new connection,
  for --seconds. Reports the normal clients' latency (p50, p95, max) and errors,
  and how often the server closed crowd connections.
- runs: the orchestrator (`python -m shared.serving orchestrator.api:app_factory`)
  before that service; --runs runs of --pages inline pages each are posted at
  once (a 429 is posted again after its Retry-After), and every run is awaited.
  Reports accepted runs, 429s, page results and those recorded as errors (all of
  them would be wrong: the pages and the service are healthy).
- bomb: --bombs overlapping-entry zip uploads (tests.helpers.overlapping_zip:
  ~0.3 MB that unpack to ~300 MB each in Python's zipfile) posted at once, while
  /health is polled every 20 ms. Reports the replies and the worst /health latency.

The benchmark raises its own open-file limit to the hard limit (the crowd needs a
descriptor per connection). Loops are bounded by --seconds and time-outs.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import datetime
import json
import os
import platform
import resource
import sys
import tempfile
import time
from pathlib import Path

import httpx
from common import REPO, service_name
from load import MemorySampler, Stats, StatusError, check, default_page, drive

from tests.helpers import overlapping_zip
from tests.servers import serve_process


def service_app(name: str) -> str:
    return f"services.{name}.app:app"


# ---------------------------------------------------------------- slowloris

async def crowd_member(port: int, stop: float, closed: collections.Counter[str]) -> None:
    """One slow client: a request head a line a second, again whenever it is closed."""
    while time.monotonic() < stop:
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError as exc:
            closed[f"connect failed: {type(exc).__name__}"] += 1
            await asyncio.sleep(1)
            continue
        try:
            writer.write(b"POST /extract HTTP/1.1\r\nhost: x\r\n")
            await writer.drain()
            line = 0
            while time.monotonic() < stop:
                await asyncio.sleep(1)
                if reader.at_eof():
                    break
                writer.write(b"x-slow-%d: %d\r\n" % (line, line))
                await writer.drain()
                line += 1
            closed["closed by the server"] += time.monotonic() < stop
        except OSError:
            closed["closed by the server"] += 1
        finally:
            writer.close()


async def slowloris(url: str, pid: int, page: bytes, crowd: int, clients: int,
                    seconds: float) -> tuple[Stats, collections.Counter[str]]:
    port = int(url.rsplit(":", 1)[1])
    stats = Stats()
    closed: collections.Counter[str] = collections.Counter()
    sampler = MemorySampler(pid)
    sampler.start()
    stop = time.monotonic() + seconds
    members = [asyncio.create_task(crowd_member(port, stop + 2, closed)) for _ in range(crowd)]
    await asyncio.sleep(3)  # the crowd in place before the normal clients come
    body = json.dumps({"html": page.decode("utf-8", "replace")}).encode()

    async def one(_: httpx.AsyncClient) -> None:
        # A new connection per request: a client arriving while the crowd is there.
        async with httpx.AsyncClient(timeout=30) as fresh:
            check(await fresh.post(f"{url}/extract", content=body,
                                   headers={"content-type": "application/json"}))

    await drive(clients, max(stop - time.monotonic(), 1.0), one, stats)
    await asyncio.gather(*members, return_exceptions=True)
    sampler.done.set()
    stats.peak_rss = sampler.peak
    return stats, closed


# ---------------------------------------------------------------- 100 runs at once

async def many_runs(api: str, runs: int, pages: list[dict[str, str]]
                    ) -> dict[str, object]:
    counts: collections.Counter[str] = collections.Counter()
    async with httpx.AsyncClient(timeout=120) as client:
        async def post(index: int) -> str:
            body = {"pages": {"name": f"set{index}", "pages": pages}}
            for _ in range(50):
                reply = await client.post(f"{api}/runs", json=body)
                if reply.status_code == 429:
                    counts["429"] += 1
                    await asyncio.sleep(float(reply.headers.get("retry-after", "5")))
                    continue
                check(reply)
                return str(reply.json()["id"])
            raise StatusError("still refused after 50 tries")

        started = time.monotonic()
        ids = await asyncio.gather(*(post(i) for i in range(runs)))
        posted = time.monotonic() - started
        deadline = time.monotonic() + 3600
        statuses: dict[str, str] = {}
        while time.monotonic() < deadline:
            listing = check(await client.get(f"{api}/runs")).json()["runs"]
            statuses = {run["id"]: run["status"] for run in listing if run["id"] in ids}
            if all(status in ("finished", "failed", "cancelled")
                   for status in statuses.values()):
                break
            await asyncio.sleep(1)
        wall = time.monotonic() - started
        errors: collections.Counter[str] = collections.Counter()
        results = 0
        for run_id in ids:
            body = check(await client.get(f"{api}/runs/{run_id}/results")).json()
            results += body["run"]["counts"]["done"]
            for error in body["errors"]:
                errors[error["error"][:60]] += 1
    return {"runs": runs, "accepted": len(ids), "refused_429": counts["429"],
            "posting_s": round(posted, 1), "wall_s": round(wall, 1),
            "statuses": dict(collections.Counter(statuses.values())),
            "page_results": results, "error_results": sum(errors.values()),
            "errors": dict(errors)}


# ---------------------------------------------------------------- zip bomb

async def bomb(api: str, bombs: int) -> dict[str, object]:
    data = overlapping_zip(2000, b"<html><body><p>" + b"word " * 20_000 + b"</p></body></html>")
    worst = 0.0
    polls = 0
    async with httpx.AsyncClient(timeout=120) as client:
        async def upload() -> str:
            started = time.perf_counter()
            reply = await client.post(f"{api}/runs", files={
                "archive": ("bomb.zip", data, "application/zip")})
            detail = reply.json().get("detail", "")[:70]
            return f"HTTP {reply.status_code} in {time.perf_counter() - started:.2f} s: {detail}"

        uploads = [asyncio.create_task(upload()) for _ in range(bombs)]
        async with httpx.AsyncClient(timeout=60) as prober:
            while not all(task.done() for task in uploads) or polls < 50:
                started = time.perf_counter()
                check(await prober.get(f"{api}/health"))
                worst = max(worst, time.perf_counter() - started)
                polls += 1
                await asyncio.sleep(0.02)
        replies = [task.result() for task in uploads]
    return {"archive_bytes": len(data), "unpacks_to_bytes": unpacked_size(data),
            "uploads": bombs, "replies": replies, "health_polls": polls,
            "worst_health_ms": round(worst * 1000, 1)}


def unpacked_size(data: bytes) -> int:
    """What Python's zipfile would unpack, from the central directory's sizes."""
    import io
    import zipfile

    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        return sum(info.file_size for info in archive.infolist())


# ---------------------------------------------------------------- main

def raise_open_files() -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, 65536)
    resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return target


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--part", choices=["all", "slowloris", "runs", "bomb"], default="all")
    parser.add_argument("--service", type=service_name, default="justext")
    parser.add_argument("--crowd", type=int, default=1000)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--pages", type=int, default=10)
    parser.add_argument("--bombs", type=int, default=4)
    parser.add_argument("--server", choices=["guarded", "uvicorn"], default="guarded")
    parser.add_argument("--open-files", type=int, default=None,
                        help="the service's open-file limit (soft and hard), e.g. 1024")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks/results/abuse.md")
    args = parser.parse_args()
    open_files = raise_open_files()
    page = default_page()
    lines = [
        "# Abuse benchmark", "",
        f"Date: {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC. Machine: "
        f"{platform.machine()}, {os.cpu_count()} cores, {platform.system()} "
        f"{platform.release()}, Python {platform.python_version()}; open-file limit of "
        f"the benchmark {open_files}.", "",
        "Command: `python " + " ".join(["benchmarks/abuse.py", *sys.argv[1:]]) + "`", "",
    ]
    service_env = {"BOILERBENCH_WORKERS": "1"}
    server = "shared.serving" if args.server == "guarded" else "uvicorn"
    with serve_process(service_app(args.service), service_env, timeout=180,
                       server=server, open_files=args.open_files) as (url, proc):
        if args.part in ("all", "slowloris"):
            stats, closed = asyncio.run(slowloris(url, proc.pid, page, args.crowd,
                                                  args.clients, args.seconds))
            limit = f", open-file limit {args.open_files}" if args.open_files else ""
            lines += [f"## Slowloris: {args.crowd} slow connections against {args.service} "
                      f"({args.server} server{limit})", "",
                      stats.row(f"{args.clients} normal clients, a new connection per request"),
                      "", "Crowd connections: " + (", ".join(
                          f"{k} {v}" for k, v in sorted(closed.items())) or "none closed"), ""]
            print("\n".join(lines[-5:]), flush=True)
        if args.part in ("all", "runs", "bomb"):
            with tempfile.TemporaryDirectory(prefix="boilerbench-abuse-") as temp:
                api_env = {"BOILERBENCH_STORE": f"{temp}/store.sqlite",
                           "BOILERBENCH_OUTPUT_FOLDER": f"{temp}/out",
                           "BOILERBENCH_SERVICES": args.service,
                           "BOILERBENCH_URLS": json.dumps({args.service: url}),
                           "BOILERBENCH_API_RESUME": "false"}
                with serve_process("orchestrator.api:app_factory", api_env, "--factory",
                                   "--env-prefix", "BOILERBENCH_API_") as (api, _):
                    if args.part in ("all", "runs"):
                        pages = [{"id": f"p{i}", "html": page.decode("utf-8", "replace"),
                                  "gold": "gold text"} for i in range(args.pages)]
                        outcome = asyncio.run(many_runs(api, args.runs, pages))
                        lines += [f"## {args.runs} runs of {args.pages} pages posted at once",
                                  "", "```", json.dumps(outcome, indent=1), "```", ""]
                        print(lines[-3], flush=True)
                    if args.part in ("all", "bomb"):
                        outcome = asyncio.run(bomb(api, args.bombs))
                        lines += [f"## {args.bombs} overlapping-entry zip bombs uploaded at "
                                  "once", "", "```", json.dumps(outcome, indent=1), "```", ""]
                        print(lines[-3], flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines), encoding="utf-8")
    print(f"written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
