"""Connections to `rota serve`: deadlines for unfinished requests and a cap on open sockets.

uvicorn has a keep-alive timeout but no deadline for a request's headers or body, so a client
that sends a byte now and then (slowloris) holds a socket for ever; with enough of them the
process runs out of file descriptors, ``accept()`` fails, nobody else gets in, and asyncio
logs a traceback for every failed accept. The guard here is a small subclass of uvicorn's
h11 protocol, driven by h11's own view of the request:

- headers must be complete ``header_timeout`` after their first byte (or after the connection
  opened), the body ``body_timeout`` after the headers; otherwise the connection is closed;
- at ``max_connections`` open connections, a new one makes room by closing the connection
  that has waited longest for an unfinished request (so slow clients cannot crowd out quick
  ones such as a /healthz probe); when every connection is busy with a request being served,
  the new one is answered 503 at once and closed. Descriptors are never exhausted (the
  default cap stays below the process's open-file limit);
- each such event is one log line; failed accepts are one line too, never a traceback.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import resource
from dataclasses import dataclass
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from rota.domain.errors import InvalidInput

log = logging.getLogger("rota.serve")

DEFAULT_HEADER_TIMEOUT_S = 10.0
DEFAULT_BODY_TIMEOUT_S = 30.0
#: Descriptors kept for everything but client connections: the listening socket, database
#: files and connections (the API's and the workers'), pipes, logs.
RESERVED_DESCRIPTORS = 64
MAX_DEFAULT_CONNECTIONS = 1024

_BUSY = (
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
    b"retry-after: 1\r\nconnection: close\r\ncontent-length: 40\r\n\r\n"
    b'{"error": "too many open connections"}\r\n'
)


def default_max_connections() -> int:
    """As many connections as the open-file limit leaves room for, at most 1024."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return MAX_DEFAULT_CONNECTIONS
    return max(1, min(MAX_DEFAULT_CONNECTIONS, soft - RESERVED_DESCRIPTORS))


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    """How long a request may take to arrive, and how many connections may be open."""

    header_timeout_s: float = DEFAULT_HEADER_TIMEOUT_S
    body_timeout_s: float = DEFAULT_BODY_TIMEOUT_S
    max_connections: int = MAX_DEFAULT_CONNECTIONS

    def __post_init__(self) -> None:
        if not (0 < self.header_timeout_s <= 3600 and 0 < self.body_timeout_s <= 3600):
            raise InvalidInput("header and body timeouts must be between 0 and 3600 seconds")
        if self.max_connections < 1:
            raise InvalidInput("max connections must be at least 1")


def default_limits() -> ConnectionLimits:
    """The default timeouts, and as many connections as the open-file limit leaves room for."""
    return ConnectionLimits(max_connections=default_max_connections())


def guarded_protocol(limits: ConnectionLimits) -> type[H11Protocol]:
    """uvicorn's h11 protocol with ``limits`` applied (pass it as ``Config(http=...)``)."""

    class GuardedProtocol(H11Protocol):
        _limits = limits
        #: Connections waiting for a request's headers or body, the longest waiting first.
        _waiting: dict[GuardedProtocol, None] = {}

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._deadline: asyncio.TimerHandle | None = None
            self._waiting_for: str | None = None
            self._refused = False

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            if len(self.connections) >= self._limits.max_connections and self._waiting:
                oldest = next(iter(self._waiting))
                log.warning(
                    "closed a connection from %s: its request was unfinished and %d "
                    "connections are open",
                    _host(oldest.client),
                    len(self.connections),
                )
                oldest._cancel()
                oldest.transport.close()
                self.connections.discard(oldest)  # its connection_lost comes later
            elif len(self.connections) >= self._limits.max_connections:
                self._refused = True
                self.transport = transport
                peer = transport.get_extra_info("peername")
                log.warning(
                    "refused a connection from %s: %d connections open (503)",
                    _host(peer),
                    len(self.connections),
                )
                transport.write(_BUSY)
                transport.close()
                return
            super().connection_made(transport)
            self._watch()

        def connection_lost(self, exc: Exception | None) -> None:
            if self._refused:
                return
            self._cancel()
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            if self._refused:
                return
            super().data_received(data)
            if not self.transport.is_closing():
                self._watch()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                self._watch()

        def _watch(self) -> None:
            """Arm, keep or drop the deadline for what h11 is waiting for from the client."""
            state = self.conn.their_state
            if state is h11.IDLE and (self.cycle is None or self.conn.trailing_data[0]):
                phase = "headers"  # a new connection, or a next request that has begun
            elif state is h11.SEND_BODY:
                phase = "body"
            else:
                phase = None  # a request is complete, or the connection idles (keep-alive)
            if phase == self._waiting_for:
                return
            self._cancel()
            self._waiting_for = phase
            if phase is not None:
                seconds = (
                    self._limits.header_timeout_s
                    if phase == "headers"
                    else self._limits.body_timeout_s
                )
                self._deadline = self.loop.call_later(seconds, self._expired, phase, seconds)
                self._waiting[self] = None

        def _cancel(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None
            self._waiting_for = None
            self._waiting.pop(self, None)

        def _expired(self, phase: str, seconds: float) -> None:
            self._deadline = None
            self._waiting.pop(self, None)
            if self.transport.is_closing():
                return
            log.warning(
                "closed a connection from %s: request %s not complete within %g s",
                _host(self.client),
                phase,
                seconds,
            )
            self.transport.close()

    return GuardedProtocol


def _host(peer: object) -> str:
    if isinstance(peer, tuple) and peer:
        return str(peer[0])
    return "an unknown address"


def quiet_accept_errors(loop: asyncio.AbstractEventLoop) -> None:
    """Report a failed ``accept()`` for want of descriptors in one line, not a traceback
    (asyncio retries the accept a second later by itself)."""
    default = loop.get_exception_handler()

    def handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        error = context.get("exception")
        if isinstance(error, OSError) and error.errno in (errno.EMFILE, errno.ENFILE):
            log.warning("could not accept a connection: %s", error.strerror)
            return
        if default is not None:
            default(loop, context)
        else:
            loop.default_exception_handler(context)

    loop.set_exception_handler(handler)
