"""Coverage of "95%" intervals of a mean per-page figure, on real per-page word F1.

    python benchmarks/interval_coverage.py [--sizes 5,10,20,50,200] [--repetitions 4000]
                                           [--resamples 2000] [--seed 1] [--processes 2]
                                           [--populations FILE] [--out benchmarks/results]

What it measures: how often an interval that claims 95% contains the mean it
estimates, at the test-set sizes users run (the built-in sample is 13 pages). The
reports give every macro figure as a mean over pages with a 95% interval
(orchestrator/statistics.py), and the interval is only worth printing if it covers
the true mean 95% of the time.

Populations: the per-page word F1 (alignment, orchestrator.scoring) of a service's
in-process extractor on every page of a dataset, or the per-page difference of two
services' F1 (POPULATIONS), taken as the whole population, so that its mean is the
true mean. A sample is n pages drawn from it with replacement; a cell's coverage is
the share of --repetitions samples whose interval contains the population mean, with
a Monte Carlo standard error of sqrt(p(1-p)/R): 0.34 points at p = 0.95 and R = 4000,
so each cell is within ±0.7 points (95%). A page an extractor fails on scores as empty
output, as in a run.

Methods, each computed from the same bootstrap resamples of a sample (so their
differences are not resampling noise), with scipy where scipy has the method:
- percentile: the bootstrap's 2.5% and 97.5% quantiles (Efron 1979; scipy.stats.bootstrap);
- BCa: bias-corrected and accelerated percentiles (Efron 1987; scipy.stats.bootstrap);
- expanded percentile: percentile quantiles at the level that makes the interval as
  wide as Student's t for normal data, alpha' = Φ(-sqrt(n/(n-1)) t_{alpha/2,n-1})
  (Hesterberg 2015, The American Statistician 69(4), section 5.3);
- Student's t: mean ± t_{0.975,n-1} s/sqrt(n) (scipy.stats.t);
- bootstrap-t: the studentized bootstrap, mean - quantiles of (mean* - mean)/se* times
  the standard error (Efron and Tibshirani 1993, An Introduction to the Bootstrap,
  chapter 12.5);
- symmetric bootstrap-t: mean ± the 95% quantile of |t*| times the standard error
  (Hall 1988, Journal of the Royal Statistical Society B 50(1));
- beta bootstrap-t: the bootstrap-t with every page weighted by an independent
  Beta(1/2, 3/2) draw instead of resampled whole (Owen 2025, "Better bootstrap t
  confidence intervals for the mean", arXiv:2508.10083);
- orchestrator.statistics: the project's own bootstrap_cis, as a report computes it:
  from 20 pages the bootstrap-t, below that the beta bootstrap-t on the arcsine scale,
  either way Student's t where more than 2.5% of the resamples have no spread (the
  bootstrap-t interval is then unbounded), from one set of resamples drawn with its
  fixed seed for every sample of a size.
Every interval is clipped to the range the values can take ([0, 1] for F1, [-1, 1]
for a difference), as the reports clip theirs; clipping never uncovers the mean, so
it changes widths only. Besides coverage: how often the interval misses on each
side, its median width, and how often it spans 90% of the range or more ([0, 1] or
nearly: an interval that says nothing).

The per-page F1 are stored in the results JSON; --populations FILE reads them from
such a file instead of running the extractors (the simulation alone takes a few
minutes).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from common import (
    REPO,
    command_line,
    existing_file,
    load_note,
    machine,
    positive_int,
    write_results,
)
from numpy.typing import NDArray
from quality import PageTask, dataset_tasks
from scipy import stats

from orchestrator.scoring import prepare_page, score_empty, score_extraction
from orchestrator.statistics import bootstrap_cis
from shared.contract import PageError
from shared.decoding import decode_html
from shared.registry import SERVICES

LEVEL = 0.95
_CHUNK_CELLS = 4_000_000  # samples x resamples x pages per numpy call (memory bound)


@dataclass(frozen=True)
class Population:
    label: str
    dataset: str
    service: str
    minus: str | None = None
    """Another service: the population is the paired difference service - minus."""

    @property
    def bounds(self) -> tuple[float, float]:
        """The values' possible range: F1 is in [0, 1], a difference of two in [-1, 1]."""
        return (0.0, 1.0) if self.minus is None else (-1.0, 1.0)

    @property
    def name(self) -> str:
        what = self.service if self.minus is None else f"{self.service} − {self.minus}"
        return f"{what} on {self.dataset}"


POPULATIONS = (
    # A strong service: a third of the pages at F1 1, a long tail down to 0.
    Population("strong", "scrapinghub", "readability"),
    # A weak one: bimodal, a sixth of the pages at 0.
    Population("weak", "scrapinghub", "justext"),
    # Moderately skewed, no zeros.
    Population("moderate", "chaos", "bte"),
    # A paired difference: a spike at 0 and long tails on both sides.
    Population("difference", "scrapinghub", "trafilatura", minus="readability"),
)

MODULE = "orchestrator.statistics"
METHODS = ("percentile", "BCa", "expanded percentile", "Student t", "bootstrap-t",
           "symmetric bootstrap-t", "beta bootstrap-t", MODULE)
WIDE = 0.9
"""An interval spanning this share of the values' range or more says nothing."""


def page_f1(job: tuple[PageTask, tuple[str, ...]]) -> tuple[str, str, dict[str, float]]:
    """(dataset, page, service -> word F1) for one page; a page a service refuses on
    purpose (PageError) has no F1 for it, one it fails on scores as empty output."""
    task, services = job
    html = decode_html(task.html_path.read_bytes())
    ref = prepare_page(html, task.gold_path.read_text(encoding="utf-8"))
    f1: dict[str, float] = {}
    for service in services:
        try:
            reply = SERVICES[service].algorithm().run(html, None, None)
        except PageError:
            continue
        except Exception:
            f1[service] = score_empty(ref).word.f1
            continue
        f1[service] = score_extraction(ref, reply.text, reply.blocks).word.f1
    return task.dataset, task.page_id, f1


def compute_populations(processes: int) -> dict[str, dict[str, float]]:
    """label -> page id -> the population's value on that page."""
    wanted: dict[str, set[str]] = {}
    for pop in POPULATIONS:
        wanted.setdefault(pop.dataset, set()).update(filter(None, (pop.service, pop.minus)))
    jobs = [(task, tuple(sorted(services))) for dataset, services in wanted.items()
            for task in dataset_tasks(dataset, (), None, with_published=False)]
    scores: dict[str, dict[str, dict[str, float]]] = {}  # dataset -> service -> page -> F1
    with multiprocessing.get_context("spawn").Pool(processes) as pool:
        for done, (dataset, page, f1) in enumerate(pool.imap_unordered(page_f1, jobs), 1):
            for service, value in f1.items():
                scores.setdefault(dataset, {}).setdefault(service, {})[page] = value
            if done % 100 == 0 or done == len(jobs):
                print(f"{done}/{len(jobs)} pages", file=sys.stderr, flush=True)
    out: dict[str, dict[str, float]] = {}
    for pop in POPULATIONS:
        first = scores[pop.dataset][pop.service]
        second = scores[pop.dataset][pop.minus] if pop.minus else {}
        pages = sorted(first.keys() & second.keys() if pop.minus else first)
        out[pop.label] = {p: first[p] - second.get(p, 0.0) for p in pages}
    return out


@dataclass
class _Distribution:
    """A bootstrap distribution in the form scipy.stats.bootstrap's `bootstrap_result`
    takes, so every method reads the same resamples."""

    bootstrap_distribution: NDArray[np.float64]


def _scipy_interval(sample: NDArray[np.float64], means: NDArray[np.float64], method: str,
                    level: float) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    with warnings.catch_warnings():  # BCa of a sample of equal values: NaN, a miss
        warnings.simplefilter("ignore", stats.DegenerateDataWarning)
        warnings.simplefilter("ignore", RuntimeWarning)
        ci = stats.bootstrap((sample,), np.mean, n_resamples=0, axis=-1, vectorized=True,
                             bootstrap_result=_Distribution(means), method=method,
                             confidence_level=level).confidence_interval
    return np.asarray(ci.low, dtype=np.float64), np.asarray(ci.high, dtype=np.float64)


def intervals(sample: NDArray[np.float64], rng: np.random.Generator, resamples: int,
              bounds: tuple[float, float]
              ) -> dict[str, tuple[NDArray[np.float64], NDArray[np.float64]]]:
    """Every method's interval for each row of `sample` (samples x n), clipped to
    `bounds`."""
    n = sample.shape[1]
    resampled = sample[:, rng.integers(0, n, size=(resamples, n))]  # samples x B x n
    means = resampled.mean(axis=-1)
    mean = sample.mean(axis=1)
    se = sample.std(axis=1, ddof=1) / np.sqrt(n)
    t_quantile = float(stats.t.ppf(1 - (1 - LEVEL) / 2, n - 1))
    expanded = 1 - 2 * float(stats.norm.cdf(-np.sqrt(n / (n - 1)) * t_quantile))
    # Studentized resamples; one with no spread has an unbounded t (capped, not inf).
    se_star = resampled.std(axis=-1, ddof=1) / np.sqrt(n)
    t_star = (means - mean[:, None]) / np.maximum(se_star, 1e-12)
    # Order statistics of t*, as Efron and Tibshirani define its quantiles.
    t_low, t_high = np.quantile(t_star, [0.025, 0.975], axis=1, method="inverted_cdf")
    t_abs = np.quantile(np.abs(t_star), LEVEL, axis=1, method="inverted_cdf")
    # Beta(1/2, 3/2) weights, normalised: no page is left out, so se* is never 0.
    weights = rng.beta(0.5, 1.5, size=(resamples, n))
    weights /= weights.sum(axis=1, keepdims=True)
    centred = sample - mean[:, None]
    shift = centred @ weights.T  # samples x B: mean* - mean
    spread = np.maximum(np.square(centred) @ weights.T - np.square(shift), 0.0)
    beta_t = shift / np.maximum(np.sqrt(spread / (n - 1)), 1e-12)
    beta_low, beta_high = np.quantile(beta_t, [0.025, 0.975], axis=1, method="inverted_cdf")
    module = np.array(bootstrap_cis(sample, resamples=resamples, level=LEVEL, bounds=bounds))
    found = {
        "percentile": _scipy_interval(sample, means, "percentile", LEVEL),
        "BCa": _scipy_interval(sample, means, "BCa", LEVEL),
        "expanded percentile": _scipy_interval(sample, means, "percentile", expanded),
        "Student t": (mean - t_quantile * se, mean + t_quantile * se),
        "bootstrap-t": (mean - t_high * se, mean - t_low * se),
        "symmetric bootstrap-t": (mean - t_abs * se, mean + t_abs * se),
        "beta bootstrap-t": (mean - beta_high * se, mean - beta_low * se),
        MODULE: (module[:, 0], module[:, 1]),
    }
    return {m: (np.clip(low, *bounds), np.clip(high, *bounds)) for m, (low, high) in found.items()}


def simulate(values: NDArray[np.float64], n: int, repetitions: int, resamples: int,
             rng: np.random.Generator, bounds: tuple[float, float]
             ) -> dict[str, dict[str, float]]:
    """Coverage, misses on each side, median width and the share of intervals that span
    WIDE of the range or more, of each method at sample size n."""
    truth = float(values.mean())
    samples = rng.choice(values, size=(repetitions, n), replace=True)
    chunk = max(1, _CHUNK_CELLS // (resamples * n))
    lows: dict[str, list[NDArray[np.float64]]] = {m: [] for m in METHODS}
    highs: dict[str, list[NDArray[np.float64]]] = {m: [] for m in METHODS}
    for start in range(0, repetitions, chunk):
        for method, (low, high) in intervals(samples[start:start + chunk], rng,
                                             resamples, bounds).items():
            lows[method].append(low)
            highs[method].append(high)
    out: dict[str, dict[str, float]] = {}
    for method in METHODS:
        low, high = np.concatenate(lows[method]), np.concatenate(highs[method])
        undefined = np.isnan(low) | np.isnan(high)
        out[method] = {
            "coverage": float(np.mean((low <= truth) & (truth <= high))),
            "miss_below": float(np.mean(high < truth)),  # the interval lies below the mean
            "miss_above": float(np.mean(low > truth)),
            "undefined": float(np.mean(undefined)),
            "median_width": float(np.median(np.where(undefined, np.inf, high - low))),
            "wide": float(np.mean(high - low >= WIDE * (bounds[1] - bounds[0]))),
        }
    return out


def describe_population(values: NDArray[np.float64]) -> dict[str, float]:
    return {"pages": len(values), "mean": float(values.mean()),
            "sd": float(values.std(ddof=1)), "skewness": float(stats.skew(values)),
            "at_0": float(np.mean(values == 0)), "at_1": float(np.mean(values == 1))}


def _table(label: str, results: dict[str, dict[str, dict[str, dict[str, float]]]],
           sizes: Sequence[int], cell: Callable[[dict[str, float]], str]) -> list[str]:
    lines = [f"| {label} | method | " + " | ".join(f"n = {n}" for n in sizes) + " |",
             "|---|---|" + "---:|" * len(sizes)]
    for pop, by_n in results.items():
        for method in METHODS:
            lines.append(f"| {pop} | {method} | "
                         + " | ".join(cell(by_n[str(n)][method]) for n in sizes) + " |")
    return lines


def markdown(results: dict[str, dict[str, dict[str, dict[str, float]]]],
             shapes: dict[str, dict[str, float]], sizes: Sequence[int], args: argparse.Namespace,
             command: str, seconds: float, load: str) -> str:
    host = machine()
    se = 100 * np.sqrt(LEVEL * (1 - LEVEL) / args.repetitions)
    lines = [
        "# Coverage of 95% intervals of a mean per-page F1", "",
        f"Command: `{command}`  ",
        f"Date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; elapsed {seconds:.0f} s; "
        f"{host['cpu']}, Python {host['python']}; {load}.  ",
        f"{args.repetitions} samples per cell, {args.resamples} bootstrap resamples per "
        f"sample, seed {args.seed}: a coverage near 95% is within ±{1.96 * se:.1f} points "
        "(95%) of the method's true coverage.", "",
        "Populations: every page of a dataset, per-page word F1 (alignment) of a service's "
        "in-process extractor, or the per-page difference of two services' F1. Samples of "
        "n pages are drawn with replacement; a cell is the share of samples whose interval "
        "contains the population mean.", "",
        "| population | values | pages | mean | sd | skewness | at 0 | at 1 |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    names = {p.label: p.name for p in POPULATIONS}
    for label, shape in shapes.items():
        lines.append(f"| {label} | {names.get(label, label)} | {shape['pages']:.0f} | "
                     f"{shape['mean']:.3f} | {shape['sd']:.3f} | {shape['skewness']:+.2f} | "
                     f"{100 * shape['at_0']:.1f}% | {100 * shape['at_1']:.1f}% |")
    lines += ["", "## Coverage (%)", "",
              *_table("population", results, sizes, lambda c: f"{100 * c['coverage']:.1f}"),
              "", "## Misses below / above the mean (%)", "",
              "An interval that lies entirely below the population mean, or entirely above "
              "it; a 95% interval should miss 2.5% on each side.", "",
              *_table("population", results, sizes,
                      lambda c: f"{100 * c['miss_below']:.1f} / {100 * c['miss_above']:.1f}"),
              "", "## Median width", "",
              *_table("population", results, sizes, lambda c: f"{c['median_width']:.3f}"),
              "", f"## Intervals spanning {100 * WIDE:.0f}% of the range or more (%)", "",
              "[0, 1] or nearly, for F1 ([-1, 1] for a difference): an interval that says "
              "nothing, which covers the mean whatever it is.", "",
              *_table("population", results, sizes,
                      lambda c: f"{100 * c['wide']:.1f}")]
    undefined = {f"{pop} n = {n} {m}": c["undefined"] for pop, by_n in results.items()
                 for n, cells in by_n.items() for m, c in cells.items() if c["undefined"]}
    if undefined:
        lines += ["", "Samples where the interval is undefined (NaN, counted as a miss): "
                  + "; ".join(f"{k}: {100 * v:.2f}%" for k, v in undefined.items()) + "."]
    services = [p.label for p in POPULATIONS if p.minus is None and p.label in results]
    lines += ["", "## Worst and mean coverage per method, n ≥ 10", "",
              "Over the populations of one service's F1 (" + ", ".join(services) + "), the "
              "means the reports give intervals of, and over every population.", "",
              "| method | worst (services) | mean (services) | mean distance from 95 (services) "
              "| worst (all) | mean (all) | mean distance from 95 (all) |",
              "|---|---:|---:|---:|---:|---:|---:|"]
    distance: dict[str, float] = {}
    for method in METHODS:
        cells = []
        for labels in (services, list(results)):
            found = np.array([100 * results[label][str(n)][method]["coverage"]
                              for label in labels for n in sizes if n >= 10])
            cells += ([f"{found.min():.1f}", f"{found.mean():.1f}",
                       f"{np.abs(found - 100 * LEVEL).mean():.1f}"] if found.size
                      else ["–"] * 3)
            if labels is services and found.size:
                distance[method] = float(np.abs(found - 100 * LEVEL).mean())
        lines.append(f"| {method} | " + " | ".join(cells) + " |")
    published = [m for m in METHODS if m != MODULE]
    if distance:
        best = min((m for m in published if m in distance), key=distance.__getitem__)
        lines += ["", f"Closest to 95% over the services' populations at n ≥ 10 (mean "
                  f"distance): {best}. `{MODULE}` is the interval the reports give."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--sizes", default="5,10,20,50,200",
                        help="sample sizes (pages), comma-separated")
    parser.add_argument("--repetitions", type=positive_int, default=4000,
                        help="samples per cell")
    parser.add_argument("--resamples", type=positive_int, default=2000,
                        help="bootstrap resamples per sample")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--processes", type=positive_int, default=2,
                        help="processes that compute the per-page F1")
    parser.add_argument("--populations", type=existing_file, default=None,
                        help="read the per-page F1 from this results JSON instead")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    args = parser.parse_args(argv)
    try:
        sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    except ValueError:
        parser.error(f"--sizes {args.sizes!r}: whole numbers, comma-separated")
    if not sizes or any(n < 2 for n in sizes):
        parser.error("every sample size must be at least 2")
    start, load_start = time.perf_counter(), os.getloadavg()
    if args.populations:
        stored = json.loads(args.populations.read_text(encoding="utf-8"))["populations"]
        pages = {label: dict(zip(p["page_ids"], p["values"], strict=True))
                 for label, p in stored.items()}
    else:
        pages = compute_populations(args.processes)
    shapes: dict[str, dict[str, float]] = {}
    results: dict[str, dict[str, dict[str, dict[str, float]]]] = {}
    for index, pop in enumerate(POPULATIONS):
        values = np.array(list(pages[pop.label].values()), dtype=np.float64)
        shapes[pop.label] = describe_population(values)
        for n in sizes:
            rng = np.random.default_rng([args.seed, index, n])
            results.setdefault(pop.label, {})[str(n)] = simulate(
                values, n, args.repetitions, args.resamples, rng, pop.bounds)
            print(f"{pop.label} n = {n}: " + ", ".join(
                f"{m} {100 * c['coverage']:.1f}"
                for m, c in results[pop.label][str(n)].items()), file=sys.stderr, flush=True)
    seconds = time.perf_counter() - start
    command = command_line(__file__, argv)
    data: dict[str, Any] = {
        "command": command, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "seconds": round(seconds, 1), "machine": machine(), "level": LEVEL,
        "sizes": sizes, "repetitions": args.repetitions, "resamples": args.resamples,
        "seed": args.seed, "coverage": results,
        "populations": {pop.label: {"dataset": pop.dataset, "service": pop.service,
                                    "minus": pop.minus, **shapes[pop.label],
                                    "page_ids": sorted(pages[pop.label]),
                                    "values": [pages[pop.label][p]
                                               for p in sorted(pages[pop.label])]}
                        for pop in POPULATIONS},
    }
    write_results(args.out, "interval_coverage",
                  markdown(results, shapes, sizes, args, command, seconds,
                           load_note(load_start)), data)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
