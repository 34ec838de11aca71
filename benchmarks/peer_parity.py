"""Peer parity: trafilatura through our service's extractor vs trafilatura called directly.

    python benchmarks/peer_parity.py [--datasets scrapinghub,cleaneval] [--limit N] [--jobs 2]

For every page of each dataset it runs trafilatura.extract directly on the decoded
page text (services/trafilatura/direct.py) and our services/trafilatura extractor
with the same options, and prints the mean bag-of-words F1 of both against the gold
text (orchestrator.scoring.bag_f1, the project's scoring) and their difference, which
must stay within 0.01; readability and resiliparse through our extractors, and
trafilatura with our shared parser (option shared_parser), are printed beside them
for reference.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from common import paired_files, positive_int, require_dataset

from orchestrator.scoring import bag_f1
from shared.decoding import NotHTMLError, decode_html

COLUMNS = ("trafilatura", "trafilatura_direct", "trafilatura_shared_parser", "readability",
           "resiliparse")


def score_page(html_path: Path, gold_path: Path) -> dict[str, float] | None:
    """F1 of every column on one page (None for a page that is not HTML)."""
    from services.readability.extractor import ALGORITHM as READABILITY
    from services.resiliparse.extractor import ALGORITHM as RESILIPARSE
    from services.trafilatura.direct import trafilatura_direct
    from services.trafilatura.extractor import ALGORITHM as TRAFILATURA

    try:
        html = decode_html(html_path.read_bytes())
    except NotHTMLError:
        return None
    gold = gold_path.read_text(encoding="utf-8")
    texts = {
        "trafilatura": TRAFILATURA.run(html).text,
        "trafilatura_direct": trafilatura_direct(html),
        "trafilatura_shared_parser": TRAFILATURA.run(html, {"shared_parser": True}).text,
        "readability": READABILITY.run(html).text,
        "resiliparse": RESILIPARSE.run(html).text,
    }
    return {name: bag_f1(text, gold) for name, text in texts.items()}


def pages(root: Path, limit: int | None) -> list[tuple[Path, Path]]:
    return [(html, gold) for _, html, gold in paired_files(root, limit)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--datasets", default="scrapinghub,cleaneval")
    parser.add_argument("--limit", type=positive_int, default=None,
                        help="first N pages per dataset")
    parser.add_argument("--jobs", type=positive_int, default=2)
    args = parser.parse_args(argv)
    # Every dataset up front: a missing one would leave nothing to compare and read as
    # parity.
    names = [name.strip() for name in args.datasets.split(",") if name.strip()]
    roots = {name: require_dataset(name) for name in names}
    worst = 0.0
    print("| dataset | pages | " + " | ".join(COLUMNS) + " | traf. diff |")
    print("|---" * (len(COLUMNS) + 3) + "|")
    for name, root in roots.items():
        todo = pages(root, args.limit)
        with ProcessPoolExecutor(args.jobs) as pool:
            results = [r for r in pool.map(score_page, *zip(*todo, strict=True), chunksize=4)
                       if r is not None]
        means = {c: statistics.fmean(r[c] for r in results) for c in COLUMNS}
        diff = means["trafilatura"] - means["trafilatura_direct"]
        worst = max(worst, abs(diff))
        print(f"| {name} | {len(results)} | "
              + " | ".join(f"{means[c]:.4f}" for c in COLUMNS) + f" | {diff:+.4f} |")
    print(f"\nlargest |trafilatura - trafilatura_direct|: {worst:.4f} "
          f"({'within' if worst <= 0.01 else 'OUTSIDE'} 0.01)")
    return 0 if worst <= 0.01 else 1


if __name__ == "__main__":
    sys.exit(main())
