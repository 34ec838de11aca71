"""The guard of a local Ray that `extract --warc --ray auto` starts (warc_ray._local_ray):
a process of its own that outlives a driver killed without a chance to clean up, and
ends what is left of that driver's cluster. It needs the standard library alone, so
that it stays small for the job's length.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sys
import time


def guard_local_ray() -> None:
    """The guard of a local Ray (_local_ray), given the cluster's temp folder and the
    driver's process id: at EOF on stdin, the processes that hold a file in the folder
    (every process of the cluster writes its logs there) but the driver are killed until
    none is found (the raylet may have been starting a worker as it died), and the
    folder is removed (Ray's logs of the run, about 200 KB). Processes are found on
    Linux only (/proc); elsewhere Ray does not fate-share with the kernel's help but
    starts a reaper of its own, which ends them."""
    folder, driver = sys.argv[1], int(sys.argv[2])
    sys.stdin.buffer.read()
    for _ in range(50):
        holding = [pid for pid in _processes_holding(folder) if pid != driver]
        if not holding:
            break
        for pid in holding:
            with contextlib.suppress(OSError):  # gone meanwhile
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.1)
    shutil.rmtree(folder, ignore_errors=True)


def _processes_holding(folder: str) -> list[int]:
    """This user's processes with a file in `folder` open, from /proc (none without)."""
    inside = os.path.join(folder, "")
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    found: list[int] = []
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            for fd in os.scandir(f"/proc/{entry}/fd"):
                if os.readlink(fd.path).startswith(inside):
                    found.append(int(entry))
                    break
        except OSError:  # gone meanwhile, or another user's
            continue
    return found
