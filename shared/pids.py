"""Processes by pid, with the standard library alone (a browser's janitor imports it,
and must stay small)."""

from __future__ import annotations

import os


def process_exists(pid: int, group: bool = False) -> bool:
    """Whether a process `pid` exists on this host (one of another user's counts), or
    with `group`, whether process group `pid` still has a member (a zombie not yet
    reaped counts)."""
    try:
        (os.killpg if group else os.kill)(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
