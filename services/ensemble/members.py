"""Reaching the ensemble's members: in this process, or over HTTP to running services.

A member's answer is its text and blocks (what /extract returns) or nothing: a member
that is not installed, fails on the page, is down or answers after its time limit is a
missing feature of the combiner, never an error of the ensemble. Over HTTP the members
are asked at the same time (one thread each on a keep-alive connection pool), so the
page costs the slowest member's time, not the sum of all.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import httpx
import orjson

from shared.contract import Algorithm, Block
from shared.registry import SERVICES

# The members the combiner is trained on: every algorithm service but rss (it needs a
# feed), the ensemble itself and the learned ones (services/ensemble/training.py says
# why). Deployments give the ensemble these members' URLs.
TRAINING_MEMBERS = ("justext", "boilerpipe", "bte", "cetd", "trafilatura", "readability",
                    "resiliparse")


@dataclass(frozen=True)
class MemberAnswer:
    """What one member said about one page: its text and blocks, or why it said
    nothing (`error`), and the CPU time it took where it ran in this process."""

    member: str
    text: str | None
    blocks: list[Block] | None
    cpu_ms: float = 0.0
    error: str | None = None
    wall_ms: float = 0.0

    @property
    def answered(self) -> bool:
        return self.text is not None


@functools.cache
def member_algorithm(name: str) -> Algorithm:
    """A member's pure extractor, imported once per process (ImportError where the
    member's libraries are not installed)."""
    algorithm = SERVICES[name].algorithm()
    algorithm.warm_up()
    return algorithm


def ask_in_process(name: str, html: str, url: str | None) -> MemberAnswer:
    """Run a member's extractor here with its default options."""
    started, wall = time.process_time(), time.perf_counter()
    try:
        reply = member_algorithm(name).run(html, None, url)
    except Exception as exc:  # a failing member is a missing feature
        return MemberAnswer(name, None, None, error=f"{type(exc).__name__}: {exc}"[:300])
    return MemberAnswer(name, reply.text, reply.blocks,
                        cpu_ms=(time.process_time() - started) * 1000,
                        wall_ms=(time.perf_counter() - wall) * 1000)


def _blocks_of(raw: object) -> list[Block] | None:
    if not isinstance(raw, list):
        return None
    blocks = []
    for item in raw:
        if not isinstance(item, dict) or not isinstance(item.get("text"), str):
            return None
        score = item.get("score")
        blocks.append(Block(text=item["text"], is_content=bool(item.get("is_content")),
                            score=float(score) if isinstance(score, int | float) else None,
                            path=item.get("path") if isinstance(item.get("path"), str)
                            else None,
                            label=item.get("label") if isinstance(item.get("label"), str)
                            else None))
    return blocks


class HttpMembers:
    """Members behind base URLs, asked concurrently on keep-alive connections."""

    def __init__(self, urls: Mapping[str, str], time_limit_s: float,
                 token: str | None = None) -> None:
        self.urls = dict(urls)
        self.time_limit_s = time_limit_s
        headers = {"authorization": f"Bearer {token}"} if token else {}
        self.client = httpx.Client(
            timeout=httpx.Timeout(time_limit_s), headers=headers,
            limits=httpx.Limits(max_connections=4 * max(len(urls), 1),
                                max_keepalive_connections=2 * max(len(urls), 1)))
        self.pool = ThreadPoolExecutor(max(len(urls), 1), thread_name_prefix="member")

    def ask(self, name: str, body: bytes) -> MemberAnswer:
        try:
            reply = self.client.post(f"{self.urls[name]}/extract", content=body,
                                     headers={"content-type": "application/json"})
        except httpx.HTTPError as exc:
            return MemberAnswer(name, None, None, error=f"{type(exc).__name__}: {exc}"[:300])
        if reply.status_code != 200:
            return MemberAnswer(name, None, None, error=f"HTTP {reply.status_code}: "
                                f"{reply.text[:200]}")
        try:
            data = orjson.loads(reply.content)
        except orjson.JSONDecodeError:
            return MemberAnswer(name, None, None, error="the reply is not JSON")
        text = data.get("text") if isinstance(data, dict) else None
        if not isinstance(text, str):
            return MemberAnswer(name, None, None, error="the reply has no text")
        return MemberAnswer(name, text, _blocks_of(data.get("blocks")))

    def submit(self, names: Sequence[str], html: str, url: str | None
               ) -> dict[str, Future[MemberAnswer]]:
        """Ask every member in `names` at once; their answers arrive as futures."""
        body = orjson.dumps({"html": html, "url": url, "options": {}})
        return {name: self.pool.submit(self.ask, name, body) for name in names}
