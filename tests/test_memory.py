"""Memory does not grow over 1,000 requests of the same real page (jusText service).

The service runs as a real process (orchestrator.launcher.LocalStack, on a free
port); its memory is the resident set (VmRSS) summed over its process tree (the
uvicorn process and its extraction workers), read from /proc. After 100 warm-up
requests (caches filled, allocator settled) the tree's RSS may grow by at most
max(20 MB, 10 %) over the next 900 requests; a leak of even 20 kB per request
would pass that.
"""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from orchestrator.launcher import LocalStack
from tests.conftest import report
from tests.processes import process_tree, tree_memory_bytes
from tests.servers import free_port

REQUESTS = 1_000
WARM_UP = 100
ALLOWED_GROWTH_BYTES = 20 * 1024 * 1024
ALLOWED_GROWTH_SHARE = 0.10
WORKERS = 2  # extraction workers, and as many client threads to keep them busy

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="reads process memory from /proc")


def pick_page(dataset: Path) -> bytes:
    """A real page of ordinary size: the lower-decile page by size of the dataset."""
    pages = sorted((dataset / "html").glob("*.html"), key=lambda p: (p.stat().st_size, p.name))
    return pages[len(pages) // 10].read_bytes()


def test_tree_rss_counts_children() -> None:
    """The helper itself: this process's tree includes a child it starts."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert child.pid in process_tree(os.getpid())
        assert tree_memory_bytes(os.getpid()) > tree_memory_bytes(child.pid) > 0
    finally:
        child.kill()
        child.wait()


def test_memory_does_not_grow_over_1000_requests(scrapinghub: Path) -> None:
    page = pick_page(scrapinghub)
    port = free_port()
    stack = LocalStack(["justext"], ports={"justext": port},
                       env={"BOILERBENCH_WORKERS": str(WORKERS)})
    with stack, httpx.Client(timeout=60) as client, ThreadPoolExecutor(WORKERS) as pool:
        url = f"{stack.urls()['justext']}/extract"
        pid = stack.processes["justext"].process.pid

        def extract(_: int) -> str:
            reply = client.post(url, content=page, headers={"content-type": "text/html"})
            assert reply.status_code == 200, reply.text[:300]
            text: str = reply.json()["text"]
            return text

        texts = set(pool.map(extract, range(WARM_UP)))
        rss_after_warm_up = tree_memory_bytes(pid)
        texts |= set(pool.map(extract, range(REQUESTS - WARM_UP)))
        rss_at_end = tree_memory_bytes(pid)
        assert len(process_tree(pid)) == 1 + WORKERS, "no worker was lost or added"
    assert len(texts) == 1, "the same page gives the same text every time"
    growth = rss_at_end - rss_after_warm_up
    report(f"memory (justext, {len(page)} byte page): tree RSS {rss_after_warm_up / 2**20:.1f} MB "
           f"after {WARM_UP} requests, {rss_at_end / 2**20:.1f} MB after {REQUESTS} "
           f"({growth / 2**20:+.1f} MB)")
    assert rss_after_warm_up > 0
    assert growth <= max(ALLOWED_GROWTH_BYTES, ALLOWED_GROWTH_SHARE * rss_after_warm_up), (
        f"RSS grew by {growth / 2**20:.1f} MB over {REQUESTS - WARM_UP} requests")
