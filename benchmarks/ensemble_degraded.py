"""The ensemble over HTTP while its members go down: every page answered, how much F1 is lost.

    python benchmarks/ensemble_degraded.py [--dataset scrapinghub] [--members all|a,b,...]
                                           [--stop a,b] [--limit N] [--out benchmarks/results]

Starts the members (default: every member of the model) and the ensemble as real local
processes (each on a free port, the ensemble told their URLs), then sends every page of
the dataset, asking for those members, three times: with every member up, with the
members of --stop killed (default: the last two the member frontier keeps, the ones
its accuracy leans on most), and with every member killed. For each round: replies
by HTTP status, mean bag-of-words word F1 (orchestrator.scoring), and the replies that
say `fallback`. Writes ensemble_degraded.md.
"""

from __future__ import annotations

import argparse
import datetime
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from statistics import fmean
from typing import Any

import httpx
from common import positive_int, require_dataset

from orchestrator.launcher import stack_with_members
from orchestrator.scoring import bag_f1
from services.ensemble.model import default_model
from shared.training import load_page, page_ids

RESULTS = Path(__file__).resolve().parent / "results"


def run_round(client: httpx.Client, url: str, pages: Sequence[tuple[str, str]],
              members: Sequence[str]) -> dict[str, Any]:
    statuses: Counter[int] = Counter()
    scores, fallback = [], 0
    for html, gold in pages:
        reply = client.post(f"{url}/extract",
                            json={"html": html, "options": {"members": list(members)}})
        statuses[reply.status_code] += 1
        if reply.status_code == 200:
            body = reply.json()
            scores.append(bag_f1(body["text"], gold))
            fallback += bool(body.get("details", {}).get("fallback"))
        else:
            scores.append(0.0)
    return {"statuses": dict(statuses), "word_f1": round(fmean(scores), 4),
            "fallback": fallback}


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", default="scrapinghub")
    parser.add_argument("--members", default="all")
    parser.add_argument("--stop", default=None)
    parser.add_argument("--limit", type=positive_int, default=None)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    model = default_model()
    members = list(model.members) if args.members == "all" else args.members.split(",")
    if not set(members) <= set(model.members):  # before any service starts
        parser.error(f"--members names {sorted(set(members) - set(model.members))}, which "
                     f"the model does not ask; its members: {', '.join(model.members)}")
    frontier = model.metadata["evaluation"]["frontier"]
    last_two = [step["dropped"] for step in frontier[-2:]]
    stop = args.stop.split(",") if args.stop else last_two
    if not set(stop) <= set(members):  # a round that stops nothing would read as one that did
        parser.error(f"--stop names {sorted(set(stop) - set(members))}, which are not among "
                     f"the members started ({', '.join(members)})")
    folder = require_dataset(args.dataset)
    pages = [load_page(folder, i) for i in page_ids(folder)[:args.limit]]
    stack = stack_with_members("ensemble", members)
    url = stack.start(timeout=300.0)["ensemble"]
    rounds: dict[str, dict[str, Any]] = {}
    try:
        with httpx.Client(timeout=120.0) as client:
            rounds["every member up"] = run_round(client, url, pages, members)
            for name in stop:
                stack.kill(name)
            rounds[f"stopped: {', '.join(stop)}"] = run_round(client, url, pages, members)
            for name in members:
                stack.kill(name)
            rounds["every member stopped"] = run_round(client, url, pages, members)
    finally:
        stack.stop()
    date = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    lines = ["# Ensemble with members down (over HTTP)", "",
             f"{date}; `python benchmarks/ensemble_degraded.py "
             f"{' '.join(sys.argv[1:] if argv is None else argv)}`; {len(pages)} pages of "
             f"{args.dataset}; members asked: {', '.join(members)}."
             + (f" In-sample: the combiner was trained on {args.dataset}; the figures "
                "compare the rounds with each other, not with held-out ones."
                if args.dataset in model.metadata.get("trained_on", []) else ""), "",
             "| round | replies by status | word F1 (bag of words, mean per page) | "
             "fallback replies |", "|---|---|---:|---:|"]
    for name, result in rounds.items():
        lines.append(f"| {name} | {result['statuses']} | {result['word_f1']:.4f} | "
                     f"{result['fallback']} |")
    text = "\n".join(lines) + "\n"
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "ensemble_degraded.md").write_text(text, encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
