"""Reaching the ensemble's members: in this process, or over HTTP to running services.

A member's answer is its text and blocks (what /extract returns) or nothing: a member
that is not installed, fails on the page, is down, answers after its time limit or
answers as another service is a missing feature of the combiner, never an error of
the ensemble. Over HTTP every member's request is written first, the ensemble's own
features are computed while the members work in their own processes, and the replies
are read last, so the page costs about the slowest member's time, not the sum of all.

A text peer (trafilatura, readability, resiliparse: shared.registry's `text_peer`) is
asked for its text alone: its blocks would be that text mapped onto the page's blocks,
which the ensemble does itself (services/ensemble/features.py), so the member's
second parse and alignment stay off the page's critical path.
"""

from __future__ import annotations

import contextlib
import functools
import http.client
import select
import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import orjson

from shared.contract import Algorithm, Block, bearer_header
from shared.registry import SERVICES

# The members the combiner is trained on: every algorithm service but rss (it needs a
# feed), the ensemble itself and the learned ones (services/ensemble/training.py says
# why). Deployments give the ensemble these members' URLs.
TRAINING_MEMBERS = ("justext", "boilerpipe", "bte", "cetd", "trafilatura", "readability",
                    "resiliparse")
# A text peer's options for its text without blocks (shared.blockmap.TextPeerOptions).
TEXT_ONLY = {"blocks": False}


@dataclass(frozen=True)
class MemberAnswer:
    """What one member said about one page: its text and blocks, or why it said
    nothing (`error`), and the CPU time it took where it ran in this process."""

    member: str
    text: str | None
    blocks: list[Block] | None
    cpu_ms: float = 0.0
    error: str | None = None
    wall_ms: float = 0.0

    @property
    def answered(self) -> bool:
        return self.text is not None


@functools.cache
def member_algorithm(name: str) -> Algorithm:
    """A member's pure extractor, imported once per process (ImportError where the
    member's libraries are not installed)."""
    algorithm = SERVICES[name].algorithm()
    algorithm.warm_up()
    return algorithm


def is_text_peer(name: str) -> bool:
    entry = SERVICES.get(name)
    return entry is not None and entry.text_peer


def member_options(name: str) -> dict[str, Any]:
    """The options a member is asked with: its defaults, but a text peer's text alone."""
    return dict(TEXT_ONLY) if is_text_peer(name) else {}


def ask_in_process(name: str, html: str, url: str | None) -> MemberAnswer:
    """Run a member's extractor here with member_options."""
    started, wall = time.process_time(), time.perf_counter()
    try:
        reply = member_algorithm(name).run(html, member_options(name), url)
    except Exception as exc:  # a failing member is a missing feature
        return _failed(name, exc)
    return MemberAnswer(name, reply.text, reply.blocks,
                        cpu_ms=(time.process_time() - started) * 1000,
                        wall_ms=(time.perf_counter() - wall) * 1000)


def _blocks_of(raw: object) -> list[Block] | None:
    if not isinstance(raw, list):
        return None
    blocks = []
    for item in raw:
        if not isinstance(item, dict) or not isinstance(item.get("text"), str):
            return None
        score = item.get("score")
        blocks.append(Block(text=item["text"], is_content=bool(item.get("is_content")),
                            score=float(score) if isinstance(score, int | float) else None,
                            path=item.get("path") if isinstance(item.get("path"), str)
                            else None,
                            label=item.get("label") if isinstance(item.get("label"), str)
                            else None))
    return blocks


class HttpMembers:
    """Members behind base URLs, one keep-alive connection each (per thread).

    `send` writes every member's request and returns at once; `collect` reads the
    replies. The ensemble computes its own features in between, so a page costs about
    the slowest member's time, not the sum. The requests are written by the calling
    thread itself, not by helper threads: a helper would wait for the interpreter lock
    while the features are computed and send its request late."""

    def __init__(self, urls: Mapping[str, str], time_limit_s: float,
                 token: str | None = None, max_reply_bytes: int = 64 * 1024 * 1024) -> None:
        self.urls = dict(urls)
        self.time_limit_s = time_limit_s
        self.max_reply_bytes = max_reply_bytes
        self.headers = {"content-type": "application/json", **bearer_header(token)}
        self._local = threading.local()

    def _connections(self) -> dict[str, http.client.HTTPConnection]:
        connections: dict[str, http.client.HTTPConnection] | None = getattr(
            self._local, "connections", None)
        if connections is None:
            connections = self._local.connections = {}
        return connections

    def _connection(self, name: str, timeout: float) -> http.client.HTTPConnection:
        """The member's open connection, or a new one where it has none or the member
        closed it while idle (its socket then reads as ready: the end of the stream)."""
        connections = self._connections()
        conn = connections.get(name)
        if conn is not None and (conn.sock is None or _closed_by_peer(conn.sock)):
            conn.close()
            conn = None
        if conn is None:
            parts = urlsplit(self.urls[name])
            kind = (http.client.HTTPSConnection if parts.scheme == "https"
                    else http.client.HTTPConnection)
            conn = kind(parts.hostname or "localhost", parts.port, timeout=timeout)
            connections[name] = conn
        elif conn.sock is not None:
            conn.sock.settimeout(timeout)
        return conn

    def _drop(self, name: str) -> None:
        conn = self._connections().pop(name, None)
        if conn is not None:
            conn.close()

    def send(self, names: Sequence[str], html: str, url: str | None) -> PendingAnswers:
        """Write the request of every member in `names` (member_options); their time
        starts now."""
        plain: Callable[[], bytes] = functools.cache(  # built only if a member needs it
            lambda: orjson.dumps({"html": html, "url": url, "options": {}}))
        text_only = (orjson.dumps({"html": html, "url": url, "options": TEXT_ONLY})
                     if any(map(is_text_peer, names)) else b"")
        deadline = time.perf_counter() + self.time_limit_s
        failed: dict[str, MemberAnswer] = {}
        sent: dict[str, bytes] = {}
        for name in names:
            body = text_only if is_text_peer(name) else plain()
            try:
                self._write(name, body, deadline)
            except (OSError, http.client.HTTPException, ValueError) as exc:  # ValueError:
                self._drop(name)  # a URL whose port is not a number
                failed[name] = _failed(name, exc)
                continue
            sent[name] = body
        return PendingAnswers(self, sent, failed, deadline, plain)

    def _write(self, name: str, body: bytes, deadline: float) -> None:
        """Write the request; a kept-alive connection that the member closed after the
        idle check (its end of the stream not yet arrived) breaks as the request goes
        out, and the request goes once more on a new connection, as _read does for a
        break noticed on the reply."""
        path = urlsplit(self.urls[name]).path.rstrip("/") + "/extract"
        for attempt in range(2):
            conn = self._connection(name, max(deadline - time.perf_counter(), 1e-3))
            reused = conn.sock is not None
            try:
                conn.request("POST", path, body=body, headers=self.headers)
                return
            except (BrokenPipeError, ConnectionResetError):
                self._drop(name)
                if attempt or not reused:
                    raise

    def read(self, name: str, deadline: float, body: bytes, plain: Callable[[], bytes]
             ) -> MemberAnswer:
        """The member's reply to the request `send` wrote (`body`), waiting until
        `deadline`. A kept-alive connection that the member closed just as the request
        went out gets the request once more on a new one; a member that refuses the
        text-only option (422: an image older than it) is asked again with `plain()`, the
        request with its default options."""
        answer = self._read(name, deadline, body)
        if is_text_peer(name) and answer.error is not None and answer.error.startswith(
                "HTTP 422"):
            try:
                self._write(name, plain(), deadline)
            except (OSError, http.client.HTTPException) as exc:
                self._drop(name)
                return _failed(name, exc)
            answer = self._read(name, deadline, plain())
        return answer

    def _late(self, name: str) -> MemberAnswer:
        return MemberAnswer(name, None, None, error=f"timed out: no whole reply within the "
                            f"members' time limit of {self.time_limit_s:g} s")

    def _read(self, name: str, deadline: float, body: bytes) -> MemberAnswer:
        for attempt in range(2):
            conn = self._connections()[name]
            try:
                if conn.sock is not None:
                    conn.sock.settimeout(max(deadline - time.perf_counter(), 1e-3))
                reply = conn.getresponse()
                if (reply.length or 0) > self.max_reply_bytes:
                    self._drop(name)
                    return _too_large(name, self.max_reply_bytes)
                content = reply.read(self.max_reply_bytes + 1)
                if len(content) > self.max_reply_bytes:
                    self._drop(name)
                    return _too_large(name, self.max_reply_bytes)
                break
            except (http.client.RemoteDisconnected, ConnectionResetError) as exc:
                self._drop(name)
                if time.perf_counter() >= deadline:  # cut off by collect()
                    return self._late(name)
                if attempt:
                    return _failed(name, exc)
                try:
                    self._write(name, body, deadline)
                except (OSError, http.client.HTTPException) as again:
                    self._drop(name)
                    return _failed(name, again)
            except (OSError, http.client.HTTPException) as exc:
                self._drop(name)  # half-read or timed out: the connection is unusable
                return self._late(name) if time.perf_counter() >= deadline else _failed(name, exc)
        if reply.will_close:
            self._drop(name)
        if reply.status != 200:
            return MemberAnswer(name, None, None, error=f"HTTP {reply.status}: "
                                f"{content[:200].decode('utf-8', 'replace')}")
        try:
            data = orjson.loads(content)
        except orjson.JSONDecodeError:
            return MemberAnswer(name, None, None, error="the reply is not JSON")
        if not isinstance(data, dict):
            return MemberAnswer(name, None, None, error="the reply is not a JSON object")
        algorithm = data.get("algorithm")
        if isinstance(algorithm, str) and algorithm != name:  # a URL set to the wrong port
            return MemberAnswer(name, None, None, error=f"{self.urls[name]} is the "
                                f"{algorithm!r} service, not {name!r}")
        text = data.get("text")
        if not isinstance(text, str):
            return MemberAnswer(name, None, None, error="the reply has no text")
        return MemberAnswer(name, text, _blocks_of(data.get("blocks")))


@dataclass(frozen=True)
class PendingAnswers:
    """Requests written to members (`sent`: their bodies) and the members that could
    not be asked; `plain()`: the request with default options."""

    members: HttpMembers
    sent: Mapping[str, bytes]
    failed: Mapping[str, MemberAnswer]
    deadline: float
    plain: Callable[[], bytes]

    def collect(self, on_answer: Callable[[MemberAnswer], None] | None = None
                ) -> dict[str, MemberAnswer]:
        """Every member's answer: a reply read by the deadline, or why there is none.

        Replies are read as they arrive, and each answer goes to `on_answer` at once,
        so the caller maps a fast member's answer while a slower one still works.
        A socket timeout bounds each wait for bytes, not the whole reply: a member that
        sends a byte now and then would keep the page past its time limit. At the
        deadline a timer shuts down the connections still being read, which ends their
        reads at once (the member is then missing)."""
        answers = dict(self.failed)
        if on_answer is not None:
            for answer in self.failed.values():
                on_answer(answer)
        connections = self.members._connections()  # this thread's, read by the timer
        unread = set(self.sent)
        guard = threading.Lock()

        def cut_off() -> None:
            with guard:  # the connection each unread member has now (a retry makes a new one)
                for name in unread:
                    conn = connections.get(name)
                    sock = conn.sock if conn is not None else None
                    if sock is not None:
                        with contextlib.suppress(OSError):
                            sock.shutdown(socket.SHUT_RDWR)

        timer = threading.Timer(max(self.deadline - time.perf_counter(), 0.0), cut_off)
        timer.daemon = True
        timer.start()
        try:
            while unread:
                name = _first_ready([n for n in self.sent if n in unread], connections,
                                    self.deadline)
                answer = answers[name] = self.members.read(name, self.deadline,
                                                           self.sent[name], self.plain)
                with guard:
                    unread.discard(name)
                if on_answer is not None:
                    on_answer(answer)
        finally:
            timer.cancel()
        return answers


def _first_ready(names: Sequence[str], connections: Mapping[str, http.client.HTTPConnection],
                 deadline: float) -> str:
    """The member among `names` whose reply has begun to arrive (the first in `names`
    where none has by the deadline, or where a connection has no socket left: reading
    it then ends at once)."""
    socks = {}
    for name in names:
        conn = connections.get(name)
        if conn is None or conn.sock is None:
            return name
        socks[conn.sock] = name
    try:
        ready, _, _ = select.select(list(socks), [], [], max(deadline - time.perf_counter(), 0))
    except (OSError, ValueError):  # a socket closed meanwhile: reading it says why
        return names[0]
    return socks[ready[0]] if ready else names[0]


def _too_large(name: str, limit: int) -> MemberAnswer:
    return MemberAnswer(name, None, None, error=f"the reply passes {limit} bytes")


def _failed(name: str, exc: BaseException) -> MemberAnswer:
    return MemberAnswer(name, None, None, error=f"{type(exc).__name__}: {exc}"[:300])


def _closed_by_peer(sock: socket.socket) -> bool:
    """An idle keep-alive socket that reads as ready was closed by the other end (or
    holds bytes nobody asked for): either way it cannot carry the next request."""
    try:
        readable, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(readable)
