"""The pathological-page table: each page of tests/test_pathological.py on each service.

    python benchmarks/pathological.py [--services all|a,b] [--time-limit 10]
                                      [--out output/pathological.md]

Each service runs under uvicorn on a free loopback port with its real worker
processes and the given time limit; each page is posted once as a raw text/html
body and the table gives the reply's status, error code and wall-clock seconds,
then whether the service was healthy after it (GET /health 200 and a normal page
served, retried while a killed worker is replaced; the seconds that took are in
the last column). Printed as Markdown and written to --out.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import httpx
from common import REPO, service_list

from shared.settings import ServiceSettings
from tests.servers import serve_service
from tests.test_pathological import (
    LIMIT_BYTES,
    PathologicalPage,
    build_corpus,
    page_params,
    post_normal_page,
    text_page,
)


def run_service(name: str, corpus: list[PathologicalPage], time_limit: float) -> list[str]:
    """Table rows of one service."""
    rows = []
    settings = ServiceSettings(time_limit_s=time_limit, max_body_bytes=LIMIT_BYTES)
    over = PathologicalPage("over_limit_+1_byte", text_page(LIMIT_BYTES + 1))
    with serve_service(name, settings) as (url, client):
        for page in [*corpus, over]:
            params = page_params(name)
            started = time.monotonic()
            try:
                reply = client.post(f"{url}/extract", content=page.body, params=params,
                                    headers={"content-type": page.content_type},
                                    timeout=time_limit + 120)
                status = str(reply.status_code)
                try:
                    body = reply.json()
                except ValueError:
                    body = {}
                code = body.get("error", "") if isinstance(body, dict) else ""
                blocks = len(body.get("blocks", [])) if isinstance(body, dict) else 0
            except httpx.HTTPError as exc:
                status, code, blocks = "no reply", type(exc).__name__, 0
            seconds = time.monotonic() - started
            recovered = time.monotonic()
            health = client.get(f"{url}/health", timeout=30).status_code
            normal = post_normal_page(client, url, name).status_code
            healthy = "yes" if health == 200 and normal == 200 else f"NO ({health}/{normal})"
            rows.append(f"| {page.name} | {name} | {status} | {code or '-'} | "
                        f"{blocks if status == '200' else '-'} | {seconds:.2f} | {healthy} | "
                        f"{time.monotonic() - recovered:.2f} |")
            print(rows[-1], flush=True)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--services", type=service_list, default="all")
    parser.add_argument("--time-limit", type=float, default=10.0)
    parser.add_argument("--out", type=Path,
                        default=REPO / "output" / "pathological.md")
    args = parser.parse_args()
    corpus = build_corpus()
    header = [f"Pathological pages, time limit {args.time_limit:g} s, size limit "
              f"{LIMIT_BYTES} bytes.", "",
              "| page | service | status | error | blocks | seconds | healthy after | "
              "recovery s |", "|---|---|---|---|---|---|---|---|"]
    print("\n".join(header), flush=True)
    rows: list[str] = []
    for name in args.services:
        rows += run_service(name, corpus, args.time_limit)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(header + rows) + "\n")
    print(f"\nwritten to {args.out}")
    return 0 if all("| yes |" in row for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
