"""Real servers for tests: an ASGI app under uvicorn in a thread, on a free port."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import uvicorn


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


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
