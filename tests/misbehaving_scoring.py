"""A scoring worker that misbehaves on request, for the scoring pool's tests
(test_run_safety.py). The extract's text says what to do: `hang`, `die` (the process
ends as a crash in native code would), `raise` (a scoring bug); any other text is
scored by the real handler (orchestrator.scoring.scoring_handler)."""

from __future__ import annotations

import os
import pickle
import time
from typing import Any

from orchestrator.scoring import scoring_handler
from shared.workers import Handler


def misbehaving_handler(argument: str) -> Handler:
    real = scoring_handler(argument)

    def handle(meta: tuple[Any, ...], payload: bytes) -> tuple[tuple[Any, ...], bytes]:
        text, _ = pickle.loads(memoryview(payload)[meta[1]:])
        if text == "hang":
            time.sleep(60)
        if text == "die":
            os._exit(3)
        if text == "raise":
            return ("error", "RuntimeError: a bug in scoring"), b""
        return real(meta, payload)

    return handle
