"""Quality gate: every registry service's extractor, in-process, over the datasets.

    python benchmarks/quality.py [--datasets scrapinghub,cleaneval,chaos,cleanportaleval]
                                 [--services all|a,b] [--out benchmarks/results]
                                 [--limit N] [--processes 2] [--cache DIR | --no-cache]

A service may carry options as `name:key=value` (e.g. `density:threshold=fixed`);
`all` is every registry service with its defaults plus every other mode of the
services that have modes (MODES below), so one command covers every service and mode.

Runs each service's pure extractor (no HTTP) and the all-visible-text baseline
on every page, scores them with orchestrator.scoring, and writes quality.md and
quality.json. The headline table is one row per service and mode, one column per
dataset: mean per-page bag-of-words word F1. A learned service (LEARNED) also gets a
row of its leave-one-dataset-out figures, read from its model file's metadata (each
dataset scored by a model trained on the other datasets), and its in-process figures
on pages it was trained on are marked in-sample (matched by their HTML, as a run's
are: orchestrator.insample). A detail table follows with
precision, recall and F1 by alignment and by bag of words, the article-extraction
benchmark's shingle F1, precision and recall, and ROUGE-LSum, per service and
dataset. A service whose module does not import is reported as missing; a page it
fails on counts as empty output. On a dataset with a `published/` folder of
prediction files (scrapinghub), each file is scored too, as a row
`<name> (published)`, so the services stand beside the figures the field publishes.

Each service's page results are cached per dataset under --cache (git-ignored),
keyed by a hash of the service's folder (code and model files) and of shared/, so a
rerun only computes what changed.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import importlib.metadata
import json
import multiprocessing
import sys
import time
import traceback
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from common import (
    REPO,
    command_line,
    paired_files,
    parse_target,
    positive_int,
    require_dataset,
    write_results,
)

from orchestrator.insample import in_sample, in_sample_pages, trained_pages
from orchestrator.models import PageResult
from orchestrator.predictions import read_predictions
from orchestrator.scoring import prepare_page, score_empty, score_extraction
from orchestrator.statistics import ServiceSummary, Summary, summarize
from orchestrator.testsets import open_dataset_dir
from shared.contract import Algorithm, Block, PageError
from shared.datasets import DATASETS
from shared.decoding import decode_html
from shared.html import parse_html, text_blocks
from shared.registry import SERVICES, code_digest

BASELINE = "visible-text"
RUN_ID = "quality"
# Modes besides the default that `--services all` evaluates too. trafilatura keeps a
# page's comments by default; the article-extraction benchmark runs it without them.
MODES = {"density": [f"density:threshold={mode}" for mode in ("fixed", "mean", "gaussian")],
         "trafilatura": ["trafilatura:include_comments=false"]}


def _model_metadata(module: str) -> Callable[[], dict[str, Any]]:
    """The metadata of a service's shipped model (`module`.default_model())."""
    def load() -> dict[str, Any]:
        metadata: dict[str, Any] = __import__(module, fromlist=["default_model"]
                                              ).default_model().metadata
        return metadata
    return load


# Learned services: target -> its model's metadata, which holds `trained_on` (dataset
# names) and `leave_one_dataset_out.word_f1` (dataset -> word F1). One line per service.
LEARNED: dict[str, Callable[[], dict[str, Any]]] = {
    "fusion": _model_metadata("services.fusion.model"),
    "density": _model_metadata("services.density.model"),
    "ensemble": _model_metadata("services.ensemble.model"),
}
LODO_SUFFIX = " (leave-one-dataset-out)"


@dataclass(frozen=True)
class PageTask:
    dataset: str
    page_id: str
    html_path: Path
    gold_path: Path
    services: tuple[str, ...]
    published: tuple[tuple[str, str], ...] = ()
    """(row name, text) of the published prediction files for this page."""


_ALGORITHMS: dict[str, Algorithm] = {}


def _algorithm(name: str) -> Algorithm:
    if name not in _ALGORITHMS:
        _ALGORITHMS[name] = SERVICES[name].algorithm()
    return _ALGORITHMS[name]


def baseline(html: str) -> tuple[str, list[Block]]:
    """Keep every visible block: the floor any extractor should beat on precision."""
    blocks = [Block(text=b.text, is_content=True, path=b.path)
              for b in text_blocks(parse_html(html))]
    return "\n".join(b.text for b in blocks), blocks


def evaluate_page(task: PageTask) -> list[PageResult]:
    """Every chosen service and the baseline on one page, scored."""
    html = decode_html(task.html_path.read_bytes())
    ref = prepare_page(html, task.gold_path.read_text(encoding="utf-8"))
    results = []
    for service in (*task.services, BASELINE):
        base = {"run_id": RUN_ID, "dataset": task.dataset, "page_id": task.page_id,
                "service": service}
        start = time.perf_counter()
        try:
            if service == BASELINE:
                text, blocks = baseline(html)
            else:
                name, options = parse_target(service)
                algorithm = _algorithm(name)  # options from the command line are text
                reply = algorithm.run(html, algorithm.options_model.model_validate(options),
                                      None)
                text, blocks = reply.text, reply.blocks
        except PageError as exc:  # refused on purpose (e.g. no feed): left out, counted
            results.append(PageResult(**base, status="skipped", error=str(exc)[:500]))
            continue
        except Exception as exc:  # a failing page is reported, never fatal
            results.append(PageResult(**base, status="error",
                                      error=f"{type(exc).__name__}: {exc}"[:500],
                                      scores=score_empty(ref)))
            continue
        elapsed = (time.perf_counter() - start) * 1000
        results.append(PageResult(**base, status="ok", elapsed_ms=elapsed, text="",
                                  scores=score_extraction(ref, text, blocks)))
    for row, text in task.published:
        results.append(PageResult(run_id=RUN_ID, dataset=task.dataset, page_id=task.page_id,
                                  service=row, status="ok",
                                  scores=score_extraction(ref, text, None)))
    return results


def importable(services: list[str]) -> tuple[list[str], dict[str, str]]:
    """Split services into those whose extractor imports and those missing (with why)."""
    ok, missing = [], {}
    for name in services:
        try:
            SERVICES[parse_target(name)[0]].algorithm()
        except Exception as exc:
            missing[name] = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
            traceback.clear_frames(exc.__traceback__)
        else:
            ok.append(name)
    return ok, missing


# The suffix of a row of published prediction files (scrapinghub's `published/`).
PUBLISHED = " (published)"


def dataset_tasks(name: str, services: tuple[str, ...], limit: int | None,
                  with_published: bool = True) -> list[PageTask]:
    folder = require_dataset(name)
    published = {f"{path.stem}{PUBLISHED}": read_predictions(path)
                 for path in sorted((folder / "published").glob("*.json"))} \
        if with_published else {}
    return [PageTask(name, page_id, html, gold, services,
                     tuple((row, texts.get(page_id, "")) for row, texts in published.items()))
            for page_id, html, gold in paired_files(folder, limit)]


def code_hash(target: str, dataset: str) -> str:
    """A hash of everything a target's cached results depend on: its service's code and
    model files and shared/ (shared.registry.code_digest), the scoring (orchestrator/)
    and this script, the installed libraries' versions, and the dataset's files."""
    name = parse_target(target)[0]
    digest = hashlib.sha256(target.encode())
    digest.update(code_digest(None if name == BASELINE else name).encode())
    digest.update(_scoring_and_libraries())
    digest.update(_dataset_files(dataset))
    return digest.hexdigest()[:20]


@functools.cache
def _scoring_and_libraries() -> bytes:
    digest = hashlib.sha256()
    for path in sorted([*(REPO / "orchestrator").glob("*.py"), Path(__file__),
                        REPO / "benchmarks" / "common.py"]):
        digest.update(path.read_bytes())
    for dist in sorted(f"{d.metadata['Name']}=={d.version}"
                       for d in importlib.metadata.distributions()):
        digest.update(dist.encode())
    return digest.digest()


@functools.cache
def _dataset_files(dataset: str) -> bytes:
    """The dataset's files by name, size and modification time (not read: cheap)."""
    digest = hashlib.sha256()
    for path in sorted(require_dataset(dataset).rglob("*")):
        if path.is_file():
            stat = path.stat()
            digest.update(f"{path.name} {stat.st_size} {stat.st_mtime_ns}\n".encode())
    return digest.digest()


def cache_file(cache: Path, target: str, dataset: str, limit: int | None) -> Path:
    safe = target.replace(":", "_").replace("=", "-").replace("/", "_")
    return cache / f"{safe}--{dataset}--{limit or 'all'}--{code_hash(target, dataset)}.json"


def _f(value: float | None) -> str:
    return "–" if value is None else f"{value:.3f}"


def learned_rows(targets: list[str]) -> tuple[dict[str, dict[str, float]], dict[str, set[str]]]:
    """Leave-one-dataset-out rows of the learned services among `targets`, and the
    datasets each was trained on."""
    rows: dict[str, dict[str, float]] = {}
    trained: dict[str, set[str]] = {}
    for target in targets:
        if target not in LEARNED:
            continue
        metadata = LEARNED[target]()
        trained[target] = set(metadata.get("trained_on", []))
        figures = metadata.get("leave_one_dataset_out", {}).get("word_f1", {})
        if figures:
            rows[target + LODO_SUFFIX] = {k: float(v) for k, v in figures.items()}
    return rows, trained


InSample = dict[tuple[str, str], int]
"""(row, dataset) -> how many of the row's pages there its model was trained on."""


def in_sample_counts(results: list[PageResult], datasets: list[str]) -> InSample:
    """The pages each row's model was trained on, matched by their HTML as a run's are
    (orchestrator.insample): a folder under BOILERBENCH_DATASETS need not hold the
    training set its name says."""
    pages: dict[tuple[str, str], list[tuple[str, str]]] = defaultdict(list)
    for r in results:
        pages[r.service, r.dataset].append((r.dataset, r.page_id))
    trained = trained_pages({parse_target(row)[0] for row, _ in pages},
                            [open_dataset_dir(require_dataset(d)) for d in datasets])
    counts = {}
    for (row, dataset), found in pages.items():
        service, options = parse_target(row)
        counts[row, dataset] = in_sample_pages(service, found, options, trained)
    return counts


def _in_sample(counts: InSample | None, row: str, dataset: str, pages: int) -> int:
    """How many of the `pages` of `row` on `dataset` are in-sample: as counted, or by
    the dataset's name (all or none) where they were not matched."""
    if counts is not None:
        return counts.get((row, dataset), 0)
    service, options = parse_target(row)
    return pages if in_sample(service, dataset, options) else 0


def headline(summary: Summary, datasets: list[str], lodo: dict[str, dict[str, float]],
             counts: InSample | None = None) -> list[str]:
    """One row per service and mode (and per learned service's leave-one-dataset-out
    figures), one column per dataset: mean per-page bag-of-words word F1. `counts`:
    in_sample_counts (None: by the datasets' names)."""
    figures: dict[str, dict[str, float | None]] = {}
    for row in summary.services:
        if row.dataset in datasets:
            figures.setdefault(row.service, {})[row.dataset] = \
                row.levels["word_bag"].macro["f1"].mean if "word_bag" in row.levels else None
    for name, values in lodo.items():
        figures[name] = {d: values.get(d) for d in datasets}

    def mean(values: dict[str, float | None]) -> float | None:
        known = [values.get(d) for d in datasets]
        return None if any(v is None for v in known) else \
            sum(v for v in known if v is not None) / len(known)

    lines = ["| service | " + " | ".join(datasets) + " | mean |",
             "|---|" + "---:|" * (len(datasets) + 1)]
    for name in sorted(figures, key=lambda n: -(mean(figures[n]) or 0.0)):
        # In-sample: a model trained on pages of the dataset, as the detail table marks it.
        cells = []
        for d in datasets:
            mark = "*" if name not in lodo and _in_sample(counts, name, d, 1) else ""
            cells.append(_f(figures[name].get(d)) + mark)
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {_f(mean(figures[name]))} |")
    return lines


def markdown(summary: Summary, missing: dict[str, str], command: str, seconds: float,
             datasets: list[str], lodo: dict[str, dict[str, float]],
             limit: int | None = None, counts: InSample | None = None) -> str:
    lines = ["# Extraction quality", "",
             f"Command: `{command}` ({seconds:.0f} s wall time for what was not cached).", "",
             "Mean per-page bag-of-words word F1, every service in-process with default "
             "options (and every mode). A learned service's `(leave-one-dataset-out)` row "
             "is its honest figure: each dataset scored by a model trained on the other "
             "datasets (from its model file's metadata). `*` marks an in-sample figure "
             "(the shipped model was trained on pages of that dataset, matched by their "
             "HTML; the detail table says on how many). `visible-text` is the "
             "all-visible-text baseline."
             + (f" With --limit {limit} the in-process rows are over each dataset's first "
                f"{limit} pages; the leave-one-dataset-out rows are over every page."
                if limit and lodo else ""), "",
             *headline(summary, datasets, lodo, counts), "",
             "## Detail", "",
             "Means over pages of per-page word figures; alignment = LCS of extracted and gold "
             "tokens, bag = multiset intersection. Errors count as empty output; pages a "
             "service refuses on purpose (PageError, e.g. no feed) are skipped: left out of "
             "its means and counted. Shingle: the article-extraction benchmark's metric "
             "(4-token shingles, F1 of the precision and recall means); ROUGE-LSum: mean F1. "
             "`(published)` rows: the prediction files upstream publishes.", "",
             "| service | dataset | pages | errors | skipped | P (align) | R (align) | F1 (align) "
             "| P (bag) | R (bag) | F1 (bag) | shingle F1 | shingle P | shingle R | ROUGE-LSum "
             "| median ms |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    rows: list[ServiceSummary] = sorted(
        summary.services,
        key=lambda r: (r.dataset, -(r.levels["word"].macro["f1"].mean or 0.0)))
    for row in rows:
        word, bag = row.levels["word"].macro, row.levels["word_bag"].macro
        ms = "–" if row.elapsed_ms_median is None else f"{row.elapsed_ms_median:.1f}"
        shingle = row.shingle
        seen = _in_sample(counts, row.service, row.dataset, row.pages)
        name = row.service
        if seen:
            name += " (in-sample)" if seen >= row.pages else \
                f" (in-sample on {seen} of {row.pages} pages)"
        lines.append(f"| {name} | {row.dataset} | {row.pages} | {row.errors} | "
                     f"{row.skipped} | "
                     f"{_f(word['precision'].mean)} | {_f(word['recall'].mean)} | "
                     f"{_f(word['f1'].mean)} | {_f(bag['precision'].mean)} | "
                     f"{_f(bag['recall'].mean)} | {_f(bag['f1'].mean)} | "
                     f"{_f(shingle.f1 if shingle else None)} | "
                     f"{_f(shingle.precision if shingle else None)} | "
                     f"{_f(shingle.recall if shingle else None)} | "
                     f"{_f(row.rouge_lsum.mean if row.rouge_lsum else None)} | {ms} |")
    if missing:
        lines += ["", "## Missing services (module does not import)", ""]
        lines += [f"- {name}: {why}" for name, why in sorted(missing.items())]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--datasets", default=",".join(DATASETS))
    parser.add_argument("--services", default="all")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    parser.add_argument("--limit", type=positive_int, default=None,
                        help="first N pages (by id) per dataset")
    parser.add_argument("--processes", type=positive_int, default=2)
    parser.add_argument("--cache", type=Path, default=REPO / "benchmarks" / ".cache" / "quality",
                        help="folder of cached page results (git-ignored)")
    parser.add_argument("--no-cache", action="store_true", help="compute every result")
    args = parser.parse_args(argv)
    wanted = [t for name in SERVICES for t in (name, *MODES.get(name, []))] \
        if args.services == "all" else [s.strip() for s in args.services.split(",") if s.strip()]
    unknown = [s for s in wanted if parse_target(s)[0] not in SERVICES]
    if unknown:
        parser.error(f"unknown services {unknown}; known: {', '.join(SERVICES)}")
    services, missing = importable(wanted)
    datasets = [name.strip() for name in args.datasets.split(",") if name.strip()]
    results: list[PageResult] = []
    todo: dict[str, list[str]] = {}  # dataset -> targets to compute
    # Keyed by the code as it is before the run, which is the code that computes it.
    paths = {(dataset, target): cache_file(args.cache, target, dataset, args.limit)
             for dataset in datasets for target in (*services, BASELINE)}
    for dataset in datasets:
        for target in (*services, BASELINE):
            path = paths[dataset, target]
            if not args.no_cache and path.is_file():
                results += [PageResult.model_validate(r)
                            for r in json.loads(path.read_text(encoding="utf-8"))]
            else:
                todo.setdefault(dataset, []).append(target)
    tasks = [task for dataset, targets in todo.items()
             for task in dataset_tasks(dataset, tuple(t for t in targets if t != BASELINE),
                                       args.limit, with_published=BASELINE in targets)]
    start = time.perf_counter()
    fresh: list[PageResult] = []
    if tasks:
        with multiprocessing.get_context("spawn").Pool(args.processes) as pool:
            for done, page_results in enumerate(pool.imap(evaluate_page, tasks, chunksize=2),
                                                1):
                fresh.extend(r for r in page_results if r.service in todo[r.dataset]
                             or r.service.endswith(PUBLISHED))
                if done % 50 == 0 or done == len(tasks):
                    print(f"{done}/{len(tasks)} pages", file=sys.stderr, flush=True)
    seconds = time.perf_counter() - start
    if not args.no_cache:
        args.cache.mkdir(parents=True, exist_ok=True)
        for dataset, targets in todo.items():
            for target in targets:
                # The published rows are stored with the baseline: neither depends on code.
                mine = [r.model_dump(mode="json") for r in fresh
                        if r.dataset == dataset and (r.service == target or (
                            target == BASELINE and r.service.endswith(PUBLISHED)))]
                paths[dataset, target].write_text(json.dumps(mine), encoding="utf-8")
    results += fresh
    summary = summarize(results)
    command = command_line(__file__, argv)
    lodo, trained = learned_rows(services)
    write_results(args.out, "quality",
                  markdown(summary, missing, command, seconds, datasets, lodo, args.limit,
                           in_sample_counts(results, datasets)), {
                      "command": command, "seconds": round(seconds, 1), "missing": missing,
                      "leave_one_dataset_out": lodo,
                      "trained_on": {k: sorted(v) for k, v in trained.items()},
                      "summary": summary.model_dump(mode="json")})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
