"""A server stopped by SIGTERM where the signal cannot end the process (PID 1 of a
container): it ends once shut down, rather than wait for the thread of a request it
cancelled."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading

import httpx

from tests.helpers import REPO

# An app whose lifespan asks a stop's grace of 1 s and whose one request works in a
# thread that never ends; SIGTERM has a handler that does nothing, as the kernel does
# with the default action of a signal sent to PID 1.
SERVER = """
import asyncio, signal, sys, threading
from shared import serving

signal.signal(signal.SIGTERM, lambda *_: None)
never = threading.Event()

async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                scope["state"][serving.SHUTDOWN_GRACE_S] = 1
                await send({"type": "lifespan.startup.complete"})
            else:
                await send({"type": "lifespan.shutdown.complete"})
                return
    print("working", flush=True)
    await asyncio.to_thread(never.wait)

serving.serve(app, "127.0.0.1", 0, log_level="critical",
              on_listening=lambda url: print(url, flush=True))
"""


def test_a_stop_ignored_as_by_pid_1_still_ends_the_server() -> None:
    process = subprocess.Popen([sys.executable, "-c", SERVER], cwd=REPO, text=True,
                               stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
    try:
        assert process.stdout is not None
        url = process.stdout.readline().strip()
        asking = threading.Thread(target=lambda: httpx.get(url, timeout=60), daemon=True)
        asking.start()
        assert process.stdout.readline().strip() == "working"
        process.send_signal(signal.SIGTERM)
        try:
            code = process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            code = None
    finally:
        process.kill()
        process.wait()
    assert code == 128 + signal.SIGTERM, "the server waited for its request's thread"
