"""Do visual features from a headless-Chromium layout help fusion? Leave-one-dataset-out.

    python benchmarks/fusion_visual.py [--datasets scrapinghub,cleaneval,chaos,cleanportaleval]
                                       [--limit N] [--processes 2] [--out benchmarks/results]

Loads every page once with fusion's block features (services/fusion/features.py)
plus VISUAL, the block container's box in shared.layout (joined by XPath), then
runs fusion's own leave-one-dataset-out evaluation (its training candidates and
decision rules through shared.training.evaluate_candidates: fit on all datasets but
one, score the one left out with the decision rule chosen on the others) twice: on
fusion's features alone and with the visual columns added, each reporting its best
candidate as training would ship it. Same pages, labels, candidates and seed; only the
columns differ. The shipped fusion model is not touched. Writes fusion_visual.md and
fusion_visual.json.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
from common import REPO, command_line, load_note, positive_int, require_dataset, write_results

from services.cetd.extractor import weighted_median
from services.fusion.features import FEATURES, page_features
from services.fusion.training import CANDIDATES, learner
from shared.datasets import DATASETS
from shared.layout import layout
from shared.training import Units, evaluate_candidates, load_datasets

VISUAL = ("rendered", "centrality", "x_centre", "y_in_page", "screens_down", "width",
          "font_size_ratio", "font_weight")
MISSING = -1.0  # a block whose container has no box


def visual_blocks(html: str) -> Units:
    """fusion's block units with the VISUAL columns appended."""
    page = page_features(html)
    rendered = layout(html)
    width, height = rendered.viewport_width, rendered.viewport_height
    band_left, band_right = width / 4, width * 3 / 4
    boxes = [rendered.boxes.get(block.path or "") for block in page.blocks]
    sizes = [(box.font_size, len(block.text)) for box, block in zip(boxes, page.blocks,
                                                                    strict=True)
             if box is not None and box.rendered]
    text_size = weighted_median(sizes) if sizes else 16.0
    rows = []
    for box in boxes:
        if box is None:
            rows.append([MISSING] * len(VISUAL))
            continue
        inside = max(0.0, min(box.x + box.width, band_right) - max(box.x, band_left))
        rows.append([
            float(box.rendered), inside / max(min(box.width, band_right - band_left), 1.0),
            (box.x + box.width / 2) / width, box.y / max(rendered.page_height, 1.0),
            min(box.y / height, 20.0), box.width / width,
            box.font_size / text_size if text_size else 1.0, box.font_weight / 1000])
    visual = np.array(rows, dtype=np.float64).reshape(len(boxes), len(VISUAL))
    return np.hstack([page.matrix, visual]), page.tokens


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--datasets", default=",".join(DATASETS))
    parser.add_argument("--limit", type=positive_int, default=None,
                        help="first N pages per dataset")
    parser.add_argument("--processes", type=positive_int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    args = parser.parse_args(argv)
    names = [name.strip() for name in args.datasets.split(",") if name.strip()]
    if len(set(names)) < 2:  # before any page is laid out
        parser.error("leave-one-dataset-out needs at least two --datasets")
    folders = [require_dataset(name) for name in names]
    start, load_start = time.perf_counter(), os.getloadavg()
    pages, _ = load_datasets(folders, visual_blocks, "blocks", args.limit, args.processes)
    loaded = time.perf_counter() - start
    fusion = learner(args.seed, CANDIDATES)
    base = [replace(page, features=page.features[:, :len(FEATURES)]) for page in pages]
    results = {}
    for label, variant in (("fusion features", base), ("with visual features", pages)):
        evaluations = evaluate_candidates(
            variant, fusion.candidates, fusion.rules,
            lambda line: print(line, file=sys.stderr, flush=True))
        best = max(evaluations, key=lambda name: evaluations[name]["mean"])
        results[label] = {"candidate": best, **evaluations[best]}
    seconds = time.perf_counter() - start
    names = sorted(results["fusion features"]["word_f1"])
    command = command_line(__file__, argv)
    lines = [
        "# fusion with and without visual features (leave-one-dataset-out word F1)", "",
        f"Command: `{command}`  ",
        f"Date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {len(pages)} pages; "
        f"loading (layout and features) {loaded:.0f} s, all {seconds:.0f} s; "
        f"{load_note(load_start)}.  ",
        f"Visual columns: {', '.join(VISUAL)} (the block container's box in headless "
        "Chromium). Each row: trained on the other datasets, scored on this one at the "
        "decision rule chosen on the others; candidates: "
        f"{results['fusion features']['candidate']} (fusion features), "
        f"{results['with visual features']['candidate']} (with visual features).", "",
        "| left out | fusion features | with visual features | difference |",
        "|---|---:|---:|---:|",
    ]
    for name in names:
        a = results["fusion features"]["word_f1"][name]
        b = results["with visual features"]["word_f1"][name]
        lines.append(f"| {name} | {a:.4f} | {b:.4f} | {b - a:+.4f} |")
    mean_a = statistics.fmean(results["fusion features"]["word_f1"][n] for n in names)
    mean_b = statistics.fmean(results["with visual features"]["word_f1"][n] for n in names)
    lines.append(f"| mean of datasets | {mean_a:.4f} | {mean_b:.4f} | {mean_b - mean_a:+.4f} |")
    write_results(args.out, "fusion_visual", "\n".join(lines) + "\n",
                  {"command": command, "seconds": round(seconds, 1), "visual": list(VISUAL),
                   "results": results})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
