"""A browser's files: the temporary folder each browser gets (its HOME, where Chromium
can write no crash dumps), what a killed browser leaves in the temporary folder, and
their removal, by the browser's own process or, where that was killed with its browser,
by its janitor (clean_up_after_browsers) or the next browser launched. shared.layout
starts the browsers; this module needs the standard library alone, so that a janitor
process, which only imports it, stays small.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sys
import tempfile
import time

from shared.pids import proc_stat, process_exists

# No switch stops Debian's Chromium (156) from writing a dump per crashed page:
# --disable-breakpad, --disable-crash-reporter and --crash-dumps-dir change nothing, and
# --disable-crashpad-for-testing makes a page's script navigations hang. Its crash
# handler puts its database in $XDG_CONFIG_HOME/chromium/Crash Reports (or where
# BREAKPAD_DUMP_LOCATION or CHROME_CONFIG_HOME say), and where that cannot be a folder
# it writes nothing, while the browser and its pages go on as before. So the browser's
# HOME is a folder of its own in which that path is an empty file.
CRASH_REPORTS = os.path.join(".config", "chromium", "Crash Reports")
# A browser's temporary folder is named after its process (boilerbench-browser-PID-...)
# so that one whose process was killed can be told apart and removed.
SCRATCH_PREFIX = "boilerbench-browser-"
# The file in a browser's folder that names the folders a killed browser leaves in the
# temporary folder: the profile that Playwright's driver made for it and the folder of
# its singleton socket (which stays in TMPDIR: a socket's path has at most 107 bytes).
LEFT_BEHIND = "left-behind"
LEFT_BEHIND_PREFIXES = ("playwright_chromiumdev_profile-", "org.chromium.Chromium.")


def clean_up_after_browsers() -> None:
    """The body of a Renderer's janitor: once the process that started it has ended,
    however it ended (killed with its browser past its time limit or as its service
    stopped: nothing in it could remove its browser's folders then), remove them. Each
    line on stdin is the pid of a browser that process launched; EOF comes as it ends.
    The folders go once the last browser has ended too (at most 10 s later): one whose
    driver saw the end of the process closes it and removes its profile meanwhile. Stop
    signals are ignored: the janitor ends by itself, once that is done."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    owner = int(sys.argv[1])
    browsers = [int(line) for line in sys.stdin.buffer]
    deadline = time.monotonic() + 10
    while browsers and not _ended(browsers[-1]) and time.monotonic() < deadline:
        time.sleep(0.1)
    remove_abandoned_scratch(owner)


def _ended(pid: int) -> bool:
    """Whether process `pid` has ended: gone, or a zombie (which the process it is left
    to, PID 1 for a browser whose driver was killed, may reap late or never)."""
    stat = proc_stat(pid)
    return not process_exists(pid) if stat is None else stat[0] in ("Z", "X")


def new_scratch() -> str:
    """A new temporary folder for a browser's files, with `home` (its HOME, in which
    Chromium cannot make its crash database, see CRASH_REPORTS). The folders that
    killed processes left behind go first."""
    remove_abandoned_scratch()
    scratch = tempfile.mkdtemp(prefix=f"{SCRATCH_PREFIX}{os.getpid()}-")
    blocker = os.path.join(scratch, "home", CRASH_REPORTS)
    os.makedirs(os.path.dirname(blocker))
    with open(blocker, "x"):
        pass
    return scratch


def note_left_behind(scratch: str, browser_pid: int | None) -> None:
    """Note in `scratch` what the browser has outside it that a killed browser leaves
    behind: the profile folder Playwright's driver made (its --user-data-dir) and the
    folder of the socket that the profile's SingletonSocket links to."""
    if browser_pid is None:
        return
    try:
        with open(f"/proc/{browser_pid}/cmdline", "rb") as cmdline:
            arguments = cmdline.read().decode(errors="replace").split("\0")
    except OSError:
        return
    profile = next((argument.partition("=")[2] for argument in arguments
                    if argument.startswith("--user-data-dir=")), "")
    folders = [profile]
    with contextlib.suppress(OSError):
        folders.append(os.path.dirname(os.readlink(os.path.join(profile, "SingletonSocket"))))
    with open(os.path.join(scratch, LEFT_BEHIND), "w", encoding="utf-8") as note:
        note.writelines(f"{folder}\n" for folder in folders
                        if os.path.basename(folder).startswith(LEFT_BEHIND_PREFIXES))


def remove_scratch(scratch: str) -> None:
    """Remove a browser's temporary folder and the folders noted in it (which a browser
    that ends normally removes itself)."""
    with contextlib.suppress(OSError), \
            open(os.path.join(scratch, LEFT_BEHIND), encoding="utf-8") as note:
        for folder in note.read().splitlines():
            if os.path.basename(folder).startswith(LEFT_BEHIND_PREFIXES):
                shutil.rmtree(folder, ignore_errors=True)
    shutil.rmtree(scratch, ignore_errors=True)


def remove_abandoned_scratch(owner: int | None = None) -> None:
    """Remove the browsers' folders whose processes are gone: a process killed with its
    browser (a worker past its time limit, or as its service stops) could not remove
    its own. With `owner`, those of that process (which has ended) only."""
    try:
        with os.scandir(tempfile.gettempdir()) as scan:
            entries = [entry for entry in scan if entry.name.startswith(SCRATCH_PREFIX)]
    except OSError:
        return
    for entry in entries:
        pid = entry.name.removeprefix(SCRATCH_PREFIX).partition("-")[0]
        if owner is None:
            gone = pid.isdigit() and not process_exists(int(pid))
        else:
            gone = pid == str(owner)
        with contextlib.suppress(OSError):  # another process may be removing it too
            if (gone and entry.is_dir(follow_symlinks=False)
                    and entry.stat(follow_symlinks=False).st_uid == os.getuid()):
                remove_scratch(entry.path)
