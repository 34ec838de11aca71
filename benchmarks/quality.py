"""Quality gate: every registry service's extractor, in-process, over the datasets.

    python benchmarks/quality.py [--datasets scrapinghub,cleaneval] [--services all|a,b]
                                 [--out benchmarks/results] [--limit N] [--processes 2]

A service may carry options as `name:key=value` (e.g. `density:threshold=fixed`);
`all` is every registry service with its defaults plus every other mode of the
services that have modes (MODES below), so one command covers every service and mode.

Runs each service's pure extractor (no HTTP) and the all-visible-text baseline
on every page, scores them with orchestrator.scoring, and writes quality.md (mean
word precision, recall and F1 by alignment and by bag of words, the
article-extraction benchmark's shingle F1, precision and recall, and ROUGE-LSum,
per service and dataset) and quality.json (the full summary). A service whose
module does not import is reported as missing; a page it fails on counts as empty
output. On a dataset with a `published/` folder of prediction files (scrapinghub),
each file is scored too, as a row `<name> (published)`, so the services stand
beside the figures the field publishes.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from orchestrator.insample import in_sample  # noqa: E402
from orchestrator.models import PageResult  # noqa: E402
from orchestrator.predictions import read_predictions  # noqa: E402
from orchestrator.scoring import prepare_page, score_empty, score_extraction  # noqa: E402
from orchestrator.statistics import ServiceSummary, Summary, summarize  # noqa: E402
from shared.contract import Algorithm, Block, PageError  # noqa: E402
from shared.datasets import dataset_dir  # noqa: E402
from shared.decoding import decode_html  # noqa: E402
from shared.html import parse_html, text_blocks  # noqa: E402
from shared.registry import SERVICES  # noqa: E402

BASELINE = "visible-text"
RUN_ID = "quality"
# Modes besides the default that `--services all` evaluates too.
MODES = {"density": [f"density:threshold={mode}" for mode in ("fixed", "mean", "gaussian")]}


def parse_target(target: str) -> tuple[str, dict[str, str]]:
    """`name` or `name:key=value[:key=value]` -> (service name, options)."""
    name, *pairs = target.split(":")
    options = dict(pair.split("=", 1) for pair in pairs)
    return name, options


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
                reply = _algorithm(name).run(html, options, None)
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


def dataset_tasks(name: str, services: tuple[str, ...], limit: int | None) -> list[PageTask]:
    folder = dataset_dir(name)
    if folder is None:
        raise SystemExit(f"dataset {name!r} not found (set BOILERBENCH_DATASETS)")
    published = {f"{path.stem} (published)": read_predictions(path)
                 for path in sorted((folder / "published").glob("*.json"))}
    tasks = [PageTask(name, html.stem, html, folder / "content" / f"{html.stem}.txt", services,
                      tuple((row, texts.get(html.stem, "")) for row, texts in published.items()))
             for html in sorted((folder / "html").glob("*.html"))
             if (folder / "content" / f"{html.stem}.txt").is_file()]
    return tasks[:limit] if limit else tasks


def _f(value: float | None) -> str:
    return "–" if value is None else f"{value:.3f}"


def markdown(summary: Summary, missing: dict[str, str], command: str, seconds: float) -> str:
    lines = ["# Extraction quality", "",
             f"Command: `{command}` ({seconds:.0f} s wall time). Means over pages of per-page "
             "word figures; alignment = LCS of extracted and gold tokens, bag = multiset "
             "intersection. Errors count as empty output; pages a service refuses on purpose "
             "(PageError, e.g. no feed) are skipped: left out of its means and counted. "
             "Shingle: the article-extraction benchmark's metric (4-token shingles, F1 of the "
             "precision and recall means); ROUGE-LSum: mean F1. `(published)` rows: the "
             "prediction files upstream publishes; `in-sample`: a model scored on the test set "
             "it was trained on.", "",
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
        name = f"{row.service} (in-sample)" if in_sample(parse_target(row.service)[0],
                                                         row.dataset) else row.service
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
    parser.add_argument("--datasets", default="scrapinghub,cleaneval")
    parser.add_argument("--services", default="all")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    parser.add_argument("--limit", type=int, default=None, help="first N pages (by id) per dataset")
    parser.add_argument("--processes", type=int, default=2)
    args = parser.parse_args(argv)
    wanted = [t for name in SERVICES for t in (name, *MODES.get(name, []))] \
        if args.services == "all" else [s.strip() for s in args.services.split(",") if s.strip()]
    unknown = [s for s in wanted if parse_target(s)[0] not in SERVICES]
    if unknown:
        parser.error(f"unknown services {unknown}; known: {', '.join(SERVICES)}")
    services, missing = importable(wanted)
    tasks = [task for name in args.datasets.split(",") if name.strip()
             for task in dataset_tasks(name.strip(), tuple(services), args.limit)]
    start = time.perf_counter()
    results: list[PageResult] = []
    with multiprocessing.get_context("spawn").Pool(args.processes) as pool:
        for done, page_results in enumerate(pool.imap(evaluate_page, tasks, chunksize=2), 1):
            results.extend(page_results)
            if done % 50 == 0 or done == len(tasks):
                print(f"{done}/{len(tasks)} pages", file=sys.stderr, flush=True)
    seconds = time.perf_counter() - start
    summary = summarize(results)
    command = "python benchmarks/quality.py " + " ".join(argv if argv is not None else sys.argv[1:])
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "quality.md").write_text(markdown(summary, missing, command.strip(), seconds),
                                         encoding="utf-8")
    (args.out / "quality.json").write_text(json.dumps({
        "command": command.strip(), "seconds": round(seconds, 1), "missing": missing,
        "summary": summary.model_dump(mode="json")}, indent=1), encoding="utf-8")
    print((args.out / "quality.md").read_text(encoding="utf-8"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
