"""What the rss service needs of a test page besides its HTML: the page's feed.

The registry names `feed_options` as rss's input hook, so the orchestrator sends
each page's feed (a dataset's `feeds/<id>.xml`) as option `feed` and skips the
pages that have none. Imports nothing of the extractor's libraries: the
orchestrator calls it without them.
"""

from __future__ import annotations

from typing import Any

from shared.registry import InputPage, InputSet, MissingInputError

NO_FEEDS = "dataset has no feeds"
NO_PAGE_FEED = "the page has no feed"


def feed_options(page: InputPage, test_set: InputSet) -> dict[str, Any]:
    """The page's feed as option `feed`; MissingInputError where it has none."""
    if page.feed is None:
        raise MissingInputError(NO_PAGE_FEED if test_set.has_feeds else NO_FEEDS)
    return {"feed": page.feed}
