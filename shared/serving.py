"""Serving an ASGI app under uvicorn with limits no client can get past.

    python -m shared.serving services.bte.app:app --host 0.0.0.0 --port 8003

uvicorn's httptools protocol puts no bound on a request head and waits forever
for a request that trickles in (its keep-alive timer only runs between requests),
so a few slow clients hold the server's sockets until the open-file limit is
reached (the "slowloris" attack). GuardedProtocol adds, per connection:

- a head (request line and headers) over `max_header_bytes` gets 431 and the
  connection is closed (RFC 6585, 5);
- a request must arrive whole (head and body) within `request_timeout_s` of its
  first byte (of the connection, for the first request): else 408 if the head is
  incomplete, and the connection is closed;
- at most `max_connections` connections: one more closes the oldest connection
  whose request is still incomplete (slow clients go first, complete requests are
  never cut), or, when every connection has a complete request in hand, is itself
  answered 503 and closed;
- a reply sent while the request's body is still arriving (a 413 for a body far
  past the limit; a 401, 404 or 405 sent before the app read the body) ends the
  connection (uvicorn would keep it open and read the rest of the body, however
  long, until the request's time ran out), in stages (RFC 9112, 9.6): the writing
  side first, then the rest of the body is read and dropped until the client
  closes, at most `linger_bytes` of it and only until the request's time runs out.
  Closed at once with bytes unread, the kernel resets the connection, and a client
  that sends its whole body before it reads (Python's http.client, and requests on
  it) gets the reset instead of the reply.

The process's open-file limit is raised to its hard limit, and the connection cap
kept below it, so accepting never fails for lack of descriptors.

On a stop (SIGTERM, Ctrl-C) uvicorn waits for the requests in hand to be answered,
for as long as they take: a service's page in hand is answered. An app whose lifespan
state holds SHUTDOWN_GRACE_S has the requests still in hand that many seconds into a
stop cancelled instead (the orchestrator's API, whose reads can be asked again, and
which answers them 503): one WARNING line says so, where uvicorn's own is an ERROR.
Once shut down, uvicorn ends the process by raising the SIGTERM again, without waiting
for the threads of requests it cancelled; where that signal is ignored (the process is
PID 1 of a container) the process ends the same way, with the status the signal gives
(143), rather than wait for them.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import re
import resource
import signal
import socket
import sys
from collections.abc import Callable, Coroutine, Mapping
from types import FrameType
from typing import TYPE_CHECKING, Any

import uvicorn
from pydantic import ValidationError
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle

from shared.registry import ORCHESTRATOR_PORT, SERVICES
from shared.settings import HttpLimits, invalid_settings

if TYPE_CHECKING:
    from uvicorn._types import ASGISendEvent

# Descriptors kept free of client connections: worker sockets, log files, SQLite.
RESERVED_FILES = 64
# The key of an app's lifespan state that bounds a stop's wait for requests in hand; an
# app that sets it answers the requests it then has cancelled (503, as the API does).
SHUTDOWN_GRACE_S = "shutdown_grace_s"
# uvicorn's ERROR line (Server.shutdown) when that wait ends with requests in hand, and
# the start of its line on a request's exception (RequestResponseCycle.run_asgi).
GRACE_PASSED = "Cancel %s running task(s), timeout graceful shutdown exceeded"
APP_EXCEPTION = "Exception in ASGI application"


def raise_open_file_limit() -> int:
    """Raise the soft open-file limit to the hard one; returns the new soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 65536)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    return soft


def _reply(status: bytes, detail: bytes) -> bytes:
    """A whole HTTP/1.1 JSON error reply that ends the connection."""
    body = b'{"error":"%s","detail":"%s"}' % (status.split(b" ", 1)[1].lower().replace(
        b" ", b"_"), detail)
    return (b"HTTP/1.1 %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n"
            b"connection: close\r\n\r\n%s" % (status, len(body), body))


def _ending_if_body_unread(
        cycle: RequestResponseCycle) -> Callable[[ASGISendEvent], Coroutine[Any, Any, None]]:
    """The request's `send`, with a reply that starts while the request's body is still
    arriving made to end the connection (`connection: close`, then the close in stages
    of the module docstring): uvicorn would read the rest of that body to its end."""
    send = cycle.send

    async def sending(message: ASGISendEvent) -> None:
        if message["type"] == "http.response.start" and cycle.more_body:
            cycle.keep_alive = False
        await send(message)

    return sending


class _ReplyTransport(asyncio.Transport):
    """The connection as one request's reply sees it (uvicorn's cycle writes the reply
    and closes the connection after it where the reply says so): closing it calls
    `close`, which GuardedProtocol makes a close in stages."""

    def __init__(self, transport: asyncio.Transport, close: Callable[[], None]) -> None:
        super().__init__()
        self._transport, self._close = transport, close

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self._transport.write(data)

    def is_closing(self) -> bool:
        return self._transport.is_closing()

    def close(self) -> None:
        self._close()


def guarded_protocol(limits: HttpLimits) -> type[HttpToolsProtocol]:
    """uvicorn's httptools protocol with the limits of the module docstring."""
    max_connections = min(limits.max_connections,
                          max(raise_open_file_limit() - RESERVED_FILES, 1))

    class GuardedProtocol(HttpToolsProtocol):
        _opened = 0.0
        _head_bytes = 0
        _head_done = False
        _incomplete = True
        _refused = False
        _linger_left: int | None = None  # bytes still to drop before the close
        _timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._opened = self.loop.time()
            self._arm()
            if len(self.connections) > max_connections:
                self._make_room()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            if self._linger_left is not None:
                self._linger_left -= len(data)
                if self._linger_left < 0:
                    self.transport.close()
                return
            super().data_received(data)
            if self._head_done or self.transport.is_closing():
                return
            self._head_bytes += len(data)
            if self._head_bytes > limits.max_header_bytes:
                self._refuse_head()

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self._head_bytes = 0
            self._head_done = False
            self._incomplete = True
            self._arm()

        def on_headers_complete(self) -> None:
            self._head_done = True
            # A head that came whole in one read is measured here.
            size = len(self.url) + sum(len(n) + len(v) + 4 for n, v in self.headers)
            if size > limits.max_header_bytes:
                self._refuse_head()
                return
            before = self.cycle
            super().on_headers_complete()
            if self.cycle is not None and self.cycle is not before:  # this request's
                self.cycle.transport = _ReplyTransport(self.transport, self._close_after_reply)
                self.cycle.send = _ending_if_body_unread(  # type: ignore[method-assign,assignment]
                    self.cycle)

        def _close_after_reply(self) -> None:
            """Close once a reply is sent; in stages where the request's body is still
            arriving (module docstring). The request's timer still ends the wait."""
            if not (self._incomplete and self._head_done and self.cycle.response_complete) \
                    or self.transport.is_closing():
                self.transport.close()
                return
            self._linger_left = limits.linger_bytes
            self.transport.write_eof()
            self.flow.resume_reading()  # paused where the unread body filled uvicorn's buffer

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if self._linger_left is not None:  # no keep-alive timer cuts the drain short
                self._unset_keepalive_if_required()

        def on_body(self, body: bytes) -> None:
            if not self._refused:
                super().on_body(body)

        def on_message_complete(self) -> None:
            if self._refused:
                return
            super().on_message_complete()
            self._incomplete = False
            self._disarm()

        def send_400_response(self, msg: str) -> None:
            """A request the HTTP parser cannot read (a bad Content-Length, chunk or
            method, ...) gets the contract's JSON error, not uvicorn's plain text."""
            reason = re.sub(r"[^A-Za-z0-9 .,:-]", "", msg).strip().rstrip(".")
            self._refuse(b"400 Bad Request",
                         b"the HTTP request is malformed: " + reason.encode("ascii")[:200])

        def _refuse_head(self) -> None:
            self._refuse(b"431 Request Header Fields Too Large",
                         b"the request head passes the limit of %d bytes"
                         % limits.max_header_bytes)

        def _arm(self) -> None:
            if self._timer is None:
                self._timer = self.loop.call_later(limits.request_timeout_s, self._too_slow)

        def _disarm(self) -> None:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None

        def _too_slow(self) -> None:
            self._timer = None
            if not self._incomplete or self.transport.is_closing():
                return
            if self._head_done:  # the app is reading the body: it sees a disconnect
                self.transport.close()
            else:
                self._refuse(b"408 Request Timeout", b"the request did not arrive within "
                             b"%g s" % limits.request_timeout_s)

        def _refuse(self, status: bytes, detail: bytes) -> None:
            self._refused = True
            self._disarm()
            self.transport.write(_reply(status, detail))
            self.transport.close()

        def _make_room(self) -> None:
            """Close the oldest connection whose request is incomplete, else this one."""
            oldest: GuardedProtocol | None = None
            for other in self.connections:
                if (other is not self and isinstance(other, GuardedProtocol)
                        and other._incomplete and not other.transport.is_closing()
                        and (oldest is None or other._opened < oldest._opened)):
                    oldest = other
            if oldest is not None:
                oldest.transport.close()
            else:
                self._refuse(b"503 Service Unavailable", b"too many connections")

    return GuardedProtocol


class _GracePassedWarning(logging.Filter):
    """uvicorn's ERROR line on the requests a stop's grace has cancelled, as the WARNING
    it is: cancelling them is what an app asking a grace wants, not a fault. Then, for a
    request whose reply had started (its connection is closed mid-reply), uvicorn logs
    the cancellation as an exception of the app, traceback and all: that line is the
    same event, counted in the warning, and is left out."""

    def __init__(self, grace: float) -> None:
        super().__init__()
        self.grace = grace
        self.passed = False

    def filter(self, record: logging.LogRecord) -> bool:
        if self.passed and str(record.msg).startswith(APP_EXCEPTION) and record.exc_info \
                and isinstance(record.exc_info[1], asyncio.CancelledError):
            return False
        if record.msg != GRACE_PASSED or not isinstance(record.args, tuple):
            return True
        self.passed = True
        if not record.args[0]:  # a grace of 0 s passes at once, with nothing in hand
            return False
        record.levelno, record.levelname = logging.WARNING, "WARNING"
        record.msg = ("Stopping: %s request(s) still in hand after the grace of %g s "
                      "cancelled; those whose reply had not started are answered 503")
        record.args = (*record.args, self.grace)
        return logging.getLogger(record.name).isEnabledFor(logging.WARNING)


class _Server(uvicorn.Server):
    """uvicorn's server, telling `on_listening` its URL once its socket listens, with the
    stop's wait for requests in hand that the app's lifespan state asks (module
    docstring)."""

    def __init__(self, config: uvicorn.Config,
                 on_listening: Callable[[str], None] | None) -> None:
        super().__init__(config)
        self.on_listening = on_listening
        self.stop_signals: list[int] = []
        self.grace_passed: _GracePassedWarning | None = None

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self.stop_signals.append(sig)
        super().handle_exit(sig, frame)

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        try:
            await super().serve(sockets)  # ends the process on a SIGTERM, unless ignored
        finally:
            if self.grace_passed is not None:
                logging.getLogger("uvicorn.error").removeFilter(self.grace_passed)
        if signal.SIGTERM in self.stop_signals:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(128 + signal.SIGTERM)

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)  # exits the process if it cannot listen
        grace = self.lifespan.state.get(SHUTDOWN_GRACE_S)
        if grace is not None:
            self.config.timeout_graceful_shutdown = grace
            self.grace_passed = _GracePassedWarning(grace)
            logging.getLogger("uvicorn.error").addFilter(self.grace_passed)
        if self.on_listening is None:
            return
        for server in self.servers:
            for sock in server.sockets:
                host, port = sock.getsockname()[:2]
                self.on_listening(f"http://[{host}]:{port}" if ":" in host
                                  else f"http://{host}:{port}")
                return


def serve(app: Any, host: str, port: int, limits: HttpLimits | None = None,
          factory: bool = False, log_level: str = "warning", access_log: bool = True,
          on_listening: Callable[[str], None] | None = None) -> None:
    """Run `app` (an ASGI app or its import path) until stopped, with the limits;
    `on_listening` gets the URL it listens on once it does."""
    config = uvicorn.Config(app, host=host, port=port, factory=factory,
                            http=guarded_protocol(limits or HttpLimits()),
                            log_level=log_level, access_log=access_log)
    _Server(config, on_listening).run()


def _port(value: str) -> int:
    """A TCP port number: uvicorn would otherwise start and stop at once on 70000,
    with no word of why."""
    port = int(value)
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{value} is no TCP port (0-65535)")
    return port


def default_port(app: str, environ: Mapping[str, str],
                 env_prefix: str = "BOILERBENCH_") -> int:
    """The port without --port: the environment's `<prefix>PORT` (the documented setting),
    else the registry's port of a service's app, else the orchestrator's."""
    given = environ.get(f"{env_prefix}PORT", "").strip()
    if given:
        try:
            return _port(given)
        except (ValueError, argparse.ArgumentTypeError):
            raise argparse.ArgumentTypeError(f"{env_prefix}PORT={given} is no TCP port "
                                             "(0-65535)") from None
    for entry in SERVICES.values():
        if entry.app_path == app:
            return entry.port
    return ORCHESTRATOR_PORT


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m shared.serving", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("app", help="module:attribute of the ASGI app")
    parser.add_argument("--host", help="default: <env-prefix>HOST, else 127.0.0.1")
    parser.add_argument("--port", type=_port, help="default: <env-prefix>PORT, else the "
                        "registry's port of a service's app, else 8000")
    parser.add_argument("--factory", action="store_true", help="the attribute makes the app")
    parser.add_argument("--env-prefix", default="BOILERBENCH_",
                        help="prefix of the limits' environment variables")
    parser.add_argument("--log-level", default="info")
    parser.add_argument("--no-access-log", action="store_true")
    args = parser.parse_args(argv)
    host = args.host or os.environ.get(f"{args.env_prefix}HOST", "").strip() or "127.0.0.1"
    try:
        port = args.port if args.port is not None else default_port(
            args.app, os.environ, args.env_prefix)
    except argparse.ArgumentTypeError as exc:
        parser.error(str(exc))
    try:
        serve(args.app, host, port, HttpLimits(_env_prefix=args.env_prefix),
              factory=args.factory, log_level=args.log_level,
              access_log=not args.no_access_log)
    except ValidationError as exc:  # a setting (of the limits, or of the app as imported)
        parser.exit(2, f"{parser.prog}: error: {invalid_settings(exc, args.env_prefix)}\n")


if __name__ == "__main__":
    main()
