"""Extraction in worker processes, so a pathological page can be cut off for real.

A thread cannot be stopped in Python, and lxml or a JVM in the middle of a parse
does not look at a flag. So each service keeps a small pool of worker processes
(fresh interpreters, `python -m shared.workers MODULE FD`, so no lock, JVM or
__main__ module is inherited); a request goes to an idle worker over a socket
pair, and when the time limit passes the worker is killed with SIGKILL and
replaced. The pool serves the next request as soon as the replacement has
imported its extractor. A worker that dies on its own (a crash in native code,
memory exhaustion) is replaced the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import os
import socket
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

import orjson
from pydantic import BaseModel

from shared.contract import Algorithm, PageError

SOCKET_BUFFER_BYTES = 4 * 1024 * 1024


class ExtractionTimeoutError(Exception):
    """The extraction ran past the time limit; its worker was killed."""


class ExtractionFailedError(Exception):
    """The extractor raised, or its worker died, on this page."""


class PoolBusyError(Exception):
    """No worker became free within the time limit."""


def _model_fields(value: Any) -> Any:
    """orjson's fallback for pydantic models (Block): their fields, encoded in C.

    A Block's __dict__ holds exactly its fields (extra keys are forbidden), and
    this is several times faster than model_dump() plus pickling the dicts."""
    if isinstance(value, BaseModel):
        return value.__dict__
    raise TypeError(f"cannot encode {type(value).__name__} as JSON")


def encode_blocks(blocks: Any) -> bytes:
    """A list of Blocks as the JSON array of the contract."""
    return orjson.dumps(blocks, default=_model_fields)


def _worker_main(conn: Connection, module: str) -> None:
    """Body of a worker process: load the algorithm once, then serve requests."""
    algorithm: Algorithm = importlib.import_module(module).ALGORITHM
    algorithm.warm_up()
    conn.send(("ready", None))
    while True:
        try:
            html, options, url = conn.recv()
        except (EOFError, OSError):
            return
        started = time.perf_counter()
        try:
            body = algorithm.run(html, options, url)
            reply: tuple[Any, ...] = ("ok", body.text, encode_blocks(body.blocks),
                                      (time.perf_counter() - started) * 1000)
        except PageError as exc:
            reply = ("page_error", str(exc))
        except MemoryError:
            reply = ("failed", "the extractor ran out of memory on this page")
        except Exception as exc:  # the worker survives any extractor bug
            reply = ("failed", f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=3)}")
        conn.send(reply)


@dataclass(eq=False)
class _Worker:
    process: subprocess.Popen[bytes]
    conn: Connection


@dataclass(frozen=True)
class WorkerResult:
    """An extraction's text, its blocks already encoded as the contract's JSON array
    (the service splices them into its reply without decoding them), and its time."""

    text: str
    blocks_json: bytes
    extract_ms: float
    wait_ms: float = 0.0  # spent waiting for a free worker (queueing, not work)

    @property
    def blocks(self) -> list[dict[str, Any]]:
        blocks: list[dict[str, Any]] = orjson.loads(self.blocks_json)
        return blocks


class WorkerPool:
    """A fixed number of extraction worker processes for one algorithm."""

    def __init__(self, module: str, size: int, start_timeout_s: float = 120.0) -> None:
        self.module = module
        self.size = size
        self.start_timeout_s = start_timeout_s
        self._idle: asyncio.Queue[_Worker] = asyncio.Queue()
        self._workers: set[_Worker] = set()
        self._closed = False
        self.ready = False
        self.start_error: str | None = None

    async def start(self) -> None:
        """Start every worker and wait until each has loaded its algorithm."""
        try:
            workers = await asyncio.gather(*(self._spawn() for _ in range(self.size)))
        except Exception as exc:
            self.start_error = f"{type(exc).__name__}: {exc}"
            raise
        for worker in workers:
            self._idle.put_nowait(worker)
        self.ready = True

    async def _spawn(self) -> _Worker:
        parent, child = socket.socketpair()
        for end in (parent, child):
            # A page or a reply fits the buffer: one write, no ping-pong of 200 kB
            # chunks (each a wake-up of the other process) while the event loop waits.
            end.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SOCKET_BUFFER_BYTES)
        process = subprocess.Popen(
            [sys.executable, "-m", "shared.workers", self.module, str(child.fileno())],
            pass_fds=[child.fileno()], stdin=subprocess.DEVNULL,
        )
        child.close()
        worker = _Worker(process, Connection(parent.detach()))
        self._workers.add(worker)
        try:
            message = await self._receive(worker, self.start_timeout_s)
        except Exception:
            self._kill(worker)
            raise
        if message[0] != "ready":
            self._kill(worker)
            raise RuntimeError(f"worker of {self.module} failed to start: {message!r}")
        return worker

    async def _receive(self, worker: _Worker, timeout: float) -> Any:
        """Wait for the worker's next message without blocking the event loop."""
        loop = asyncio.get_running_loop()
        readable: asyncio.Future[None] = loop.create_future()
        fd = worker.conn.fileno()

        def _on_readable() -> None:
            if not readable.done():
                readable.set_result(None)

        loop.add_reader(fd, _on_readable)
        try:
            await asyncio.wait_for(readable, timeout)
        finally:
            loop.remove_reader(fd)
            # Some event loops (uvloop) leave a watched fd non-blocking, which would
            # cut a message that arrives in parts short (BlockingIOError).
            with contextlib.suppress(OSError):
                os.set_blocking(fd, True)
        try:
            return worker.conn.recv()
        except (EOFError, OSError) as exc:
            raise ConnectionError("the worker process died") from exc

    def _kill(self, worker: _Worker) -> None:
        self._workers.discard(worker)
        with contextlib.suppress(Exception):
            worker.process.kill()
            worker.process.wait(timeout=5)
        with contextlib.suppress(Exception):
            worker.conn.close()

    async def _replace(self, worker: _Worker) -> None:
        """Kill a worker and put a fresh one in the pool (retrying until it starts)."""
        self._kill(worker)
        delay = 0.5
        while not self._closed:
            try:
                self._idle.put_nowait(await self._spawn())
                return
            except Exception:
                await asyncio.sleep(delay)
                delay = min(delay * 2, 10.0)

    async def run(self, html: str, options: dict[str, Any], url: str | None,
                  timeout: float) -> WorkerResult:
        """Extract one page in a worker; raise ExtractionTimeoutError, ExtractionFailedError,
        PageError or PoolBusyError."""
        deadline = time.monotonic() + timeout
        try:
            worker = await asyncio.wait_for(self._idle.get(), timeout)
        except TimeoutError:
            raise PoolBusyError(f"no extraction worker was free within {timeout:g} s") from None
        wait_ms = (time.monotonic() - deadline + timeout) * 1000
        try:
            worker.conn.send((html, options, url))
            reply = await self._receive(worker, max(deadline - time.monotonic(), 0.001))
        except TimeoutError:
            asyncio.get_running_loop().create_task(self._replace(worker))
            raise ExtractionTimeoutError(
                f"the extraction took longer than the time limit of {timeout:g} s"
            ) from None
        except (ConnectionError, OSError) as exc:
            asyncio.get_running_loop().create_task(self._replace(worker))
            raise ExtractionFailedError("the extraction worker died on this page") from exc
        except BaseException:
            # Cancelled (client gone) while the worker is busy: replace it, since
            # its late answer would otherwise be read as the next request's.
            asyncio.get_running_loop().create_task(self._replace(worker))
            raise
        self._idle.put_nowait(worker)
        kind = reply[0]
        if kind == "ok":
            return WorkerResult(reply[1], reply[2], reply[3], wait_ms)
        if kind == "page_error":
            raise PageError(reply[1])
        raise ExtractionFailedError(reply[1])

    async def close(self) -> None:
        self._closed = True
        for worker in list(self._workers):
            self._kill(worker)


if __name__ == "__main__":
    _worker_main(Connection(int(sys.argv[2])), sys.argv[1])
