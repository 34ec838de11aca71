"""The `boilerbench` command as users start it: each command module loads alone, `up`
loads no heavy library, `up --port-base` moves a stack, services on assumed ports are
checked before use, a stop signal leaves no service behind, `serve` says where it
listens, an offline download fails in one line."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import http.server
import itertools
import json
import os
import queue
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest
import typer
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from orchestrator.api import ApiSettings, create_app
from orchestrator.cli import app
from orchestrator.config import RunConfig, load_config, parse_config_text
from orchestrator.launcher import (
    DEFAULT_PORT_BASE,
    LocalStack,
    PortLocks,
    ServiceProcess,
    StackError,
    check_service,
    http_url,
    parse_service_list,
    port_is_free,
    service_port,
    wait_healthy,
)
from orchestrator.runner import Outcome, RunSpec, create_run, execute_run
from orchestrator.store import Store
from orchestrator.testsets import LabelledPage, in_memory
from shared.registry import SERVICES
from tests.helpers import REPO, SAMPLE, resume_hint, set_run_owner
from tests.processes import as_a_terminal_starts_it, process_tree
from tests.servers import free_port, local_stack, serve_app, serve_http

CLI = [sys.executable, "-m", "orchestrator.cli"]
COMMAND_MODULES = ["orchestrator.commands_run", "orchestrator.commands_services",
                   "orchestrator.commands_render", "orchestrator.commands_docker",
                   "orchestrator.commands_train", "orchestrator.kubernetes"]
HEAVY = ("docker", "aiohttp")


def _python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                          text=True, timeout=120, check=False)


@pytest.mark.parametrize("module", COMMAND_MODULES)
def test_each_command_module_imports_alone_without_the_cli(module: str) -> None:
    done = _python(f"import sys, {module}; print('orchestrator.cli' in sys.modules)")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


@pytest.mark.parametrize("args", [["up", "--help"], ["--help"]])
def test_help_loads_neither_the_docker_sdk_nor_aiohttp(args: list[str]) -> None:
    done = _python(
        "import importlib.util, json, sys\n"
        f"assert all(importlib.util.find_spec(m) for m in {HEAVY!r})  # there to avoid\n"
        "from typer.testing import CliRunner\n"
        "from orchestrator.cli import app\n"
        f"result = CliRunner().invoke(app, {args!r})\n"
        "assert result.exit_code == 0, result.output\n"
        f"print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []


def test_every_command_is_listed() -> None:
    result = CliRunner().invoke(app, ["--help"], terminal_width=200)
    assert result.exit_code == 0
    for command in ("render", "run", "score", "serve", "up", "extract", "kubernetes",
                    "datasets", "runs", "docker", "train"):
        assert f" {command} " in result.output, command


def test_port_base_keeps_every_service_at_its_registry_offset() -> None:
    assert [service_port(name) for name in SERVICES] == [e.port for e in SERVICES.values()]
    assert service_port(next(iter(SERVICES)), 9001) == 9001
    for name, entry in SERVICES.items():
        assert service_port(name, 9001) - 9001 == entry.port - DEFAULT_PORT_BASE
        assert service_port(name, DEFAULT_PORT_BASE) == entry.port
    shifted = [service_port(name, 20001) for name in SERVICES]
    assert len(set(shifted)) == len(SERVICES)
    assert not set(shifted) & {e.port for e in SERVICES.values()}  # stacks do not overlap


def test_the_configuration_points_at_a_port_base_stack() -> None:
    values = parse_config_text("mode:http; port_base:9001; services:justext,bte;\n"
                               "service.bte.url:http://10.0.0.5:8003;")
    config = load_config(file_values=values)
    urls = config.service_urls
    assert urls["justext"] == "http://127.0.0.1:9001"
    assert urls["bte"] == "http://10.0.0.5:8003"  # a URL given wins
    assert urls["fusion"] == "http://127.0.0.1:9010"  # also a service named later (--services)
    assert config.run_spec(services=["fusion"]).urls["fusion"] == "http://127.0.0.1:9010"
    local = load_config(file_values={**values, "mode": "local"})
    assert local.service_urls == {"bte": "http://10.0.0.5:8003"}  # local runs pick ports


def test_a_taken_port_fails_before_anything_starts() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        stack = LocalStack(["bte"], ports={"bte": port})
        with pytest.raises(StackError, match=f"port in use: bte on {port}"):
            stack.start(timeout=5)
        assert not stack.processes


def test_a_port_another_start_holds_fails_before_anything_starts() -> None:
    """A start holds its ports locked from its check until its services listen: another
    start on one of them in that time is refused as if the port were taken."""
    port = free_port()
    with PortLocks() as starting:
        assert starting.take(port)
        stack = LocalStack(["bte"], ports={"bte": port})
        with pytest.raises(StackError, match=f"port in use: bte on {port}"):
            stack.start(timeout=5)
        assert not stack.processes
    with PortLocks() as later:  # given up: free for the next start
        assert later.take(port)


def test_port_locks_leave_no_files_and_hold_across_a_release(tmp_path: Path) -> None:
    """A lock's file goes with its lock (the temporary folder kept one per port ever
    used), and a start that opened the file before its holder removed it does not take
    the removed file's lock for the port's."""
    port = free_port()
    with PortLocks(tmp_path) as first:
        assert first.take(port)
        stale = os.open(tmp_path / f"{port}.lock", os.O_RDWR)  # opened while held
    assert list(tmp_path.iterdir()) == []
    with PortLocks(tmp_path) as second, PortLocks(tmp_path) as third:
        assert second.take(port)
        fcntl.flock(stale, fcntl.LOCK_EX | fcntl.LOCK_NB)  # the old file's lock is free
        assert not third.take(port)  # the port's is not
    os.close(stale)
    assert list(tmp_path.iterdir()) == []


def test_a_host_no_server_could_listen_on_is_not_called_a_taken_port() -> None:
    # 192.0.2.1 (TEST-NET-1) is no address of this machine.
    stack = LocalStack(["bte"], host="192.0.2.1", ports={"bte": free_port()})
    with pytest.raises(StackError, match=r"bte cannot listen on '192\.0\.2\.1' port \d+: "
                                         "Cannot assign requested address"):
        stack.start(timeout=5)
    assert not stack.processes


def test_an_ipv6_host_is_checked_and_called_as_ipv6() -> None:
    with socket.socket(socket.AF_INET6) as taken:
        taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as a server binds
        try:
            taken.bind(("::1", 0))
        except OSError:
            pytest.skip("no IPv6 loopback here")
        port = taken.getsockname()[1]
        assert port_is_free("::1", port)
        taken.listen()
        assert not port_is_free("::1", port)
    assert http_url("::1", port) == f"http://[::1]:{port}"
    stack = LocalStack(["readability", "ensemble"], host="::",
                       ports={"readability": 9108, "ensemble": 9111})
    assert json.loads(stack._member_env("ensemble")["BOILERBENCH_MEMBER_URLS"]) == {
        "readability": "http://[::1]:9108"}


def test_stop_ends_what_lives_on_in_a_group_whose_main_process_died(tmp_path: Path
                                                                     ) -> None:
    # A service's main process gone, a worker busy on a page (or its browser) lives on
    # in its process group: here a sleep left behind by a shell that exited.
    pid_file = tmp_path / "pid"
    process = subprocess.Popen(["sh", "-c", f"sleep 60 & echo $! > {pid_file}; exit 0"],
                               start_new_session=True)
    process.wait(timeout=10)
    left = int(pid_file.read_text())
    assert _running(left)
    stack = LocalStack(["bte"], ports={"bte": free_port()})
    stack.processes["bte"] = ServiceProcess("bte", "http://127.0.0.1:1", process)
    stack.stop(grace=0.5)
    deadline = time.monotonic() + 5
    while _running(left) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _running(left)
    assert not stack.processes


def _running(pid: int) -> bool:
    """Whether the process exists and is no zombie."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


def test_a_service_named_twice_is_started_once() -> None:
    assert parse_service_list("bte, justext,bte") == ["bte", "justext"]
    assert LocalStack(["bte", "bte"]).names == ["bte"]


def test_workers_that_cannot_start_are_reported_at_once(monkeypatch: pytest.MonkeyPatch
                                                        ) -> None:
    """Workers that failed to start are never started again: /health says so and why
    (start_failed), /extract no longer says they are starting, and a launcher waiting
    for the service stops at once."""
    from shared.service import create_service_app
    from tests.misbehaving_extractor import ALGORITHM

    monkeypatch.setenv("MISBEHAVING_START", "fail")
    reason = "the extraction workers failed to start: RuntimeError: the model file is missing"
    with serve_app(create_service_app(ALGORITHM), ready_path=None) as url:
        started = time.monotonic()
        with pytest.raises(StackError, match=re.escape(f"misbehaving at {url}: {reason}")):
            wait_healthy(url, 60, name="misbehaving")
        assert time.monotonic() - started < 20
        health = httpx.get(f"{url}/health")
        extract = httpx.post(f"{url}/extract", content=b"<p>a page</p>",
                             headers={"content-type": "text/html"})
    assert health.status_code == extract.status_code == 503
    assert health.json() == {"error": "start_failed", "detail": reason}
    assert extract.json() == {"error": "not_ready", "detail": reason}


def _slow_workers(folder: Path) -> dict[str, str]:
    """An environment whose extraction workers take a minute to start (a sitecustomize
    on the PYTHONPATH, which the services and their workers inherit), to signal a
    command while its services are still starting."""
    folder.mkdir()
    (folder / "sitecustomize.py").write_text(
        "import sys, time\n"
        "if 'shared.workers' in sys.orig_argv and 'extraction_handler' in str(sys.orig_argv):\n"
        "    time.sleep(60)\n")
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(folder), str(REPO)])}


def _services_of(pid: int, timeout: float = 60) -> list[int]:
    """The processes below `pid` once one of its services listens and has a worker."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        tree = process_tree(pid)[1:]
        commands = [Path(f"/proc/{p}/cmdline").read_bytes() if Path(f"/proc/{p}").exists()
                    else b"" for p in tree]
        if any(b"shared.serving" in c for c in commands) and \
                any(b"extraction_handler" in c for c in commands):
            return tree
        time.sleep(0.2)
    raise AssertionError("no service started")


def _alive(pids: list[int]) -> list[int]:
    """The processes of `pids` that still run (a zombie has ended), after a moment."""
    time.sleep(1.0)
    alive = []
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            alive.append(pid)
    return alive


@pytest.mark.e2e
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP],
                         ids=["SIGINT", "SIGTERM_under_nohup", "SIGHUP"])
def test_a_signal_while_up_starts_stops_every_service_at_once(
        sig: signal.Signals, tmp_path: Path) -> None:
    """Ctrl-C, SIGTERM or a closed terminal (SIGHUP) stop `up` and every service it
    started without waiting for them to be ready; with SIGHUP ignored (nohup) it keeps
    starting them."""
    port = free_port()
    base = port - (SERVICES["bte"].port - DEFAULT_PORT_BASE)
    process = subprocess.Popen([*CLI, "up", "--services", "bte", "--port-base", str(base)],
                               cwd=REPO, env=_slow_workers(tmp_path / "slow"),
                               stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, start_new_session=True,
                               preexec_fn=as_a_terminal_starts_it(
                                   hangup_ignored=sig == signal.SIGTERM))
    services: list[int] = []
    try:
        services = _services_of(process.pid)
        if sig == signal.SIGTERM:  # nohup: a hangup first, which changes nothing
            os.killpg(process.pid, signal.SIGHUP)
            time.sleep(1.0)
            assert process.poll() is None
        os.killpg(process.pid, sig)  # as a terminal does: the command's process group
        _, stderr = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        for pid in _alive(services):
            os.kill(pid, signal.SIGKILL)
    assert process.returncode == 128 + sig, stderr
    assert "stopped before every service was ready" in stderr
    assert "Ready" not in stderr
    assert "Traceback" not in stderr
    assert not _alive(services)


@pytest.mark.e2e
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_a_stop_signal_ends_a_run_and_the_services_it_started(sig: signal.Signals,
                                                             tmp_path: Path) -> None:
    """The run's services have sessions of their own: a SIGTERM to the run alone (`kill`,
    a stopped container), or SIGHUP (a closed terminal), must not leave them running."""
    process = subprocess.Popen(
        [*CLI, "run", "--services", "bte", "--store", str(tmp_path / "runs.sqlite"),
         "--output", str(tmp_path / "out")],
        cwd=REPO, env=_slow_workers(tmp_path / "slow"), stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        preexec_fn=as_a_terminal_starts_it())
    services: list[int] = []
    try:
        services = _services_of(process.pid)
        process.send_signal(sig)
        _, stderr = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        left = _alive(services)
        for pid in left:
            os.kill(pid, signal.SIGKILL)
    assert not left, "services left running"
    assert process.returncode == 130, stderr
    assert "Traceback" not in stderr


@pytest.mark.e2e
def test_up_with_a_port_base_serves_on_the_shifted_port(tmp_path: Path) -> None:
    port = free_port()
    base = port - (SERVICES["bte"].port - DEFAULT_PORT_BASE)
    process = subprocess.Popen([*CLI, "up", "--services", "bte", "--port-base", str(base)],
                               cwd=REPO, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, start_new_session=True)
    assert process.stderr is not None
    try:
        deadline = time.monotonic() + 180
        healthy = False
        while not healthy and time.monotonic() < deadline and process.poll() is None:
            with contextlib.suppress(httpx.TransportError):
                healthy = httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).is_success
            time.sleep(0.3)
        assert healthy, process.stderr.read() if process.poll() is not None else ""
        assert httpx.get(f"http://127.0.0.1:{port}/info", timeout=2).json()["name"] == "bte"
    finally:
        # up stops its services on SIGTERM, exit status 0 once they were all healthy.
        os.killpg(process.pid, signal.SIGTERM)
        stdout, stderr = process.communicate(timeout=60)
    assert process.returncode == 0, stderr
    assert f"http://127.0.0.1:{port}" in stdout
    assert f"boilerbench run --http --port-base {base}" in stderr
    with pytest.raises(httpx.TransportError):
        httpx.get(f"http://127.0.0.1:{port}/health", timeout=2)


@pytest.mark.e2e
def test_two_ups_started_together_on_one_port_leave_one_running() -> None:
    """Both check the port before either's service listens on it: one starts, the other
    fails at once saying the port is in use, instead of the two fighting over it."""
    port = free_port()
    base = port - (SERVICES["bte"].port - DEFAULT_PORT_BASE)
    ups = [subprocess.Popen([*CLI, "up", "--services", "bte", "--port-base", str(base)],
                            cwd=REPO, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
           for _ in range(2)]
    try:
        deadline = time.monotonic() + 180
        while all(up.poll() is None for up in ups):
            assert time.monotonic() < deadline, "neither `up` stopped"
            time.sleep(0.1)
        (lost,) = [up for up in ups if up.poll() is not None]
        (running,) = [up for up in ups if up is not lost]
        healthy = False
        while not healthy and running.poll() is None:
            assert time.monotonic() < deadline, "the `up` left never became healthy"
            with contextlib.suppress(httpx.TransportError):
                healthy = httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).is_success
            time.sleep(0.2)
        assert running.poll() is None
        assert httpx.get(f"http://127.0.0.1:{port}/info", timeout=5).json()["name"] == "bte"
    finally:
        for up in ups:
            if up.poll() is None:
                os.killpg(up.pid, signal.SIGTERM)
        outputs = [up.communicate(timeout=60) for up in ups]
    _, lost_stderr = outputs[ups.index(lost)]
    assert lost.returncode == 1, lost_stderr
    assert f"port in use: bte on {port}" in " ".join(lost_stderr.split())
    assert "Ready" not in lost_stderr
    running_stdout, running_stderr = outputs[ups.index(running)]
    assert running.returncode == 0, running_stderr  # stopped by the SIGTERM, not a fight
    assert f"http://127.0.0.1:{port}" in running_stdout


class _Answer(http.server.BaseHTTPRequestHandler):
    """Answers every GET with `body` and `status`."""

    def __init__(self, *args: object, body: bytes, status: int) -> None:
        self.body, self.status = body, status
        super().__init__(*args)  # type: ignore[arg-type]

    def do_GET(self) -> None:
        self.send_response(self.status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def other_service() -> Iterator[str]:
    """A server whose /info says it is justext."""
    handler = partial(_Answer, body=json.dumps({"name": "justext"}).encode(), status=200)
    with serve_http(handler) as url:
        yield url


def _run_http(port: int, tmp_path: Path, service: str = "bte") -> tuple[int, str]:
    """`run --http` of `service` with a --port-base that puts it on `port`."""
    base = port - (SERVICES[service].port - DEFAULT_PORT_BASE)
    result = CliRunner().invoke(app, [
        "run", "--http", "--services", service, "--port-base", str(base),
        "--store", str(tmp_path / "store.sqlite"), "--output", str(tmp_path / "out")])
    return result.exit_code, result.output


def test_run_http_refuses_another_service_on_the_assumed_port(
        other_service: str, tmp_path: Path) -> None:
    port = int(other_service.rsplit(":", 1)[1])
    code, output = _run_http(port, tmp_path)
    assert code == 1
    assert output.count("\n") == 1, output
    assert f"127.0.0.1:{port} is not the bte service" in output
    assert "'justext'" in output
    assert not (tmp_path / "out").exists()
    store = Store(tmp_path / "store.sqlite")
    assert store.runs() == []  # refused before the run was created
    store.close()


def test_run_http_names_a_server_that_is_no_service(tmp_path: Path) -> None:
    handler = partial(_Answer, body=b'{"detail": "Not Found"}', status=404)
    with serve_http(handler) as url:
        port = int(url.rsplit(":", 1)[1])
        code, output = _run_http(port, tmp_path)
    assert code == 1
    assert output.count("\n") == 1, output
    assert f"127.0.0.1:{port} is not the bte service: HTTP 404" in output


def test_run_http_says_when_nothing_answers(tmp_path: Path) -> None:
    """...and how to start it where the run looks for it: on its --port-base."""
    port = free_port()
    code, output = _run_http(port, tmp_path)
    assert code == 1
    assert f"nothing answers at http://127.0.0.1:{port}" in output
    base = port - (SERVICES["bte"].port - DEFAULT_PORT_BASE)
    assert f"start it with `boilerbench up --services bte --port-base {base}`" in output


def test_extract_says_how_to_start_the_service_where_it_looks_for_it() -> None:
    page = str(sorted((SAMPLE / "html").glob("*.html"))[0])
    base = free_port() - (SERVICES["bte"].port - DEFAULT_PORT_BASE)
    result = CliRunner().invoke(app, ["extract", page, "--service", "bte", "--port-base",
                                      str(base)], terminal_width=300)
    assert result.exit_code == 1
    assert f"start it with `boilerbench up --services bte --port-base {base}`" in result.output


@pytest.mark.parametrize("mode", ["--http", "--local"])
def test_run_refuses_a_url_given_where_another_service_or_none_answers(
        mode: str, other_service: str, tmp_path: Path) -> None:
    """A URL given for a service is checked before the run as an assumed port is, as
    `extract` refuses another service's reply: boilerpipe's text scored as the justext
    row, or a run of pages that all failed, is refused in one line, and nothing is
    recorded."""
    store = tmp_path / "store.sqlite"
    nothing = f"http://127.0.0.1:{free_port()}"
    for url, message in ((other_service, f"{other_service} is not the bte service: the "
                                         "'justext' service answers there"),
                         (nothing, f"nothing answers at {nothing}")):
        result = CliRunner().invoke(app, [
            "run", mode, "--url", f"bte={url}", "--services", "bte", "--store", str(store),
            "--output", str(tmp_path / "out")], terminal_width=300)
        assert result.exit_code == 1, result.output
        assert result.output.count("\n") == 1, result.output
        assert message in result.output
        assert "check the URL given for bte" in result.output
    db = Store(store)
    assert db.runs() == []  # refused before the run was created
    db.close()
    assert not (tmp_path / "out").exists()


def test_the_api_refuses_a_run_when_another_service_is_on_the_assumed_port(
        other_service: str, tmp_path: Path) -> None:
    port = int(other_service.rsplit(":", 1)[1])
    config = RunConfig(store=tmp_path / "store.sqlite", output_folder=tmp_path / "out",
                       mode="http", services=["bte"],
                       port_base=port - (SERVICES["bte"].port - DEFAULT_PORT_BASE))
    with TestClient(create_app(ApiSettings(resume=False), config)) as client:
        reply = client.post("/runs", json={"pages": [{"id": "p", "html": "<p>x</p>",
                                                      "gold": "x"}]})
        runs = client.get("/runs").json()["runs"]
    assert reply.status_code == 503, reply.text
    assert reply.json()["error"] == "service_unavailable"
    assert f"127.0.0.1:{port} is not the bte service" in reply.json()["detail"]
    assert "'justext'" in reply.json()["detail"]
    assert runs == []  # refused before the run was created


def test_the_named_service_passes_the_check(tmp_path: Path) -> None:
    handler = partial(_Answer, body=json.dumps({"name": "bte"}).encode(), status=200)
    with serve_http(handler) as url:
        check_service(url, "bte")
        with pytest.raises(StackError, match="the 'bte' service answers there"):
            check_service(url, "cetd")


def test_port_base_goes_with_http() -> None:
    result = CliRunner().invoke(app, ["run", "--services", "bte", "--port-base", "9001"])
    assert result.exit_code == 2
    assert "--port-base goes with --http" in result.output


@pytest.mark.parametrize(("variable", "value"), [
    ("BOILERBENCH_API_MAX_BODY_BYTES", "64 MB"),  # the API's own settings
    ("BOILERBENCH_API_REQUEST_TIMEOUT_S", "0"),  # the server's limits
])
def test_serve_names_a_setting_out_of_range(tmp_path: Path, variable: str,
                                            value: str) -> None:
    result = CliRunner().invoke(app, ["serve", "--port", str(free_port()), "--store",
                                      str(tmp_path / "store.sqlite")], env={variable: value})
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert f"{variable}={value!r}" in result.output


def test_serve_prints_the_url_it_listens_on_and_opens_the_store_given(tmp_path: Path) -> None:
    port = free_port()
    store = tmp_path / "store.sqlite"
    env = {**os.environ, "BOILERBENCH_OUTPUT_FOLDER": str(tmp_path / "out")}
    env.pop("BOILERBENCH_STORE", None)
    process = subprocess.Popen([*CLI, "serve", "--port", str(port), "--store", str(store)],
                               cwd=tmp_path, env=env,
                               stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True, start_new_session=True)
    lines: queue.Queue[str] = queue.Queue()
    stderr = process.stderr
    assert stderr is not None

    def forward() -> None:
        for line in stderr:
            lines.put(line)

    threading.Thread(target=forward, daemon=True).start()
    try:
        line = lines.get(timeout=120)
        url = f"http://127.0.0.1:{port}"
        assert f"listening on {url}" in line
        assert httpx.get(f"{url}/health", timeout=10).status_code == 200  # listening already
        assert store.is_file()
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=30)


def test_an_offline_download_fails_in_one_line(tmp_path: Path) -> None:
    source = f"http://127.0.0.1:{free_port()}/benchmark"  # nothing listens there
    result = CliRunner().invoke(app, ["datasets", "download", "scrapinghub", "--to",
                                      str(tmp_path / "set"), "--source-url", source])
    assert result.exit_code == 1
    assert result.output.count("\n") == 1, result.output
    assert result.output.startswith(f"download failed: GET {source}/ground-truth.json: "
                                    "ConnectError")
    assert "Traceback" not in result.output


def test_a_download_http_error_fails_in_one_line(tmp_path: Path) -> None:
    handler = partial(_Answer, body=b"gone", status=410)
    with serve_http(handler) as url:
        result = CliRunner().invoke(app, ["datasets", "download", "scrapinghub", "--to",
                                          str(tmp_path / "set"), "--source-url", url])
    assert result.exit_code == 1
    assert result.output == f"download failed: GET {url}/ground-truth.json: HTTP 410\n"


def test_two_settings_of_a_service_start_it_once(tmp_path: Path) -> None:
    """`bte` and `bte@strict` are two rows of the sample's table from one local bte
    process; the strict row keeps fewer blocks (its option is its own)."""
    result = CliRunner().invoke(app, [
        "run", "--services", "bte,bte@strict", "--option", 'bte@strict={"min_inside": 1.0}',
        "--store", str(tmp_path / "store.sqlite"), "--output", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    assert "starting local services: bte ...\n" in result.output
    (folder,) = (tmp_path / "out").iterdir()
    outputs = {row: json.loads((folder / "outputs" / f"{row}.json").read_text())
               for row in ("bte", "bte@strict")}
    assert outputs["bte"].keys() == outputs["bte@strict"].keys()
    lengths = [(len(outputs["bte@strict"][page]["articleBody"]),
                len(outputs["bte"][page]["articleBody"])) for page in outputs["bte"]]
    assert all(strict <= default for strict, default in lengths)
    assert any(strict < default for strict, default in lengths)


def _commands(group: object, path: tuple[str, ...] = ()
              ) -> Iterator[tuple[tuple[str, ...], Any]]:
    """Every command below a click group, with its path of names."""
    for name, command in getattr(group, "commands", {}).items():
        yield (*path, name), command
        yield from _commands(command, (*path, name))


def test_every_command_has_a_one_line_summary() -> None:
    """The help lists a command by its docstring's first paragraph with the line breaks
    kept, so a summary wrapped in the source shows broken in the middle of a sentence."""
    import typer

    root = typer.main.get_command(app)
    commands = dict(_commands(root))
    assert ("train", "ensemble") in commands
    assert ("run",) in commands
    for path, command in commands.items():
        summary = (command.help or "").strip().split("\n\n")[0]
        assert summary, f"boilerbench {' '.join(path)} has no help"
        assert "\n" not in summary, f"boilerbench {' '.join(path)}: {summary!r}"


def test_commands_on_recorded_runs_leave_no_store_behind(tmp_path: Path) -> None:
    """`runs list/show/cancel` and `run --resume` read a store: a mistyped --store is
    said to hold no store, and no empty store file is left at that path."""
    missing = tmp_path / "typo" / "runs.sqlite"
    for command in (["runs", "list"], ["runs", "show", "abc"], ["runs", "cancel", "abc"],
                    ["run", "--resume", "abc"]):
        done = CliRunner().invoke(app, [*command, "--store", str(missing)])
        assert done.exit_code == 2, (command, done.output)
        assert "no store at" in " ".join(done.output.split()), (command, done.output)
        assert not missing.parent.exists(), command


def test_runs_list_keeps_whole_run_ids_in_a_narrow_terminal(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The id is what `--resume` and `runs cancel` take: an 80-column terminal shows each
    run as a block, its whole id first and its lists on lines of their own."""
    from rich.console import Console

    from orchestrator import commands_run
    from orchestrator.models import RunInfo

    store = Store(tmp_path / "runs.sqlite")
    ids = ["a1b2c3d4e5f6", "0123456789ab"]
    for run_id in ids:
        store.create_run(RunInfo(id=run_id, datasets=["cleanportaleval", "scrapinghub"],
                                 services=["density", "density@fixed", "readability"]),
                         {"total": 3}, [])
    store.close()
    narrow = Console(width=80, record=True)
    monkeypatch.setattr(commands_run, "out", narrow)
    done = CliRunner().invoke(app, ["runs", "list", "--store", str(tmp_path / "runs.sqlite")])
    assert done.exit_code == 0, done.output
    shown = narrow.export_text()
    assert all(run_id in shown for run_id in ids)
    assert max(len(line) for line in shown.splitlines()) <= 80
    assert "…" not in shown
    assert shown.count("services: density, density@fixed, readability") == 2
    assert shown.count("datasets: cleanportaleval, scrapinghub") == 2
    wide = Console(width=160, record=True)
    monkeypatch.setattr(commands_run, "out", wide)
    CliRunner().invoke(app, ["runs", "list", "--store", str(tmp_path / "runs.sqlite")])
    table = wide.export_text()
    assert all(run_id in table for run_id in ids)
    assert table.count("density, density@fixed, readability") == 2  # one table line each


def test_extract_reads_a_page_from_standard_input_as_from_its_file() -> None:
    page = sorted((SAMPLE / "html").glob("*.html"))[0]
    runner = CliRunner()
    from_file = runner.invoke(app, ["extract", str(page), "--service", "bte", "--in-process"])
    from_stdin = runner.invoke(app, ["extract", "-", "--service", "bte", "--in-process"],
                               input=page.read_bytes())
    assert from_file.exit_code == from_stdin.exit_code == 0, from_stdin.output
    assert len(from_file.stdout.split()) > 50
    assert from_stdin.stdout == from_file.stdout


def test_extract_in_process_takes_the_options_a_json_request_takes() -> None:
    # A list option, which no query string carries, as over HTTP.
    page = sorted((SAMPLE / "html").glob("*.html"))[0]
    result = CliRunner().invoke(app, [
        "extract", str(page), "--service", "ensemble", "--in-process", "--json",
        "--options", '{"members": ["readability"]}'])
    assert result.exit_code == 0, result.output
    details = json.loads(result.stdout)["details"]
    assert details["members_answered"] == ["readability"]


def test_extract_finds_the_service_of_a_port_base_stack(monkeypatch: pytest.MonkeyPatch
                                                        ) -> None:
    from shared.service import create_service_app
    from shared.settings import ServiceSettings

    page = sorted((SAMPLE / "html").glob("*.html"))[0]
    runner = CliRunner()
    with serve_app(create_service_app(SERVICES["bte"].algorithm(), ServiceSettings())) as url:
        port_base = int(url.rsplit(":", 1)[1]) - (SERVICES["bte"].port - DEFAULT_PORT_BASE)
        by_flag = runner.invoke(app, ["extract", str(page), "--service", "bte",
                                      "--port-base", str(port_base)])
        monkeypatch.setenv("BOILERBENCH_PORT_BASE", str(port_base))
        by_env = runner.invoke(app, ["extract", str(page), "--service", "bte"])
    in_process = runner.invoke(app, ["extract", str(page), "--service", "bte", "--in-process"])
    assert by_flag.exit_code == by_env.exit_code == 0, by_flag.output
    assert by_flag.stdout == by_env.stdout == in_process.stdout


def test_extract_sends_the_token_a_service_asks_for(monkeypatch: pytest.MonkeyPatch,
                                                    tmp_path: Path) -> None:
    """A service started with BOILERBENCH_TOKEN answers `extract --token` (or the
    BOILERBENCH_SERVICE_TOKEN that `run` reads); without it the refusal says why, not
    that the service should be started."""
    from shared.service import create_service_app
    from shared.settings import ServiceSettings

    page = str(sorted((SAMPLE / "html").glob("*.html"))[0])
    runner = CliRunner()
    settings = ServiceSettings(token="sekret")
    with serve_app(create_service_app(SERVICES["bte"].algorithm(), settings)) as url:
        port_base = int(url.rsplit(":", 1)[1]) - (SERVICES["bte"].port - DEFAULT_PORT_BASE)
        refused = runner.invoke(app, ["extract", page, "--service", "bte", "--url", url])
        unasked = runner.invoke(app, ["extract", page, "--service", "bte",
                                      "--port-base", str(port_base)], terminal_width=200)
        by_flag = runner.invoke(app, ["extract", page, "--service", "bte", "--url", url,
                                      "--token", "sekret"])
        run_unasked = runner.invoke(app, [
            "run", "--http", "--port-base", str(port_base), "--services", "bte",
            "--store", str(tmp_path / "runs.sqlite"), "--output", str(tmp_path / "out")],
            terminal_width=300)
        monkeypatch.setenv("BOILERBENCH_SERVICE_TOKEN", "sekret")
        by_env = runner.invoke(app, ["extract", page, "--service", "bte",
                                     "--port-base", str(port_base)])
    assert refused.exit_code == 1
    assert "HTTP 401" in refused.output
    assert "pass the service's token with --token" in " ".join(refused.output.split())
    assert unasked.exit_code == 1
    assert "asks for a bearer token (none was given)" in " ".join(unasked.output.split())
    assert "or pass it with --token" in " ".join(unasked.output.split())
    assert "start it" not in unasked.output  # it runs: it wants a token
    assert run_unasked.exit_code == 1
    assert "asks for a bearer token (none was given): set BOILERBENCH_SERVICE_TOKEN" in \
        run_unasked.output
    assert "start it" not in run_unasked.output
    assert by_flag.exit_code == by_env.exit_code == 0, by_flag.output
    assert by_flag.stdout == by_env.stdout
    assert len(by_flag.stdout.split()) > 50


def test_extract_says_what_is_wrong_with_the_page_named(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "300")  # usage errors in one line, however long tmp_path is
    runner = CliRunner()
    cases = {"no such file: ": [str(tmp_path / "missing.html")],
             "is a folder": [str(tmp_path)],
             "not 2": [str(tmp_path / "a.html"), str(tmp_path / "b.html")],
             "go with --warc": [str(tmp_path / "a.html"), "--out", "text.jsonl"],
             "not an http(s) URL": [str(tmp_path / "a.html"), "--url", "localhost:8003"],
             "does not go with --in-process": [str(tmp_path / "a.html"), "--port-base", "9001"],
             "Extra inputs are not permitted": [str(tmp_path / "a.html"), "--options",
                                                '{"nope": 1}']}
    for message, names in cases.items():
        result = runner.invoke(app, ["extract", *names, "--service", "bte", "--in-process"])
        assert result.exit_code == 2, result.output
        assert message in result.output, result.output


def test_extract_refuses_options_a_json_request_would_be_refused_for(tmp_path: Path) -> None:
    """Checked before the page is read, as the service would check them: a number given
    as a string, and rss without its feed (no run adds one to a single page)."""
    page = str(sorted((SAMPLE / "html").glob("*.html"))[0])
    cases = {"justext": ('{"length_low": "70"}', 'not a string ("70")'),
             "rss": ("{}", "give option 'feed'")}
    for service, (options, message) in cases.items():
        for form in ([page], ["--warc", page, "--out", str(tmp_path / "rows.jsonl")]):
            result = CliRunner().invoke(app, ["extract", *form, "--service", service,
                                              "--in-process", "--options", options],
                                        terminal_width=300)
            assert result.exit_code == 2, result.output
            assert message in result.output, result.output
    assert not (tmp_path / "rows.jsonl").exists()


def test_extract_over_http_prints_only_the_named_services_text() -> None:
    """A --url is used as typed (a trailing slash too), and what answers there must be
    the service named: another one's text, or a server that is no service, is refused
    in one line instead of being printed (or failing with a traceback)."""
    from shared.service import create_service_app
    from shared.settings import ServiceSettings

    page = str(sorted((SAMPLE / "html").glob("*.html"))[0])
    runner = CliRunner()
    no_service = partial(_Answer, body=b"<html>hello</html>", status=200)
    with serve_app(create_service_app(SERVICES["bte"].algorithm(), ServiceSettings())) as url, \
            serve_http(no_service) as other:
        slash = runner.invoke(app, ["extract", page, "--service", "bte", "--url", url + "/"])
        wrong = runner.invoke(app, ["extract", page, "--service", "justext", "--url", url],
                              terminal_width=300)
        nothing = runner.invoke(app, ["extract", page, "--service", "bte", "--url", other],
                                terminal_width=300)
    assert slash.exit_code == 0, slash.output
    assert len(slash.stdout.split()) > 50
    assert wrong.exit_code == nothing.exit_code == 1
    assert wrong.output == (f"{url} is not the justext service: the 'bte' service answers "
                            "there (--service names it)\n")
    assert nothing.output.startswith(f"{other} is not a boilerbench service: HTTP 501 to "
                                     "POST /extract"), nothing.output
    assert nothing.output.count("\n") == 1


@pytest.mark.parametrize("url", ["http://[::1", "http://", "http://host:99999", "ftp://host"])
def test_extract_refuses_a_url_that_names_no_http_server(url: str) -> None:
    result = CliRunner().invoke(app, ["extract", "-", "--service", "bte", "--url", url],
                                input=b"<p>a page</p>", terminal_width=200)
    assert result.exit_code == 2, result.output
    assert "is not an http(s) URL" in result.output


def test_extract_with_standard_input_closed_says_so() -> None:
    done = subprocess.run([*CLI, "extract", "-", "--service", "bte", "--in-process"],
                          cwd=REPO, capture_output=True, text=True, timeout=120, check=False,
                          preexec_fn=lambda: os.close(0), env={**os.environ, "COLUMNS": "200"})
    assert done.returncode == 2, done.stderr
    assert "standard input is closed" in done.stderr
    assert "Traceback" not in done.stderr


def test_extract_names_the_extra_an_extractor_lacks(monkeypatch: pytest.MonkeyPatch) -> None:
    from shared.registry import ServiceEntry

    def missing(_entry: ServiceEntry) -> None:
        raise ModuleNotFoundError("No module named 'selectolax'")

    page = str(sorted((SAMPLE / "html").glob("*.html"))[0])
    monkeypatch.setattr(ServiceEntry, "algorithm", missing)
    in_process = CliRunner().invoke(app, ["extract", page, "--service", "bte", "--in-process"],
                                    terminal_width=300)
    monkeypatch.setitem(sys.modules, "orchestrator.warc", None)  # the `warc` extra missing
    warc = CliRunner().invoke(app, ["extract", "--warc", "a.warc.gz", "--service", "bte",
                                    "--out", "t.jsonl"], terminal_width=300)
    assert in_process.exit_code == warc.exit_code == 1
    assert in_process.output == (
        "cannot load the bte extractor: ModuleNotFoundError: No module named 'selectolax' "
        "(install its extra: pip install 'boilerbench[bte]')\n")
    assert "(pip install 'boilerbench[warc]')" in warc.output


@pytest.mark.e2e
def test_services_start_from_a_folder_that_holds_folders_named_like_the_packages(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A folder named shared/ or services/ where `boilerbench up` is started (the
    # datasets' own shared/ beside a checkout, say) is not the project's packages.
    for folder in ("shared/datasets", "services/bte"):
        (tmp_path / folder).mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    page = sorted((SAMPLE / "html").glob("*.html"))[0]
    with local_stack(["bte"], timeout=60) as stack:
        reply = httpx.post(f"{stack.urls()['bte']}/extract", content=page.read_bytes(),
                           headers={"content-type": "text/html"}, timeout=30)
    assert reply.status_code == 200, reply.text
    assert len(reply.json()["text"].split()) > 50


@pytest.mark.e2e
def test_ctrl_c_stops_a_run_quietly_and_its_hint_resumes_it(tmp_path: Path) -> None:
    """Ctrl-C reaches every process of the terminal's group: the workers leave it to the
    run, which says how to resume (its store included), and that command finishes it."""
    command = [sys.executable, "-c", "from orchestrator.cli import app; app()"]
    store = tmp_path / "stores" / "mine.sqlite"
    started = subprocess.Popen(
        [*command, "run", "--in-process", "--services", "trafilatura,readability,fusion",
         "--store", str(store), "--out", str(tmp_path / "out")],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True, preexec_fn=as_a_terminal_starts_it())
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        time.sleep(0.2)
        if store.is_file():
            db = Store(store)
            done = [db.counts(info.id)["done"] for info in db.runs()]
            db.close()
            if done and done[0] >= 3:
                break
    os.killpg(started.pid, signal.SIGINT)
    _, stderr = started.communicate(timeout=60)
    assert started.returncode == 130, stderr[-2000:]
    assert "Traceback" not in stderr, stderr[-3000:]
    counts = _resumed_counts(command, resume_hint(stderr, store), tmp_path)
    assert counts["done"] == counts["total"] == 13 * 3


def test_run_refuses_at_once_what_it_could_not_finish(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")  # usage errors in one line
    runner = CliRunner()
    store = tmp_path / "runs.sqlite"
    (tmp_path / "afile").write_text("not a folder")

    def refused(*args: str) -> str:
        result = runner.invoke(app, [*args, "--store", str(store)], terminal_width=200)
        assert result.exit_code == 2, result.output
        return result.output

    # Reports into a file would fail after every page was extracted: no run is recorded.
    assert "cannot write the reports" in refused(
        "run", "--in-process", "--services", "bte", "--out", str(tmp_path / "afile"))
    assert Store(store).runs() == []
    for sub in ("html", "content"):
        (tmp_path / "empty" / sub).mkdir(parents=True)
    assert "no page with both its HTML and its gold text" in refused(
        "run", "--in-process", "--services", "bte", "--dataset", str(tmp_path / "empty"))
    assert "--url-map takes a JSON object" in refused("run", "--http", "--url-map", "[1]")
    assert "names trafilatura@plian, which this run does not call" in refused(
        "run", "--services", "trafilatura@plain", "--option",
        'trafilatura@plian={"include_comments": false}')
    assert "is a folder" in runner.invoke(
        app, ["runs", "list", "--store", str(tmp_path)], terminal_width=200).output
    # A resumed run is the run as recorded, and not a second copy of one still going.
    assert "drop --services, --out" in refused(
        "run", "--resume", "abc", "--services", "bte", "--out", "x")
    db = Store(store)
    from orchestrator.runner import RunSpec, create_run
    from orchestrator.testsets import LabelledPage, in_memory

    page = LabelledPage("set", "p", b"<p>words</p>", "words")
    run_id = create_run(db, RunSpec(datasets=[], services=["bte"]),
                        memory=[in_memory("set", [page])])
    db.close()
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        for status, state in (("running", "running"), ("pending", "queued")):
            set_run_owner(store, run_id, sleeper.pid, status)
            held = runner.invoke(app, ["run", "--resume", run_id, "--store", str(store)],
                                 terminal_width=200)
            assert held.exit_code == 1, held.output
            assert (f"is {state} in another process ({socket.gethostname()}:{sleeper.pid}), "
                    "which holds it") in held.output
    finally:
        sleeper.kill()
        sleeper.wait()


class _GoldExtractor:
    """An extractor double that answers every page with its gold text at once."""

    def __init__(self, text: str) -> None:
        self.text = text

    async def start(self) -> None:
        return None

    async def extract(self, row: str, html: str, options: dict[str, object]) -> Outcome:
        return Outcome(text=self.text, elapsed_ms=1.0, extract_ms=1.0)

    async def aclose(self) -> None:
        return None


def test_resuming_a_finished_run_starts_nothing_and_keeps_its_reports(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A finished run has nothing left to do: `--resume` of it neither starts its
    services nor scores again, but prints its table and reports as the run did, and
    writes the reports again only where they are gone."""
    store = tmp_path / "runs.sqlite"
    db = Store(store)
    gold = "The harbour bridge opened again today."
    pages = [LabelledPage("set", f"p{i}", f"<p>Menu</p><p>{gold}</p>", gold) for i in range(2)]
    run_id = create_run(db, RunSpec(datasets=[], services=["bte"], local=True,
                                    scoring_processes=1, output_folder=str(tmp_path / "out")),
                        memory=[in_memory("set", pages)])
    asyncio.run(execute_run(db, run_id, extractor=_GoldExtractor(gold)))
    db.close()
    reports = tmp_path / "out" / run_id
    written = {path: path.stat().st_mtime_ns for path in reports.rglob("*") if path.is_file()}
    assert reports / "results.json" in written

    def never(*args: object, **kwargs: object) -> None:
        raise AssertionError("a finished run was run again")

    monkeypatch.setattr("orchestrator.runner.execute_run", never)
    monkeypatch.setattr("orchestrator.commands_run.LocalStack", never)
    monkeypatch.setattr("orchestrator.runner.ScoringPool", never)
    result = CliRunner().invoke(app, ["run", "--resume", run_id, "--store", str(store)],
                                terminal_width=200)
    assert result.exit_code == 0, result.output
    output = " ".join(result.output.split())
    assert f"run {run_id} is already finished: nothing to resume" in output
    assert f"Run {run_id}" in output
    assert "bte" in output
    assert f"report.html: {reports / 'report.html'}" in output
    assert {path: path.stat().st_mtime_ns for path in written} == written
    db = Store(store)
    assert db.counts(run_id)["done"] == 2
    db.close()

    shutil.rmtree(reports)
    result = CliRunner().invoke(app, ["run", "--resume", run_id, "--store", str(store)],
                                terminal_width=200)
    assert result.exit_code == 0, result.output
    assert json.loads((reports / "results.json").read_text(encoding="utf-8"))["run"][
        "status"] == "finished"
    assert (reports / "report.html").is_file()


def test_a_stack_names_its_members_to_the_ensemble_and_no_one_else(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BOILERBENCH_MEMBER_URLS", raising=False)
    stack = LocalStack(["readability", "bte", "ensemble"],
                       ports={"readability": 9108, "bte": 9103, "ensemble": 9111})
    assert json.loads(stack._member_env("ensemble")["BOILERBENCH_MEMBER_URLS"]) == {
        "bte": "http://127.0.0.1:9103", "readability": "http://127.0.0.1:9108"}
    assert stack._member_env("readability") == {}
    assert LocalStack(["ensemble"])._member_env("ensemble") == {}


def _command_paths(command: object, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    """Every command of the CLI, as the arguments that name it (the root: none)."""
    yield path
    for name, sub in getattr(command, "commands", {}).items():
        yield from _command_paths(sub, (*path, name))


def test_help_paragraphs_fill_the_terminal() -> None:
    # Docstrings wrap at 88 columns; help that kept their line breaks left a line of two
    # words after each full one in an 80-column terminal.
    for path in _command_paths(typer.main.get_command(app)):
        result = CliRunner().invoke(app, [*path, "--help"], terminal_width=80)
        assert result.exit_code == 0, path
        head = result.output.split("╭", 1)[0].splitlines()
        for line, following in itertools.pairwise(head):
            if line.strip() and following.strip():  # not a paragraph's last line
                assert len(line.rstrip()) >= 50, (path, line)


def test_flags_show_in_the_help_as_flags_taking_no_value(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """--json, --help, --keep-outputs/--no-keep-outputs take no value: no command's
    help shows them with a placeholder (`<bool>`), while options that take one keep
    theirs."""
    import typer.main

    monkeypatch.setenv("COLUMNS", "200")  # the help's lines unwrapped
    runner = CliRunner()
    paths = list(_command_paths(typer.main.get_command(app)))
    assert ("runs", "delete") in paths
    for path in paths:
        result = runner.invoke(app, [*path, "--help"])
        assert result.exit_code == 0, (path, result.output)
        assert "<bool>" not in result.output, path
    extract = runner.invoke(app, ["extract", "--help"]).output
    assert re.search(r"--json +Print the whole reply", extract), extract
    assert re.search(r"--service +<str> +Service name", extract), extract
    delete = runner.invoke(app, ["runs", "delete", "--help"]).output
    assert re.search(r"--keep-outputs +--no-keep-outputs +Keep the run's output", delete)


def test_run_help_gives_the_defaults_the_run_uses(tmp_path: Path) -> None:
    """--services, --output and --store name their defaults as the configuration has
    them; the store's is the platform's data folder of this environment."""
    data = tmp_path / "data"
    env = {**os.environ, "XDG_DATA_HOME": str(data), "COLUMNS": "300"}
    for variable in ("BOILERBENCH_STORE", "BOILERBENCH_SERVICES", "BOILERBENCH_OUTPUT_FOLDER"):
        env.pop(variable, None)
    done = subprocess.run([*CLI, "run", "--help"], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    defaults = load_config()
    assert f"(default {', '.join(defaults.services)})" in done.stdout
    assert f"(default {defaults.output_folder})" in done.stdout
    assert f"default runs.sqlite in {data / 'boilerbench'})" in done.stdout


class _HalfFailingExtractor:
    """An extractor double: page p0 fails, every other page gets the gold text."""

    def __init__(self, text: str) -> None:
        self.text = text

    async def start(self) -> None:
        return None

    async def extract(self, row: str, html: str, options: dict[str, object]) -> Outcome:
        if "first" in html:
            return Outcome(error="HTTP 422: unprocessable_page: refused")
        return Outcome(text=self.text, elapsed_ms=1.0, extract_ms=1.0)

    async def aclose(self) -> None:
        return None


def test_runs_show_says_a_runs_progress_in_words(tmp_path: Path) -> None:
    store = tmp_path / "runs.sqlite"
    db = Store(store)
    gold = "The harbour bridge opened again today."
    pages = [LabelledPage("set", f"p{i}", f"<p>{word}</p><p>{gold}</p>", gold)
             for i, word in enumerate(["first", "second", "third"])]
    run_id = create_run(db, RunSpec(datasets=[], services=["bte"], local=True,
                                    scoring_processes=1, output_folder=str(tmp_path / "out")),
                        memory=[in_memory("set", pages)])
    asyncio.run(execute_run(db, run_id, extractor=_HalfFailingExtractor(gold)))
    db.close()
    result = CliRunner().invoke(app, ["runs", "show", run_id, "--store", str(store)],
                                terminal_width=200)
    assert result.exit_code == 0, result.output
    assert f"run {run_id}: finished, 3/3 done: 2 ok, 1 error, 0 skipped\n" in result.output


@pytest.mark.parametrize("command", ["list", "show", "cancel", "delete"])
def test_the_runs_commands_say_what_their_config_is_for(
        command: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")  # the help's lines unwrapped
    help_text = CliRunner().invoke(app, ["runs", command, "--help"]).output
    (line,) = [line for line in help_text.splitlines() if "--config" in line]
    assert "configuration file: its `store` names the store" in line


def test_a_dataset_flag_replaces_the_test_sets_of_the_configuration_file(
        tmp_path: Path) -> None:
    """The example configuration names the sample; with --dataset the run scores the
    flag's test set alone."""
    gold = "The harbour bridge opened again today after a long winter of repairs."
    pages = tmp_path / "mine.json"
    pages.write_text(json.dumps([{"id": "a", "html": f"<p>Menu</p><p>{gold}</p>",
                                  "gold": gold}]), encoding="utf-8")
    store = tmp_path / "runs.sqlite"
    result = CliRunner().invoke(app, [
        "run", "--config", str(REPO / "orchestrator" / "examples" / "config.txt"),
        "--dataset", str(pages), "--services", "bte", "--in-process", "--store", str(store),
        "--output", str(tmp_path / "out")], terminal_width=200)
    assert result.exit_code == 0, result.output
    db = Store(store)
    (info,) = db.runs()
    assert info.datasets == ["mine"]
    assert db.counts(info.id)["total"] == 1
    db.close()


def _slow_pages(folder: Path, seconds: float) -> dict[str, str]:
    """An environment whose extraction workers take `seconds` on every page (a
    sitecustomize on the PYTHONPATH, which the run's workers inherit), so a run is
    certain to be mid-way when it is signalled."""
    folder.mkdir()
    (folder / "sitecustomize.py").write_text(
        "import sys, time\n"
        "if 'extraction_handler' in str(sys.orig_argv):\n"
        "    import shared.answer\n"
        "    answer = shared.answer.answer_extract\n"
        "    def slow(*args, **kwargs):\n"
        f"        time.sleep({seconds})\n"
        "        return answer(*args, **kwargs)\n"
        "    shared.answer.answer_extract = slow\n")
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(folder), str(REPO)])}


def _resumed_counts(command: list[str], hint: list[str], cwd: Path) -> dict[str, int]:
    """Run the resume hint a stopped command printed; the run's counts once it is done."""
    resumed = subprocess.run([*command, "run", *hint], cwd=cwd, capture_output=True,
                             text=True, timeout=300, check=False)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    db = Store(Path(hint[3]))
    counts = db.counts(hint[1])
    db.close()
    return counts


def _stop_after_first_result(folder: Path) -> dict[str, str]:
    """An environment in which `boilerbench run` sends itself SIGTERM as it stores its
    first result (a sitecustomize on the PYTHONPATH): the signal arrives while the
    run's own code runs, not while it waits."""
    folder.mkdir()
    (folder / "sitecustomize.py").write_text(
        "import os, signal, sys\n"
        "if 'orchestrator.cli' in sys.orig_argv:\n"
        "    from orchestrator.store import Store\n"
        "    add_result = Store.add_result\n"
        "    def add_and_stop(self, result):\n"
        "        added = add_result(self, result)\n"
        "        if not getattr(Store, 'stopped', False):\n"
        "            Store.stopped = True\n"
        "            os.kill(os.getpid(), signal.SIGTERM)\n"
        "        return added\n"
        "    Store.add_result = add_and_stop\n")
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(folder), str(REPO)])}


@pytest.mark.e2e
@pytest.mark.parametrize("ctrl_c", ["handled", "ignored"])
def test_sigterm_while_the_run_stores_a_result_ends_it_cleanly(ctrl_c: str,
                                                               tmp_path: Path) -> None:
    """A stop signal that arrives while a lane stores its result cancels the run's
    task: the lane finishes its step and every task ends through its clean-up, also
    where Ctrl-C is ignored (a background job of a script), where it used to be a
    KeyboardInterrupt raised in the middle of that lane."""
    done = subprocess.run(
        [*CLI, "run", "--in-process", "--services", "bte", "--store",
         str(tmp_path / "runs.sqlite"), "--output", str(tmp_path / "out")],
        cwd=REPO, env=_stop_after_first_result(tmp_path / "stop"), stdin=subprocess.DEVNULL,
        capture_output=True, text=True, timeout=120, check=False,
        preexec_fn=(lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
        if ctrl_c == "ignored" else None)
    assert done.returncode == 130, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert "never retrieved" not in done.stderr, done.stderr
    assert "Task was destroyed" not in done.stderr, done.stderr
    assert "interrupted; resume with --resume" in done.stderr


@pytest.mark.e2e
def test_sigterm_mid_run_ends_it_without_pending_tasks(tmp_path: Path) -> None:
    """`kill -TERM` of a run started in the background of a script (Ctrl-C ignored)
    while its workers are busy: its requests and the replacements of their workers
    are cancelled and awaited, no task is left pending for Python to report ("Task was
    destroyed but it is pending!"), and the hint resumes it."""
    store = tmp_path / "runs.sqlite"
    process = subprocess.Popen(
        [*CLI, "run", "--in-process", "--services", "bte", "--store", str(store),
         "--output", str(tmp_path / "out")],
        cwd=REPO, env=_slow_pages(tmp_path / "slow", 0.5), stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    try:
        deadline = time.monotonic() + 60
        done = 0
        while done < 1:  # 12 pages of 0.5 s each are left for 2 workers: seconds of work
            assert time.monotonic() < deadline, "no page done"
            assert process.poll() is None, "the run ended before a page was done"
            time.sleep(0.1)
            if store.is_file():
                db = Store(store)
                done = sum(db.counts(info.id)["done"] for info in db.runs())
                db.close()
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert process.returncode == 130, stderr
    assert "Task was destroyed" not in stderr, stderr
    assert "Traceback" not in stderr, stderr
    assert "interrupted; resume with --resume" in stderr


@pytest.mark.e2e
def test_sigterm_ends_score_with_the_resume_hint(tmp_path: Path) -> None:
    """A stop signal ends `score` as it ends `run`: what was stored stays, the command
    exits 130 with the resume hint, and the hint's command finishes the run."""
    predictions = tmp_path / "predictions"
    predictions.mkdir()
    texts = {path.stem: {"articleBody": path.read_text(encoding="utf-8")}
             for path in (SAMPLE / "content").glob("*.txt")}
    (predictions / "gold.json").write_text(json.dumps(texts), encoding="utf-8")
    store = tmp_path / "runs.sqlite"
    stopped = subprocess.run(
        [*CLI, "score", "--predictions", str(predictions), "--dataset", str(SAMPLE),
         "--store", str(store), "--output", str(tmp_path / "out")],
        cwd=REPO, env=_stop_after_first_result(tmp_path / "stop"), stdin=subprocess.DEVNULL,
        capture_output=True, text=True, timeout=180, check=False)
    assert stopped.returncode == 130, stopped.stderr[-3000:]
    assert "Traceback" not in stopped.stderr, stopped.stderr[-3000:]
    hint = resume_hint(stopped.stderr, store)
    db = Store(store)
    assert 0 < db.counts(hint[1])["done"] < len(texts)
    db.close()
    counts = _resumed_counts(CLI, hint, REPO)
    assert counts["done"] == counts["total"] == len(texts)
