"""CETD's three measures side by side: word F1 of td, ctd and htd, htd's time and memory.

    python benchmarks/htd.py [--datasets scrapinghub,cleaneval,chaos,cleanportaleval]
                             [--sample N] [--seed 0] [--processes 2]
                             [--out benchmarks/results]

Runs services/cetd's pure extractor in-process on every page (or on a fixed random
sample of N pages per dataset, drawn with `--seed`) with measure td, ctd and htd,
and scores each extract by bag-of-words word F1 against the gold text
(shared.training.word_f1 on shared.tokens.tokenize), mean per page and dataset.
Each pool process keeps its own headless Chromium (shared.layout): htd's time per
page is the whole extraction (layout included), and the browser's memory is the
summed RSS of the chromium processes below a pool process, read after each page.
A page an extractor fails on scores 0 and is counted. Writes htd.md and htd.json.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import random
import statistics
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from common import REPO, command_line, load_note, positive_int, write_results
from quality import PageTask, dataset_tasks

from services.cetd.extractor import ALGORITHM
from shared.datasets import DATASETS
from shared.decoding import decode_html
from shared.tokens import tokenize
from shared.training import word_f1
from shared.workers import descendants

MEASURES = ("td", "ctd", "htd")


@dataclass(frozen=True)
class PageOutcome:
    dataset: str
    page_id: str
    f1: dict[str, float]
    failed: list[str]
    htd_ms: float | None
    browser_rss_mb: float


def browser_rss_mb() -> float:
    """Summed resident memory of the chromium processes below this process (MB)."""
    total_kb = 0
    for pid in descendants(os.getpid()):
        try:
            if "chrom" not in Path(f"/proc/{pid}/comm").read_text():
                continue
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total_kb += int(line.split()[1])
        except (OSError, ValueError):
            continue
    return total_kb / 1024


def evaluate_page(task: PageTask) -> PageOutcome:
    html = decode_html(task.html_path.read_bytes())
    gold = Counter(tokenize(task.gold_path.read_text(encoding="utf-8")))
    f1: dict[str, float] = {}
    failed: list[str] = []
    htd_ms = None
    for measure in MEASURES:
        started = time.perf_counter()
        try:
            reply = ALGORITHM.run(html, {"measure": measure})
        except Exception:  # a failing page counts as empty output
            f1[measure] = 0.0
            failed.append(measure)
            continue
        if measure == "htd":
            htd_ms = (time.perf_counter() - started) * 1000
        f1[measure] = word_f1(Counter(tokenize(reply.text)), gold)
    return PageOutcome(task.dataset, task.page_id, f1, failed, htd_ms, browser_rss_mb())


def sampled_tasks(name: str, sample: int | None, seed: int) -> list[PageTask]:
    """The pages of dataset `name`, or a fixed random sample of `sample` of them."""
    tasks = dataset_tasks(name, (), None)
    if sample and sample < len(tasks):
        tasks = sorted(random.Random(f"{seed}:{name}").sample(tasks, sample),
                       key=lambda task: task.page_id)
    return tasks


def summarize(outcomes: list[PageOutcome]) -> dict[str, dict[str, float | int]]:
    by_dataset: dict[str, list[PageOutcome]] = {}
    for outcome in outcomes:
        by_dataset.setdefault(outcome.dataset, []).append(outcome)
    by_dataset["all pages"] = outcomes
    table: dict[str, dict[str, float | int]] = {}
    for name, group in by_dataset.items():
        row: dict[str, float | int] = {"pages": len(group)}
        for measure in MEASURES:
            row[measure] = round(statistics.fmean(o.f1[measure] for o in group), 4)
            row[f"{measure}_failed"] = sum(measure in o.failed for o in group)
        times = [o.htd_ms for o in group if o.htd_ms is not None]
        row["htd_median_ms"] = round(statistics.median(times), 1) if times else 0.0
        table[name] = row
    return table


def markdown(table: dict[str, dict[str, float | int]], command: str, seconds: float,
             rss: list[float], sampled: bool, load: str) -> str:
    lines = [
        "# CETD: td, ctd and htd (word F1, bag of words, mean per page)", "",
        f"Command: `{command}`  ",
        f"Date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; elapsed "
        f"{seconds:.0f} s; {load}.  ",
        ("Pages: a fixed random sample per dataset (see the command's --sample and --seed)."
         if sampled else "Pages: every labelled page of each dataset."), "",
        "| dataset | pages | td | ctd | htd | htd − ctd | htd median ms/page | failed td/ctd/htd |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for name, row in table.items():
        lines.append(
            f"| {name} | {row['pages']} | {row['td']:.3f} | {row['ctd']:.3f} | {row['htd']:.3f} "
            f"| {float(row['htd']) - float(row['ctd']):+.3f} | {row['htd_median_ms']:.0f} "
            f"| {row['td_failed']}/{row['ctd_failed']}/{row['htd_failed']} |")
    if rss:
        lines += ["", f"Browser memory (summed RSS of one pool process's chromium processes, "
                  f"after each page): median {statistics.median(rss):.0f} MB, max "
                  f"{max(rss):.0f} MB (an upper bound: pages shared by the browser's processes "
                  "count once per process)."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--datasets", default=",".join(DATASETS))
    parser.add_argument("--sample", type=positive_int, default=None,
                        help="a fixed random sample of N pages per dataset")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--processes", type=positive_int, default=2)
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    args = parser.parse_args(argv)
    tasks = [task for name in args.datasets.split(",") if name.strip()
             for task in sampled_tasks(name.strip(), args.sample, args.seed)]
    start, load_start = time.perf_counter(), os.getloadavg()
    outcomes: list[PageOutcome] = []
    with multiprocessing.get_context("spawn").Pool(args.processes) as pool:
        for done, outcome in enumerate(pool.imap_unordered(evaluate_page, tasks), 1):
            outcomes.append(outcome)
            if done % 25 == 0 or done == len(tasks):
                print(f"{done}/{len(tasks)} pages, {time.perf_counter() - start:.0f} s",
                      file=sys.stderr, flush=True)
        # Workers that end on their own run their exit handlers, which stop the browser
        # and remove its temporary folders; the pool's terminate() would kill them first.
        pool.close()
        pool.join()
    seconds = time.perf_counter() - start
    outcomes.sort(key=lambda o: (o.dataset, o.page_id))
    table = summarize(outcomes)
    rss = [o.browser_rss_mb for o in outcomes if o.browser_rss_mb > 0]
    command = command_line(__file__, argv)
    write_results(args.out, "htd", markdown(table, command, seconds, rss, bool(args.sample),
                                                  load_note(load_start)), {
        "command": command, "seconds": round(seconds, 1), "summary": table,
        "browser_rss_mb": {"median": round(statistics.median(rss), 1) if rss else None,
                           "max": round(max(rss), 1) if rss else None},
        "pages": [{"dataset": o.dataset, "page": o.page_id, "f1": o.f1, "failed": o.failed,
                   "htd_ms": o.htd_ms} for o in outcomes]})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
