"""Real servers for tests (and benchmarks) on free ports: an ASGI app under uvicorn, a
registry service's app, or a plain http.server handler, each in a thread; or services
as processes (LocalStack)."""

from __future__ import annotations

import http.server
import os
import resource
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Literal

import httpx
import uvicorn
from fastapi import FastAPI

from orchestrator.launcher import LocalStack, free_port, wait_healthy
from shared import serving
from shared.registry import SERVICES
from shared.service import create_service_app
from shared.settings import HttpLimits, ServiceSettings
from tests.helpers import REPO

__all__ = ["free_port", "local_stack", "serve_app", "serve_guarded", "serve_http", "serve_process",
           "serve_service", "stand_in_service"]


@contextmanager
def serve_app(app: Any, ready_path: str | None = "/health",
              timeout: float = 120.0) -> Iterator[str]:
    """Run `app` on 127.0.0.1:<free port> until the block ends; yield its base URL.

    Waits until `ready_path` answers 200 (None: until the socket accepts).
    """
    port = free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning",
                            access_log=False, lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout
    try:
        while True:
            if not thread.is_alive():
                raise RuntimeError(f"the test server on {url} exited")
            try:
                reply = httpx.get(f"{url}{ready_path or '/'}", timeout=2.0)
                if ready_path is None or reply.status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"the test server on {url} never became ready")
            time.sleep(0.1)
        yield url
    finally:
        server.should_exit = True
        thread.join(timeout=30)


@contextmanager
def serve_guarded(app: Any, limits: HttpLimits | None = None,
                  lifespan: Literal["auto", "on", "off"] = "auto"
                  ) -> Iterator[tuple[str, serving._Server]]:
    """`app` under shared.serving's server (the guarded protocol with `limits`, the
    app's stop grace) in a thread on 127.0.0.1:<free port>, once it listens: its base
    URL and the server. The block's end stops it as a signal would (should_exit)."""
    port = free_port()
    server = serving._Server(uvicorn.Config(
        app, host="127.0.0.1", port=port, http=serving.guarded_protocol(limits or HttpLimits()),
        lifespan=lifespan, log_level="warning"), None)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        while not server.started:
            if not thread.is_alive():
                raise RuntimeError("the test server exited")
            thread.join(0.05)
        yield f"http://127.0.0.1:{port}", server
    finally:
        server.should_exit = True
        thread.join(timeout=60)


def stand_in_service(name: str, extract: Callable[..., Awaitable[Any]]) -> FastAPI:
    """A stand-in for service `name`: GET /health answers ok, GET /info is the real
    service's (a run checks it before calling the service there, check_services), POST
    /extract is `extract` (a FastAPI endpoint: it may take the Request and return a
    Response or a JSON body)."""
    app = FastAPI()
    info = SERVICES[name].algorithm().info().model_dump(mode="json")
    if info["details"] is None:  # as create_service_app leaves it out
        del info["details"]

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/info")
    async def get_info() -> dict[str, Any]:
        return info

    app.post("/extract")(extract)
    return app


@contextmanager
def serve_service(name: str, settings: ServiceSettings) -> Iterator[tuple[str, httpx.Client]]:
    """Service `name`'s real app (worker processes and all) under uvicorn on a free
    loopback port with `settings`, until the block ends: its base URL and a client."""
    app = create_service_app(SERVICES[name].algorithm(), settings)
    with serve_app(app) as url, httpx.Client() as client:
        yield url, client


@contextmanager
def serve_http(handler: Callable[..., http.server.BaseHTTPRequestHandler]) -> Iterator[str]:
    """Serve `handler` (an http.server request handler class, or a partial of one) on
    127.0.0.1:<free port> until the block ends; yield its base URL."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def local_stack(names: Sequence[str], timeout: float = 180.0) -> Iterator[LocalStack]:
    """The services `names` as real processes (the launcher of `boilerbench up`), each on
    a free port, until the block ends."""
    stack = LocalStack(list(names), ports={name: free_port() for name in names})
    stack.start(timeout=timeout)
    try:
        yield stack
    finally:
        stack.stop()


@contextmanager
def serve_process(app_path: str, env: dict[str, str] | None = None, *extra: str,
                  timeout: float = 120.0, server: str = "shared.serving",
                  open_files: int | None = None
                  ) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """`python -m shared.serving app_path` (as services are deployed; `server="uvicorn"`
    for plain uvicorn) on a free port, with `env` added to the environment (and an
    open-file limit of `open_files`, soft and hard), until the block ends; yield its
    URL and process."""
    port = free_port()

    def limit_files() -> None:
        if open_files is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (open_files, open_files))

    process = subprocess.Popen(
        [sys.executable, "-m", server, app_path, "--port", str(port),
         "--log-level", "warning", "--no-access-log", *extra],
        env={**os.environ, **(env or {})}, cwd=REPO, stdin=subprocess.DEVNULL,
        start_new_session=True, preexec_fn=limit_files)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, timeout, process)
        yield url, process
    finally:
        stop_process_group(process)


def stop_process_group(process: subprocess.Popen[bytes]) -> None:
    """Stop a server started in its own session, with its workers: SIGTERM, then
    SIGKILL if it has not ended within 15 s."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=5)
