"""Extraction in worker processes, so a pathological page can be cut off for real.

A thread cannot be stopped in Python, and lxml or a JVM in the middle of a parse
does not look at a flag. So each service keeps a small pool of worker processes
(fresh interpreters, `python -m shared.workers FACTORY ARGUMENT FD`, so no lock,
JVM or __main__ module is inherited); a request goes to an idle worker over a socket
pair, and when the time limit passes the worker is killed with SIGKILL and
replaced. The pool serves the next request as soon as the replacement has
imported its extractor. A worker that dies on its own (a crash in native code,
memory exhaustion) is replaced the same way, also when it dies while idle: it is
found dead before it gets work (or by `alive()`, which /health asks), and a
request whose worker turns out dead before it took the page (the send fails) goes
to another worker instead of failing.

The time limit counts the extraction only: the wait for a free worker has its own
limit (`wait_s`), after which the request is refused as busy (PoolBusyError),
which says nothing about the page.

The pool itself (ProcessPool) answers one frame with one frame, through the handler
its FACTORY builds in the worker: the orchestrator scores results that way
(orchestrator.scoring.scoring_handler). An extraction worker (WorkerPool,
extraction_handler) answers whole /extract requests (shared/answer.py): it gets the
request body's bytes as they arrived and sends back the reply's bytes, each as one
frame (lengths, a small pickled tuple, then the bytes as they are; each part received
whole by one recv): the bytes are never decoded, copied into a str or pickled on the
way, which multiprocessing's Connection and its pickler would do
(benchmarks/results/speed-history.md compares the two).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
import os
import pickle
import signal
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from shared.answer import ServiceError, answer_extract, reply_head
from shared.contract import Algorithm, PageError

SOCKET_BUFFER_BYTES = 4 * 1024 * 1024
# A frame: this header (the lengths of the pickled meta and of the payload), the meta
# (a small tuple), the payload (a request body or a reply, as bytes).
_FRAME_HEADER = struct.Struct("!II")


class ExtractionTimeoutError(Exception):
    """The extraction ran past the time limit; its worker was killed."""


class ExtractionFailedError(Exception):
    """The worker died on this page."""


class PoolBusyError(Exception):
    """No worker became free within the time limit."""


class WorkerStartError(Exception):
    """A worker could not build its handler (a library or a model file missing); the
    message is the worker's own error."""


Handler = Callable[[tuple[Any, ...], bytes], tuple[tuple[Any, ...], bytes]]
"""What a worker does with a frame: its reply frame (meta and payload)."""


def send_frame(sock: socket.socket, meta: tuple[Any, ...], payload: bytes = b"") -> None:
    """One frame to the other end in one system call (one wake-up of the reader, which
    would otherwise wake for the header and wait again for the payload); the payload
    is written as it is, not copied."""
    pickled = pickle.dumps(meta, protocol=pickle.HIGHEST_PROTOCOL)
    head = _FRAME_HEADER.pack(len(pickled), len(payload)) + pickled
    sent = sock.sendmsg((head, payload))
    if sent < len(head) + len(payload):  # cut short (a signal): the rest as it goes
        if sent < len(head):
            sock.sendall(head[sent:])
            sent = len(head)
        sock.sendall(memoryview(payload)[sent - len(head):])


def _recv_exactly(sock: socket.socket, size: int) -> bytes:
    parts: list[bytes] = []
    while size:
        chunk = sock.recv(size, socket.MSG_WAITALL)  # whole, unless a signal cuts in
        if not chunk:
            raise EOFError("the other end closed the socket")
        parts.append(chunk)
        size -= len(chunk)
    return parts[0] if len(parts) == 1 else b"".join(parts)


def receive_frame(sock: socket.socket) -> tuple[tuple[Any, ...], bytes]:
    """The next frame from the other end: its meta and its payload."""
    meta_size, payload_size = _FRAME_HEADER.unpack(_recv_exactly(sock, _FRAME_HEADER.size))
    meta = pickle.loads(_recv_exactly(sock, meta_size))
    return meta, _recv_exactly(sock, payload_size)


def _answer(algorithm: Algorithm, head: bytes, body: bytes, content_type: str,
            query: dict[str, str], blocks: bool = True) -> tuple[tuple[Any, ...], bytes]:
    """One request's reply frame: ("ok", ms) and the reply, or ("error", status, code, detail)."""
    started = time.perf_counter()
    try:
        reply = answer_extract(algorithm, head, body, content_type, query, blocks)
    except ServiceError as exc:
        return ("error", exc.status, exc.error, exc.detail), b""
    except PageError as exc:
        return ("error", 422, "unprocessable_page", str(exc)), b""
    except MemoryError:
        return ("error", 422, "extraction_failed", "the extractor ran out of memory"), b""
    except Exception as exc:  # the worker survives any extractor bug
        # The traceback (server paths, code) goes to the service's log, not to clients.
        logging.getLogger("boilerbench.worker").error("%s failed on a page", algorithm.name,
                                                      exc_info=True)
        return ("error", 422, "extraction_failed", f"{type(exc).__name__}: {exc}"), b""
    return ("ok", (time.perf_counter() - started) * 1000), reply


def extraction_handler(module: str) -> Handler:
    """The handler of an extraction worker: the algorithm of `module`, loaded and warmed
    up once, answering whole /extract requests (meta: content type, query, blocks)."""
    algorithm: Algorithm = importlib.import_module(module).ALGORITHM
    algorithm.warm_up()
    head = reply_head(algorithm)

    def handle(meta: tuple[Any, ...], body: bytes) -> tuple[tuple[Any, ...], bytes]:
        content_type, query, blocks = meta
        return _answer(algorithm, head, body, content_type, query, blocks)

    return handle


def same_imports_env(env: Mapping[str, str]) -> dict[str, str]:
    """`env` for a Python child started with -P that imports what this process imports:
    PYTHONPATH is this process's sys.path, and -P keeps the child's working directory off
    it (with -m alone a folder named shared/ there would be taken for the package)."""
    return {**env, "PYTHONPATH": os.pathsep.join(sys.path)}


def _worker_main(sock: socket.socket, factory: str, argument: str) -> None:
    """Body of a worker process: build the handler once (`factory`, "module:function",
    called with `argument`), then answer one frame with one frame until the pool goes."""
    module, function = factory.split(":")
    try:
        handle: Handler = getattr(importlib.import_module(module), function)(argument)
    except Exception as exc:  # the pool says why it has no workers; the log has the rest
        with contextlib.suppress(OSError):  # unless the pool is gone already
            send_frame(sock, ("failed", f"{type(exc).__name__}: {' '.join(str(exc).split())}"))
        raise
    reply: tuple[tuple[Any, ...], bytes] = (("ready",), b"")
    while True:
        try:  # the pool gone (closed while this worker started or worked): nothing to say
            send_frame(sock, *reply)
            meta, payload = receive_frame(sock)
        except (EOFError, OSError):
            return
        reply = handle(meta, payload)


def descendants(pid: int) -> list[int]:
    """The processes below `pid` (children, their children, ...), read from /proc;
    empty where there is no /proc. A worker's own children (a browser and its driver)
    would outlive a SIGKILL of the worker alone if they did not clean up themselves."""
    children: dict[int, list[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as stat:
                parent = int(stat.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile
        children.setdefault(parent, []).append(int(entry))
    found: list[int] = []
    todo = [pid]
    while todo:
        below = children.get(todo.pop(), [])
        found.extend(below)
        todo.extend(below)
    return found


@dataclass(eq=False)
class _Worker:
    process: subprocess.Popen[bytes]
    sock: socket.socket
    retired: bool = False
    """Being replaced: never handed work again."""
    busy: bool = False
    """Handed a request (out of the idle queue)."""
    waiting: asyncio.Future[None] | None = None
    """Set while the event loop watches the socket for the worker's next frame."""

    def dead(self) -> bool:
        """Has the process exited (its end of the socket then reads as closed)?"""
        if self.process.poll() is not None:
            return True
        try:
            return self.sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
        except BlockingIOError:
            return False
        except OSError:
            return True


@dataclass(frozen=True)
class WorkerResult:
    """A 200 reply up to its `blocks` (shared.answer.finish_reply completes it), the
    worker's time on it, and the wait for a free worker (queueing, not work)."""

    partial_reply: bytes
    extract_ms: float
    wait_ms: float = 0.0


class ProcessPool:
    """A fixed number of worker processes, each built by `factory` ("module:function",
    called with `argument` in the worker; it returns the worker's Handler), that answer
    one frame (a page's work) at a time; a worker past its time limit, or dead, is
    killed and replaced. `label` names the work in error messages ("extraction")."""

    def __init__(self, factory: str, argument: str, size: int, label: str,
                 start_timeout_s: float = 120.0) -> None:
        self.factory = factory
        self.argument = argument
        self.label = label
        self.size = size
        self.start_timeout_s = start_timeout_s
        self._idle: asyncio.Queue[_Worker] = asyncio.Queue()
        self._workers: set[_Worker] = set()
        self._replacing: set[asyncio.Task[None]] = set()
        """The replacements under way (_replace), which close() cancels and awaits."""
        self._closed = False
        self.ready = False
        self.start_error: str | None = None

    async def start(self) -> None:
        """Start every worker and wait until each has loaded its algorithm."""
        try:
            workers = await asyncio.gather(*(self._spawn() for _ in range(self.size)))
        except Exception as exc:
            self.start_error = (str(exc) if isinstance(exc, WorkerStartError)
                                else f"{type(exc).__name__}: {exc}")
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
            [sys.executable, "-P", "-m", "shared.workers", self.factory, self.argument,
             str(child.fileno())],
            pass_fds=[child.fileno()], stdin=subprocess.DEVNULL,
            env=same_imports_env(os.environ),
        )
        child.close()
        worker = _Worker(process, parent)
        self._workers.add(worker)
        try:
            meta, _ = await self._receive(worker, self.start_timeout_s)
        except Exception:
            self._kill(worker)
            raise
        if meta[:1] == ("failed",):
            self._kill(worker)
            raise WorkerStartError(str(meta[1]))
        if meta != ("ready",):
            self._kill(worker)
            raise RuntimeError(f"worker of {self.factory} {self.argument} failed to start: "
                               f"{meta!r}")
        return worker

    async def _receive(self, worker: _Worker, timeout: float) -> tuple[tuple[Any, ...], bytes]:
        """Wait for the worker's next frame without blocking the event loop."""
        loop = asyncio.get_running_loop()
        readable: asyncio.Future[None] = loop.create_future()
        fd = worker.sock.fileno()

        def _on_readable() -> None:
            if not readable.done():
                readable.set_result(None)

        loop.add_reader(fd, _on_readable)
        worker.waiting = readable
        try:
            await asyncio.wait_for(readable, timeout)
        finally:
            worker.waiting = None
            if worker.sock.fileno() == fd:  # else _kill has unwatched and closed it
                loop.remove_reader(fd)
                # Some event loops (uvloop) leave a watched fd non-blocking, which would
                # cut a frame that arrives in parts short (BlockingIOError).
                with contextlib.suppress(OSError):
                    os.set_blocking(fd, True)
        try:
            return receive_frame(worker.sock)
        except (EOFError, OSError) as exc:
            raise ConnectionError("the worker process died") from exc

    def alive(self) -> int:
        """Workers alive now; dead idle ones are put to be replaced."""
        count = 0
        for worker in list(self._workers):
            if worker.retired:
                continue
            if worker.dead():
                if not worker.busy:  # a busy one's request finds out and replaces it
                    self._retire(worker)
            else:
                count += 1
        return count

    def _retire(self, worker: _Worker) -> None:
        """Replace a worker in the background (once); in a closed pool, only kill it."""
        if worker.retired:
            return
        worker.retired = True
        if self._closed:
            self._kill(worker)
            return
        task = asyncio.get_running_loop().create_task(self._replace(worker))
        self._replacing.add(task)
        task.add_done_callback(self._replacing.discard)

    async def _take(self, wait_s: float | None) -> tuple[_Worker, float]:
        """A live idle worker and the time waited for it (ms), else PoolBusyError after
        `wait_s` (None: as long as it takes)."""
        started = time.monotonic()
        while True:
            if not self._idle.empty():  # the usual case, without a task to wait in
                worker = self._idle.get_nowait()
            elif wait_s is None:
                worker = await self._idle.get()
            else:
                try:
                    worker = await asyncio.wait_for(
                        self._idle.get(), max(started + wait_s - time.monotonic(), 0.0))
                except TimeoutError:
                    raise PoolBusyError(
                        f"no {self.label} worker was free within {wait_s:g} s") from None
            if worker.retired:
                continue
            if worker.dead():
                self._retire(worker)
                continue
            worker.busy = True
            return worker, (time.monotonic() - started) * 1000

    def _kill(self, worker: _Worker) -> None:
        self._workers.discard(worker)
        below = descendants(worker.process.pid)
        with contextlib.suppress(Exception):
            worker.process.kill()
            for pid in below:  # a browser the worker drove dies with it
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            worker.process.wait(timeout=5)
        # A socket the event loop still watches is unwatched before it closes: the loop
        # would otherwise keep the number as watched, and a later socket given that
        # number (the next pool's) would never be reported readable.
        if worker.waiting is not None:
            with contextlib.suppress(Exception):
                asyncio.get_running_loop().remove_reader(worker.sock.fileno())
            if not worker.waiting.done():
                worker.waiting.set_exception(ConnectionError("the worker was stopped"))
        with contextlib.suppress(Exception):
            worker.sock.close()

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

    async def call(self, meta: tuple[Any, ...], payload: bytes, timeout: float,
                   wait_s: float | None) -> tuple[tuple[Any, ...], bytes, float]:
        """One frame answered by a worker within `timeout` seconds of work, after at
        most `wait_s` for a free worker (None: no limit): the reply's meta and payload
        and the wait (ms). Raises TimeoutError past the limit and ConnectionError when
        the worker died on the page (either way it is replaced), PoolBusyError, or
        ConnectionError when the workers keep dying before they get it; the messages
        name the work by the pool's label."""
        waited_ms = 0.0
        for _ in range(self.size + 1):  # each try finds one more dead worker at most
            worker, wait_ms = await self._take(wait_s)
            waited_ms += wait_ms
            try:
                send_frame(worker.sock, meta, payload)
            except OSError:
                self._retire(worker)  # died before it had the frame: not the frame's fault
                continue
            break
        else:
            raise ConnectionError(f"the {self.label} workers keep dying before they get a page")
        try:
            reply_meta, reply = await self._receive(worker, timeout)
        except BaseException as exc:
            # Past the limit, dead, or cancelled (client gone) while the worker is busy:
            # replace it, since its late answer would otherwise be read as the next
            # frame's.
            self._retire(worker)
            if isinstance(exc, OSError) and not isinstance(exc, TimeoutError):
                raise ConnectionError(f"the {self.label} worker died on this page") from exc
            raise
        worker.busy = False
        self._idle.put_nowait(worker)
        return reply_meta, reply, waited_ms

    async def close(self) -> None:
        """Stop every worker and every replacement under way. The replacements are
        awaited: a task left pending would outlive the pool and its event loop, which
        reports it as "Task was destroyed but it is pending!" (a run stopped while its
        lanes' requests were cancelled)."""
        self._closed = True
        replacing = list(self._replacing)
        for task in replacing:
            task.cancel()
        for worker in list(self._workers):
            self._kill(worker)
        await asyncio.gather(*replacing, return_exceptions=True)


class WorkerPool(ProcessPool):
    """A fixed number of extraction worker processes for one algorithm (`module`, which
    names its ALGORITHM)."""

    def __init__(self, module: str, size: int, start_timeout_s: float = 120.0) -> None:
        super().__init__("shared.workers:extraction_handler", module, size, "extraction",
                         start_timeout_s)
        self.module = module

    async def run(self, body: bytes, content_type: str, query: dict[str, str],
                  timeout: float, wait_s: float | None = None,
                  blocks: bool = True) -> WorkerResult:
        """Answer one /extract request (its body, Content-Type and query parameters) in
        a worker, within `timeout` seconds of extraction after at most `wait_s` (default
        `timeout`) for a free worker; without `blocks` the reply leaves them out (a
        caller that has no use for them saves their encoding, transfer and parsing).
        Raises ServiceError for an error reply (the
        request or the page was refused, the extractor failed), ExtractionTimeoutError,
        ExtractionFailedError (the worker died on the page) or PoolBusyError."""
        try:
            meta, reply, waited_ms = await self.call(
                (content_type, query, blocks), body, timeout,
                timeout if wait_s is None else wait_s)
        except TimeoutError:
            raise ExtractionTimeoutError(
                f"the extraction took longer than the time limit of {timeout:g} s"
            ) from None
        except ConnectionError as exc:
            raise ExtractionFailedError(str(exc)) from exc
        if meta[0] == "ok":
            return WorkerResult(reply, meta[1], waited_ms)
        _, status, error, detail = meta
        raise ServiceError(status, error, detail)


def _ignore_stop_signals() -> None:
    """In a worker process: Ctrl-C in a terminal, and a stop sent to the whole process
    group (`boilerbench up` ending, a launcher's killpg), reach the workers too. The
    pool's owner handles them, answers the pages in hand and then stops its workers;
    a worker that ended on the signal itself would fail the page it was on, and print
    a traceback of its own."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


if __name__ == "__main__":
    _ignore_stop_signals()
    _worker_main(socket.socket(fileno=int(sys.argv[3])), sys.argv[1], sys.argv[2])
