"""Each identity's share of the API: how many reads it may have in flight and how many it may
start a second, so one client cannot crowd out the others.

A client running thirty threads of heavy list pages used to fill the request gate's queue, and
an admin's write waited behind all of it. Two things keep a share a share:

- ``ReadShare`` answers a read over its identity's share at once with 429 and ``Retry-After``
  (at most ``concurrent`` in flight, and a token bucket of ``per_second`` refilled every second
  holding up to ``BURST_SECONDS`` seconds' worth), before it queues for anything. A read that
  finds none of its identity's in flight is never refused (it takes a token if one is left):
  a client that waits for each answer before it asks again holds at most one turn of the gate,
  its round trips pace it, and a script reading jobs one by one is not turned away;
- the request gate (rota.api.gate) lets requests in turn by turn across identities, so another
  identity's request waits for one turn to free, never for a greedy client's whole queue.

An identity is the authenticated principal's name; without authentication, ``anonymous`` and
the client's address. Only the API's reads and ``/metrics`` are counted (SHARED_PREFIXES). The defaults are far
above what a dashboard asks (a browser opens at most six connections to a host, and the
dashboard polls a few routes every 1.5 s).
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from rota.api.security import SAFE_METHODS, client_address, principal_of, route_path

#: What a share counts: the API's reads and /metrics. The dashboard's page and static files
#: (served from memory), /healthz and the login page are never counted.
SHARED_PREFIXES = ("/api/", "/metrics")
#: A bucket holds this many seconds' worth of reads: a page load's burst passes.
BURST_SECONDS = 3.0
#: Identities tracked at once; the idle ones longest unseen are forgotten first.
MAX_TRACKED = 10_000


def share_key(scope: Scope) -> str:
    """Whose share a request counts against."""
    identity = principal_of(scope).identity
    return f"{identity}@{client_address(scope)}" if identity == "anonymous" else identity


@dataclass(slots=True)
class _Share:
    tokens: float
    at: float
    inside: int = 0


class ReadShare:
    """ASGI middleware (inside the security middleware): per-identity limits on reads."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        concurrent: int,
        per_second: float,
        monotonic: Callable[[], float],
    ) -> None:
        if concurrent < 1 or per_second <= 0:
            raise ValueError("read shares need at least 1 read in flight and a positive rate")
        self.app = app
        self.concurrent = concurrent
        self.per_second = per_second
        self.capacity = max(1.0, per_second * BURST_SECONDS)
        self.monotonic = monotonic
        self._shares: OrderedDict[str, _Share] = OrderedDict()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or scope["method"] not in SAFE_METHODS
            or not route_path(scope).startswith(SHARED_PREFIXES)
        ):
            await self.app(scope, receive, send)
            return
        key = share_key(scope)
        share, retry_after = self._admit(key)
        if share is None:
            refusal = JSONResponse(
                {"error": "too many reads from this identity; slow down"},
                status_code=429,
                headers={"Retry-After": str(retry_after)},
            )
            await refusal(scope, receive, send)
            return
        try:
            await self.app(scope, receive, send)
        finally:
            share.inside -= 1

    def _admit(self, key: str) -> tuple[_Share | None, int]:
        """The identity's share with this read counted in, or None and the seconds to wait."""
        now = self.monotonic()
        share = self._shares.get(key)
        if share is None:
            share = self._shares[key] = _Share(tokens=self.capacity, at=now)
            self._forget_idle()
        self._shares.move_to_end(key)
        share.tokens = min(self.capacity, share.tokens + max(0.0, now - share.at) * self.per_second)
        share.at = now
        if share.inside >= self.concurrent:
            return None, 1
        if share.tokens < 1.0:
            if share.inside:
                return None, max(1, math.ceil((1.0 - share.tokens) / self.per_second))
        else:
            share.tokens -= 1.0
        share.inside += 1
        return share, 0

    def _forget_idle(self) -> None:
        if len(self._shares) <= MAX_TRACKED:
            return
        for key in [k for k, s in self._shares.items() if s.inside == 0]:
            del self._shares[key]
            if len(self._shares) <= MAX_TRACKED:
                return
