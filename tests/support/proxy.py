"""A chaos TCP proxy for fault tests: pass, latency, blackhole, reset, close after N bytes.

Runs its own event loop on a daemon thread, so a test (sync or async) switches modes with
plain method calls while clients go through ``127.0.0.1:<proxy.port>``. Modelled on pg-boss's
half-open proxy. Modes:

- ``pass``: forward both ways.
- ``latency``: hold every chunk ``latency_s`` before forwarding it (order kept).
- ``blackhole``: accept and read, never forward or answer: a half-open connection. A
  connection that has swallowed bytes stays dead for good (its stream is broken), as after a
  peer that vanished; new connections are blackholed too until the mode changes.
- ``reset``: abort every connection with an RST (SO_LINGER 0); new ones are reset at once.
- ``close_after``: forward ``after_bytes`` more bytes of the server's answers per connection,
  then close both ends (FIN): a connection lost in the middle of a response.

Faults can target one kind of traffic: with ``match`` (bytes) a fault hits a connection at the
moment its client sends a statement containing those bytes, from the switch on (PostgreSQL
frontend messages are parsed, so a statement prepared once and executed later by name is still
recognised); connections that sent it before are left alone. Routing one
client (the LISTEN connection) through a proxy of its own is the other way to target.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

PASS, LATENCY, BLACKHOLE, RESET, CLOSE_AFTER = (
    "pass",
    "latency",
    "blackhole",
    "reset",
    "close_after",
)
MODES = (PASS, LATENCY, BLACKHOLE, RESET, CLOSE_AFTER)
_UNTYPED_REQUESTS = {80877103, 80877104}  # SSLRequest, GSSENCRequest: another startup follows
_CANCEL_REQUEST = 80877102  # a connection of its own that asks to cancel another's query
_PROTOCOL_3 = 196608  # a StartupMessage: the client asks for a session


class PgStatements:
    """Reads a PostgreSQL client's byte stream and yields the SQL text each message runs."""

    def __init__(self) -> None:
        self._buffer = b""
        self._startup = True
        self._names: dict[bytes, bytes] = {}
        #: Whether the client asked for a session (sent a StartupMessage). Until then a
        #: connection is an attempt: libpq first asks for TLS (an SSLRequest) and waits for
        #: the answer, which a blackhole never gives, so an attempt may stay one until its
        #: connect_timeout.
        self.startup_sent = False
        #: Whether the stream is a CancelRequest (psycopg opens one per query it interrupts),
        #: not a session.
        self.cancel_request = False

    def feed(self, data: bytes) -> list[bytes]:
        self._buffer += data
        found: list[bytes] = []
        while True:
            if self._startup:
                if len(self._buffer) < 8:
                    return found
                length, code = struct.unpack("!II", self._buffer[:8])
                if len(self._buffer) < length:
                    return found
                self._buffer = self._buffer[length:]
                self._startup = code in _UNTYPED_REQUESTS
                self.cancel_request = self.cancel_request or code == _CANCEL_REQUEST
                self.startup_sent = self.startup_sent or code == _PROTOCOL_3
                continue
            if len(self._buffer) < 5:
                return found
            kind = self._buffer[:1]
            (length,) = struct.unpack("!I", self._buffer[1:5])
            if len(self._buffer) < 1 + length:
                return found
            body = self._buffer[5 : 1 + length]
            self._buffer = self._buffer[1 + length :]
            if kind == b"Q":
                found.append(body.split(b"\0", 1)[0])
            elif kind == b"P":
                name, _, rest = body.partition(b"\0")
                text = rest.split(b"\0", 1)[0]
                self._names[name] = text
                found.append(text)
            elif kind == b"B":
                _, _, rest = body.partition(b"\0")
                found.append(self._names.get(rest.split(b"\0", 1)[0], b""))


@dataclass(eq=False)
class Link:
    """One proxied connection."""

    client: asyncio.StreamWriter
    upstream: asyncio.StreamWriter | None = None
    dead: bool = False  # blackholed for good
    budget: int | None = None  # bytes left before close_after closes it
    client_gone: bool = False  # the client closed its end (a blackholed upstream may linger)
    opened: float = field(default_factory=time.monotonic)
    server_gone: bool = False  # the server's end closed, and the client was told
    gone: asyncio.Event = field(default_factory=asyncio.Event)  # set with client_gone
    texts: list[bytes] = field(default_factory=list)
    parser: PgStatements = field(default_factory=PgStatements)

    def sent(self, needle: bytes) -> bool:
        return any(needle in text for text in self.texts)

    def describe(self) -> str:
        """One line on this link for a failure's log: age, state, the last statements."""
        flags = [
            name
            for name, on in (
                ("cancel-request", self.parser.cancel_request),
                ("attempt", not self.parser.startup_sent),
                ("blackholed", self.dead),
                ("server-gone", self.server_gone),
            )
            if on
        ]
        last = [text[:60].decode("utf-8", "replace") for text in self.texts[-2:]]
        return f"age {time.monotonic() - self.opened:.1f}s {' '.join(flags) or 'open'} {last}"

    @property
    def session(self) -> bool:
        """A session the client asked for: not an attempt still waiting for the server's
        answer to its TLS request, nor a request to cancel another connection's query."""
        return self.parser.startup_sent and not self.parser.cancel_request


class ChaosProxy:
    """A proxy from ``listen_host:port`` (0 picks one) to ``target``; see the module docstring."""

    def __init__(
        self,
        target_host: str,
        target_port: int,
        *,
        listen_host: str = "127.0.0.1",
        listen_port: int = 0,
    ) -> None:
        self.target = (target_host, target_port)
        self.listen = (listen_host, listen_port)
        self.mode = PASS
        self.latency_s = 0.2
        self.after_bytes = 0
        self.match: bytes | None = None
        self.links: list[Link] = []
        self.accepted = 0
        #: Connections a fault has hit so far.
        self.faulted = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True, name="proxy")
        self._server: asyncio.Server | None = None
        #: The client end of every connection not yet served to its end.
        self._clients: set[asyncio.StreamWriter] = set()
        self._serving: set[asyncio.Task[None]] = set()
        self.port = 0

    # ------------------------------------------------------------------ control (any thread)

    def start(self) -> ChaosProxy:
        self._thread.start()
        self._call(self._start)
        return self

    def set(
        self,
        mode: str,
        *,
        latency_s: float | None = None,
        after_bytes: int | None = None,
        match: bytes | None = None,
    ) -> None:
        """Switch mode for existing and new connections (those matching ``match``, if given)."""
        if mode not in MODES:
            raise ValueError(f"unknown proxy mode {mode!r}")

        def apply() -> None:
            self.mode, self.match = mode, match
            if latency_s is not None:
                self.latency_s = latency_s
            if after_bytes is not None:
                self.after_bytes = after_bytes
            if match is None:
                for link in list(self.links):
                    self._apply(link)

        self._call_sync(apply)

    def cut(self, predicate: Callable[[Link], bool]) -> int:
        """Blackhole the existing connections ``predicate`` picks (e.g. ``link.sent(b"LISTEN ")``)
        for good, whatever the mode; returns how many."""

        def apply() -> int:
            hit = [link for link in self.links if predicate(link)]
            for link in hit:
                link.dead = True
            self.faulted += len(hit)
            return len(hit)

        return int(self._call_sync(apply))

    def heal(self) -> None:
        """Back to pass for new connections; blackholed ones stay dead (they are half-open)."""
        self.set(PASS)

    def close(self) -> None:
        if not self._thread.is_alive():
            return
        with contextlib.suppress(Exception):
            self._call(self._stop)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        if not self._thread.is_alive():
            self._loop.close()

    def __enter__(self) -> ChaosProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def count(self, predicate: Callable[[Link], bool] = lambda link: True) -> int:
        """Links whose client still holds its end and that match ``predicate``."""
        return self._call_sync(
            lambda: sum(1 for link in self.links if not link.client_gone and predicate(link))
        )

    def describe_links(self) -> str:
        """Every link whose client still holds its end, one per line (``Link.describe``)."""
        return self._call_sync(
            lambda: "".join(f"\n  {link.describe()}" for link in self.links if not link.client_gone)
        )

    def wait_gone(self, predicate: Callable[[Link], bool], *, within_s: float = 10.0) -> int:
        """Wait until every client of the links ``predicate`` picks has closed its end;
        returns how many there were."""

        async def wait() -> int:
            picked = [link for link in self.links if predicate(link)]
            await asyncio.wait_for(asyncio.gather(*(link.gone.wait() for link in picked)), within_s)
            return len(picked)

        return int(self._call(wait))

    # ------------------------------------------------------------------ internals (loop)

    def _call(self, factory: Callable[[], Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(factory(), self._loop).result(timeout=30)

    def _call_sync(self, func: Callable[[], Any]) -> Any:
        async def run() -> Any:
            return func()

        return self._call(run)

    async def _start(self) -> None:
        self._server = await asyncio.start_server(self._accept, *self.listen)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _stop(self) -> None:
        # Stop accepting first, but close the server only once the connections it already
        # accepted are handed over (asyncio's own tasks: a socket, its transport, then
        # ``_accept``): on Python 3.11 a hand-over that runs after the server closed fails
        # inside asyncio and leaves its socket to the garbage collector, an unclosed-socket
        # warning in whichever test runs then.
        if self._server is not None:
            loop = asyncio.get_running_loop()
            for listening in self._server.sockets:
                loop.remove_reader(listening.fileno())
            await self._handovers()
            self._server.close()
        for _ in range(100):  # bounded: each round ends what the previous one handed over
            for link in list(self.links):
                self._drop(link)
            for client in list(self._clients):
                _abort(client)
            self._clients.clear()
            ours = list(self._serving)
            for task in ours:
                task.cancel()
            await asyncio.gather(*ours, return_exceptions=True)
            for _ in range(3):  # let aborted transports run their connection_lost callbacks
                await asyncio.sleep(0)
            if not self._serving and not self._clients:
                return

    async def _handovers(self) -> None:
        """Wait for asyncio's tasks that hand accepted connections over (at most 5 s)."""
        handing_over = [
            task
            for task in asyncio.all_tasks()
            if getattr(task.get_coro(), "__name__", "") == "_accept_connection2"
        ]
        if handing_over:
            await asyncio.wait(handing_over, timeout=5)

    def _targets(self, link: Link) -> bool:
        return self.match is None or link.sent(self.match)

    def _apply(self, link: Link) -> None:
        if self.mode in (PASS, LATENCY):
            return
        self.faulted += 1
        if self.mode == RESET:
            self._drop(link)
        elif self.mode == BLACKHOLE:
            link.dead = True
        elif self.mode == CLOSE_AFTER and link.budget is None:
            link.budget = self.after_bytes

    def _drop(self, link: Link) -> None:
        _abort(link.client)
        if link.upstream is not None:
            _abort(link.upstream)
        with contextlib.suppress(ValueError):
            self.links.remove(link)

    def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # Called as the connection is made, so ``_stop`` knows every client socket, even one
        # whose task it cancels before that task ran.
        self._clients.add(writer)
        task = asyncio.ensure_future(self._serve_quietly(reader, writer))
        self._serving.add(task)
        task.add_done_callback(self._serving.discard)

    async def _serve_quietly(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        # Only ``_stop`` cancels a connection's task, and it must end quietly.
        with contextlib.suppress(asyncio.CancelledError):
            await self._serve(reader, writer)
        self._clients.discard(writer)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        link = Link(client=writer)
        self.links.append(link)
        if self.match is None and self.mode == RESET:
            self._drop(link)
            return
        if self.match is None and self.mode == BLACKHOLE:
            link.dead = True
        if self.match is None and self.mode == CLOSE_AFTER:
            link.budget = self.after_bytes
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            self._drop(link)
            return
        link.upstream = up_writer
        try:
            await asyncio.gather(
                self._pump(link, reader, up_writer, from_client=True),
                self._pump(link, up_reader, writer, from_client=False),
                return_exceptions=True,
            )
        finally:
            self._drop(link)

    async def _pump(
        self,
        link: Link,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        from_client: bool,
    ) -> None:
        try:
            await self._forward(link, reader, writer, from_client=from_client)
        except OSError:
            # The end we read from was reset (a server that exited with our bytes unread
            # answers RST, which also discards what it had sent): reset the other end too, as
            # a real peer's RST would reach it, instead of leaving it waiting for an answer.
            _abort(writer)
        finally:
            if not from_client:
                link.server_gone = True

    async def _forward(
        self,
        link: Link,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        from_client: bool,
    ) -> None:
        while True:
            data = await reader.read(65536)
            if not data:
                if from_client:
                    link.client_gone = True
                    link.gone.set()
                if not link.dead:
                    with contextlib.suppress(OSError):
                        writer.write_eof()
                return
            if from_client:
                texts = link.parser.feed(data)
                link.texts.extend(texts)
                if self.match is not None and any(self.match in text for text in texts):
                    self._apply(link)
                    if link not in self.links:
                        return  # reset
            if link.dead:
                continue  # swallowed: the peer never hears of it
            if self.mode == LATENCY and self._targets(link):
                await asyncio.sleep(self.latency_s)
            if link.budget is not None and not from_client:
                data = data[: link.budget]
                link.budget -= len(data)
            writer.write(data)
            await writer.drain()
            if link.budget is not None and link.budget <= 0 and not from_client:
                for end in (link.client, link.upstream):
                    if end is not None:
                        end.close()
                return


def _abort(writer: asyncio.StreamWriter) -> None:
    """Close with an RST: SO_LINGER on, zero timeout, then close."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    transport = writer.transport
    if transport is not None and not transport.is_closing():
        transport.abort()
