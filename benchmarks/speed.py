"""Speed: every service in-process and over HTTP, beside the parsing floors and trafilatura.

    python benchmarks/speed.py [--datasets scrapinghub,cleaneval] [--services all|a,b]
                               [--limit N] [--repeat R] [--no-http] [--pair-peer]
                               [--out benchmarks/results]

On every page of the datasets (the first N per dataset with --limit), measured in
one run:

- floors: `decode` (shared.decoding.decode_html, bytes to text) and `lxml`
  (lxml.html.document_fromstring alone, on the page's decoded, UTF-8 encoded text);
  `parse_html` (shared.html.parse_html: the cleaning and parse every service does)
  beside them;
- the peer: `trafilatura.extract` called directly on the decoded text;
- each service (a service:key=value target sets an option, as in quality.py, e.g.
  density:threshold=fixed; `all` expands density into its four thresholds):
  in-process, decode + the pure extractor; and over HTTP, the real service started
  by LocalStack on a free port, raw text/html bodies, one keep-alive HTTP/1.1
  connection (http.client, KeepAliveClient), sequential requests (latency, not
  throughput). The ensemble runs over HTTP with its default members, each its own
  service on a free port that it asks at once: its wall time includes theirs, and
  its CPU and memory figures count every process of that stack. Each member is also
  asked directly just before every ensemble request (paired, with the options the
  ensemble asks it with), so the ensemble's ratio to its slowest member compares times
  taken under the same load.

Every in-process target runs in a fresh subprocess (so imports, caches and peak
memory are its own); per-page times, in-process and over HTTP (with the paired
in-process run), are the minimum over --repeat passes. Peak
memory: the subprocess's ru_maxrss (in-process) and the summed VmHWM of the
service's process tree (HTTP: uvicorn and its extraction workers). With --pair-peer,
each service's subprocess also times trafilatura.extract on every page right after the
service (same process, same page, alternating), and `x_trafilatura` is the ratio of
those paired CPU medians: on a machine loaded by others, the only fair ratio. The datasets
have no feeds, so rss gets a one-item feed per page (common.rss_feed): the page's URL
as the item's link and the first 60 words of its gold text as the item's summary.

Writes speed.json (every page's times) and speed.md (the tables and the speed
targets checked) into --out, with the date and the machine.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import http.client
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode, urlsplit

import orjson
from common import (
    REPO,
    PageRef,
    command_line,
    load_pages,
    machine,
    page_options,
    parse_target,
    positive_int,
    query_params,
    write_results,
)
from lxml import etree

from shared.registry import SERVICES

if TYPE_CHECKING:
    from orchestrator.launcher import LocalStack

FLOORS = ("decode", "lxml", "parse_html")
PEER = "trafilatura.extract"
DENSITY_MODES = ("fixed", "mean", "gaussian", "learned")
WARM_UP_PAGES = 3


# ---------------------------------------------------------------------------------------
# Targets


def expand_services(value: str) -> list[str]:
    """'all' -> every registry service (density as its four thresholds); else 'a,b:k=v'."""
    if value.strip() == "all":
        names: list[str] = []
        for name in SERVICES:
            if name == "density":
                names += [f"density:threshold={mode}" for mode in DENSITY_MODES]
            else:
                names.append(name)
        return names
    targets = [t.strip() for t in value.split(",") if t.strip()]
    for target in targets:
        if parse_target(target)[0] not in SERVICES:
            raise SystemExit(f"unknown service in {target!r}; known: {', '.join(SERVICES)}")
    return targets


# ---------------------------------------------------------------------------------------
# In-process measurement (runs in a fresh child process per target)


def _make_runner(target: str) -> Callable[[bytes, PageRef], None]:
    """decode + work for one target, as a function of the page bytes."""
    from shared.decoding import decode_html

    if target == "decode":
        def decode(data: bytes, _page: PageRef) -> None:
            decode_html(data)

        return decode
    if target in ("lxml", "parse_html"):
        raise AssertionError("floors that exclude decoding are run by _floor_times")
    if target == PEER:
        import trafilatura

        def peer(data: bytes, _page: PageRef) -> None:
            trafilatura.extract(decode_html(data))

        return peer

    name, _ = parse_target(target)
    algorithm = SERVICES[name].algorithm()
    algorithm.warm_up()
    model = algorithm.options_model

    def run(data: bytes, page: PageRef) -> None:
        options, url = page_options(target, page)
        algorithm.extract(decode_html(data), model.model_validate(options), url)

    return run


def _floor_bytes(text: str) -> bytes:
    """What lxml's bare parse is given: the decoded page, cleaned, as UTF-8."""
    from shared.html import clean_text

    return clean_text(text).encode("utf-8", errors="replace")


def _parse_lxml(data: bytes) -> None:
    """lxml's HTML parse alone: the floor."""
    import lxml.html

    from shared.html import _PARSER

    with contextlib.suppress(etree.ParserError, ValueError):  # empty: the attempt counts
        lxml.html.document_fromstring(data, parser=_PARSER)


def _floor_times(target: str, text: str, repeat: int) -> tuple[float, float]:
    """Wall and CPU milliseconds of one parse floor on decoded text (min over `repeat`)."""
    from shared.html import parse_html

    data = _floor_bytes(text)

    def parse_lxml() -> None:
        _parse_lxml(data)

    def parse_shared() -> None:
        parse_html(text)

    work = parse_lxml if target == "lxml" else parse_shared
    best = best_cpu = float("inf")
    for _ in range(repeat):
        start, start_cpu = time.perf_counter(), time.process_time()
        work()
        best_cpu = min(best_cpu, time.process_time() - start_cpu)
        best = min(best, time.perf_counter() - start)
    return best * 1000, best_cpu * 1000


def _rss_kb() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def child_main(target: str, pages_file: str, repeat: int, pair_peer: bool = False) -> None:
    """Time one target on every page; print JSON to stdout."""
    from shared.contract import PageError
    from shared.decoding import NotHTMLError, decode_html

    pages = [PageRef(**p) for p in json.loads(Path(pages_file).read_text())]
    blobs = [Path(p.html_path).read_bytes() for p in pages]
    results: list[dict[str, Any]] = []
    if target in ("lxml", "parse_html"):
        import lxml.html  # noqa: F401  (imported before the baseline)
        texts: list[str | None] = []
        for data in blobs:
            try:
                texts.append(decode_html(data))
            except NotHTMLError:
                texts.append(None)
        for text in texts[:WARM_UP_PAGES]:
            if text is not None:
                _floor_times(target, text, 1)
        baseline_kb = _rss_kb()
        for page, text in zip(pages, texts, strict=True):
            row: dict[str, Any] = {"dataset": page.dataset, "id": page.page_id}
            if text is None:
                row.update(ms=None, error="not HTML")
            else:
                wall, cpu = _floor_times(target, text, repeat)
                row.update(ms=round(wall, 4), cpu_ms=round(cpu, 4), error=None)
            results.append(row)
    else:
        run = _make_runner(target)
        peer = _make_runner(PEER) if pair_peer and target != PEER else None
        for page, data in list(zip(pages, blobs, strict=True))[:WARM_UP_PAGES]:
            try:
                run(data, page)
                if peer is not None:
                    peer(data, page)
            except Exception:  # warm-up only; errors are counted below
                continue
        baseline_kb = _rss_kb()
        for page, data in zip(pages, blobs, strict=True):
            best = best_cpu = best_floor = best_peer = float("inf")
            error: str | None = None
            try:
                floor: bytes | None = _floor_bytes(decode_html(data))
            except NotHTMLError:
                floor = None
            for _ in range(repeat):
                start, start_cpu = time.perf_counter(), time.process_time()
                try:
                    run(data, page)
                except (PageError, NotHTMLError) as exc:
                    error = f"{type(exc).__name__}: {str(exc)[:120]}"
                except Exception as exc:
                    error = f"{type(exc).__name__}: {str(exc)[:120]}"
                best_cpu = min(best_cpu, time.process_time() - start_cpu)
                best = min(best, time.perf_counter() - start)
                if floor is not None:  # the floor on the same page, right after: same load
                    start_cpu = time.process_time()
                    _parse_lxml(floor)
                    best_floor = min(best_floor, time.process_time() - start_cpu)
                if peer is not None and floor is not None:  # the peer, alternately
                    start_cpu = time.process_time()
                    with contextlib.suppress(Exception):
                        peer(data, page)
                    best_peer = min(best_peer, time.process_time() - start_cpu)
            row = {"dataset": page.dataset, "id": page.page_id,
                   "ms": round(best * 1000, 4), "cpu_ms": round(best_cpu * 1000, 4),
                   "floor_cpu_ms": round(best_floor * 1000, 4) if floor else None,
                   "error": error}
            if peer is not None:
                row["peer_cpu_ms"] = round(best_peer * 1000, 4) if floor else None
            results.append(row)
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    json.dump({"target": target, "pages": results, "baseline_rss_mb": round(baseline_kb / 1024, 1),
               "peak_rss_mb": round(peak_kb / 1024, 1)}, sys.stdout)


def measure_in_process(target: str, pages_file: Path, repeat: int, pair_peer: bool = False
                       ) -> dict[str, Any]:
    command = [sys.executable, str(Path(__file__).resolve()), "--child", target,
               "--pages-file", str(pages_file), "--repeat", str(repeat),
               *(["--pair-peer"] if pair_peer else [])]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        return {"target": target, "pages": [], "failed": done.stderr[-2000:]}
    result: dict[str, Any] = json.loads(done.stdout)
    return result


# ---------------------------------------------------------------------------------------
# HTTP measurement


def _tree_peak_mb(pid: int) -> float:
    """Summed peak RSS (VmHWM) of a process tree, in MB."""
    from tests.processes import tree_memory_bytes

    return round(tree_memory_bytes(pid, "VmHWM") / 2**20, 1)


class KeepAliveClient:
    """POSTs over one keep-alive HTTP/1.1 connection (http.client), the measuring
    instrument of the HTTP path: httpx costs ~0.6 ms of Python per request, which
    would be counted against the service."""

    def __init__(self, base_url: str, timeout: float = 120.0) -> None:
        parts = urlsplit(base_url)
        self.conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port,
                                               timeout=timeout)

    def post(self, path: str, body: bytes, params: dict[str, str],
             content_type: str = "text/html") -> tuple[int, bytes]:
        target = f"{path}?{urlencode(params)}" if params else path
        self.conn.request("POST", target, body=body, headers={"content-type": content_type})
        reply = self.conn.getresponse()
        return reply.status, reply.read()

    def close(self) -> None:
        self.conn.close()


def measure_http(target: str, pages: Sequence[PageRef], repeat: int = 1) -> dict[str, Any]:
    """Sequential raw text/html POSTs to the real service over one keep-alive connection
    (KeepAliveClient).

    Each page is also run in-process here just before its request ("paired"), so
    that both paths see the same machine load: the HTTP/in-process ratios use these.
    With repeat > 1 each page goes `repeat` times through both paths and the minimum
    of each is kept, as for the in-process times: on a loaded machine every hand-over
    between client, service and worker can wait for a core, and the minimum filters
    that out of both paths alike."""
    from orchestrator.launcher import StackError

    name, _ = parse_target(target)
    stack = _stack_for(name)
    try:
        urls = stack.start(timeout=180.0)
    except StackError as exc:
        return {"target": target, "pages": [], "failed": str(exc)}
    results: list[dict[str, Any]] = []
    run = _make_runner(target)
    # The ensemble's members, asked directly just before each ensemble request: its
    # ratio to its slowest member compares times taken under the same machine load.
    members = {m: KeepAliveClient(u) for m, u in urls.items() if m != name}
    if members:  # asked as the ensemble asks them (text peers: their text alone)
        from services.ensemble.members import member_options
    try:
        client = KeepAliveClient(urls[name])
        try:
            blobs = [Path(p.html_path).read_bytes() for p in pages]
            for page, data in list(zip(pages, blobs, strict=True))[:WARM_UP_PAGES]:
                options, page_url = page_options(target, page)
                client.post("/extract", data, query_params(options, page_url))
            # The ensemble's members are its cost too: every service of the stack counts.
            pids = [service.process.pid for service in stack.processes.values()]
            cpu_before = sum(map(_tree_cpu_s, pids)) + time.process_time()
            paired_cpu_s = member_cpu_s = 0.0  # the in-process runs, the members' services
            asking_members_s = 0.0  # this client's CPU for asking the members
            for page, data in zip(pages, blobs, strict=True):
                options, page_url = page_options(target, page)
                params = query_params(options, page_url)
                paired = elapsed = float("inf")
                member_ms = dict.fromkeys(members, float("inf"))
                for _ in range(repeat):
                    start, start_cpu = time.perf_counter(), time.process_time()
                    with contextlib.suppress(Exception):  # its errors show in the HTTP reply
                        run(data, page)
                    paired = min(paired, (time.perf_counter() - start) * 1000)
                    paired_cpu_s += time.process_time() - start_cpu
                    asking_started = time.process_time()
                    for member, member_client in members.items():
                        member_cpu_s -= _tree_cpu_s(stack.processes[member].process.pid)
                        start = time.perf_counter()
                        member_client.post("/extract", data,
                                           query_params(member_options(member), page_url))
                        member_ms[member] = min(member_ms[member],
                                                (time.perf_counter() - start) * 1000)
                        member_cpu_s += _tree_cpu_s(stack.processes[member].process.pid)
                    asking_members_s += time.process_time() - asking_started
                    start = time.perf_counter()
                    status, body = client.post("/extract", data, params)
                    elapsed = min(elapsed, (time.perf_counter() - start) * 1000)
                server_ms = None
                error = None
                if status == 200:
                    server_ms = orjson.loads(body)["elapsed_ms"]
                else:
                    error = f"HTTP {status}: {body[:120]!r}"
                results.append({"dataset": page.dataset, "id": page.page_id,
                                "ms": round(elapsed, 4), "server_ms": server_ms,
                                "paired_ms": round(paired, 4), "error": error,
                                **({"members_ms": {m: round(v, 4) for m, v in member_ms.items()}}
                                   if members else {})})
        finally:
            client.close()
            for member_client in members.values():
                member_client.close()
        # CPU of the service's processes and of this client per page: the cost of
        # the HTTP path that scheduling delays on a loaded machine do not blur.
        cpu_ms = (sum(map(_tree_cpu_s, pids)) + time.process_time() - paired_cpu_s
                  - member_cpu_s - asking_members_s - cpu_before) * 1000
        peak = sum(map(_tree_peak_mb, pids))
    finally:
        stack.stop()
    return {"target": target, "pages": results, "peak_rss_mb": peak,
            "cpu_mean_ms": round(cpu_ms / max(len(results) * repeat, 1), 3)}


def _stack_for(name: str) -> LocalStack:
    """The service alone on a free port; the ensemble with its default members, each on
    a free port, reached over HTTP (so its times include its members', asked at once)."""
    from orchestrator.launcher import stack_with_members

    if name != "ensemble":
        return stack_with_members(name, [])
    from services.ensemble.model import default_model

    return stack_with_members(name, default_model().default_members)


def _tree_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process tree (its live members)."""
    from tests.processes import process_cpu_s, process_tree

    return sum(map(process_cpu_s, process_tree(pid)))


# ---------------------------------------------------------------------------------------
# Statistics and output


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


def summarize_times(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    times = [r["ms"] for r in rows if r.get("ms") is not None]
    if not times:
        return {"pages": len(rows), "errors": len(rows), "median_ms": None, "p95_ms": None,
                "pages_per_s_per_core": None}
    cpu = [r["cpu_ms"] for r in rows if r.get("cpu_ms") is not None]
    cpu_mean = round(statistics.fmean(cpu), 3) if cpu else None
    return {
        "cpu_mean_ms": cpu_mean,
        "pages": len(rows),
        "errors": sum(1 for r in rows if r.get("error")),
        "median_ms": round(statistics.median(times), 3),
        "cpu_median_ms": round(statistics.median(cpu), 3) if cpu else None,
        "p95_ms": round(percentile(times, 0.95), 3),
        "mean_ms": round(statistics.fmean(times), 3),
        "pages_per_s_per_core": round(len(times) / (sum(times) / 1000), 1) if sum(times) else None,
    }


def build_summary(in_process: dict[str, dict[str, Any]], http: dict[str, dict[str, Any]],
                  datasets: Sequence[str]) -> dict[str, Any]:
    """Per target and dataset (and 'all'): medians, p95, ratios to the floors and the peer."""
    summary: dict[str, Any] = {}
    scopes = [*datasets, "all"]
    for scope in scopes:
        def rows(result: dict[str, Any] | None, scope: str = scope) -> list[dict[str, Any]]:
            pages = (result or {}).get("pages", [])
            return [r for r in pages if scope == "all" or r["dataset"] == scope]

        # Ratios on CPU time: on a loaded machine wall time also counts other processes.
        lxml_cpu = summarize_times(rows(in_process.get("lxml"))).get("cpu_median_ms")
        peer_cpu = summarize_times(rows(in_process.get(PEER))).get("cpu_median_ms")
        per_scope: dict[str, Any] = {}
        for target, result in in_process.items():
            entry = {"in_process": summarize_times(rows(result))}
            median = entry["in_process"]["median_ms"]
            cpu = entry["in_process"].get("cpu_median_ms")
            # A service's floor is lxml parsing the same pages in the same process,
            # alternately with it (paired); the floor rows use the standalone floor run.
            floors = [r["floor_cpu_ms"] for r in rows(result) if r.get("floor_cpu_ms")]
            floor_cpu = statistics.median(floors) if floors else lxml_cpu
            if floors:
                entry["paired_lxml_cpu_median_ms"] = round(statistics.median(floors), 3)
            if cpu is not None and floor_cpu:
                entry["x_lxml"] = round(cpu / floor_cpu, 4)
            paired_peer = [r["peer_cpu_ms"] for r in rows(result) if r.get("peer_cpu_ms")]
            if paired_peer:  # the peer timed alternately with the target, in its process
                entry["paired_trafilatura_cpu_median_ms"] = round(
                    statistics.median(paired_peer), 3)
                if cpu is not None:
                    entry["x_trafilatura"] = round(cpu / statistics.median(paired_peer), 4)
            elif cpu is not None and peer_cpu:
                entry["x_trafilatura"] = round(cpu / peer_cpu, 4)
            if target in http:
                http_rows = rows(http[target])
                entry["http"] = summarize_times(http_rows)
                server = [r["server_ms"] for r in http_rows if r.get("server_ms") is not None]
                entry["http"]["server_median_ms"] = (
                    round(statistics.median(server), 3) if server else None)
                cpu_mean = entry["in_process"].get("cpu_mean_ms")
                if scope == "all" and cpu_mean is not None and "cpu_mean_ms" in http[target]:
                    entry["http_cpu_added_ms"] = round(http[target]["cpu_mean_ms"] - cpu_mean, 3)
                http_median = entry["http"]["median_ms"]
                paired = [r["paired_ms"] for r in http_rows if r.get("paired_ms") is not None]
                if paired:  # the same pages in-process, just before each request
                    median = statistics.median(paired)
                    entry["http"]["paired_in_process_median_ms"] = round(median, 3)
                asked = [r["members_ms"] for r in http_rows if r.get("members_ms")]
                if asked:  # the ensemble's members asked directly, just before it
                    entry["http"]["paired_members_median_ms"] = {
                        m: round(statistics.median(r[m] for r in asked), 3) for m in asked[0]}
                if median and http_median is not None:
                    entry["http_over_in_process"] = round(http_median / median, 4)
                    entry["http_added_ms"] = round(http_median - median, 3)
            per_scope[target] = entry
        summary[scope] = per_scope
    return summary


def check_targets(summary: dict[str, Any], datasets: Sequence[str],
                  services: Sequence[str]) -> list[dict[str, Any]]:
    """The speed targets the services are held to, each with the figure measured."""
    checks: list[dict[str, Any]] = []
    for dataset in datasets:
        scope = summary[dataset]
        for target in services:
            entry = scope.get(target, {})
            median = entry.get("in_process", {}).get("median_ms")
            name, options = parse_target(target)
            # Not for the ensemble: over HTTP its members work in their own processes at
            # once, in-process one after another, so the ratio is not what HTTP costs.
            if "http_added_ms" in entry and median is not None and name != "ensemble":
                if median > 10:
                    ok = entry["http_over_in_process"] <= 1.3
                    rule = "HTTP <= 1.3x in-process"
                    figure = f"{entry['http_over_in_process']}x"
                else:
                    ok = entry["http_added_ms"] <= 3.0
                    rule = "HTTP adds <= 3 ms"
                    figure = f"+{entry['http_added_ms']} ms"
                checks.append({"dataset": dataset, "target": target, "rule": rule,
                               "figure": figure, "ok": ok})
            limit = None
            if name in ("bte", "cetd"):
                limit = 3.0
            elif name == "density":
                limit = 4.0 if options.get("threshold", "learned") == "learned" else 3.0
            if name == "fusion" and "x_trafilatura" in entry:
                checks.append({"dataset": dataset, "target": target,
                               "rule": "in-process <= 0.5x trafilatura.extract (CPU medians)",
                               "figure": f"{entry['x_trafilatura']}x",
                               "ok": entry["x_trafilatura"] <= 0.5})
            if limit is not None and "x_lxml" in entry:
                checks.append({"dataset": dataset, "target": target,
                               "rule": f"in-process <= {limit:g}x lxml parse",
                               "figure": f"{entry['x_lxml']}x", "ok": entry["x_lxml"] <= limit})
        ensemble_http = scope.get("ensemble", {}).get("http", {})
        ensemble = ensemble_http.get("median_ms")
        # Its members as asked directly beside it (paired), else their own HTTP runs.
        paired_members = ensemble_http.get("paired_members_median_ms") or {}
        member_ms = (list(paired_members.values()) if paired_members else
                     [scope.get(m, {}).get("http", {}).get("median_ms")
                      for m in _ensemble_members()])
        if ensemble is not None and member_ms and None not in member_ms:
            slowest = max(m for m in member_ms if m is not None)
            checks.append({"dataset": dataset, "target": "ensemble",
                           "rule": "HTTP median <= 1.3x its slowest default member's"
                                   + (" (paired)" if paired_members else ""),
                           "figure": f"{ensemble:.1f} ms vs {slowest:.1f} ms "
                                     f"({ensemble / slowest:.2f}x)",
                           "ok": ensemble <= 1.3 * slowest})
    return checks


def _ensemble_members() -> list[str]:
    """The ensemble's default members ([] where its model cannot load)."""
    try:
        from services.ensemble.model import default_model

        return list(default_model().default_members)
    except Exception:
        return []


def _fmt(value: Any, suffix: str = "") -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        text = f"{value:.2f}" if value < 100 else f"{value:.0f}"
        return text + suffix
    return f"{value}{suffix}"


def render_markdown(report: dict[str, Any]) -> str:
    m = report["machine"]
    lines = [
        "# Speed",
        "",
        f"Measured {report['date']} on {m['nproc']} cores ({m['cpu']}), Python {m['python']}; "
        f"load average at the start {m['load_avg_start']}, at the end {m['load_avg_end']}.",
        f"Command: `{report['command']}`. Pages: "
        + ", ".join(f"{d} {n}" for d, n in report["page_counts"].items())
        + f"; per-page time = min of {report['repeat']} pass(es).",
        "",
        "In-process = decode + the pure extractor in one fresh process; HTTP = the real "
        "service (uvicorn + 1 extraction worker), raw text/html body, one keep-alive "
        "HTTP/1.1 connection (Python's http.client), "
        "sequential requests (wall time). HTTP / in-proc and HTTP added compare the HTTP "
        "median with the median of the same pages run in-process by the benchmark just "
        "before each request (paired in-proc: the same machine load). Median and p95 are "
        "wall time; CPU median is the "
        "in-process CPU time (process_time), steadier on a loaded machine. x lxml: in-process "
        "CPU median over the CPU median of lxml's parse alone of the same pages, timed in the "
        "same process right after each pass of the service (paired: the same machine load; "
        "the floor rows use their own run). x trafilatura: over the CPU median of "
        "trafilatura.extract called directly. pages/s/core: pages over the summed in-process "
        "wall seconds (one core). HTTP CPU added (in the 'all' table): CPU seconds of the "
        "service's processes and of the client per page, minus the in-process CPU per page "
        "(means): the HTTP path's cost without the scheduling delays of a loaded machine. "
        "The ensemble's members run as services of its stack; each is also asked directly "
        "just before every ensemble request, with the options the ensemble asks it with "
        "(text peers: their text alone), and the ensemble's ratio to its slowest member "
        "(paired) compares those medians (the same machine load; their CPU, and this "
        "client's for asking them, is not counted in the ensemble's). The ensemble is held "
        "to that ratio, not to HTTP against in-process (its members work at once over HTTP, "
        "one after another in-process).",
        "",
    ]
    for scope, entries in report["summary"].items():
        lines += [f"## {scope}", "",
                  "| target | pages | errors | median ms | p95 ms | CPU median ms | HTTP median ms "
                  "| HTTP p95 ms | paired in-proc median ms "
                  "| HTTP / in-proc | HTTP added ms | x lxml | x trafilatura | pages/s/core "
                  "| peak RSS MB in-proc | peak RSS MB HTTP tree | HTTP CPU added ms |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for target, entry in entries.items():
            ip = entry["in_process"]
            hp = entry.get("http", {})
            mem_ip = report["memory"].get(target, {}).get("in_process_peak_mb")
            mem_http = report["memory"].get(target, {}).get("http_tree_peak_mb")
            lines.append(
                f"| {target} | {ip['pages']} | {ip['errors']} | {_fmt(ip['median_ms'])} "
                f"| {_fmt(ip['p95_ms'])} | {_fmt(ip.get('cpu_median_ms'))} "
                f"| {_fmt(hp.get('median_ms'))} | {_fmt(hp.get('p95_ms'))} "
                f"| {_fmt(hp.get('paired_in_process_median_ms'))} "
                f"| {_fmt(entry.get('http_over_in_process'))} "
                f"| {_fmt(entry.get('http_added_ms'))} | {_fmt(entry.get('x_lxml'))} "
                f"| {_fmt(entry.get('x_trafilatura'))} | {_fmt(ip.get('pages_per_s_per_core'))} "
                f"| {_fmt(mem_ip)} | {_fmt(mem_http)} | {_fmt(entry.get('http_cpu_added_ms'))} |")
        lines.append("")
    if report["checks"]:
        lines += ["## Speed targets", "", "| dataset | target | rule | measured | met |",
                  "|---|---|---|---|---|"]
        for c in report["checks"]:
            lines.append(f"| {c['dataset']} | {c['target']} | {c['rule']} | {c['figure']} "
                         f"| {'yes' if c['ok'] else 'NO'} |")
        lines.append("")
    if report["failures"]:
        lines += ["## Failures", ""]
        lines += [f"- {k}: {v.splitlines()[-1] if v else ''}" for k, v in
                  report["failures"].items()]
        lines.append("")
    return "\n".join(lines)


def measure_each(targets: Sequence[str], how: str, failures: dict[str, str],
                 measure: Callable[[str], dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each target's measurement `how` ("in-process", "http"), the seconds each took on
    stderr; a failed one goes to `failures` instead."""
    results = {}
    for target in targets:
        started = time.perf_counter()
        result = measure(target)
        print(f"{how} {target}: {time.perf_counter() - started:.1f} s", file=sys.stderr,
              flush=True)
        if "failed" in result:
            failures[f"{target} ({how})"] = result["failed"]
        else:
            results[target] = result
    return results


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets", default="scrapinghub,cleaneval")
    parser.add_argument("--services", default="all")
    parser.add_argument("--limit", type=positive_int, default=None,
                        help="First N pages per dataset.")
    parser.add_argument("--repeat", type=positive_int, default=1,
                        help="Passes per page (min is kept).")
    parser.add_argument("--no-http", action="store_true", help="Skip the HTTP measurements.")
    parser.add_argument("--pair-peer", action="store_true",
                        help="Time trafilatura.extract alternately with each service, in its "
                             "process, and take x_trafilatura from those pairs.")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--pages-file", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child_main(args.child, args.pages_file, args.repeat, args.pair_peer)
        return

    datasets = [d.strip() for d in args.datasets.split(",") if d.strip()]
    services = expand_services(args.services)
    pages = load_pages(datasets, args.limit)
    load_start = [round(x, 2) for x in os.getloadavg()]
    failures: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as tmp:
        pages_file = Path(tmp) / "pages.json"
        pages_file.write_text(json.dumps([p.__dict__ for p in pages]))
        in_process = measure_each(
            (*FLOORS, PEER, *services), "in-process", failures,
            lambda target: measure_in_process(target, pages_file, args.repeat,
                                              args.pair_peer and target in services))
    http = {} if args.no_http else measure_each(
        [t for t in services if t in in_process],  # the others' extractors did not load
        "http", failures, lambda target: measure_http(target, pages, args.repeat))
    summary = build_summary(in_process, http, datasets)
    memory = {t: {"in_process_peak_mb": r.get("peak_rss_mb"),
                  "in_process_baseline_mb": r.get("baseline_rss_mb"),
                  "http_tree_peak_mb": http.get(t, {}).get("peak_rss_mb")}
              for t, r in in_process.items()}
    report = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": {**machine(), "load_avg_start": load_start,
                    "load_avg_end": [round(x, 2) for x in os.getloadavg()]},
        "command": command_line(__file__, argv),
        "repeat": args.repeat,
        "page_counts": {d: sum(1 for p in pages if p.dataset == d) for d in datasets},
        "summary": summary,
        "memory": memory,
        "checks": check_targets(summary, datasets, services),
        "failures": failures,
        "pages": {"in_process": {t: r["pages"] for t, r in in_process.items()},
                  "http": {t: r["pages"] for t, r in http.items()}},
    }
    report["machine"]["load_avg_start"] = load_start
    write_results(args.out, "speed", render_markdown(report), report)


if __name__ == "__main__":
    main()
