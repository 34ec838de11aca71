"""Do visual features from a headless-Chromium layout help fusion? Leave-one-dataset-out.

    python benchmarks/fusion_visual.py [--datasets scrapinghub,cleaneval,chaos,cleanportaleval]
                                       [--limit N] [--processes 2] [--out benchmarks/results]

Loads every page once with fusion's block features (services/fusion/features.py)
plus VISUAL, the block container's box in shared.layout (joined by XPath), then
runs fusion's leave-one-dataset-out evaluation (shared.training: fit fusion's first
tree candidate on all datasets but one, score the one left out at the decision rule
chosen on the others) twice: on fusion's features alone and with the visual columns
added. Same pages, labels, hyperparameters and seed; only the columns differ. The
shipped fusion model is not touched. Writes fusion_visual.md and fusion_visual.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

import common  # noqa: F401  (the repository on sys.path)
import numpy as np

from services.cetd.extractor import weighted_median
from services.fusion.features import FEATURES, page_features
from services.fusion.training import CANDIDATES, CUTS, KERNELS, fit
from shared.datasets import dataset_dir
from shared.layout import layout
from shared.training import Units, leave_one_dataset_out, load_datasets, lodo_evaluation, rules

REPO = Path(__file__).resolve().parent.parent
DATASETS = "scrapinghub,cleaneval,chaos,cleanportaleval"
VISUAL = ("rendered", "centrality", "x_centre", "y_in_page", "screens_down", "width",
          "font_size_ratio", "font_weight")
MISSING = -1.0  # a block whose container has no box


def visual_blocks(html: str) -> Units:
    """fusion's block units with the VISUAL columns appended."""
    page = page_features(html)
    rendered = layout(html)
    width, height = rendered.viewport_width, rendered.viewport_height
    band_left, band_right = width / 4, width * 3 / 4
    boxes = [rendered.boxes.get(block.path) if block.path else None for block in page.blocks]
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
    return np.hstack([page.matrix, visual]), [b.text for b in page.blocks], page.tokens


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--datasets", default=DATASETS)
    parser.add_argument("--limit", type=int, default=None, help="first N pages per dataset")
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    args = parser.parse_args(argv)
    folders = []
    for name in args.datasets.split(","):
        folder = dataset_dir(name.strip())
        if folder is None:
            raise SystemExit(f"dataset {name!r} not found (set BOILERBENCH_DATASETS)")
        folders.append(folder)
    start = time.perf_counter()
    pages, _ = load_datasets(folders, visual_blocks, "blocks", args.limit, args.processes)
    loaded = time.perf_counter() - start
    params = next(iter(CANDIDATES.values()))
    base = [replace(page, features=page.features[:, :len(FEATURES)]) for page in pages]
    results = {}
    for label, variant in (("fusion features", base), ("with visual features", pages)):
        held_out = leave_one_dataset_out(variant, lambda train: fit(params, args.seed, train))
        scores = lodo_evaluation(variant, held_out, rules(CUTS, KERNELS))["word_f1"]
        print(f"{label}: {scores}", file=sys.stderr, flush=True)
        results[label] = {name: {"word_f1": f1} for name, f1 in scores.items()}
    seconds = time.perf_counter() - start
    names = sorted(results["fusion features"])
    command = "python benchmarks/fusion_visual.py " + " ".join(
        argv if argv is not None else sys.argv[1:])
    lines = [
        "# fusion with and without visual features (leave-one-dataset-out word F1)", "",
        f"Command: `{command.strip()}`  ",
        f"Date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {len(pages)} pages; "
        f"loading (layout and features) {loaded:.0f} s, all {seconds:.0f} s, on a machine "
        "shared with other work.  ",
        f"Visual columns: {', '.join(VISUAL)} (the block container's box in headless "
        "Chromium). Each row: trained on the other datasets, scored on this one, "
        "decision rule fixed beforehand.", "",
        "| left out | fusion features | with visual features | difference |",
        "|---|---:|---:|---:|",
    ]
    for name in names:
        a = results["fusion features"][name]["word_f1"]
        b = results["with visual features"][name]["word_f1"]
        lines.append(f"| {name} | {a:.4f} | {b:.4f} | {b - a:+.4f} |")
    mean_a = statistics.fmean(results["fusion features"][n]["word_f1"] for n in names)
    mean_b = statistics.fmean(results["with visual features"][n]["word_f1"] for n in names)
    lines.append(f"| mean of datasets | {mean_a:.4f} | {mean_b:.4f} | {mean_b - mean_a:+.4f} |")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "fusion_visual.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (args.out / "fusion_visual.json").write_text(json.dumps(
        {"command": command.strip(), "seconds": round(seconds, 1), "visual": list(VISUAL),
         "results": results}, indent=1), encoding="utf-8")
    print((args.out / "fusion_visual.md").read_text(encoding="utf-8"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
