"""Start algorithm services as local uvicorn processes and stop them cleanly.

`boilerbench up`, the orchestrator's local runs and the end-to-end tests all go
through LocalStack, so what the tests start is what users start.

A stack checks that its ports are free and then starts its services, which bind them
a second or more later. Two stacks started together on the same ports would both pass
the check and then fight over them, so a start holds a lock per port (PortLocks: flock
on a file per port, released by the kernel if the process dies) from the check until
its services are healthy, and by then they listen: a second start finds the port
locked, or taken, and fails at once.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Literal

import httpx

from shared.contract import START_FAILED, bearer_header
from shared.pids import process_exists
from shared.registry import SERVICES, get_service
from shared.workers import same_imports_env

DEFAULT_PORT_BASE = min(entry.port for entry in SERVICES.values())
"""The port of the first service of the registry: `--port-base` of the registry ports."""


class StackError(RuntimeError):
    """A service did not start, never became healthy, or is not the one expected
    (`service`: its name, where one service is at fault). `cause`, where check_service
    raised it, says what would help: `absent` (nothing answers: start it), `token` (it
    asks for a bearer token), `other` (another server or service answers there)."""

    def __init__(self, message: str, service: str | None = None,
                 cause: Literal["absent", "token", "other"] | None = None) -> None:
        super().__init__(message)
        self.service = service
        self.cause = cause


class StartCancelledError(StackError):
    """The start was called off (its `cancel` event set) before every service was
    healthy; the services started so far are stopped."""


def _max_port_base() -> int:
    """The highest --port-base whose stack still fits below port 65536."""
    span = max(service.port for service in SERVICES.values()) - DEFAULT_PORT_BASE
    return 65535 - span


MAX_PORT_BASE = _max_port_base()


def service_port(name: str, port_base: int | None = None) -> int:
    """The port of service `name` in a stack whose ports start at `port_base`.

    Every service keeps its distance from the first registry port, so with
    `port_base` 9001 the service of registry port 8003 listens on 9003, whichever
    services a stack runs; None means the registry ports themselves.
    """
    port = get_service(name).port
    return port if port_base is None else port - DEFAULT_PORT_BASE + port_base


def check_service(url: str, name: str, token: str | None = None, timeout: float = 5.0
                  ) -> dict[str, Any]:
    """Make sure the service at `url` is `name` (its /info says so), else StackError
    with one line naming the address and what answered there; its /info, for a caller
    that reads more of it (the run's in-sample flags) without asking again."""
    headers = bearer_header(token)
    try:
        reply = httpx.get(f"{url}/info", headers=headers, timeout=timeout)
    except httpx.TransportError as exc:
        raise StackError(f"nothing answers at {url} ({type(exc).__name__})", name,
                         "absent") from None
    return check_info_reply(url, name, token, reply.status_code, reply.content,
                            reply.headers.get("server"))


def check_info_reply(url: str, name: str, token: str | None, status: int, body: bytes,
                     server: str | None) -> dict[str, Any]:
    """check_service's judgement of the reply to GET /info at `url` (its status, body
    and Server header), for a caller that asked on its own terms: the /info read."""
    try:
        info = json.loads(body) if status == 200 else None
    except ValueError:
        info = None
    answered = info.get("name") if isinstance(info, dict) else None
    if isinstance(info, dict) and answered == name:
        return info
    if status == 401:
        given = "the one given was refused" if token else "none was given"
        raise StackError(f"{url} asks for a bearer token ({given}): set "
                         "BOILERBENCH_SERVICE_TOKEN to the service's BOILERBENCH_TOKEN", name,
                         "token")
    if isinstance(answered, str):
        what = f"the {answered!r} service"
    else:
        what = (f"HTTP {status} to GET /info"
                + (f" from {server!r}" if server else "") + ", not a boilerbench service")
    raise StackError(f"{url} is not the {name} service: {what} answers there", name, "other")


def up_command(name: str, port_base: int | None) -> str:
    """The `boilerbench up` that starts service `name` where a command given `port_base`
    (None: the registry ports) looks for it."""
    shifted = "" if port_base is None else f" --port-base {port_base}"
    return f"boilerbench up --services {name}{shifted}"


def check_services(urls: Mapping[str, str], token: str | None = None
                   ) -> dict[str, dict[str, Any]]:
    """check_service for every (name, URL) of `urls`, the first wrong one raising; each
    one's /info by name."""
    return {name: check_service(url, name, token) for name, url in urls.items()}


@dataclass
class ServiceProcess:
    name: str
    url: str
    process: subprocess.Popen[bytes]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now (the OS picks it)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def http_url(host: str, port: int) -> str:
    """The base URL of a server on `host`:`port` (an IPv6 address in brackets)."""
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def port_is_free(host: str, port: int) -> bool:
    """Whether a server could listen on `host`:`port` now, bound as uvicorn binds: on
    every address `host` resolves to, with SO_REUSEADDR (so only a listening socket
    counts as taken). OSError where no server could listen there whatever else runs
    (a host unknown or not of this machine, a port not allowed)."""
    for family, kind, proto, _, address in socket.getaddrinfo(
            host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE):
        with socket.socket(family, kind, proto) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                sock.bind(address)
            except OSError as exc:
                if exc.errno == errno.EADDRINUSE:
                    return False
                raise
    return True


def port_lock_folder() -> Path:
    """Where the port locks of this user's stacks are: a folder of the user's own in the
    temporary folder (one another user made there is not used)."""
    return Path(tempfile.gettempdir()) / f"boilerbench-ports-{os.getuid()}"


class PortLocks:
    """Locks on TCP ports held by this process: a stack holds them while it checks its
    ports and starts its services there, so two starts on one port cannot both pass the
    check. Any process of this user's on this machine sees them (flock on
    port_lock_folder()/PORT.lock); the kernel releases them when the process ends,
    so a killed start leaves no stale lock. A release removes the lock's file while it
    still holds the lock, and a take keeps a lock only on the file its path names
    still: one opened before its holder removed it is tried again. Where no lock file
    can be made (a temporary folder that is read-only, or not this user's), the port
    is checked without one."""

    def __init__(self, folder: Path | None = None) -> None:
        self.folder = folder or port_lock_folder()
        self._held: dict[int, int] = {}  # port -> descriptor of its locked file

    def take(self, port: int) -> bool:
        """Lock `port` for this process; False if another start holds it."""
        if port in self._held:
            return True
        try:
            self.folder.mkdir(mode=0o700, exist_ok=True)
            folder = self.folder.lstat()
            if not stat.S_ISDIR(folder.st_mode) or folder.st_uid != os.getuid():
                return True  # not ours to trust: the port check alone
        except OSError:
            return True
        path = self.folder / f"{port}.lock"
        while True:
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
                             0o600)
            except OSError:
                return True
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                if os.fstat(fd).st_ino == os.stat(path, follow_symlinks=False).st_ino:
                    self._held[port] = fd
                    return True
            except FileNotFoundError:
                pass  # removed by its holder since it was opened: try the path again
            except OSError as exc:
                os.close(fd)
                return exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN)
            os.close(fd)

    def release(self) -> None:
        """Give every lock up: its file removed while the lock is held, then closed
        (which releases the flock)."""
        for port, fd in self._held.items():
            with contextlib.suppress(OSError):
                os.unlink(self.folder / f"{port}.lock")
            os.close(fd)
        self._held.clear()

    def __enter__(self) -> PortLocks:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.release()


def _error_code(reply: httpx.Response) -> object:
    """The `error` of a contract error reply (None for any other body)."""
    try:
        body = reply.json()
    except ValueError:
        return None
    return body.get("error") if isinstance(body, dict) else None


def wait_healthy(url: str, timeout: float, process: subprocess.Popen[bytes] | None = None,
                 cancel: threading.Event | None = None, name: str | None = None) -> None:
    """Poll `url`/health until it answers 200. Fail early if `process` exits or the
    service says its workers failed to start (it would never be healthy); stop with
    StartCancelledError once `cancel` is set. `name` names the service in errors."""
    label = url if name is None else f"{name} at {url}"
    deadline = time.monotonic() + timeout
    last = "no answer"
    pause: Callable[[float], object] = time.sleep if cancel is None else cancel.wait
    with httpx.Client(timeout=2.0) as client:
        while True:
            if process is not None and process.poll() is not None:
                raise StackError(f"{label}: the process exited with code {process.returncode}",
                                 name)
            try:
                reply = client.get(f"{url}/health")
                if reply.status_code == 200:
                    return
                last = f"HTTP {reply.status_code}: {reply.text[:200]}"
                if _error_code(reply) == START_FAILED:
                    raise StackError(f"{label}: {reply.json().get('detail')}", name)
            except httpx.TransportError as exc:
                last = type(exc).__name__
            # After the poll: a service found healthy has started, whenever `cancel` came.
            if cancel is not None and cancel.is_set():
                raise StartCancelledError(f"{label}: stopped before it was healthy", name)
            if time.monotonic() >= deadline:
                break
            pause(0.2)
    raise StackError(f"{label} did not become healthy within {timeout:g} s ({last})", name)


@dataclass
class LocalStack:
    """The named services, each its own uvicorn process on its registry port (or as given)."""

    names: list[str]
    host: str = "127.0.0.1"
    ports: dict[str, int] | None = None
    env: dict[str, str] | None = None
    processes: dict[str, ServiceProcess] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # A name given twice would start two processes on one port, one of them lost.
        self.names = list(dict.fromkeys(self.names))
        for name in self.names:
            get_service(name)  # unknown names fail here, before anything starts

    def port(self, name: str) -> int:
        return (self.ports or {}).get(name, SERVICES[name].port)

    def start(self, timeout: float = 120.0, names: Sequence[str] | None = None,
              cancel: threading.Event | None = None) -> dict[str, str]:
        """Start every service (or the `names`, again after they died or were killed),
        wait until each is healthy; name -> base URL of every service. Setting `cancel`
        stops them all (StartCancelledError) without waiting for the rest.

        A port already taken fails before anything starts: otherwise another stack's
        service there could pass for ours. So does a port another start is about to
        take (PortLocks, held until the services here are healthy).
        """
        starting = list(dict.fromkeys(self.names if names is None else names))
        with PortLocks() as locks:
            taken = []
            for name in starting:
                port = self.port(name)
                try:
                    if not locks.take(port) or not port_is_free(self.host, port):
                        taken.append(f"{name} on {port}")
                except OSError as exc:
                    raise StackError(f"{name} cannot listen on {self.host!r} port {port}: "
                                     f"{exc.strerror or exc}", name) from None
            if taken:
                raise StackError(f"port in use: {', '.join(taken)} (another stack there? "
                                 "`--port-base` moves a stack)")
            try:
                for name in starting:
                    self._spawn(name)
                for name in starting:
                    service = self.processes[name]
                    wait_healthy(service.url, timeout, service.process, cancel, name)
            except BaseException:
                self.stop()
                raise
        return self.urls()

    def _spawn(self, name: str) -> None:
        entry = SERVICES[name]
        port = self.port(name)
        env = same_imports_env({**os.environ, **self._member_env(name), **(self.env or {}),
                                "BOILERBENCH_HOST": self.host, "BOILERBENCH_PORT": str(port)})
        command = [sys.executable, "-P", "-m", "shared.serving", entry.app_path,
                   "--host", self.host, "--port", str(port), "--log-level", "warning",
                   "--no-access-log"]
        process = subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL,
                                   start_new_session=True)
        self.processes[name] = ServiceProcess(name, http_url(self.host, port), process)

    def _member_env(self, name: str) -> dict[str, str]:
        """BOILERBENCH_MEMBER_URLS naming the members of `name` that run in this stack, as
        docker-compose.yml names them: the ensemble asks them over HTTP, beside it, and
        runs only the others in its own worker. A value in the environment wins."""
        members = [m for m in SERVICES[name].members if m in self.names]
        if not members or "BOILERBENCH_MEMBER_URLS" in os.environ:
            return {}
        # A wildcard is no address to call; "::" binds IPv6 alone (IPV6_V6ONLY).
        host = {"0.0.0.0": "127.0.0.1", "": "127.0.0.1", "::": "::1"}.get(self.host, self.host)
        urls = {m: http_url(host, self.port(m)) for m in members}
        return {"BOILERBENCH_MEMBER_URLS": json.dumps(urls)}

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        """Signal one service's process group (its worker processes too)."""
        service = self.processes.get(name)
        if service is None or service.process.poll() is not None:
            return
        try:
            os.killpg(service.process.pid, sig)
        except ProcessLookupError:
            return
        service.process.wait(timeout=10)

    def urls(self) -> dict[str, str]:
        return {name: service.url for name, service in self.processes.items()}

    def stop(self, grace: float = 10.0) -> None:
        """SIGTERM every process group, then SIGKILL what is left after `grace` seconds.
        A group whose main process has died is signalled too: its workers, or a
        worker's browser, may live on in it (Linux gives no new process the number of
        a group that still has members, so the signal reaches no stranger)."""
        signalled = []
        for service in self.processes.values():
            try:
                os.killpg(service.process.pid, signal.SIGTERM)
            except ProcessLookupError:  # the whole group is gone
                continue
            signalled.append(service)
        deadline = time.monotonic() + grace
        for service in signalled:
            with contextlib.suppress(subprocess.TimeoutExpired):
                service.process.wait(timeout=max(deadline - time.monotonic(), 0.1))
            while process_exists(service.process.pid, group=True) and time.monotonic() < deadline:
                time.sleep(0.05)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(service.process.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                service.process.wait(timeout=10)
        self.processes.clear()

    def __enter__(self) -> LocalStack:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


def stack_with_members(name: str, members: Sequence[str],
                       env: Mapping[str, str] | None = None) -> LocalStack:
    """Service `name` and the `members` it asks, each on a free port: an ensemble
    measured or tested as it runs in production, told its members' URLs. No members:
    `name` alone on a free port."""
    names = [*members, name]
    return LocalStack(names, ports={n: free_port() for n in names}, env=dict(env or {}))


def parse_service_list(value: str | None, available: Iterable[str] = SERVICES) -> list[str]:
    """'a,b' -> ['a', 'b'] (validated); None, '' or 'all' -> every service."""
    if not value or value.strip() == "all":
        return list(available)
    names = list(dict.fromkeys(n.strip() for n in value.split(",") if n.strip()))
    for name in names:
        get_service(name)
    return names
