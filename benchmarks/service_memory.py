"""Resident memory of each algorithm service as deployed: the whole process tree
(uvicorn and its extraction workers, `BOILERBENCH_WORKERS` of them, 2 as in
docker-compose.yml and the Kubernetes manifests) after warm-up and at its peak over a
dataset's pages; and the orchestrator API's through a run (with its scoring processes,
as many as in the Kubernetes manifests). The Kubernetes manifests
(deploy/kubernetes) take their memory requests and limits from the JSON this writes.

    python benchmarks/service_memory.py [--services bte,cetd] [--dataset scrapinghub]

Writes benchmarks/results/service_memory.json and .md (services not named keep their
earlier figures; the JSON's "notes", paragraphs about earlier rows, are kept and written
above the table). rss gets each page's feed as speed.py builds it (common.rss_feed): the
datasets have none, and without one rss refuses every page.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
from common import PageRef, load_pages, page_options, query_params, require_dataset

from orchestrator.kubernetes import SCORING_PROCESSES
from orchestrator.launcher import LocalStack, free_port, stack_with_members, wait_healthy
from shared.registry import SERVICES
from tests.processes import tree_memory_bytes

RESULTS = Path(__file__).resolve().parent / "results"
WORKERS = 2
WARM_UP_PAGES = 20


def measure(name: str, pages: Sequence[PageRef]) -> dict[str, Any]:
    """Tree RSS in MB of service `name` after WARM_UP_PAGES pages and at its peak, and
    its replies by status: a service that refuses the pages is measured refusing, not
    extracting, and the row says so. Each page goes with the options and URL speed.py
    gives it (rss: the page's feed). A service that asks members
    (the ensemble) asks them over HTTP, as deployed: they run beside it and only its own
    tree is measured."""
    with stack_with_members(name, SERVICES[name].members,
                            {"BOILERBENCH_WORKERS": str(WORKERS)}) as stack:
        url = stack.urls()[name]
        pid = stack.processes[name].process.pid
        peak = after_warm_up = 0
        replies: Counter[str] = Counter()
        with httpx.Client(timeout=60.0) as client:
            for i, page in enumerate(pages, 1):
                reply = client.post(f"{url}/extract", content=Path(page.html_path).read_bytes(),
                                    params=query_params(*page_options(name, page)),
                                    headers={"content-type": "text/html"})
                replies[str(reply.status_code)] += 1
                rss = tree_memory_bytes(pid)
                peak = max(peak, rss)
                if i == min(WARM_UP_PAGES, len(pages)):  # a short dataset: its last page
                    after_warm_up = rss
    return {"workers": WORKERS, "pages": len(pages),
            "rss_after_warm_up_mb": round(after_warm_up / 2**20, 1),
            "peak_rss_mb": round(peak / 2**20, 1), "replies": dict(sorted(replies.items()))}


def measure_orchestrator(folder: Path, service: str = "bte") -> dict[str, float]:
    """Tree RSS in MB of the orchestrator API (uvicorn, as its image runs it) through a
    run of one service (running beside it) over a dataset, with the results pages and
    reports it writes."""
    # A free port: the service's own (8003 for bte) may be taken by a running stack.
    with tempfile.TemporaryDirectory() as data, \
            LocalStack([service], ports={service: free_port()},
                       env={"BOILERBENCH_WORKERS": str(WORKERS)}) as stack:
        port = free_port()
        env = {**os.environ, "BOILERBENCH_MODE": "http", "BOILERBENCH_SERVICES": service,
               "BOILERBENCH_URLS": json.dumps(stack.urls()),
               "BOILERBENCH_STORE": f"{data}/store.sqlite",
               "BOILERBENCH_SCORING_PROCESSES": str(SCORING_PROCESSES),
               "BOILERBENCH_OUTPUT_FOLDER": f"{data}/results"}
        api = subprocess.Popen([sys.executable, "-m", "uvicorn", "orchestrator.api:app_factory",
                                "--factory", "--port", str(port)], env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            url = f"http://127.0.0.1:{port}"
            wait_healthy(url, 60.0, api)
            idle = tree_memory_bytes(api.pid)
            peak = idle
            with httpx.Client(timeout=60.0) as client:
                run = client.post(f"{url}/runs", json={"dataset": [str(folder)],
                                                      "services": [service]}).json()
                while client.get(f"{url}/runs/{run['id']}").json()["status"] not in (
                        "finished", "failed"):
                    peak = max(peak, tree_memory_bytes(api.pid))
                    time.sleep(0.2)
        finally:
            api.terminate()
            api.wait(10)
    return {"workers": 0, "pages": len(list((folder / "html").glob("*.html"))),
            "rss_after_warm_up_mb": round(idle / 2**20, 1),
            "peak_rss_mb": round(peak / 2**20, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--services", default=",".join([*SERVICES, "orchestrator"]))
    parser.add_argument("--dataset", default="scrapinghub")
    parser.add_argument("--out", type=Path, default=RESULTS,
                        help="Folder of service_memory.json and .md (rows of services not "
                        "named are kept from the JSON there).")
    args = parser.parse_args()
    names = [name.strip() for name in args.services.split(",") if name.strip()]
    unknown = [name for name in names if name != "orchestrator" and name not in SERVICES]
    if unknown or not names:
        parser.error(f"argument --services: unknown {unknown or 'none named'}; known: "
                     f"{', '.join(SERVICES)}, orchestrator")
    folder = require_dataset(args.dataset)
    pages = load_pages([args.dataset], None)
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "service_memory.json"
    results = json.loads(path.read_text()) if path.exists() else {"services": {}}
    command = ("python benchmarks/service_memory.py "
               + (f"--services {args.services} " if args.services != parser.get_default(
                   "services") else "") + f"--dataset {args.dataset}")
    machine = (f"{os.cpu_count()} cores, {platform.processor() or platform.machine()}, "
               f"Python {platform.python_version()}")
    for name in names:
        started = time.monotonic()
        figures = measure_orchestrator(folder) if name == "orchestrator" \
            else measure(name, pages)
        # Each row keeps when, where and by which command it was measured.
        results["services"][name] = {
            **figures, "measured": datetime.now(UTC).isoformat(timespec="seconds"),
            "machine": machine, "command": command}
        print(name, results["services"][name], f"{time.monotonic() - started:.0f} s",
              flush=True)
    for stale in ("measured", "machine", "command"):  # once one header for every row
        results.pop(stale, None)
    results["services"] = dict(sorted(results["services"].items()))
    path.write_text(json.dumps(results, indent=2) + "\n")
    lines = ["# Service memory", "",
             "Each row as measured by the command beside it (rows of services not named in "
             "a run keep their earlier measurement).", "",
             f"The process tree's resident set (uvicorn + {WORKERS} extraction workers) "
             f"after {WARM_UP_PAGES} pages and its peak over all {args.dataset} pages, "
             "sent one at a time as text/html (rss with a one-item feed per page, as "
             "benchmarks/speed.py gives it); the orchestrator's row: its API process "
             f"idle, and at its peak with its {SCORING_PROCESSES} scoring processes "
             f"through a run of bte over the {args.dataset} pages "
             "(bte running beside it). deploy/kubernetes takes its memory requests "
             "and limits from these figures.", "",
             *(line for note in results.get("notes", []) for line in (note, "")),
             "| service | pages | replies by status | RSS after warm-up MB | peak RSS MB "
             "| measured | command |",
             "|---|---:|---|---:|---:|---|---|"]
    lines += [f"| {n} | {r['pages']} | {_replies(r)} | {r['rss_after_warm_up_mb']} | "
              f"{r['peak_rss_mb']} | {r.get('measured', '?')} ({r.get('machine', '?')}) | "
              f"`{r.get('command', '?')}` |" for n, r in results["services"].items()]
    (args.out / "service_memory.md").write_text("\n".join(lines) + "\n")


def _replies(row: dict[str, Any]) -> str:
    """A row's replies by status ("-" for the orchestrator's, "?" where a row measured
    before they were counted has none)."""
    if row.get("workers") == 0:
        return "-"
    replies = row.get("replies")
    return ", ".join(f"{status}: {count}" for status, count in replies.items()) \
        if replies else "?"


if __name__ == "__main__":
    main()
