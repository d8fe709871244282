"""Admission control: at most so many requests inside the API at once; /healthz never waits.

Every request runs on the server's one event loop, and its handler's CPU work (validation,
rendering, JSON) holds the loop between awaits. Twenty clients paging a heavy list keep twenty
handlers ready to run, and a /healthz probe queues behind all of them. The gate lets a bounded
number of requests in (the others wait, costing nothing, first come first served), so a probe
waits behind at most that many, however many clients there are; /healthz passes the gate.

A request's body is read before it takes its turn (up to ``max_body`` bytes, past which the
app refuses it anyway): a client trickling a body holds a connection until the body timeout
closes it, never one of the turns. The gate sits inside the security middleware, so only an
authenticated request gets its body read here.
"""

from __future__ import annotations

import asyncio
from collections import deque

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from rota.api.security import route_path

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
        self._gate: asyncio.Semaphore | None = None
        #: Requests in the app now, and waiting at the gate (for tests and diagnostics).
        self.inside = 0
        self.waiting = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or route_path(scope) in UNGATED:
            await self.app(scope, receive, send)
            return
        receive = await self._read_body(receive)
        if self._gate is None:  # made on the serving loop, at its first request
            self._gate = asyncio.Semaphore(self.limit)
        self.waiting += 1
        try:
            await self._gate.acquire()
        finally:
            self.waiting -= 1
        self.inside += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.inside -= 1
            self._gate.release()

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
