"""WARC throughput: records per second of `boilerbench extract --warc`, in-process with
1 and 2 worker processes and through a local Ray with 2 CPUs, and the scaling of 2
processes over 1.

    python benchmarks/warc.py [--records 2000] [--services bte,fusion,trafilatura]
                              [--datasets scrapinghub,cleaneval] [--rounds 2] [--no-ray]
                              [--out benchmarks/results]

The WARC (gzip per record) holds the datasets' pages as HTML responses, repeated in
turn up to --records, each its own record id. Each mode is the job itself
(orchestrator.warc_job.run_job, the code behind the command), writing JSONL to a
fresh file; its rate counts the rows written between the job's 10th and 90th
percent, so the start-up of the worker pool or of Ray and the tail are left out.
With --rounds R every mode runs R times, the modes interleaved (the order turning
each round), and the best round counts: this machine's speed drifts over minutes and
others' load comes and goes. The machine's own two-core scaling (benchmarks/throughput.py's
probe) is measured before each round: the ceiling of any 2-over-1 ratio at that moment.
Writes warc.json and warc.md into --out.
"""

from __future__ import annotations

import argparse
import datetime
import io
import os
import platform
import tempfile
import time
from pathlib import Path
from typing import Any

from common import positive_int, require_dataset, service_list, write_results
from rich.console import Console
from throughput import two_core_scaling

from orchestrator.warc_job import WarcJob, run_job
from tests.warc_files import Response, dataset_responses, write_warc

MODES = ("1 process", "2 processes", "Ray, 2 CPUs")


def build_warc(path: Path, datasets: list[str], records: int) -> int:
    """A WARC of `records` HTML responses taken in turn from the datasets' pages."""
    pools: list[list[Response]] = []
    for name in datasets:
        folder = require_dataset(name)
        pools.append(dataset_responses(folder / "html", records))
    mixed = [pool[i] for i in range(records) for pool in pools][:records]
    write_warc(path, mixed)
    return path.stat().st_size


def run_mode(warc: Path, service: str, mode: str, folder: Path) -> dict[str, Any]:
    out = folder / f"{service}-{mode.replace(' ', '-').replace(',', '')}.jsonl"
    out.unlink(missing_ok=True)
    job = WarcJob(paths=[warc], service=service, out=out, workers=1 if mode == MODES[0] else 2)
    ray = "auto" if mode == MODES[2] else None
    if ray:
        out = folder / f"{service}-ray"
        for shard in out.glob("part-*.jsonl"):
            shard.unlink()
        job = WarcJob(paths=[warc], service=service, out=out, workers=2)
    quiet = Console(file=io.StringIO())
    written: list[float] = []
    tally = run_job(job, quiet, ray, on_row=lambda _row: written.append(time.perf_counter()))
    return {"rows": tally.counts["written"], "errors": tally.counts["extraction errors"],
            "records_per_s": round(steady_rate(written), 2)}


def steady_rate(times: list[float]) -> float:
    """Rows per second between the row at 10 % and the row at 90 % of the job: the
    start-up (the pool's or Ray's workers loading the algorithm, Ray's first batches)
    and the tail (the last pages, with a worker idle) left out of every mode alike."""
    if len(times) < 10:
        return 0.0
    first, last = len(times) // 10, len(times) - 1 - len(times) // 10
    return (last - first) / (times[last] - times[first]) if times[last] > times[first] else 0.0


def enough_records(text: str) -> int:
    """An argparse type for --records: the rate counts the rows between the 10th and
    the 90th percent of a job, so fewer than 10 rows would read as 0 records/s."""
    value = positive_int(text)
    if value < 10:
        raise argparse.ArgumentTypeError(f"{value} is less than 10")
    return value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=enough_records, default=2000)
    parser.add_argument("--services", default="bte,fusion,trafilatura")
    parser.add_argument("--datasets", default="scrapinghub,cleaneval")
    parser.add_argument("--rounds", type=positive_int, default=2)
    parser.add_argument("--probes", type=int, default=2)
    parser.add_argument("--no-ray", action="store_true")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results")
    args = parser.parse_args()
    try:  # checked here: the command line below repeats --services as given
        services = service_list(args.services)
    except argparse.ArgumentTypeError as exc:
        parser.error(f"argument --services: {exc}")
    modes = MODES[:2] if args.no_ray else MODES
    load_start = [round(x, 2) for x in os.getloadavg()]
    started = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    rounds: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        warc = Path(tmp) / "crawl.warc.gz"
        size = build_warc(warc, args.datasets.split(","), args.records)
        for number in range(args.rounds):
            figures: dict[str, dict[str, Any]] = {s: {} for s in services}
            probe = two_core_scaling(args.probes)
            for service in services:
                turned = modes[number % len(modes):] + modes[:number % len(modes)]
                for mode in turned:
                    figures[service][mode] = run_mode(warc, service, mode, Path(tmp))
                    print(f"round {number + 1} {service} {mode}: {figures[service][mode]}",
                          flush=True)
            rounds.append({"machine_two_core_scaling": probe, "figures": figures})
    best: dict[str, dict[str, float]] = {
        s: {m: max(r["figures"][s][m]["records_per_s"] for r in rounds) for m in modes}
        for s in services}
    results = {
        "measured": started,
        "command": "python benchmarks/warc.py " + " ".join(
            f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items()
            if k not in ("out", "no_ray") and v != parser.get_default(k))
        + (" --no-ray" if args.no_ray else ""),
        "machine": {"cores": os.cpu_count(), "processor": platform.processor()
                    or platform.machine(), "python": platform.python_version(),
                    "load_avg_start": load_start,
                    "load_avg_end": [round(x, 2) for x in os.getloadavg()]},
        "warc": {"records": args.records, "datasets": args.datasets, "bytes": size},
        "best_records_per_s": best,
        # Within each round (the two modes under that round's load), the best of those.
        "scaling_2_over_1": {s: _best_ratio(rounds, s) for s in services},
        "rounds": rounds,
    }
    write_results(args.out, "warc", render_markdown(results, modes), results)


def _best_ratio(rounds: list[dict[str, Any]], service: str) -> float | None:
    """The highest 2-over-1 ratio of the rounds, each taken within its own round."""
    ratios = [r["figures"][service][MODES[1]]["records_per_s"]
              / r["figures"][service][MODES[0]]["records_per_s"]
              for r in rounds if r["figures"][service][MODES[0]]["records_per_s"]]
    return round(max(ratios), 2) if ratios else None


def render_markdown(results: dict[str, Any], modes: tuple[str, ...]) -> str:
    machine = results["machine"]
    probes = [p for r in results["rounds"] for p in r["machine_two_core_scaling"]]
    lines = [
        "# WARC throughput", "",
        f"Measured {results['measured']} on {machine['cores']} cores ({machine['processor']}), "
        f"Python {machine['python']}; load average at the start {machine['load_avg_start']}, "
        f"at the end {machine['load_avg_end']}; the machine's own two-core scaling "
        f"(probes) {probes}.",
        f"Command: `{results['command']}`. WARC: {results['warc']['records']:,} HTML records "
        f"from {results['warc']['datasets']} ({results['warc']['bytes'] / 2**20:.1f} MiB, "
        "gzip per record).", "",
        "Records per second of `boilerbench extract --warc` (rows written between the "
        "job's 10th and 90th percent; best of the rounds; the ratio taken within each round, "
        "then the best).", "",
        "| service | " + " | ".join(modes) + " | 2 processes / 1 |",
        "|---|" + "---:|" * (len(modes) + 1),
    ]
    for service, figures in results["best_records_per_s"].items():
        ratio = results["scaling_2_over_1"][service]
        lines.append(f"| {service} | " + " | ".join(f"{figures[m]:,.1f}" for m in modes)
                     + f" | {ratio if ratio is not None else '-'} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
