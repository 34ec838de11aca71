"""How long scoring takes on a 20,000-token page (a benchmark, never a timed test).

    python benchmarks/scoring_speed.py [--tokens 20000] [--repeat 7]

The page is real text: the gold texts of the cleaneval (or scrapinghub) dataset
concatenated until the page holds --tokens words, with a navigation line between
articles; without the datasets, Zipf-distributed synthetic words. Gold is the
articles; the extract keeps 90% of them plus a little navigation. Prints the
median time of each step in milliseconds.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import numpy as np
from common import positive_int

from orchestrator.field_metrics import rouge_lsum_f1, shingle_counts
from orchestrator.scoring import prepare_page, score_extraction
from shared.contract import Block
from shared.datasets import dataset_dir
from shared.tokens import tokenize


def articles(tokens: int) -> tuple[str, list[list[str]]]:
    """Word lists of real gold texts (or synthetic ones) totalling about `tokens` words,
    and where they came from, which the output names: the times depend on the text."""
    found: list[list[str]] = []
    total = 0
    sources: list[str] = []
    for name in ("cleaneval", "scrapinghub"):
        folder = dataset_dir(name)
        if folder is None:
            continue
        sources.append(name)
        for path in sorted((folder / "content").glob("*.txt")):
            words = path.read_text(encoding="utf-8").split()
            if words:
                found.append(words)
                total += len(words)
            if total >= tokens * 0.8:
                return f"gold texts of {', '.join(sources)}", found
    if total:
        sources.append("synthetic Zipf words")
    else:
        sources = ["synthetic Zipf words (no dataset found)"]
    rng = np.random.default_rng(0)
    while total < tokens * 0.8:
        words = [f"w{int(x)}" for x in rng.zipf(1.3, size=800) % 5000]
        found.append(words)
        total += len(words)
    return " and ".join(sources), found


def timed(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Scoring speed on a large page.")
    parser.add_argument("--tokens", type=positive_int, default=20_000)
    parser.add_argument("--repeat", type=positive_int, default=7)
    args = parser.parse_args(argv)
    nav = ["home", "news", "sport", "weather", "contact", "about", "privacy", "terms", "login",
           "subscribe"]
    paragraphs: list[tuple[str, bool]] = []
    source, texts = articles(args.tokens)
    for words in texts:
        paragraphs.append((" ".join(nav), False))
        paragraphs += [(" ".join(words[i:i + 60]), True) for i in range(0, len(words), 60)]
    page_words = sum(len(tokenize(text)) for text, _ in paragraphs)
    while page_words > args.tokens:  # trim to the requested size
        text, _ = paragraphs.pop()
        page_words -= len(tokenize(text))
    html = "<html><body>" + "".join(
        f"<p>{text}</p>" if gold else f"<div>{text}</div>" for text, gold in paragraphs
    ) + "</body></html>"
    gold = "\n".join(text for text, is_gold in paragraphs if is_gold)
    kept = [text for i, (text, is_gold) in enumerate(paragraphs) if is_gold and i % 10 != 3]
    extract = "\n".join([" ".join(nav[:3]), *kept])
    page_blocks = [Block(text=text, is_content=is_gold and i % 10 != 3)
                   for i, (text, is_gold) in enumerate(paragraphs)]
    # a different token sequence at both ends (no common prefix or suffix to strip):
    # aligned with the gold on its own
    other_blocks = [Block(text="skip to content", is_content=False), *page_blocks[1:],
                    Block(text="copyright 2024", is_content=False)]

    ref = prepare_page(html, gold)
    print(f"page tokens {len(ref.page_tokens)}, gold tokens {len(ref.gold_tokens)}, "
          f"extract tokens {len(tokenize(extract))}; text: {source}")
    rows = [
        ("prepare_page (once per page)", lambda: prepare_page(html, gold)),
        ("shingle_counts (article-extraction metric)",
         lambda: shingle_counts(ref.gold_shingles, extract)),
        ("rouge_lsum_f1", lambda: rouge_lsum_f1(gold, extract)),
        ("score_extraction, text only (all figures)",
         lambda: score_extraction(ref, extract, None)),
        ("score_extraction, blocks = page tokens",
         lambda: score_extraction(ref, extract, page_blocks)),
        ("score_extraction, blocks != page tokens",
         lambda: score_extraction(ref, extract, other_blocks)),
    ]
    for label, fn in rows:
        print(f"{label:45s} {timed(fn, args.repeat):8.1f} ms (median of {args.repeat})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
