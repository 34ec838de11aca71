"""Long fuzz run: N generated requests per service, findings saved for replay.

    python benchmarks/fuzz.py [--examples 500] [--services all|a,b] [--seed 1]
                              [--time-limit 10] [--findings output/fuzz-findings]

Each service runs under uvicorn on a free loopback port with its real worker
processes (as in tests/test_fuzz.py, whose strategies this uses: generated and
mutated HTML, mixed encodings, NUL and control characters, surrogate escapes,
giant lines, random bytes, random JSON shapes). Every reply must be a
contract-valid 200, a 4xx JSON error or a 504 JSON error (the contract's answer
to a page over the time limit; counted in the table); anything else (another
5xx, a hang, a non-JSON or invalid body, a dropped connection) is a finding: the
request body and its headers are saved under the findings folder, and the run
goes on. The inputs that got a 504 are saved too, under findings/timeouts.
Prints per service the number of requests, the replies by status and the
findings, and exits 1 if there was any finding.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import time
from pathlib import Path

from common import REPO, positive_int, service_list
from hypothesis import HealthCheck, Phase, given, settings

from shared.settings import ServiceSettings
from tests.servers import serve_service
from tests.test_fuzz import (
    FuzzFindingError,
    FuzzRequest,
    all_requests,
    check_reply,
    post,
    serves_a_normal_page,
)


def save_finding(folder: Path, name: str, index: int, request: FuzzRequest, message: str) -> Path:
    """The request body as it was sent, plus a JSON note of its headers and what went wrong."""
    target = folder / name
    target.mkdir(parents=True, exist_ok=True)
    body = target / f"{index:05d}.body"
    body.write_bytes(request.body)
    note = {"service": name, "kind": request.kind, "content_type": request.content_type,
            "params": request.params, "finding": message, "body_file": body.name,
            "replay": f"curl -s -X POST -H 'content-type: {request.content_type}' "
                      f"--data-binary @{body} 'http://127.0.0.1:PORT/extract'"}
    (target / f"{index:05d}.json").write_text(json.dumps(note, indent=2))
    return body


def fuzz_service(name: str, examples: int, seed: int, time_limit: float,
                 findings_dir: Path) -> tuple[int, collections.Counter[str], list[str]]:
    """Fuzz one service; (requests sent, replies by status, findings)."""
    statuses: collections.Counter[str] = collections.Counter()
    findings: list[str] = []
    timeouts = [0]
    with serve_service(name, ServiceSettings(time_limit_s=time_limit)) as (url, client):

        @settings(max_examples=examples, deadline=None, database=None, derandomize=False,
                  phases=[Phase.generate], suppress_health_check=list(HealthCheck))
        @given(request=all_requests(name))
        def run(request: FuzzRequest) -> None:
            try:
                reply = post(client, url, request)
                statuses[str(reply.status_code)] += 1
                check_reply(name, reply, allow_timeout=True)
                if reply.status_code == 504:
                    timeouts[0] += 1
                    save_finding(findings_dir / "timeouts", name, timeouts[0], request,
                                 "504: over the time limit (allowed by the contract)")
                    if not serves_a_normal_page(client, url, name):
                        raise FuzzFindingError("no normal page served after a 504")
            except FuzzFindingError as exc:
                statuses["finding"] += 1
                saved = save_finding(findings_dir, name, len(findings), request, str(exc))
                findings.append(f"{exc} ({request.kind}, saved as {saved})")

        seeded = run
        if seed:
            from hypothesis import seed as hypothesis_seed
            seeded = hypothesis_seed(seed)(run)
        seeded()
        health = client.get(f"{url}/health", timeout=60)
        if health.status_code != 200:
            findings.append(f"unhealthy after the run: HTTP {health.status_code}")
    return sum(v for k, v in statuses.items() if k != "finding"), statuses, findings


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=positive_int, default=500,
                        help="requests per service")
    parser.add_argument("--services", type=service_list, default="all")
    parser.add_argument("--seed", type=int, default=1, help="0: a random seed")
    parser.add_argument("--time-limit", type=float, default=10.0)
    parser.add_argument("--findings", type=Path, default=REPO / "output" / "fuzz-findings")
    args = parser.parse_args()
    total = 0
    all_findings: list[str] = []
    print(f"{'service':<12} {'requests':>8} {'seconds':>8} {'findings':>8}  replies by status")
    for name in args.services:
        started = time.monotonic()
        count, statuses, findings = fuzz_service(name, args.examples, args.seed,
                                                 args.time_limit, args.findings)
        total += count
        all_findings += [f"{name}: {f}" for f in findings]
        shown = ", ".join(f"{k}: {v}" for k, v in sorted(statuses.items()))
        print(f"{name:<12} {count:>8} {time.monotonic() - started:>8.1f} {len(findings):>8}  "
              f"{shown}", flush=True)
    print(f"\n{total} requests, {len(all_findings)} findings")
    for finding in all_findings:
        print(f"- {finding.splitlines()[0][:300]}")
    return 1 if all_findings else 0


if __name__ == "__main__":
    sys.exit(main())
