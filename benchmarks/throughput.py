"""Throughput: pages scored per second by a full orchestrator run, and where the time goes.

    python benchmarks/throughput.py [--datasets scrapinghub,cleaneval] [--services all]
                                    [--limit N] [--modes serial,embedded-1,local]
                                    [--out benchmarks/results]

Each mode runs the same run (every chosen service on every page, scored and
stored in a fresh SQLite store) through orchestrator.runner.execute_run:

- `serial`: the true one-core baseline: one process, one thing at a time (each
  page decoded and prepared, each service's extractor called in-process, scored
  and stored, in turn, then the run's report written), with the runner's own
  scoring, store and output code;
- `embedded-1`: `boilerbench run --in-process --workers 1`: the extractors in one
  worker process at a time, scoring in the run's scoring processes (one per core);
- `embedded-2`: the same with 2 extractions at a time (one worker per service);
- `local`: `boilerbench run --local`: every service its own uvicorn process on a
  free port (LocalStack, 1 extraction worker each), called over HTTP with the
  runner's default concurrency.

With --rounds R the pages are split into R interleaved parts and every mode runs
on each part in turn (each round starting with the next mode), and each mode's
figures are summed over its rounds: this machine's speed drifts by 10-20% over
minutes, which would otherwise favour whichever mode ran in a fast spell.

Per mode: results, wall seconds, results per second, the ratio to `serial` and to
`embedded-1`, the cores used (CPU seconds of the orchestrator and of every service
and worker process, over the wall time), the machine's idle and stolen cores (a
virtual machine's cores wait while the host runs others: steal time) and the
runner's RunTimings (prepare, extraction, transport, reply parsing, scoring,
storage), and each round's ratio to `serial` (its spread shows how far the
machine's drift reaches into the summed figure). Before each round, --probes probes
of the machine's own two-core scaling (two_core_scaling), the ceiling of any "x
serial" at that moment. Service start-up is not timed, nor are imports (the
report's statistics import scipy: that is start-up, paid once per process by
whichever mode came first). Writes throughput.json and throughput.md into --out.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from common import (
    REPO,
    command_line,
    machine,
    positive_int,
    require_dataset,
    service_list,
    write_results,
)

import orchestrator.report  # noqa: F401  (imported before any clock starts)
from orchestrator.launcher import LocalStack
from orchestrator.models import PageResult
from orchestrator.runner import (
    EmbeddedExtractor,
    Extractor,
    RunSpec,
    RunTimings,
    create_run,
    execute_run,
    folder_source,
    open_source,
    write_run_outputs,
)
from orchestrator.scoring import prepare_page, score_empty, score_extraction
from orchestrator.store import Store
from shared.contract import Algorithm
from shared.decoding import NotHTMLError
from shared.registry import SERVICES, MissingInputError, page_options
from shared.workers import descendants
from tests.processes import CLOCK_TICKS, process_cpu_s
from tests.servers import free_port

MODES = ("serial", "embedded-1", "embedded-2", "local")
PHASES = ("prepare", "extract", "transport", "parse", "score", "store")


def machine_times_s() -> dict[str, float]:
    """The machine's CPU seconds since boot, summed over its cores (/proc/stat): idle
    (with iowait) and steal, the time the hypervisor gave this VM's cores to others."""
    fields = [int(f) for f in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    # user nice system idle iowait irq softirq steal ...
    return {"idle": (fields[3] + fields[4]) / CLOCK_TICKS, "steal": fields[7] / CLOCK_TICKS}


class CpuMeter:
    """CPU seconds of this process and all its descendants between start() and stop().

    Descendants are sampled while they live (a process that exits between samples
    loses its last share; samples are taken every `interval` seconds)."""

    def __init__(self, interval: float = 0.5) -> None:
        self.interval = interval
        self.seen: dict[int, tuple[float, float]] = {}  # pid -> (first, last) CPU seconds
        self.own_start = 0.0
        self.own = 0.0
        self.machine_start: dict[str, float] = {}
        self.machine: dict[str, float] = {}  # idle and steal seconds between start and stop

    def sample(self) -> None:
        for pid in descendants(os.getpid()):
            cpu = process_cpu_s(pid, reaped=True)
            first = self.seen.get(pid, (cpu, cpu))[0]
            self.seen[pid] = (first, cpu)

    def start(self) -> None:
        self.own_start = time.process_time()
        self.machine_start = machine_times_s()
        self.sample()

    def stop(self) -> None:
        self.sample()
        self.own = time.process_time() - self.own_start
        end = machine_times_s()
        self.machine = {k: end[k] - self.machine_start[k] for k in end}

    def children_s(self) -> float:
        return sum(last - first for first, last in self.seen.values())

    async def watch(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            self.sample()
            try:
                await asyncio.wait_for(stop.wait(), self.interval)
            except TimeoutError:
                continue


def limited_sources(datasets: Sequence[str], limit: int | None, tmp: Path,
                    part: int = 0, parts: int = 1) -> list[Any]:
    """Folder sources for the datasets; with a limit, folders of links to the first N
    pages; with several parts, to every parts-th of those pages from the part-th on."""
    sources = []
    for name in datasets:
        folder = require_dataset(name)
        html, content = folder / "html", folder / "content"
        if limit or parts > 1:
            html, content = tmp / f"{name}-{part}" / "html", tmp / f"{name}-{part}" / "content"
            html.mkdir(parents=True)
            content.mkdir(parents=True)
            for page in sorted((folder / "html").glob("*.html"))[:limit][part::parts]:
                (html / page.name).symlink_to(page)
                gold = folder / "content" / f"{page.stem}.txt"
                (content / gold.name).symlink_to(gold)
        sources.append(folder_source(name, html, content, None))
    return sources


def _cpu_unit(_: int = 0) -> float:
    """A fixed, pure-Python, CPU-bound task (no memory traffic to speak of): its wall s."""
    started = time.perf_counter()
    counts: dict[int, int] = {}
    for i in range(1_500_000):
        counts[i % 1000] = counts.get(i % 1000, 0) + i
    return time.perf_counter() - started


def two_core_scaling(probes: int) -> list[float]:
    """The machine's own two-core scaling right now, `probes` times: the work of two
    copies of _cpu_unit at once over that of one alone. 2.0 on two free cores; less
    when the host slows one virtual core while the other is busy (seen here: one of
    two identical copies taking 1.5 times as long), which caps the concurrent modes'
    "x serial" whatever the code does. The lone copy is timed before and after the
    pair and the faster time kept, so one slow spell of the lone copy cannot read as
    more than two cores' worth of scaling."""
    if probes <= 0:
        return []
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=2, mp_context=context) as pool:
        list(pool.map(_cpu_unit, range(2)))  # both workers started and warm
        figures = []
        alone_before = pool.submit(_cpu_unit).result()
        for _ in range(probes):
            together = list(pool.map(_cpu_unit, range(2)))
            alone_after = pool.submit(_cpu_unit).result()
            figures.append(round(2 * min(alone_before, alone_after) / max(together), 2))
            alone_before = alone_after
    return figures


def load_algorithms(services: Sequence[str]) -> tuple[dict[str, Algorithm], dict[str, str]]:
    """The services whose extractor imports and warms up, and why the others do not
    (a service mid-development is left out of every mode, and named in the report)."""
    algorithms: dict[str, Algorithm] = {}
    failed: dict[str, str] = {}
    for name in services:
        try:
            algorithm = SERVICES[name].algorithm()
            algorithm.warm_up()
        except Exception as exc:
            failed[name] = f"{type(exc).__name__}: {exc}"
            continue
        algorithms[name] = algorithm
    return algorithms, failed


def run_serial(store: Store, run_id: str, algorithms: dict[str, Algorithm],
               timings: RunTimings) -> list[PageResult]:
    """One process, one step at a time: the runner's steps without its concurrency."""
    spec = RunSpec.model_validate(store.spec(run_id))
    for source in spec.datasets:
        dataset = open_source(source)
        for page_id in dataset.ids:
            page = dataset.page(page_id)
            started = time.perf_counter()
            try:
                html = page.html_text()
            except NotHTMLError:
                continue
            ref = prepare_page(html, page.gold)
            timings.add("prepare", time.perf_counter() - started)
            for service in spec.services:
                base = {"run_id": run_id, "dataset": dataset.name, "page_id": page_id,
                        "service": service}
                try:  # the runner's rule: what the service needs besides the HTML
                    options = {**spec.options.get(service, {}),
                               **page_options(service, page, dataset)}
                except MissingInputError as missing:
                    result = PageResult(**base, status="skipped", error=str(missing))
                else:
                    started = time.perf_counter()
                    try:
                        reply = algorithms[service].run(html, options)
                        error = None
                    except Exception as exc:  # PageError included: an error row
                        error = f"{type(exc).__name__}: {exc}"
                    timings.add("extract", time.perf_counter() - started)
                    timings.extractions += 1
                    started = time.perf_counter()
                    if error is None:
                        scores = score_extraction(ref, reply.text, reply.blocks)
                        result = PageResult(**base, status="ok", text=reply.text, scores=scores)
                    else:
                        result = PageResult(**base, status="error", error=error,
                                            scores=score_empty(ref))
                    timings.add("score", time.perf_counter() - started)
                started = time.perf_counter()
                store.add_result(result)
                timings.add("store", time.perf_counter() - started)
    results = store.results(run_id)
    write_run_outputs(store, run_id, Path(spec.output_folder), results)  # as execute_run does
    return results


def run_mode(mode: str, algorithms: dict[str, Algorithm], sources: list[Any],
             tmp: Path, concurrency: int | None = None) -> dict[str, Any]:
    services = list(algorithms)
    store = Store(tmp / f"{mode}.sqlite")
    backend = "http" if mode == "local" else "embedded"
    workers = 2 if mode == "embedded-2" else 1
    spec = RunSpec(datasets=[], services=services, backend=backend, workers=workers,
                   output_folder=str(tmp / f"out-{mode}"))
    if concurrency is not None:  # requests in flight per service (http backend)
        spec = spec.model_copy(update={"concurrency": concurrency})
    stack: LocalStack | None = None
    urls: dict[str, str] | None = None
    if mode == "local":
        stack = LocalStack(services, ports={n: free_port() for n in services})
        urls = stack.start(timeout=180.0)
        spec = spec.model_copy(update={"urls": urls, "local": True})
    run_id = create_run(store, spec, sources)
    timings = RunTimings()
    meter = CpuMeter()
    try:
        if mode == "serial":
            meter.start()
            started = time.perf_counter()
            results = run_serial(store, run_id, algorithms, timings)
            wall = time.perf_counter() - started
        else:
            async def go() -> tuple[list[PageResult], float]:
                # The worker pools start before the clock does, as the services do.
                extractor: Extractor | None = None
                if backend == "embedded":
                    extractor = EmbeddedExtractor(spec)
                    await extractor.start()
                meter.start()
                started = time.perf_counter()
                stop = asyncio.Event()
                watcher = asyncio.create_task(meter.watch(stop))
                try:
                    results = await execute_run(store, run_id, urls=urls, extractor=extractor,
                                                timings=timings)
                    return results, time.perf_counter() - started
                finally:
                    stop.set()
                    await watcher
                    if extractor is not None:
                        await extractor.aclose()

            results, wall = asyncio.run(go())
        meter.stop()
    finally:
        if stack is not None:
            stack.stop()
        store.close()
    scored = sum(1 for r in results if r.status in ("ok", "error"))
    cpu = meter.own + meter.children_s()
    phases = {f"{k}_s": round(getattr(timings, f"{k}_s"), 2) for k in PHASES}
    return {
        "mode": mode, "results": len(results), "scored": scored,
        "errors": sum(1 for r in results if r.status == "error"),
        "wall_s": round(wall, 2), "scored_per_s": round(scored / wall, 2) if wall else None,
        "cpu_s": round(cpu, 2), "orchestrator_cpu_s": round(meter.own, 2),
        "cores_used": round(cpu / wall, 2) if wall else None,
        "idle_s": round(meter.machine["idle"], 2), "steal_s": round(meter.machine["steal"], 2),
        "phases_s": phases, "extractions": timings.extractions,
    }


def merge_rounds(rounds: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One mode's figures over its rounds: counts, seconds and phases summed."""
    merged: dict[str, Any] = {"mode": rounds[0]["mode"], "rounds": len(rounds)}
    for key in ("results", "scored", "errors", "extractions", "wall_s", "cpu_s",
                "orchestrator_cpu_s", "idle_s", "steal_s"):
        merged[key] = round(sum(r[key] for r in rounds), 2)
    merged["phases_s"] = {key: round(sum(r["phases_s"][key] for r in rounds), 2)
                          for key in rounds[0]["phases_s"]}
    wall = merged["wall_s"]
    merged["scored_per_s"] = round(merged["scored"] / wall, 2) if wall else None
    merged["cores_used"] = round(merged["cpu_s"] / wall, 2) if wall else None
    return merged


def _per_result(run: dict[str, Any], key: str) -> str:
    """Milliseconds of `key` (CPU seconds) per scored result."""
    return f"{run[key] * 1000 / run['scored']:.1f}" if run["scored"] else "-"


def _cores(run: dict[str, Any], key: str) -> str:
    """Seconds of `key` (machine-wide) over the wall time, as cores."""
    return f"{run[key] / run['wall_s']:.2f}" if run["wall_s"] else "-"


def _scaling_line(scaling: Sequence[float]) -> list[str]:
    if not scaling:
        return []
    return [f"The machine's own two-core scaling (two_core_scaling: a fixed CPU-bound loop, "
            f"two copies at once against one alone, {len(scaling)} probes before the "
            f"rounds): median {statistics.median(scaling):.2f}, range {min(scaling):.2f}-"
            f"{max(scaling):.2f}; 2.00 is two free cores.", ""]


def render_markdown(report: dict[str, Any]) -> str:
    m = report["machine"]
    lines = [
        "# Orchestrator throughput", "",
        f"Measured {report['date']} on {m['nproc']} cores ({m['cpu']}), Python {m['python']}; "
        f"load average at the start {m['load_avg_start']}, at the end {m['load_avg_end']}.",
        f"Command: `{report['command']}`. Services: {', '.join(report['services'])}; "
        "pages: " + ", ".join(f"{d} {n}" for d, n in report["page_counts"].items()) + ".",
        "",
        "Scored = page x service results scored (rss is skipped: the datasets have no "
        "feeds). Cores used = CPU seconds of the orchestrator and every service/worker "
        "process over the wall time. Phases: seconds summed over results (they overlap "
        "in the concurrent modes); transport = round trip minus the extraction the "
        "service reports (HTTP or worker IPC, with queueing in the service). CPU ms/result: "
        "CPU seconds of all those processes per scored result, and of the orchestrator "
        "process alone (preparing, storing, HTTP client; the serial mode scores there too, "
        "the others in scoring processes): the cost of a result, "
        "which other load on the machine blurs less than the wall time does. Cores idle "
        "and cores stolen: the whole machine's idle time (/proc/stat, with iowait) and "
        "steal time (its virtual cores waiting for the host's) over the wall time.",
        "",
        *_scaling_line(report["two_core_scaling"]),
        "| mode | scored | errors | wall s | scored/s | x serial | x embedded-1 | cores used "
        "| cores idle | cores stolen | CPU ms/result | orchestrator CPU ms/result "
        "| prepare s | extract s | transport s | parse s | score s | store s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:"
        "|---:|---:|",
    ]
    base = {r["mode"]: r["scored_per_s"] for r in report["runs"]}
    for r in report["runs"]:
        p = r["phases_s"]
        x_serial = (f"{r['scored_per_s'] / base['serial']:.2f}"
                    if base.get("serial") else "-")
        x_embedded = (f"{r['scored_per_s'] / base['embedded-1']:.2f}"
                      if base.get("embedded-1") else "-")
        lines.append(
            f"| {r['mode']} | {r['scored']} | {r['errors']} | {r['wall_s']} | {r['scored_per_s']} "
            f"| {x_serial} | {x_embedded} | {r['cores_used']} | {_cores(r, 'idle_s')} "
            f"| {_cores(r, 'steal_s')} | {_per_result(r, 'cpu_s')} "
            f"| {_per_result(r, 'orchestrator_cpu_s')} | {p['prepare_s']} "
            f"| {p['extract_s']} | {p['transport_s']} | {p['parse_s']} | {p['score_s']} "
            f"| {p['store_s']} |")
    lines.append("")
    for r in report["runs"]:
        if r["mode"] != "serial" and r.get("x_serial_by_round"):
            ratios = ", ".join(f"{x:.2f}" if x else "-" for x in r["x_serial_by_round"])
            lines.append(f"{r['mode']}: x serial round by round: {ratios}.")
    lines.append("")
    for name, reason in report["left_out"].items():
        lines.append(f"Left out (its extractor did not load): {name}: {reason}")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets", default="scrapinghub,cleaneval")
    parser.add_argument("--services", type=service_list, default="all")
    parser.add_argument("--limit", type=positive_int, default=None,
                        help="First N pages per dataset.")
    parser.add_argument("--modes", default="serial,embedded-1,local")
    parser.add_argument("--rounds", type=positive_int, default=1,
                        help="Split the pages into this many parts and run every mode on "
                        "each part in turn, so a drift in the machine's speed hits all modes.")
    parser.add_argument("--concurrency", type=positive_int, default=None,
                        help="Requests in flight per service in `local` (default: the runner's).")
    parser.add_argument("--probes", type=int, default=3,
                        help="Probes of the machine's two-core scaling before each round.")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    args = parser.parse_args(argv)
    datasets = [d.strip() for d in args.datasets.split(",") if d.strip()]
    services: list[str] = args.services
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    for mode in modes:
        if mode not in MODES:
            raise SystemExit(f"unknown mode {mode!r}; known: {', '.join(MODES)}")
    algorithms, failed = load_algorithms(services)
    for name, reason in failed.items():
        print(f"left out {name}: {reason}", file=sys.stderr)
    load_start = [round(x, 2) for x in os.getloadavg()]
    runs = []
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        per_mode: dict[str, list[dict[str, Any]]] = {mode: [] for mode in modes}
        counts: dict[str, int] = {}
        scaling: list[float] = []
        for part in range(args.rounds):
            scaling += two_core_scaling(args.probes)
            sources = limited_sources(datasets, args.limit, tmp, part, args.rounds)
            for source in sources:
                counts[source.name] = counts.get(source.name, 0) + len(open_source(source).ids)
            folder = tmp / f"round-{part}"
            folder.mkdir()
            for k in range(len(modes)):
                mode = modes[(part + k) % len(modes)]  # each round starts with the next mode
                started = time.perf_counter()
                per_mode[mode].append(run_mode(mode, algorithms, sources, folder,
                                               args.concurrency))
                print(f"round {part + 1}, {mode}: {time.perf_counter() - started:.1f} s",
                      file=sys.stderr, flush=True)
        runs = [merge_rounds(per_mode[mode]) for mode in modes]
        if "serial" in per_mode:  # each round's ratio: modes next to each other in time
            for run in runs:
                run["x_serial_by_round"] = [
                    round(own["scored_per_s"] / serial["scored_per_s"], 2)
                    if own["scored_per_s"] and serial["scored_per_s"] else None
                    for own, serial in zip(per_mode[run["mode"]], per_mode["serial"],
                                           strict=True)]
    report = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": {**machine(), "load_avg_start": load_start,
                    "load_avg_end": [round(x, 2) for x in os.getloadavg()]},
        "command": command_line(__file__, argv),
        "services": list(algorithms), "left_out": failed, "page_counts": counts,
        "two_core_scaling": scaling, "runs": runs,
    }
    write_results(args.out, "throughput", render_markdown(report), report)


if __name__ == "__main__":
    main()
