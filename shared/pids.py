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


def proc_stat(pid: int) -> tuple[str, str] | None:
    """The state and the start time (clock ticks after boot) of process `pid`, fields 3
    and 22 of /proc/PID/stat; None where /proc does not tell them (no /proc, no such
    process, or one hidden from this user)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            text = stat.read()
    except OSError:
        return None
    fields = text.rpartition(b")")[2].split()  # the command name may hold spaces
    return (fields[0].decode(), fields[19].decode()) if len(fields) > 19 else None
