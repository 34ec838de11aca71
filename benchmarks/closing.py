"""How the servers end a request and its connection, against real clients on loopback:
bodies past the size limit, replies sent before the body has arrived, and the API's
stop under load.

    python benchmarks/closing.py body  [--target bte|api] [--limit 10MiB]
                                       [--over 1KiB,20MiB,200MiB] [--times 10]
    python benchmarks/closing.py early [--service bte] [--bodies 64MiB,1536MiB]
                                       [--declared 1GiB] [--slow-s 45]
    python benchmarks/closing.py stop  [--trials 5] [--clients 8] [--load-s 10]
                                       [--run-dataset sample] [--reads-of DATASETS]
                                       [--pid1] [--grace S]
    every part: [--linger BYTES] [--out FILE]

- body: the service (`python -m shared.serving services.<name>.app:app`, a
  `text/html` body to /extract) or the runs API (`--target api`, to /runs) with a
  size limit of --limit; bodies of the limit plus each --over posted --times times
  by each client: httpx (`content=bytes`), Python's http.client (the whole body,
  then the reply), the same chunked (1 MiB chunks), `curl --data-binary @file`
  (which sends `Expect: 100-continue` past 1 MiB) and curl without that header.
  Counts what each client saw (the status, or the exception) and its median time
  per request, and the server process's CPU time and peak resident memory (VmHWM).
- early: the service with a token, and requests it answers before it reads their
  body: a wrong token (401) and an unknown path (404). Per request: a client that
  sends a body of --declared bytes slowly (64 KiB every 10 ms, reading meanwhile,
  for at most --slow-s); a client that sends each --bodies body as fast as it can
  and reads meanwhile (it stops when the server ends the connection); http.client
  sending each whole before it reads. What each saw, how long until the server
  ended the connection (or the client gave up), how much it sent, and the server's
  CPU time.
- stop: per trial, a new store (with --reads-of, a copy of one holding a finished
  run of those datasets, justext and bte, made once first); the API as
  `python -m shared.serving orchestrator.api:app_factory` (`--log-level info`,
  `BOILERBENCH_API_MAX_QUEUED_RUNS=4`; --pid1: as PID 1 of a new PID namespace,
  as in a container, under `unshare --pid --fork`); three runs of --run-dataset
  (justext and bte, embedded) posted; then --clients client threads for
  --load-s, one in four posting that run again (202 or 429), the others asking
  for results (the finished run's with --reads-of, else the posted runs') over and
  over; then SIGTERM to the server process, timed to its exit, with the stop's
  steps from the server's log. A new server on the store then resumes every
  accepted run, each of which must finish with all its results.

--linger sets the servers' LINGER_BYTES. Each part prints a markdown section (the
date, the machine and its load, the command, the figures) and writes it to --out.
"""

from __future__ import annotations

import argparse
import collections
import datetime
import http.client
import json
import os
import platform
import re
import select
import shutil
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import uvicorn
from common import REPO, command_line, positive_int, service_name

from orchestrator.launcher import wait_healthy
from tests.servers import free_port, serve_process

KIB, MIB, GIB = 2**10, 2**20, 2**30
UNITS = {"": 1, "B": 1, "KIB": KIB, "MIB": MIB, "GIB": GIB}
TOKEN = "closing-benchmark-token"


def size(text: str) -> int:
    """A byte count: `1024`, `1KiB`, `20MiB`, `1.5GiB`."""
    found = re.fullmatch(r"\s*([0-9.]+)\s*([KMG]iB|B)?\s*", text, re.IGNORECASE)
    if found is None:
        raise argparse.ArgumentTypeError(f"{text!r} is no size (1024, 1KiB, 20MiB, 1GiB)")
    return int(float(found.group(1)) * UNITS[(found.group(2) or "").upper()])


def sizes(text: str) -> list[int]:
    return [size(part) for part in text.split(",") if part.strip()]


def shown(count: int) -> str:
    """A byte count as the options write it."""
    for unit, factor in (("GiB", GIB), ("MiB", MIB), ("KiB", KIB)):
        if count >= factor:
            return f"{count / factor:g} {unit}"
    return f"{count} B"


def cpu_s(pid: int) -> float:
    """CPU time (user and system) of one process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def memory_mib(pid: int, key: str = "VmHWM") -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) // 1024
    return -1


def header(title: str, argv: list[str]) -> list[str]:
    curl = subprocess.run(["curl", "--version"], capture_output=True, text=True).stdout
    return [f"## {title}", "",
            f"Date: {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC. Machine: "
            f"{platform.machine()}, {os.cpu_count()} cores, load average "
            f"{os.getloadavg()[0]:.2f} at the start, {platform.system()} "
            f"{platform.release()}, Python {platform.python_version()}, uvicorn "
            f"{uvicorn.__version__}, httpx {httpx.__version__}, "
            f"{' '.join(curl.split()[:2]) or 'no curl'}.", "",
            f"Command: `{command_line('closing.py', argv)}`", ""]


def finish(lines: list[str], out: Path | None) -> None:
    lines.append(f"Load average at the end: {os.getloadavg()[0]:.2f}.")
    text = "\n".join(lines) + "\n"
    print(text)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text, encoding="utf-8")
        print(f"written to {out}")


def linger_env(prefix: str, linger: int | None) -> dict[str, str]:
    return {} if linger is None else {f"{prefix}LINGER_BYTES": str(linger)}


# ---------------------------------------------------------------- bodies past the limit

def body_file(folder: Path, length: int) -> Path:
    """An HTML page of `length` bytes."""
    path = folder / f"body_{length}.html"
    if not path.exists():
        block = b"<p>word word word</p>\n" * (MIB // 22)
        with path.open("wb") as out:
            out.write(b"<html><body>")
            left = length - len(b"<html><body>")
            while left > 0:
                left -= out.write(block[:left])
    return path


def pieces(path: Path) -> Iterator[bytes]:
    with path.open("rb") as source:
        while chunk := source.read(MIB):
            yield chunk


def _address(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    return parts.hostname or "127.0.0.1", parts.port or 80


def with_httpx(url: str, headers: dict[str, str], path: Path) -> str:
    try:
        return str(httpx.post(url, content=path.read_bytes(), headers=headers,
                              timeout=120).status_code)
    except httpx.HTTPError as exc:
        return type(exc).__name__


def with_http_client(url: str, headers: dict[str, str], path: Path,
                     chunked: bool = False) -> str:
    connection = http.client.HTTPConnection(*_address(url), timeout=120)
    try:
        if chunked:
            connection.request("POST", urlsplit(url).path, body=pieces(path),
                               headers=headers, encode_chunked=True)
        else:
            connection.request("POST", urlsplit(url).path, body=path.read_bytes(),
                               headers=headers)
        reply = connection.getresponse()
        reply.read()
        return str(reply.status)
    except OSError as exc:
        return type(exc).__name__
    finally:
        connection.close()


def with_curl(url: str, headers: dict[str, str], path: Path, expect: bool = True) -> str:
    command = ["curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "120",
               "--data-binary", f"@{path}", url]
    for name, value in headers.items():
        command[1:1] = ["-H", f"{name}: {value}"]
    if not expect:
        command[1:1] = ["-H", "Expect:"]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode == 0:
        return done.stdout
    return f"curl exit {done.returncode}" + (f" after HTTP {done.stdout}"
                                            if done.stdout not in ("", "000") else "")


BODY_CLIENTS: dict[str, Callable[[str, dict[str, str], Path], str]] = {
    "httpx": with_httpx,
    "http.client": with_http_client,
    "http.client, chunked": lambda url, headers, path: with_http_client(url, headers, path,
                                                                        chunked=True),
    "curl": with_curl,
    "curl, no Expect": lambda url, headers, path: with_curl(url, headers, path, expect=False),
}


@contextmanager
def target_server(target: str, limit: int, linger: int | None
                  ) -> Iterator[tuple[str, str, int]]:
    """The service or the API with the size limit: the URL posted to, the content type
    and the server's process id."""
    if target == "api":
        with tempfile.TemporaryDirectory(prefix="boilerbench-closing-") as temp, \
                serve_process("orchestrator.api:app_factory", {
                    "BOILERBENCH_API_MAX_BODY_BYTES": str(limit),
                    "BOILERBENCH_STORE": f"{temp}/store.sqlite",
                    "BOILERBENCH_OUTPUT_FOLDER": f"{temp}/out",
                    "BOILERBENCH_API_RESUME": "false",
                    **linger_env("BOILERBENCH_API_", linger)},
                    "--factory", "--env-prefix", "BOILERBENCH_API_") as (url, process):
            yield f"{url}/runs", "application/json", process.pid
        return
    with serve_process(f"services.{target}.app:app", {
            "BOILERBENCH_MAX_BODY_BYTES": str(limit), "BOILERBENCH_WORKERS": "1",
            **linger_env("BOILERBENCH_", linger)}) as (url, process):
        yield f"{url}/extract", "text/html", process.pid


def bodies_part(args: argparse.Namespace, argv: list[str]) -> None:
    lines = header(f"Bodies past the limit: {args.target}, limit {shown(args.limit)}", argv)
    lines += ["| past the limit | " + " | ".join(BODY_CLIENTS) + " | server CPU s | "
              "server peak RSS MiB |", "|---" * (len(BODY_CLIENTS) + 3) + "|"]
    with tempfile.TemporaryDirectory(prefix="boilerbench-bodies-") as temp, \
            target_server(args.target, args.limit, args.linger) as (url, kind, pid):
        headers = {"content-type": kind}
        for over in args.over:
            path = body_file(Path(temp), args.limit + over)
            started = cpu_s(pid)
            cells = []
            for name, client in BODY_CLIENTS.items():
                seen: collections.Counter[str] = collections.Counter()
                took = []
                for _ in range(args.times):
                    began = time.monotonic()
                    seen[client(url, headers, path)] += 1
                    took.append(time.monotonic() - began)
                cells.append(", ".join(f"{k} x{v}" for k, v in sorted(seen.items()))
                             + f"; {statistics.median(took):.2f} s")
                print(f"  +{shown(over)} {name}: {cells[-1]}", flush=True)
            lines.append(f"| {shown(over)} | " + " | ".join(cells)
                         + f" | {cpu_s(pid) - started:.2f} | {memory_mib(pid)} |")
            path.unlink()
    finish(lines, args.out)


# ---------------------------------------------------------------- replies before the body

def _head(path: str, authorization: str, length: int) -> bytes:
    return (f"POST {path} HTTP/1.1\r\nhost: x\r\nauthorization: {authorization}\r\n"
            f"content-type: text/html\r\ncontent-length: {length}\r\n\r\n").encode()


def _status(reply: bytes) -> str:
    return reply.split(b" ", 2)[1].decode() if reply.startswith(b"HTTP/1.1 ") else "none"


def raw_client(address: tuple[str, int], head: bytes, length: int, chunk: int,
               pause: float, most_s: float) -> dict[str, Any]:
    """Send the head and then `length` bytes of body, `chunk` at a time with `pause`
    between, reading all the while, until the server ends the connection, the body is
    sent (then a second for the server to end it) or `most_s` pass."""
    reply, sent = b"", 0
    ended = "no: the client gave up"
    started = time.monotonic()
    with socket.create_connection(address) as sock:
        sock.sendall(head)
        block = b"a" * chunk
        done_sending: float | None = None
        while time.monotonic() - started < most_s:
            if done_sending is not None and time.monotonic() - done_sending > 1:
                ended = "no: left open after the whole body"
                break
            wait = pause if done_sending is None else 0.1
            readable, writable, _ = select.select(
                [sock], [sock] if done_sending is None else [], [], wait)
            try:
                if readable:
                    data = sock.recv(65536)
                    if not data:
                        ended = "yes (closed)"
                        break
                    reply += data
                    continue
                if writable and done_sending is None:
                    sent += sock.send(block[:length - sent])
                    if sent >= length:
                        done_sending = time.monotonic()
                    elif pause:
                        time.sleep(pause)
            except OSError as exc:
                ended = f"yes ({type(exc).__name__})"
                break
    return {"status": _status(reply), "s": time.monotonic() - started, "sent": sent,
            "ended": ended}


def whole_first_client(address: tuple[str, int], path: str, authorization: str,
                       length: int) -> dict[str, Any]:
    """http.client: the whole body (1 MiB chunks of a generator), then the reply."""
    started = time.monotonic()
    connection = http.client.HTTPConnection(*address, timeout=120)
    sent = 0

    def body() -> Iterator[bytes]:
        nonlocal sent
        block = b"a" * MIB
        while sent < length:
            piece = block[:length - sent]
            sent += len(piece)
            yield piece

    try:
        connection.request("POST", path, body=body(), headers={
            "authorization": authorization, "content-type": "text/html",
            "content-length": str(length)})
        reply = connection.getresponse()
        reply.read()
        status = str(reply.status)
        ended = "yes (closed)" if reply.getheader("connection") == "close" else "no"
    except OSError as exc:
        status, ended = type(exc).__name__, "yes (cut)"
    finally:
        connection.close()
    return {"status": status, "s": time.monotonic() - started, "sent": sent, "ended": ended}


EARLY_CASES = {"wrong token": ("/extract", "Bearer wrong"),
               "unknown path": ("/nowhere", f"Bearer {TOKEN}")}


def early_part(args: argparse.Namespace, argv: list[str]) -> None:
    lines = header(f"Replies sent before the body: {args.service}", argv)
    lines += ["| request | client | body | status | s | sent MiB | server ended the "
              "connection | server CPU s |", "|---" * 8 + "|"]
    env = {"BOILERBENCH_TOKEN": TOKEN, "BOILERBENCH_WORKERS": "1",
           **linger_env("BOILERBENCH_", args.linger)}
    with serve_process(f"services.{args.service}.app:app", env) as (url, process):
        address = _address(url)
        for case, (path, authorization) in EARLY_CASES.items():
            runs: list[tuple[str, int, Callable[[], dict[str, Any]]]] = [(
                "slow (64 KiB / 10 ms), reads", args.declared,
                partial(raw_client, address, _head(path, authorization, args.declared),
                        args.declared, 64 * KIB, 0.01, args.slow_s))]
            for length in args.bodies:
                runs += [("fast, reads while sending", length,
                          partial(raw_client, address, _head(path, authorization, length),
                                  length, MIB, 0.0, 120)),
                         ("http.client, whole body first", length,
                          partial(whole_first_client, address, path, authorization, length))]
            for client, length, run in runs:
                before = cpu_s(process.pid)
                seen = run()
                time.sleep(0.5)  # the server's last reads of a connection it drops
                row = (f"| {case} | {client} | {shown(length)} | {seen['status']} | "
                       f"{seen['s']:.1f} | {seen['sent'] / MIB:.0f} | {seen['ended']} | "
                       f"{cpu_s(process.pid) - before:.2f} |")
                lines.append(row)
                print(row, flush=True)
    finish(lines, args.out)


# ---------------------------------------------------------------- the API's stop

API_COMMAND = ["-m", "shared.serving", "orchestrator.api:app_factory", "--factory",
               "--env-prefix", "BOILERBENCH_API_", "--log-level", "info", "--no-access-log"]
# The stop's steps in the server's log.
LOG_STEPS = {"waiting": "Waiting for connections to close",
             "app_shutdown": "Waiting for application shutdown",
             "app_done": "Application shutdown complete"}


class ApiProcess:
    """The runs API on `store`, its log lines timestamped as they come."""

    def __init__(self, folder: Path, port: int, args: argparse.Namespace,
                 datasets: list[Path]) -> None:
        env = {**os.environ, "BOILERBENCH_STORE": str(folder / "store.sqlite"),
               "BOILERBENCH_OUTPUT_FOLDER": str(folder / "out"),
               "BOILERBENCH_API_ALLOWED_ROOTS": json.dumps([str(p) for p in datasets]),
               "BOILERBENCH_API_PORT": str(port), "BOILERBENCH_API_MAX_QUEUED_RUNS": "4",
               **linger_env("BOILERBENCH_API_", args.linger)}
        if args.grace is not None:
            env["BOILERBENCH_API_STOP_GRACE_S"] = str(args.grace)
        command = [sys.executable, *API_COMMAND]
        self.pid1 = args.pid1
        if self.pid1:
            command = ["unshare", "--pid", "--fork", "--mount-proc", *command]
        self.url = f"http://127.0.0.1:{port}"
        self.log: list[tuple[float, str]] = []
        self.process = subprocess.Popen(command, env=env, cwd=REPO, stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                        start_new_session=True)
        threading.Thread(target=self._read, daemon=True).start()
        wait_healthy(self.url, 180, self.process)

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.log.append((time.monotonic(), line.decode(errors="replace").rstrip()))

    def server_pid(self) -> int:
        """The server's own process: under unshare, its child."""
        if not self.pid1:
            return self.process.pid
        children = Path(f"/proc/{self.process.pid}/task/{self.process.pid}/children")
        return int(children.read_text().split()[0])

    def stop(self, timeout: float = 120) -> int:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            return self.process.wait()


def _run_body(datasets: list[str]) -> dict[str, Any]:
    return {"dataset": datasets, "services": ["justext", "bte"], "backend": "embedded"}


def _wait_finished(url: str, ids: list[str], most_s: float) -> dict[str, dict[str, Any]]:
    deadline = time.monotonic() + most_s
    runs: dict[str, dict[str, Any]] = {}
    with httpx.Client(timeout=60) as client:
        while time.monotonic() < deadline:
            runs = {run_id: client.get(f"{url}/runs/{run_id}").json() for run_id in ids}
            if all(run.get("status") not in ("pending", "running") for run in runs.values()):
                break
            time.sleep(1)
    return runs


def prepare_reads(folder: Path, args: argparse.Namespace, roots: list[Path]) -> str:
    """A store holding one finished run of --reads-of, in `folder`: its id."""
    api = ApiProcess(folder, free_port(), args, roots)
    try:
        started = time.monotonic()
        run_id: str = httpx.post(f"{api.url}/runs", json=_run_body(args.reads_of),
                            timeout=60).json()["id"]
        run = _wait_finished(api.url, [run_id], 7200)[run_id]
        took = time.monotonic() - started
        reading = time.monotonic()
        httpx.get(f"{api.url}/runs/{run_id}/results", timeout=600)
        print(f"finished run {run_id} of {','.join(args.reads_of)}: {run['counts']} in "
              f"{took:.0f} s; its /results alone {time.monotonic() - reading:.2f} s",
              flush=True)
        return run_id
    finally:
        api.stop()


def stop_trial(args: argparse.Namespace, roots: list[Path], prepared: Path | None,
               read_run: str | None) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="boilerbench-stop-") as temp:
        folder = Path(temp)
        if prepared is not None:
            for path in prepared.parent.glob(prepared.name + "*"):  # with its WAL
                shutil.copy(path, folder / path.name)
        port = free_port()
        api = ApiProcess(folder, port, args, roots)
        body = _run_body([args.run_dataset])
        accepted = [httpx.post(f"{api.url}/runs", json=body, timeout=60).json()["id"]
                    for _ in range(3)]
        replies: collections.Counter[str] = collections.Counter()
        lock, halt = threading.Lock(), threading.Event()

        def client(index: int) -> None:
            with httpx.Client(timeout=60) as http:
                while not halt.is_set():
                    try:
                        if index % 4 == 0:
                            reply = http.post(f"{api.url}/runs", json=body)
                            if reply.status_code == 202:
                                with lock:
                                    accepted.append(reply.json()["id"])
                        else:
                            with lock:
                                run_id = read_run or accepted[index % len(accepted)]
                            reply = http.get(f"{api.url}/runs/{run_id}/results")
                        key = str(reply.status_code)
                    except httpx.HTTPError as exc:
                        key = type(exc).__name__
                        time.sleep(0.05)
                    with lock:
                        replies[key] += 1

        threads = [threading.Thread(target=client, args=(i,)) for i in range(args.clients)]
        for thread in threads:
            thread.start()
        time.sleep(args.load_s)
        sent = time.monotonic()
        os.kill(api.server_pid(), signal.SIGTERM)
        try:
            code = api.process.wait(timeout=120)
        except subprocess.TimeoutExpired:
            code = api.stop()
        exit_s = time.monotonic() - sent
        halt.set()
        for thread in threads:
            thread.join()
        steps = {name: next((t - sent for t, line in api.log
                             if t >= sent and text in line), None)
                 for name, text in LOG_STEPS.items()}
        stop_lines = [line for t, line in api.log if t >= sent]
        with closing(sqlite3.connect(folder / "store.sqlite")) as db:
            stored = dict(db.execute("SELECT id, status FROM runs").fetchall())
        # A new server on the store resumes what was left.
        again = ApiProcess(folder, port, args, roots)
        try:
            final = _wait_finished(again.url, accepted, 1800)
        finally:
            again.stop()
    whole = sum(run.get("status") == "finished"
                and run["counts"].get("done") == run["counts"].get("total") for run in
                final.values())
    return {"exit_s": exit_s, "exit_code": code, "steps": steps, "accepted": len(accepted),
            "at_stop": dict(collections.Counter(stored.get(i, "lost") for i in accepted)),
            "lost": sum(run_id not in stored for run_id in accepted),
            "whole": whole, "replies": dict(replies),
            "warnings": [line for line in stop_lines if line.startswith(("WARNING", "ERROR"))]}


def stop_part(args: argparse.Namespace, argv: list[str]) -> None:
    from shared.datasets import datasets_root

    roots = [REPO / "orchestrator" / "sample", datasets_root()]
    where = "PID 1 of a PID namespace" if args.pid1 else "a process"
    lines = header(f"The API's stop under load ({where})", argv)
    read_run = None
    with tempfile.TemporaryDirectory(prefix="boilerbench-reads-") as temp:
        prepared = None
        if args.reads_of:
            read_run = prepare_reads(Path(temp), args, roots)
            prepared = Path(temp) / "store.sqlite"
            lines += [f"Readers ask for the results of a finished run of "
                      f"{', '.join(args.reads_of)} (justext and bte).", ""]
        lines += ["| trial | exit after SIGTERM, s | exit status | wait for requests in "
                  "hand, s | application shutdown, s | runs accepted (at the stop) | lost "
                  "| finished whole once resumed | replies during the load | stop's "
                  "WARNING/ERROR lines |", "|---" * 10 + "|"]
        for number in range(1, args.trials + 1):
            seen = stop_trial(args, roots, prepared, read_run)
            steps = seen["steps"]

            def gap(start: str, end: str, steps: dict[str, float | None] = steps) -> str:
                """Seconds between two steps of the log; "none" where the first is not
                logged (uvicorn logs its wait only where requests are in hand)."""
                first, last = steps.get(start), steps.get(end)
                return "none" if first is None or last is None else f"{last - first:.2f}"

            at_stop = ", ".join(f"{k} {v}" for k, v in sorted(seen["at_stop"].items()))
            replies = ", ".join(f"{k} x{v}" for k, v in sorted(seen["replies"].items()))
            row = (f"| {number} | {seen['exit_s']:.2f} | {seen['exit_code']} | "
                   f"{gap('waiting', 'app_shutdown')} | {gap('app_shutdown', 'app_done')} | "
                   f"{seen['accepted']} ({at_stop}) | {seen['lost']} | {seen['whole']} | "
                   f"{replies} | {'; '.join(seen['warnings']) or 'none'} |")
            lines.append(row)
            print(row, flush=True)
    finish(lines, args.out)


# ---------------------------------------------------------------- main

def body_target(value: str) -> str:
    """A service of the registry, or `api`."""
    return value if value == "api" else service_name(value)


def main(argv: list[str] | None = None) -> int:
    arguments = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parts = parser.add_subparsers(dest="part", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--linger", type=size, default=None,
                        help="the servers' LINGER_BYTES (default: theirs, 1 GiB)")
    common.add_argument("--out", type=Path, default=None, help="also write the section here")

    body = parts.add_parser("body", parents=[common], help="bodies past the size limit")
    body.add_argument("--target", default="bte", type=body_target,
                      help="a service's name, or `api` for the runs API")
    body.add_argument("--limit", type=size, default=10 * MIB)
    body.add_argument("--over", type=sizes, default=[KIB, 20 * MIB, 200 * MIB])
    body.add_argument("--times", type=positive_int, default=10)

    early = parts.add_parser("early", parents=[common], help="replies before the body")
    early.add_argument("--service", type=service_name, default="bte")
    early.add_argument("--bodies", type=sizes, default=[64 * MIB, 1536 * MIB])
    early.add_argument("--declared", type=size, default=GIB,
                       help="the slow client's Content-Length")
    early.add_argument("--slow-s", type=float, default=45.0,
                       help="the slow client gives up after this")

    stop = parts.add_parser("stop", parents=[common], help="the API's stop under load")
    stop.add_argument("--trials", type=positive_int, default=5)
    stop.add_argument("--clients", type=positive_int, default=8)
    stop.add_argument("--load-s", type=float, default=10.0)
    stop.add_argument("--run-dataset", default="sample",
                      help="the runs posted (a root's name or a path under one)")
    stop.add_argument("--reads-of", type=lambda v: [p for p in v.split(",") if p],
                      default=[], help="datasets of a finished run whose results the "
                      "readers ask for (default: the posted runs')")
    stop.add_argument("--pid1", action="store_true",
                      help="the server as PID 1 of a new PID namespace (unshare)")
    stop.add_argument("--grace", type=float, default=None,
                      help="BOILERBENCH_API_STOP_GRACE_S (default: the API's, 2 s)")

    args = parser.parse_args(arguments)
    {"body": bodies_part, "early": early_part, "stop": stop_part}[args.part](args, arguments)
    return 0


if __name__ == "__main__":
    sys.exit(main())
