"""Admission control: at most so many requests inside the API at once; /healthz never waits.

Every request runs on the server's one event loop, and its handler's CPU work (validation,
rendering, JSON) holds the loop between awaits. Twenty clients paging a heavy list keep twenty
handlers ready to run, and a /healthz probe queues behind all of them. The gate lets a bounded
number of requests in (the others wait, costing nothing, first come first served), so a probe
waits behind at most that many, however many clients there are; /healthz passes the gate.

Turns go round the identities waiting (rota.api.shares.share_key): when one frees, the
identity with the fewest requests inside goes next (among equals, the one served longest ago),
so a client with a long queue of its own delays another identity's request by one turn, not by
its whole queue; and one identity's reads never hold every turn, so another's write finds one
free (FairTurns).

A request's body is read before it takes its turn (up to ``max_body`` bytes, past which the
app refuses it anyway): a client trickling a body holds a connection until the body timeout
closes it, never one of the turns. The gate sits inside the security middleware, so only an
authenticated request gets its body read here.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import Counter, OrderedDict, deque

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from rota.api.security import SAFE_METHODS, route_path
from rota.api.shares import share_key

#: Paths that never wait at the gate: the liveness probe must answer under any load.
UNGATED = frozenset({"/healthz"})


class RequestGate:
    """ASGI middleware letting at most ``limit`` HTTP requests into ``app`` at once."""

    def __init__(self, app: ASGIApp, *, limit: int, max_body: int = 1 << 20) -> None:
        if limit < 1:
            raise ValueError("the request gate needs a limit of at least 1")
        self.app = app
        self.limit = limit
        self.max_body = max_body
        self._turns = FairTurns(limit)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or route_path(scope) in UNGATED:
            await self.app(scope, receive, send)
            return
        receive = await self._read_body(receive)
        key = share_key(scope)
        read = scope["method"] in SAFE_METHODS
        await self._turns.acquire(key, read)
        try:
            await self.app(scope, receive, send)
        finally:
            self._turns.release(key, read)

    @property
    def inside(self) -> int:
        """Requests in the app now (for tests and diagnostics)."""
        return self._turns.inside

    @property
    def waiting(self) -> int:
        """Requests waiting at the gate."""
        return self._turns.waiting

    async def _read_body(self, receive: Receive) -> Receive:
        """``receive`` with the request's body (up to just past ``max_body``) already read,
        replayed to the app first."""
        read: deque[Message] = deque()
        failed: Exception | None = None
        size = 0
        while True:
            try:
                message = await receive()
            except Exception as error:  # e.g. the body cap, raised where the app reads it
                failed = error
                break
            read.append(message)
            if message["type"] != "http.request":  # the client went away
                break
            size += len(message.get("body", b""))
            if not message.get("more_body", False) or size > self.max_body:
                break

        async def replay() -> Message:
            nonlocal failed
            if read:
                return read.popleft()
            if failed is not None:
                error, failed = failed, None
                raise error
            return await receive()

        return replay


class FairTurns:
    """At most ``limit`` holders at once. A freed turn goes to the waiting key with the fewest
    turns held, and among equals to the one whose last turn began longest ago (or never); each
    key's own waiters go in arrival order. One key's reads hold at most ``limit - 1`` turns
    (at least one): a turn stays free for someone else's write, however many reads one client
    sends."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.read_cap = max(1, limit - 1)
        self.inside = 0
        self.waiting = 0
        self._held: Counter[str] = Counter()
        self._reads: Counter[str] = Counter()
        self._queues: OrderedDict[str, deque[tuple[asyncio.Future[None], bool]]] = OrderedDict()
        #: When each key holding or awaiting a turn last began one (a count of turns given).
        self._last_turn: dict[str, int] = {}
        self._turns = itertools.count(1)

    async def acquire(self, key: str, read: bool = False) -> None:
        if not self._queues and self._may_enter(key, read):
            self._enter(key, read)
            return
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queues.setdefault(key, deque()).append((turn, read))
        self.waiting += 1
        self._hand_out()  # a turn may be free for this key though others wait for theirs
        try:
            await turn
        except asyncio.CancelledError:
            if turn.done() and not turn.cancelled():  # given the turn as it was cancelled
                self.release(key, read)
            else:
                self._drop(key, turn)
            raise

    def release(self, key: str, read: bool = False) -> None:
        self.inside -= 1
        self._held[key] -= 1
        if read:
            self._reads[key] -= 1
            if self._reads[key] <= 0:
                del self._reads[key]
        if self._held[key] <= 0:
            del self._held[key]
        self._forget(key)
        self._hand_out()

    def _may_enter(self, key: str, read: bool) -> bool:
        return self.inside < self.limit and (not read or self._reads[key] < self.read_cap)

    def _enter(self, key: str, read: bool) -> None:
        self.inside += 1
        self._held[key] += 1
        if read:
            self._reads[key] += 1
        self._last_turn[key] = next(self._turns)

    def _hand_out(self) -> None:
        while self.inside < self.limit:
            ready = [k for k, queue in self._queues.items() if self._may_enter(k, queue[0][1])]
            if not ready:
                return
            key = min(ready, key=lambda k: (self._held[k], self._last_turn.get(k, 0)))
            queue = self._queues.pop(key)
            turn, read = queue.popleft()
            if queue:  # its next waiter goes to the back of the line of keys
                self._queues[key] = queue
            self.waiting -= 1
            if turn.done():  # its request was cancelled while it waited
                self._forget(key)
                continue
            self._enter(key, read)
            turn.set_result(None)

    def _drop(self, key: str, turn: asyncio.Future[None]) -> None:
        queue = self._queues.get(key)
        entry = next((entry for entry in queue or () if entry[0] is turn), None)
        if queue is not None and entry is not None:
            queue.remove(entry)
            self.waiting -= 1
            if not queue:
                del self._queues[key]
            self._forget(key)
            self._hand_out()  # a read at its key's cap may have been holding up the line

    def _forget(self, key: str) -> None:
        if key not in self._queues and key not in self._held:
            self._last_turn.pop(key, None)
