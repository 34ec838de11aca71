"""A page's rendered layout from headless Chromium: every element's box, keyed by XPath.

Why: visual features (where and how large a node is drawn, whether it is drawn at all)
need a real layout engine, not a guess from the markup: a stylesheet can hide a long
block, push a footer off the page or squeeze a sidebar into a narrow column.

How: Debian's chromium, driven by Playwright for Python with `executable_path` (no
browser download), one browser per process (`layout` starts it on first use and
starts a new one when it has died). Each page gets a fresh browser context and page:

- no network at all: every request is aborted by a route (the document itself is not
  a request: it is written into about:blank by `page.set_content`), the context is
  offline (which also stops WebRTC's UDP, which no proxy sees), and the browser
  talks to a proxy on a closed local port, loopback included, so what a route cannot
  see (a preconnect, a prefetch) does not reach a server either;
- JavaScript off unless `javascript=True`; service workers blocked; a page on
  about:blank may not load file:// URLs (and any such request is aborted anyway);
- measured once the page has loaded, by a script in a JavaScript world of its own
  (the page's scripts cannot change what it calls), see _measure;
- a viewport of VIEWPORT_WIDTH x VIEWPORT_HEIGHT; boxes are measured on the whole
  page (document coordinates: the box of a node below the first screen has y >= 768).

Every page is watched for its time (`timeout_s`) and the browser's memory
(BOILERBENCH_MAX_BROWSER_BYTES, ServiceSettings.max_browser_bytes): past either, the
browser is killed with its processes and the page fails; the next one starts a new
browser. A browser that dies otherwise during a page, or whose driver does, is
replaced and the page tried once more: a SIGTERM sent to a service's process group
(`kill -TERM -- -PGID`) or to each of its processes (systemd) ends the driver (Node.js
ends on it) and so the browser, while the worker ignores it to answer the page in
hand. A service also runs this in worker processes whose pool kills a worker
past its time limit together with its child processes (the Playwright driver and the
browser), see shared/workers.py.

A browser leaves no files behind (shared.browser_files): its HOME is a temporary
folder of its own, where Chromium can write no crash dumps at all (it would write one
per crashed page under $HOME/.config/chromium), and which holds the driver's
artifacts folder for it (which the driver would otherwise make in the temporary
folder, and leave there when it is killed). That folder goes with the browser, and
with it what a killed browser leaves in the temporary folder: the profile that
Playwright's driver made for it (about a megabyte) and the folder of its singleton
socket. A process killed together with its browser (a worker past its time limit,
or as its service stops) cannot remove them: its janitor does, a process that the
first browser's launch starts and that outlives it (shared.browser_files). Where
the janitor was killed too, the next browser launched on the machine does.

An element's XPath is lxml's getpath form, as shared.flatpage.FlatPage.path gives it
(/html/body/div[2]/p: an index only where the parent has several children of that
name), so boxes join the blocks of the extractors by path. The two parsers build the
same HTML5 tree for nearly every page; an element one of them places elsewhere just
has no box.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass
from typing import IO, TYPE_CHECKING, Any

from shared.browser_files import (
    new_scratch,
    note_left_behind,
    remove_scratch,
)

# The default cap, re-exported: orchestrator/kubernetes.py sizes the pods' memory on it.
from shared.settings import MAX_BROWSER_BYTES as MAX_BROWSER_BYTES
from shared.settings import ServiceSettings
from shared.workers import descendants, same_imports_env

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page, Playwright, Route

VIEWPORT_WIDTH = 1366
VIEWPORT_HEIGHT = 768
DEFAULT_CHROMIUM = "/usr/bin/chromium"
# The browser's proxy: nothing listens on port 9 (discard) of the loopback address, so
# any connection the routes did not see fails at once.
_DEAD_PROXY = "http://127.0.0.1:9"
_LAUNCH_ARGS = [
    "--proxy-bypass-list=<-loopback>",  # loopback goes through the dead proxy too
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-domain-reliability",
    "--disable-sync",
    "--no-pings",
    "--dns-prefetch-disable",
    "--disable-features=NetworkPrediction,PreloadMediaEngagementData,MediaRouter",
    "--disable-dev-shm-usage",  # a container's /dev/shm is 64 MB: shared memory in /tmp
    "--no-sandbox",  # containers run as an unprivileged user without user namespaces
]
_UNSET_FOR_BROWSER = ("BREAKPAD_DUMP_LOCATION", "CHROME_CONFIG_HOME")
# A Renderer's janitor (shared.browser_files), run by `python -c`: it forks away at
# once, since a worker killed past its time limit goes with every process below it.
_JANITOR = ("import os\nif os.fork():\n    os._exit(0)\n"
            "from shared.browser_files import clean_up_after_browsers\nclean_up_after_browsers()")
# How often the browser's time and memory are checked while it works on a page.
_WATCH_INTERVAL_S = 0.1

# One pass over the document in the page: per element its path (lxml's form), box in
# document coordinates, rendered or not, font size and weight. Arrays, not objects:
# a page of 10,000 elements crosses the DevTools protocol as a few lists.
_MEASURE = """
() => {
  const sx = window.scrollX, sy = window.scrollY;
  const root = document.documentElement;
  const pageWidth = Math.max(root.scrollWidth, document.body ? document.body.scrollWidth : 0);
  const pageHeight = Math.max(root.scrollHeight, document.body ? document.body.scrollHeight : 0);
  const paths = [], boxes = [], rendered = [], fonts = [];
  const stack = [[root, '/' + root.localName.toLowerCase()]];
  while (stack.length) {
    const [element, path] = stack.pop();
    const r = element.getBoundingClientRect();
    const style = getComputedStyle(element);
    const x = r.left + sx, y = r.top + sy;
    const shown = element.checkVisibility({visibilityProperty: true})
      && r.width > 0 && r.height > 0
      && x + r.width > 0 && y + r.height > 0 && x < pageWidth && y < pageHeight;
    paths.push(path);
    boxes.push(x, y, r.width, r.height);
    rendered.push(shown ? 1 : 0);
    fonts.push(parseFloat(style.fontSize) || 0, parseInt(style.fontWeight, 10) || 400);
    const counts = new Map();
    for (const child of element.children) {
      const name = child.localName.toLowerCase();
      counts.set(name, (counts.get(name) || 0) + 1);
    }
    const seen = new Map();
    const children = [];
    for (const child of element.children) {
      const name = child.localName.toLowerCase();
      const k = (seen.get(name) || 0) + 1;
      seen.set(name, k);
      children.push([child, counts.get(name) > 1 ? `${path}/${name}[${k}]` : `${path}/${name}`]);
    }
    for (let i = children.length - 1; i >= 0; i--) stack.push(children[i]);
  }
  return {pageWidth, pageHeight, paths, boxes, rendered, fonts};
}
"""
# _MEASURE once the page has loaded (set_content only waits for the document to be
# written: a script that navigates away during the load would keep it waiting for a
# load event that never comes).
_MEASURE_WHEN_LOADED = f"""
(async () => {{
  if (document.readyState !== 'complete')
    await new Promise(done => addEventListener('load', done, {{once: true}}));
  return ({_MEASURE})();
}})()
"""


class BrowserUnavailableError(RuntimeError):
    """No browser can be started here (no executable, or Playwright missing)."""


class LayoutFailedError(RuntimeError):
    """The browser could not lay the page out (its time ran out, it crashed)."""


@dataclass(frozen=True, slots=True)
class Box:
    """An element as drawn: its box in page coordinates (CSS pixels), whether it is
    rendered (displayed, not visibility:hidden, of non-zero size, at least partly on
    the page), its computed font size (px) and weight (100-900)."""

    x: float
    y: float
    width: float
    height: float
    rendered: bool
    font_size: float
    font_weight: int


@dataclass(frozen=True)
class Layout:
    """The viewport, the whole page's size and every element's Box by XPath."""

    viewport_width: int
    viewport_height: int
    page_width: float
    page_height: float
    boxes: dict[str, Box]

    def to_json(self) -> dict[str, Any]:
        return {"viewport": {"width": self.viewport_width, "height": self.viewport_height},
                "page": {"width": self.page_width, "height": self.page_height},
                "boxes": {path: asdict(box) for path, box in self.boxes.items()}}


def chromium_path() -> str:
    """The browser executable: BOILERBENCH_CHROMIUM, else Debian's /usr/bin/chromium,
    else `chromium` on PATH."""
    configured = os.environ.get("BOILERBENCH_CHROMIUM")
    if configured:
        return configured
    if os.path.exists(DEFAULT_CHROMIUM):
        return DEFAULT_CHROMIUM
    return shutil.which("chromium") or DEFAULT_CHROMIUM


def browser_problem() -> str | None:
    """Why no browser can run here (None when one can): checked without starting it."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "the Python package 'playwright' is not installed"
    path = chromium_path()
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        return f"no browser executable at {path} (set BOILERBENCH_CHROMIUM or install chromium)"
    return None


class Renderer:
    """One Playwright driver and one Chromium browser, started on first use and
    restarted when the browser has died (crashed, or killed from outside).

    Playwright's sync API belongs to the thread that started it, so every call runs on
    one thread of the Renderer's own (the watch in `render` runs on the caller's).
    `max_bytes` is the memory cap, read from the settings once."""

    def __init__(self) -> None:
        self.max_bytes = ServiceSettings().max_browser_bytes
        self._playwright: Playwright | None = None
        self._browser: Browser | None = None
        self._browser_pid: int | None = None
        self._scratch: str | None = None
        """The browser's temporary folder (see new_scratch)."""
        self._stopped: str | None = None
        """Why the watch in `render` killed the browser during the current page."""
        self._janitor: IO[bytes] | None = None
        """The end of the stdin of this process's janitor (_start_janitor)."""
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="browser")
        self._one_page = threading.Lock()  # the watch belongs to one page at a time
        atexit.register(self._at_exit)

    def _ensure_browser(self) -> Browser:
        if self._browser is not None and self._browser.is_connected():
            return self._browser
        problem = browser_problem()
        if problem:
            raise BrowserUnavailableError(problem)
        self._close()
        from playwright.sync_api import sync_playwright

        self._scratch = scratch = new_scratch()
        if self._janitor is None:
            self._janitor = _start_janitor()
        self._playwright = sync_playwright().start()
        self._browser = self._playwright.chromium.launch(
            executable_path=chromium_path(), headless=True, args=_LAUNCH_ARGS,
            env=_browser_env(scratch), artifacts_dir=os.path.join(scratch, "artifacts"),
            proxy={"server": _DEAD_PROXY, "bypass": ""}, chromium_sandbox=False,
            handle_sigint=False, handle_sigterm=False, handle_sighup=False)
        session = self._browser.new_browser_cdp_session()
        try:
            processes = session.send("SystemInfo.getProcessInfo")["processInfo"]
        finally:
            session.detach()
        self._browser_pid = next((process["id"] for process in processes
                                  if process["type"] == "browser"), None)
        note_left_behind(scratch, self._browser_pid)
        with contextlib.suppress(OSError):  # a janitor gone leaves them to the next browser
            self._janitor.write(f"{self._browser_pid}\n".encode())
            self._janitor.flush()
        return self._browser

    def render(self, html: str, javascript: bool = False, timeout_s: float = 30.0) -> Layout:
        """Lay `html` out and measure every element (see the module docstring).

        Watched from the calling thread: a page past `timeout_s` (not counting the
        browser's launch), or one that makes the browser hold more than `max_bytes`,
        gets its browser killed (the next page starts a new one) and
        a LayoutFailedError. Playwright's own timeouts do not cover everything (an
        evaluation waits for a page whose scripts never stop)."""
        with self._one_page:
            self._stopped = None
            job = self._thread.submit(self._render_again_if_dead, html, javascript, timeout_s)
            deadline = time.monotonic() + timeout_s
            while not wait([job], _WATCH_INTERVAL_S).done:
                if self._browser_pid is None:  # launching, which has a timeout of its own
                    deadline = time.monotonic() + timeout_s
                elif time.monotonic() > deadline:
                    self._stop(f"the page was not laid out within {timeout_s:g} s")
                elif browser_memory(self._browser_pid) > self.max_bytes:
                    self._stop(f"the page made the browser hold over "
                               f"{self.max_bytes >> 20} MiB")
            return job.result()

    def _stop(self, reason: str) -> None:
        """Kill the browser and every process below it, from the calling thread (the
        browser's thread is blocked on it); its pending calls then fail at once."""
        pid = self._browser_pid
        if pid is None or self._stopped is not None:
            return
        self._stopped = reason
        _kill_tree(pid)

    def _render_again_if_dead(self, html: str, javascript: bool, timeout_s: float) -> Layout:
        """_render; a browser that dies during the page, or whose driver does (a SIGTERM
        to a service's whole process group ends the driver, while the worker ignores it
        to answer the page), is replaced and tried once more (not one killed by the
        watch in `render`)."""
        from playwright.sync_api import Error

        try:
            return self._render(html, javascript, timeout_s)
        except Error as exc:
            if self._stopped is not None:
                raise LayoutFailedError(self._stopped) from None
            if self._browser_answers():
                raise LayoutFailedError(exc.message.splitlines()[0]) from None
        if self._browser_pid is not None:  # a browser whose driver is gone may run on
            _kill_tree(self._browser_pid)
        self._close()
        try:
            return self._render(html, javascript, timeout_s)
        except Error as exc:
            raise LayoutFailedError(self._stopped or exc.message.splitlines()[0]) from None

    def _browser_answers(self) -> bool:
        """Whether the browser and its driver are there: is_connected() turns False
        when the driver says the browser has gone, which a killed driver never says."""
        from playwright.sync_api import Error

        if self._browser is None or not self._browser.is_connected():
            return False
        try:
            self._browser.new_browser_cdp_session().detach()
        except Error:
            return False
        return True

    def _render(self, html: str, javascript: bool, timeout_s: float) -> Layout:
        context = self._ensure_browser().new_context(
            viewport={"width": VIEWPORT_WIDTH, "height": VIEWPORT_HEIGHT},
            java_script_enabled=javascript, service_workers="block", accept_downloads=False,
            offline=True)
        try:
            context.set_default_timeout(timeout_s * 1000)
            context.route("**/*", _refuse)
            page = context.new_page()
            page.set_content(_without_refresh(html), wait_until="commit")
            measured = _measure(page)
        finally:
            with contextlib.suppress(Exception):  # a browser that died: nothing to close
                context.close()
        return _layout_from(measured)

    def close(self) -> None:
        """Stop the browser and the driver."""
        self._thread.submit(self._close).result()

    def _close(self) -> None:
        if self._browser is not None:
            with contextlib.suppress(Exception):  # either may be dead already
                self._browser.close()
        if self._playwright is not None:
            with contextlib.suppress(Exception):
                self._playwright.stop()
        self._browser = self._playwright = None
        self._browser_pid = None
        if self._scratch is not None:
            remove_scratch(self._scratch)
            self._scratch = None

    def _at_exit(self) -> None:
        """At the interpreter's exit the Renderer's thread is gone, and the driver would
        end the browser only once this process has: kill it now and remove its folder."""
        if self._browser_pid is not None:
            _kill_tree(self._browser_pid)
        if self._scratch is not None:
            remove_scratch(self._scratch)
            self._scratch = None


def _kill_tree(pid: int) -> None:
    """SIGKILL to process `pid` and every process below it."""
    for process in [pid, *descendants(pid)]:
        with contextlib.suppress(OSError):
            os.kill(process, signal.SIGKILL)


def _start_janitor() -> IO[bytes]:
    """Start the janitor of this process's browsers
    (browser_files.clean_up_after_browsers); return the end of its stdin, which only
    this process holds. Started in a session of its own, it does not get a stop signal
    sent to this process's group."""
    janitor = subprocess.Popen(
        [sys.executable, "-P", "-c", _JANITOR, str(os.getpid())], stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL, env=same_imports_env(os.environ), start_new_session=True)
    janitor.wait()  # the janitor's first process, which ends once it has forked
    assert janitor.stdin is not None
    return janitor.stdin


def _browser_env(scratch: str) -> dict[str, str | float | bool]:
    """This process's environment with the browser's HOME and XDG folders in `scratch`:
    nothing it writes lands in the user's HOME."""
    home = os.path.join(scratch, "home")
    env: dict[str, str | float | bool] = {
        name: value for name, value in os.environ.items() if name not in _UNSET_FOR_BROWSER}
    env.update(HOME=home, XDG_CONFIG_HOME=os.path.join(home, ".config"),
               XDG_CACHE_HOME=os.path.join(home, ".cache"),
               XDG_DATA_HOME=os.path.join(home, ".local", "share"),
               XDG_STATE_HOME=os.path.join(home, ".local", "state"))
    return env


# <meta http-equiv="refresh">: a refresh to the same document reloads about:blank
# (nothing to route) and destroys the page being measured. Renamed, it is still a
# <meta> in its place, so the elements' paths stay those of the page.
_META_REFRESH = re.compile(r"""(<meta\b[^>]*?\bhttp-equiv\s*=\s*["']?\s*)refresh""",
                           re.IGNORECASE)


def _without_refresh(html: str) -> str:
    return _META_REFRESH.sub(r"\1x-refresh", html)


def _measure(page: Page) -> dict[str, Any]:
    """_MEASURE_WHEN_LOADED in a JavaScript world of its own: it shares the DOM with the
    page's scripts but not their globals, so a page that replaced Map, parseInt or
    Element.prototype.getBoundingClientRect (as polyfills and old libraries do) is
    measured all the same."""
    session = page.context.new_cdp_session(page)
    try:
        frame = session.send("Page.getFrameTree")["frameTree"]["frame"]["id"]
        world = session.send("Page.createIsolatedWorld", {"frameId": frame,
                                                          "worldName": "layout"})
        reply = session.send("Runtime.evaluate", {
            "expression": _MEASURE_WHEN_LOADED, "contextId": world["executionContextId"],
            "returnByValue": True, "awaitPromise": True})
    finally:
        with contextlib.suppress(Exception):
            session.detach()
    if "exceptionDetails" in reply:  # e.g. a script removed the document's root
        details = reply["exceptionDetails"]
        error = details.get("exception", {}).get("description") or details["text"]
        raise LayoutFailedError(f"measuring the page failed: {error.splitlines()[0]}")
    measured: dict[str, Any] = reply["result"]["value"]
    return measured


def _refuse(route: Route) -> None:
    """Abort a request; answer a navigation (a meta refresh, a form, a link followed
    by a script) with 204 No Content, which leaves the page where it is (an aborted
    navigation would commit an error page in its place). Nothing leaves the browser."""
    if route.request.is_navigation_request():
        route.fulfill(status=204)
    else:
        route.abort("blockedbyclient")


def browser_memory(pid: int | None) -> int:
    """The memory (bytes) that the browser `pid` holds: the resident anonymous and
    shared memory of it and of every process below it (renderers, GPU, utilities),
    read from /proc; 0 where there is no /proc or no browser."""
    if pid is None:
        return 0
    total = 0
    for process in [pid, *descendants(pid)]:
        try:
            with open(f"/proc/{process}/status", encoding="ascii") as status:
                for line in status:
                    if line.startswith(("RssAnon:", "RssShmem:")):
                        total += int(line.split()[1]) * 1024
        except (OSError, ValueError):
            continue  # gone meanwhile
    return total


def _layout_from(measured: dict[str, Any]) -> Layout:
    boxes, rendered, fonts = measured["boxes"], measured["rendered"], measured["fonts"]
    found: dict[str, Box] = {}
    for k, path in enumerate(measured["paths"]):
        found[path] = Box(boxes[4 * k], boxes[4 * k + 1], boxes[4 * k + 2], boxes[4 * k + 3],
                          bool(rendered[k]), fonts[2 * k], int(fonts[2 * k + 1]))
    return Layout(VIEWPORT_WIDTH, VIEWPORT_HEIGHT, float(measured["pageWidth"]),
                  float(measured["pageHeight"]), found)


_RENDERER: Renderer | None = None


def renderer() -> Renderer:
    """This process's Renderer (one browser per process)."""
    global _RENDERER
    if _RENDERER is None:
        _RENDERER = Renderer()
    return _RENDERER


def layout(html: str, javascript: bool = False, timeout_s: float = 30.0) -> Layout:
    """The rendered layout of `html` in this process's browser. Raises
    BrowserUnavailableError when no browser can run here, LayoutFailedError when the
    page fails (past `timeout_s` or the memory cap, a crash)."""
    return renderer().render(html, javascript, timeout_s)
