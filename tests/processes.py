"""A process tree's members, memory and CPU time, read from /proc (Linux), for the tests
and benchmarks that measure services with their worker processes; and the signal
dispositions a terminal gives the commands it starts."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path

from shared.workers import descendants

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def as_a_terminal_starts_it(hangup_ignored: bool = False) -> Callable[[], None]:
    """A `preexec_fn` that gives a child Ctrl-C, Ctrl-\\ and a hangup at their defaults
    (the hangup ignored, as under nohup, when asked), whatever this process inherited: a
    background job started without job control inherits SIGINT and SIGQUIT ignored, and
    Python then installs no KeyboardInterrupt handler."""
    hangup = signal.SIG_IGN if hangup_ignored else signal.SIG_DFL

    def set_dispositions() -> None:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.signal(signal.SIGQUIT, signal.SIG_DFL)
        signal.signal(signal.SIGHUP, hangup)
    return set_dispositions


def process_tree(root: int) -> list[int]:
    """`root` and every process descended from it."""
    return [root, *descendants(root)]


def tree_memory_bytes(root: int, field: str = "VmRSS") -> int:
    """A /proc/<pid>/status memory figure (VmRSS: resident now; VmHWM: its peak) summed
    over a process tree, in bytes (processes gone meanwhile count 0)."""
    total = 0
    for pid in process_tree(root):
        try:
            with open(f"/proc/{pid}/status") as status:
                for line in status:
                    if line.startswith(f"{field}:"):
                        total += int(line.split()[1]) * 1024
                        break
        except OSError:
            continue
    return total


def process_cpu_s(pid: int, reaped: bool = False) -> float:
    """User + system CPU seconds of one process (0 once it is gone); with `reaped`, those
    of its children it has waited for too."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            # The command name may hold spaces and parentheses: fields follow the last ')'.
            fields = stat.read().rsplit(b")", 1)[1].split()
    except OSError:
        return 0.0
    # utime, stime, cutime, cstime: fields 14-17 of stat, 11-14 after the name.
    return sum(int(f) for f in fields[11:15 if reaped else 13]) / CLOCK_TICKS


def processes_using(folder: Path, variable: str) -> list[int]:
    """The processes started with `variable`=`folder` in their environment (every process
    below inherits it, unless it renames itself, which may overwrite its environment, as
    Ray's agents and workers do) or with a file open in `folder`."""
    needle = f"\0{variable}={folder}\0".encode()
    found = []
    for entry in os.listdir("/proc"):
        try:
            process = Path("/proc") / entry
            if needle in b"\0" + (process / "environ").read_bytes() or any(
                    os.readlink(fd).startswith(f"{folder}/")
                    for fd in (process / "fd").iterdir()):
                found.append(int(entry))
        except OSError:  # not a process, gone, or another user's
            continue
    return found
