"""An extractor that misbehaves on request, for the worker pool's tests (test_workers.py).

The page's text says what to do: `refuse` (PageError), `raise` (a bug), `die` (the
process ends as a crash in native code would), `hang`, `slow` (a second's work);
any other page is returned as one content block. `tests.misbehaving_app` serves it.
With MISBEHAVING_START=fail in the environment its workers fail to start, as those
of an extractor whose library or model file is missing.
"""

from __future__ import annotations

import os
import time

from shared.contract import Algorithm, Block, Extraction, Options, PageError


class MisbehavingOptions(Options):
    label: str = "plain"


def extract(html: str, options: MisbehavingOptions, url: str | None = None) -> Extraction:
    if "refuse" in html:
        raise PageError("this page is refused")
    if "raise" in html:
        raise RuntimeError("a bug in the extractor")
    if "die" in html:
        os._exit(3)
    if "hang" in html:
        time.sleep(60)
    if "slow" in html:
        time.sleep(1.0)
    return Extraction([Block(text=html, is_content=True, label=options.label, path=url)])


def _warm_up() -> None:
    if os.environ.get("MISBEHAVING_START") == "fail":
        raise RuntimeError("the model file is missing")


ALGORITHM = Algorithm(
    name="misbehaving",
    version="1",
    description="Test double of shared.workers: misbehaves on request.",
    reference="tests/test_workers.py",
    options_model=MisbehavingOptions,
    extract=extract,
    score="None: blocks carry no score.",
    score_range=(0.0, 1.0),
    path_tree=None,
    warm_up=_warm_up,
)
