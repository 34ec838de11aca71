"""Start algorithm services as local uvicorn processes and stop them cleanly.

`boilerbench up`, the orchestrator's local runs and the end-to-end tests all go
through LocalStack, so what the tests start is what users start.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from types import TracebackType

import httpx

from shared.registry import SERVICES, get_service


class StackError(RuntimeError):
    """A service did not start or never became healthy."""


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


def wait_healthy(url: str, timeout: float, process: subprocess.Popen[bytes] | None = None) -> None:
    """Poll `url`/health until it answers 200; fail early if `process` exits."""
    deadline = time.monotonic() + timeout
    last = "no answer"
    with httpx.Client(timeout=2.0) as client:
        while time.monotonic() < deadline:
            if process is not None and process.poll() is not None:
                raise StackError(f"{url}: the process exited with code {process.returncode}")
            try:
                reply = client.get(f"{url}/health")
                if reply.status_code == 200:
                    return
                last = f"HTTP {reply.status_code}: {reply.text[:200]}"
            except httpx.TransportError as exc:
                last = type(exc).__name__
            time.sleep(0.2)
    raise StackError(f"{url} did not become healthy within {timeout:g} s ({last})")


@dataclass
class LocalStack:
    """The named services, each its own uvicorn process on its registry port (or as given)."""

    names: list[str]
    host: str = "127.0.0.1"
    ports: dict[str, int] | None = None
    env: dict[str, str] | None = None
    processes: dict[str, ServiceProcess] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in self.names:
            get_service(name)  # unknown names fail here, before anything starts

    def port(self, name: str) -> int:
        return (self.ports or {}).get(name, SERVICES[name].port)

    def start(self, timeout: float = 120.0, names: Sequence[str] | None = None
              ) -> dict[str, str]:
        """Start every service (or the `names`, again after they died or were killed),
        wait until each is healthy; name -> base URL of every service."""
        for name in self.names if names is None else names:
            self._spawn(name)
        try:
            for name in self.names if names is None else names:
                service = self.processes[name]
                wait_healthy(service.url, timeout, service.process)
        except BaseException:
            self.stop()
            raise
        return self.urls()

    def _spawn(self, name: str) -> None:
        entry = SERVICES[name]
        port = self.port(name)
        env = {**os.environ, **(self.env or {}), "BOILERBENCH_HOST": self.host,
               "BOILERBENCH_PORT": str(port)}
        command = [sys.executable, "-m", "shared.serving", entry.app_path, "--host", self.host,
                   "--port", str(port), "--log-level", "warning", "--no-access-log"]
        process = subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL,
                                   start_new_session=True)
        self.processes[name] = ServiceProcess(name, f"http://{self.host}:{port}", process)

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
        """SIGTERM every process group, then SIGKILL what is left after `grace` seconds."""
        alive = [s for s in self.processes.values() if s.process.poll() is None]
        for service in alive:
            try:
                os.killpg(service.process.pid, signal.SIGTERM)
            except ProcessLookupError:
                continue
        deadline = time.monotonic() + grace
        for service in alive:
            try:
                service.process.wait(timeout=max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                self.kill(service.name)
        self.processes.clear()

    def __enter__(self) -> LocalStack:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


def parse_service_list(value: str | None, available: Iterable[str] = SERVICES) -> list[str]:
    """'a,b' -> ['a', 'b'] (validated); None, '' or 'all' -> every service."""
    if not value or value.strip() == "all":
        return list(available)
    names = [n.strip() for n in value.split(",") if n.strip()]
    for name in names:
        get_service(name)
    return names
