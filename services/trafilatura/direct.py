"""trafilatura.extract called as its users call it: the reference our extractor must match.

On the raw decoded page text, with our service's default options spelled out (they
are the library's own defaults) and none of our wrapping (no control-character
cleaning, no per-page deduplication cache). tests/test_peers.py and
benchmarks/peer_parity.py compare services/trafilatura/extractor.py with it. Not
used by the service itself.
"""

from __future__ import annotations

import trafilatura

from services.trafilatura.extractor import TrafilaturaOptions


def trafilatura_direct(html: str) -> str:
    """trafilatura.extract's plain text of `html` with default options ('' for nothing)."""
    options = TrafilaturaOptions()
    return trafilatura.extract(
        html, fast=options.fast, favor_precision=options.favor_precision,
        favor_recall=options.favor_recall, include_comments=options.include_comments,
        include_tables=options.include_tables, target_language=options.target_language,
        deduplicate=options.deduplicate, prune_xpath=options.prune_xpath,
    ) or ""
