"""CETD's Hybrid Text Density through the service, with Debian's chromium: the scores
follow the layout, nothing is fetched, a page that never lays out or fills memory is
cut off with its browser (the memory cap is a setting, checked at start), a page's
scripts cannot break the measurement, a browser leaves no files behind (no crash
dumps in HOME; a process killed with it has its files removed all the same), a stop
signal to the whole service answers the page in hand, and without a browser htd is
refused with 503."""

from __future__ import annotations

import contextlib
import functools
import http.server
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from orchestrator import cli
from orchestrator.launcher import wait_healthy
from services.cetd.extractor import ALGORITHM
from shared.layout import browser_problem, layout
from shared.service import create_service_app
from shared.settings import ServiceSettings
from shared.workers import descendants
from tests.helpers import REPO
from tests.processes import processes_using
from tests.servers import free_port, serve_app, serve_http

# Generous: on a loaded machine a fresh worker may still be launching its browser
# when the next request comes; the page that never lays out waits it out in full.
TIME_LIMIT_S = 15.0
STORY = "<p>" + " ".join(["The main story goes on with words of its own here."] * 8) + "</p>"
NOTES = " ".join(["Notes nobody sees on the screen but the markup keeps them."] * 30)
NAV = "<ul>" + "".join(f"<li><a href='/s{i}'>Section {i}</a></li>" for i in range(12)) + "</ul>"
# Pages whose layout hides text or pushes it aside, and the path of that text's block.
LAYOUT_PAGES = {
    "display_none": (
        "<html><head><style>.more{display:none}</style></head><body>" + NAV
        + f"<div class=more><p>{NOTES}</p></div><div>{STORY * 3}</div></body></html>",
        "/html/body/div[1]/p"),
    "footer_off_screen": (
        f"<html><body>{NAV}<div>{STORY * 3}</div><footer style='position:absolute;"
        f"left:-5000px;width:1000px'><p>{NOTES}</p></footer></body></html>",
        "/html/body/footer/p"),
    "narrow_sidebar": (
        f"<html><body><div style='float:left;width:180px'>{NAV}<p>{NOTES}</p></div>"
        f"<div style='margin-left:400px;width:600px'>{STORY * 2}</div></body></html>",
        "/html/body/div[1]/p"),
}


@pytest.fixture(scope="module", autouse=True)
def _browser() -> None:
    problem = browser_problem()
    if problem:
        pytest.fail(f"the htd tests need Debian's chromium (scripts/setup --test): {problem}")


@pytest.fixture(scope="module")
def service() -> Iterator[str]:
    app = create_service_app(ALGORITHM, ServiceSettings(time_limit_s=TIME_LIMIT_S))
    with serve_app(app) as url:
        yield url


def extract(url: str, html: str, **options: Any) -> httpx.Response:
    return httpx.post(f"{url}/extract", json={"html": html, "options": options},
                      timeout=TIME_LIMIT_S + 30)


def scores(reply: httpx.Response) -> dict[str, tuple[float, bool]]:
    assert reply.status_code == 200, reply.text
    return {block["path"]: (block["score"], block["is_content"])
            for block in reply.json()["blocks"]}


def test_info_says_a_browser_is_available(service: str) -> None:
    info = httpx.get(f"{service}/info").json()
    assert "htd: headless Chromium" in info["engine"]
    assert "htd" in info["options_schema"]["properties"]["measure"]["enum"]


@pytest.mark.parametrize("name", sorted(LAYOUT_PAGES))
def test_htd_scores_follow_the_layout(service: str, name: str) -> None:
    html, pushed_aside = LAYOUT_PAGES[name]
    ctd, htd = scores(extract(service, html, measure="ctd")), scores(extract(service, html,
                                                                            measure="htd"))
    assert htd.keys() == ctd.keys()  # the same blocks, the same paths
    assert htd[pushed_aside][0] != ctd[pushed_aside][0]
    if name != "narrow_sidebar":  # not drawn at all: no weight, not content
        assert ctd[pushed_aside] > (0.0, False)
        assert htd[pushed_aside] == (0.0, False)
    else:  # drawn, off the centre line: weighs less
        assert htd[pushed_aside][0] < ctd[pushed_aside][0]


def test_layout_boxes_are_keyed_like_the_blocks() -> None:
    html, _ = LAYOUT_PAGES["narrow_sidebar"]
    boxes = layout(html).boxes
    side, main = boxes["/html/body/div[1]/p"], boxes["/html/body/div[2]/p[1]"]
    assert side.rendered
    assert main.rendered
    assert side.width == pytest.approx(180)
    assert main.width == pytest.approx(600)
    assert main.x == pytest.approx(400 + 8)  # body's default margin
    assert boxes["/html/body/div[1]/ul/li[3]/a"].font_size == pytest.approx(16)
    blocks = ALGORITHM.run(html, {"measure": "htd"}).blocks
    assert {block.path for block in blocks} <= boxes.keys()


@pytest.mark.parametrize("refresh", ['content="0; url=http://example.com/next"',
                                     'content="0"', "content='0;url=about:blank'"])
def test_a_page_that_navigates_away_is_measured_where_it_is(refresh: str) -> None:
    """A refresh elsewhere, or to the page itself (which would reload the document
    being measured), leaves the page where it is, its <meta> in its place."""
    boxes = layout(f'<meta HTTP-EQUIV="Refresh" {refresh}><body>{STORY}</body>').boxes
    assert boxes["/html/body/p"].rendered
    assert "/html/head/meta" in boxes


def test_scripts_run_only_when_asked() -> None:
    html = (f"<body>{STORY}<script>document.body.appendChild("
            "document.createElement('aside')).textContent = 'added';</script></body>")
    assert "/html/body/aside" not in layout(html).boxes
    assert layout(html, javascript=True).boxes["/html/body/aside"].rendered


@pytest.mark.parametrize("navigation", [
    "location = 'http://example.com/next'",
    "onbeforeunload = () => 'stay?'; location.replace('http://example.com/next')",
    "document.body.innerHTML += '<form action=http://example.com/post method=post></form>';"
    " document.forms[0].submit()",
])
def test_a_script_that_navigates_during_the_load_is_measured_at_once(navigation: str) -> None:
    """The navigation is refused and the page measured as it then is (the parser
    stops at the script), not left waiting for a load event that never comes."""
    started = time.monotonic()
    boxes = layout(f"<body>{STORY}<script>{navigation}</script><div>{NOTES}</div></body>",
                   javascript=True, timeout_s=5).boxes
    assert time.monotonic() - started < 4
    assert boxes["/html/body/p"].rendered


def test_scripts_that_replace_builtins_do_not_change_the_measurement() -> None:
    """Polyfills and old libraries replace globals and prototypes; the measurement runs
    in a JavaScript world of its own and sees the originals."""
    html = (f"<body>{STORY}<script>window.Map = function () {{}};"
            "window.parseInt = () => Infinity; window.parseFloat = () => 'big';"
            "Array.prototype.push = function () {};"
            "Element.prototype.getBoundingClientRect = () => ({left: NaN, width: 'a'});"
            "Element.prototype.checkVisibility = () => false;</script></body>")
    plain = layout(html).boxes
    scripted = layout(html, javascript=True).boxes
    assert scripted["/html/body/p"] == plain["/html/body/p"]
    assert scripted["/html/body/p"].rendered


def test_a_page_that_cannot_be_laid_out_is_refused_as_the_pages_fault(service: str) -> None:
    """422 unprocessable_page with the reason, not an extractor failure."""
    html = f"<body>{STORY}<script>document.documentElement.remove()</script></body>"
    reply = extract(service, html, measure="htd", javascript=True)
    assert reply.status_code == 422
    assert reply.json()["error"] == "unprocessable_page"
    assert reply.json()["detail"].startswith(
        "the browser could not lay the page out: measuring the page failed: TypeError")


# `layout` in a process of its own, with a browser of its own (one that a test has
# killed, or one left hanging, leaves this module's alone): per page "ok" or the
# LayoutFailedError's message, and the seconds it took.
_LAYOUT_PAGES = """
import json, sys, time
import shared.layout
pages, javascript, timeout_s = json.loads(sys.stdin.read())
outcomes = []
for html in pages:
    started = time.monotonic()
    try:
        shared.layout.layout(html, javascript, timeout_s)
        outcomes.append(("ok", time.monotonic() - started))
    except shared.layout.LayoutFailedError as exc:
        outcomes.append((str(exc), time.monotonic() - started))
print(json.dumps(outcomes))
"""


def layout_in_a_process(pages: list[str], timeout_s: float,
                        env: dict[str, str] | None = None) -> list[tuple[str, float]]:
    done = subprocess.run([sys.executable, "-c", _LAYOUT_PAGES], cwd=REPO,
                          input=json.dumps([pages, True, timeout_s]),
                          env={**os.environ, **(env or {})}, capture_output=True, text=True,
                          timeout=len(pages) * (timeout_s + 10) + 30)
    assert done.returncode == 0, done.stderr
    return [(outcome, seconds) for outcome, seconds in json.loads(done.stdout)]


def test_a_page_whose_scripts_never_stop_is_cut_off_in_time() -> None:
    """Playwright's timeouts do not cover an evaluation that waits for a page busy
    forever; the layout's own watch does, and the next page gets a new browser."""
    busy = f"<body>{STORY}<script>setTimeout(() => {{ while (true) {{}} }}, 0)</script></body>"
    (failed, seconds), (next_page, _) = layout_in_a_process([busy, STORY], timeout_s=3)
    assert failed == "the page was not laid out within 3 s"
    assert seconds < 3 + 3
    assert next_page == "ok"


def test_a_page_that_fills_memory_is_cut_off_with_its_browser() -> None:
    """A script could fill gigabytes within any time limit; past the cap the settings
    give (BOILERBENCH_MAX_BROWSER_BYTES) the browser is killed, and the next page gets
    a new one."""
    hungry = (f"<body>{STORY}<script>const kept = [];"
              "while (true) kept.push(new Array(1e6).fill(1.5));</script></body>")
    (failed, seconds), (next_page, _) = layout_in_a_process(
        [hungry, STORY], timeout_s=30,
        env={"BOILERBENCH_MAX_BROWSER_BYTES": str(512 * 2**20)})
    assert failed == "the page made the browser hold over 512 MiB"
    assert seconds < 10
    assert next_page == "ok"


@pytest.mark.parametrize("value", ["2048", "-1", "2GiB", "1.5e9"])
def test_a_bad_browser_memory_cap_stops_the_service_at_start(
        monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    """Not a failure at the first htd page: the app is not built (a value in MiB, or
    one below what an idle browser holds, would fail every page)."""
    monkeypatch.setenv("BOILERBENCH_MAX_BROWSER_BYTES", value)
    with pytest.raises(ValidationError, match="max_browser_bytes"):
        create_service_app(ALGORITHM)


# Pages in a process of its own whose HOME and temporary folder are the test's: a page
# whose renderer crashes (SIGSEGV, which Chromium's crash handler catches as any crash),
# a page killed past its time, and the pages after each; then the crash dumps found.
_CRASH_AND_KILL = """
import contextlib, json, os, signal, sys, tempfile, threading, time
from pathlib import Path
from shared.layout import LayoutFailedError, layout
from shared.workers import descendants

story, busy = json.loads(sys.stdin.read())
outcomes = []

def page(html, timeout_s=30.0):
    try:
        layout(html, True, timeout_s)
        outcomes.append("ok")
    except LayoutFailedError as exc:
        outcomes.append(str(exc))

def crash_renderers(done):
    while not done.wait(0.5):
        for pid in descendants(os.getpid()):
            with contextlib.suppress(OSError):
                if b"--type=renderer" in Path(f"/proc/{pid}/cmdline").read_bytes():
                    os.kill(pid, signal.SIGSEGV)

page(story)
done = threading.Event()
threading.Thread(target=crash_renderers, args=(done,)).start()
page(busy)
done.set()
time.sleep(1)  # the crash handler's time to write its dump
dumps = [str(path) for root in (os.environ["HOME"], tempfile.gettempdir())
         for path in Path(root).rglob("*.dmp")]
page(story)
page(busy, 2)
page(story)
print(json.dumps([outcomes, dumps]))
"""


@pytest.fixture
def isolated() -> Iterator[tuple[Path, Path, dict[str, str]]]:
    """A fresh HOME and temporary folder, and an environment with them. Not under
    tmp_path: the browser's singleton socket goes in its TMPDIR, and a socket's path
    may not be longer than 107 bytes."""
    with tempfile.TemporaryDirectory(prefix="htd-") as folder:
        home, temp = Path(folder, "home"), Path(folder, "tmp")
        home.mkdir()
        temp.mkdir()
        env = {name: value for name, value in os.environ.items()
               if not name.startswith("XDG_")}
        yield home, temp, {**env, "HOME": str(home), "TMPDIR": str(temp)}


def left_in(*folders: Path, wait_s: float = 30) -> list[str]:
    """What is left in `folders` once Playwright's driver, which outlives the process
    by a moment, and a janitor have had their time to remove their own (os.walk, unlike
    rglob, passes over a folder removed while it looks)."""
    deadline = time.monotonic() + wait_s
    while True:
        left = sorted(os.path.join(root, name) for folder in folders
                      for root, dirs, files in os.walk(folder) for name in dirs + files)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)


def test_a_browser_leaves_nothing_behind(isolated: tuple[Path, Path, dict[str, str]]) -> None:
    """Chromium writes a crash dump per crashed page under $HOME/.config/chromium, which
    nothing would remove, and Playwright's driver leaves the profile of a killed
    browser in the temporary folder: neither happens."""
    home, temp, env = isolated
    busy = f"<body>{STORY}<script>const until = Date.now() + 10000;" \
           "while (Date.now() < until) {}</script></body>"
    done = subprocess.run([sys.executable, "-c", _CRASH_AND_KILL], cwd=REPO, env=env,
                          input=json.dumps([STORY, busy]), capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    outcomes, dumps = json.loads(done.stdout)
    assert outcomes[0] == outcomes[2] == outcomes[4] == "ok"
    assert "crashed" in outcomes[1]
    assert outcomes[3] == "the page was not laid out within 2 s"
    assert dumps == []
    assert left_in(home, temp) == []


_LAY_OUT_AND_WAIT = """
from shared.layout import layout
layout("<p>ready</p>")
print("ready", flush=True)
__import__("time").sleep(120)
"""


def kill_laid_out(env: dict[str, str], temp: Path, janitor_too: bool) -> None:
    """Start a process that lays a page out, then SIGKILL it with every process below it
    (as a worker past its time limit goes), or with every process of its own (its
    janitor too, as a container's processes go when it ends)."""
    with subprocess.Popen([sys.executable, "-c", _LAY_OUT_AND_WAIT], cwd=REPO, env=env,
                          stdout=subprocess.PIPE, text=True) as killed:
        try:
            assert killed.stdout is not None
            assert killed.stdout.readline() == "ready\n"
        finally:
            below = descendants(killed.pid)
            for pid in [killed.pid, *(processes_using(temp, "TMPDIR") if janitor_too else below)]:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)


def test_a_process_killed_with_its_browser_has_its_files_removed_all_the_same(
        isolated: tuple[Path, Path, dict[str, str]]) -> None:
    """A worker killed with its driver and browser (SIGKILL, past its time limit or as its
    service stops) cannot remove their files: its janitor does. Where the janitor was
    killed too, the next browser launched does."""
    home, temp, env = isolated
    kill_laid_out(env, temp, janitor_too=False)
    assert left_in(home, temp) == []
    kill_laid_out(env, temp, janitor_too=True)
    assert {path.name.split("-")[0] for path in temp.iterdir()} >= {
        "boilerbench", "playwright_chromiumdev_profile"}
    assert layout_in_a_process([STORY], timeout_s=30, env=env)[0][0] == "ok"
    assert left_in(home, temp) == []


def page_script_running(service_pid: int) -> bool:
    """Whether a renderer below the service has spent a second of CPU time: the busy
    script of a page in hand is running."""
    for pid in descendants(service_pid):
        try:
            if b"--type=renderer" not in Path(f"/proc/{pid}/cmdline").read_bytes():
                continue
            times = Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[11:13]
        except OSError:
            continue
        if sum(map(int, times)) >= os.sysconf("SC_CLK_TCK"):
            return True
    return False


@pytest.mark.parametrize("every_process", [False, True],
                         ids=["to_the_process_group", "to_every_process"])
def test_a_stop_signal_to_the_whole_service_answers_the_page_in_hand_and_leaves_nothing(
        isolated: tuple[Path, Path, dict[str, str]], tmp_path: Path,
        every_process: bool) -> None:
    """SIGTERM to the service's process group (`kill -TERM -- -PGID`) or to each of its
    processes (systemd's KillMode=control-group) reaches the browser's driver and the
    browser at the moment it reaches the service. The page in hand is
    answered all the same, as any service's page on a stop; the service ends with the
    signal's status and no traceback, and leaves no process and no file behind."""
    home, temp, env = isolated
    busy = f"<body>{STORY}<script>const until = Date.now() + 3000;" \
           "while (Date.now() < until) {}</script></body>"
    port = free_port()
    log = tmp_path / "service.log"
    with log.open("wb") as log_file:
        process = subprocess.Popen(
            [sys.executable, "-m", "shared.serving", "services.cetd.app:app",
             "--port", str(port)],
            env={**env, "BOILERBENCH_TIME_LIMIT_S": "60"}, cwd=REPO,
            stdin=subprocess.DEVNULL, stdout=log_file, stderr=log_file,
            start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    replies: list[httpx.Response] = []
    in_hand = threading.Thread(target=lambda: replies.append(
        extract(url, busy, measure="htd", javascript=True)))
    try:
        wait_healthy(url, 120, process)
        assert scores(extract(url, STORY, measure="htd"))  # a browser is running
        in_hand.start()
        deadline = time.monotonic() + 60
        while not page_script_running(process.pid):
            assert time.monotonic() < deadline, "the page never ran in the browser"
            time.sleep(0.05)
        if every_process:
            for pid in [process.pid, *descendants(process.pid)]:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGTERM)
        else:
            os.killpg(process.pid, signal.SIGTERM)
        in_hand.join(timeout=90)
        status = process.wait(timeout=60)
        deadline = time.monotonic() + 10
        while processes_using(temp, "TMPDIR") and time.monotonic() < deadline:
            time.sleep(0.2)
        left_running = processes_using(temp, "TMPDIR")
        left_files = left_in(home, temp)
    finally:
        for pid in [process.pid, *processes_using(temp, "TMPDIR")]:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        process.wait()
    assert [reply.status_code for reply in replies] == [200], [r.text for r in replies]
    assert "The main story goes on" in replies[0].json()["text"]
    assert status == -signal.SIGTERM
    assert "Traceback" not in log.read_text(), log.read_text()
    assert left_running == []
    assert left_files == []


def test_render_command_prints_the_layout_as_json(tmp_path: Path) -> None:
    page = tmp_path / "page.html"
    page.write_text(LAYOUT_PAGES["footer_off_screen"][0], encoding="utf-8")
    result = CliRunner().invoke(cli.app, ["render", str(page), "--json"])
    assert result.exit_code == 0, result.output
    rendered = json.loads(result.output)
    assert rendered["viewport"] == {"width": 1366, "height": 768}
    footer = rendered["boxes"]["/html/body/footer/p"]
    assert footer["rendered"] is False
    assert footer["x"] == pytest.approx(-5000)
    assert rendered["boxes"]["/html/body/div/p[3]"]["rendered"] is True


class _Recorder(http.server.BaseHTTPRequestHandler):
    """Answers anything with a tiny body and records the path asked for."""

    def __init__(self, *args: Any, log: list[str], **kwargs: Any) -> None:
        self.seen = log
        super().__init__(*args, **kwargs)

    def do_GET(self) -> None:
        self.seen.append(self.path)
        self.send_response(200)
        self.send_header("content-length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, format: str, *args: Any) -> None:
        pass


def test_htd_fetches_nothing(service: str) -> None:
    log: list[str] = []
    with serve_http(functools.partial(_Recorder, log=log)) as server, \
            socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
        udp.bind(("127.0.0.1", 0))
        udp.setblocking(False)
        stun = f"stun:127.0.0.1:{udp.getsockname()[1]}"  # WebRTC's UDP sees no proxy
        html = f"""<html><head>
          <link rel=stylesheet href="{server}/style.css">
          <link rel=preconnect href="{server}"><link rel=prefetch href="{server}/next">
          <link rel=icon href="{server}/icon.png">
          <style>@import url("{server}/import.css");
            body {{ background: url("{server}/background.png") }}
            @font-face {{ font-family: F; src: url("{server}/font.woff2") }}
            p {{ font-family: F }}</style>
          <script src="{server}/script.js"></script></head>
          <body>{STORY}<img src="{server}/image.png"><iframe src="{server}/frame"></iframe>
          <video poster="{server}/poster.png" src="{server}/video.mp4"></video>
          <object data="{server}/object"></object><embed src="{server}/embed">
          <img src="file:///etc/hostname">
          <script>fetch("{server}/fetch"); new Image().src = "{server}/js-image";
            const peer = new RTCPeerConnection({{iceServers: [{{urls: "{stun}"}}]}});
            peer.createDataChannel("d");
            peer.createOffer().then(offer => peer.setLocalDescription(offer)).then(() => {{
              const until = Date.now() + 300;  // time for a STUN request to go out
              while (Date.now() < until) {{}}
            }});</script>
          {STORY}</body></html>"""
        for javascript in (False, True):
            assert scores(extract(service, html, measure="htd", javascript=javascript))
        assert log == []
        with pytest.raises(BlockingIOError):
            udp.recv(1024)
        httpx.get(f"{server}/control")  # the server was there all along
        assert log == ["/control"]


def chromium_processes() -> list[int]:
    """The chromium processes below the service's extraction workers (this test's own
    `layout` calls have a browser of their own, below this process directly)."""
    found = []
    for worker in descendants(os.getpid()):
        try:
            if b"shared.workers" not in Path(f"/proc/{worker}/cmdline").read_bytes():
                continue
        except OSError:
            continue
        for pid in descendants(worker):
            try:
                if "chrom" in Path(f"/proc/{pid}/comm").read_text():
                    found.append(pid)
            except OSError:
                continue
    return found


def test_a_page_that_never_lays_out_is_cut_off_with_its_browser(service: str) -> None:
    assert scores(extract(service, STORY, measure="htd"))  # a browser is running
    browsers = chromium_processes()
    assert browsers
    nested = "<html><body>" + "<div>" * 200_000 + "deep" + "</div>" * 200_000 + "</body></html>"
    started = time.monotonic()
    reply = extract(service, nested, measure="htd")
    assert reply.status_code in (200, 504), reply.text
    assert time.monotonic() - started < TIME_LIMIT_S + 5
    if reply.status_code == 504:
        deadline = time.monotonic() + 15
        while True:  # killed with its worker, and reaped: not even a zombie is left
            listed = subprocess.run(["ps", "-o", "pid=,stat=,comm=", "-p",
                                     ",".join(map(str, browsers))],
                                    capture_output=True, text=True).stdout.strip()
            if not listed or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert listed == ""
    assert scores(extract(service, STORY, measure="htd"))  # a fresh worker and browser
    assert chromium_processes()


def test_htd_without_a_browser_is_refused(monkeypatch: pytest.MonkeyPatch,
                                          tmp_path: Path) -> None:
    monkeypatch.setenv("BOILERBENCH_CHROMIUM", str(tmp_path / "no-such-chromium"))
    app = create_service_app(ALGORITHM, ServiceSettings(time_limit_s=TIME_LIMIT_S))
    with serve_app(app) as url:
        assert "htd unavailable" in httpx.get(f"{url}/info").json()["engine"]
        reply = extract(url, STORY, measure="htd")
        assert reply.status_code == 503
        assert reply.json()["error"] == "no_browser"
        assert "no-such-chromium" in reply.json()["detail"]
        assert scores(extract(url, STORY, measure="ctd"))  # the other measures still run
