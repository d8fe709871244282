"""The request gate: a bounded number of requests inside the API, /healthz never waiting."""

from __future__ import annotations

import asyncio
from typing import cast

import httpx
import pytest
from starlette.types import Message, Receive, Scope, Send

from rota.api import ApiSettings
from rota.api.gate import RequestGate
from rota.domain.errors import InvalidInput
from tests.unit.api.conftest import MakeApp, asgi_client


class Held:
    """An ASGI app whose requests wait until released, counting how many are inside."""

    def __init__(self) -> None:
        self.entered = asyncio.Event()
        self.release = asyncio.Event()
        self.seen: list[str] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.seen.append(scope["path"])
        if scope["path"] != "/healthz":
            self.entered.set()
            await self.release.wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})


async def test_at_most_the_limit_is_inside_and_healthz_passes_a_full_gate() -> None:
    inner = Held()
    gate = RequestGate(inner, limit=2)
    arrived: list[str] = []
    all_arrived = asyncio.Event()

    async def front(scope: Scope, receive: Receive, send: Send) -> None:
        # Counts arrivals, then runs the gate in the same task: once the fifth has arrived,
        # nothing else runs until it waits at the gate (or is let in).
        arrived.append(scope["path"])
        if len(arrived) == 5:
            all_arrived.set()
        await gate(scope, receive, send)

    transport = httpx.ASGITransport(app=front)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        # Writes: one identity's reads leave a turn free for others (test_read_shares.py).
        pages = [asyncio.create_task(client.post(f"/api/page/{n}")) for n in range(5)]
        await all_arrived.wait()
        assert (gate.inside, gate.waiting) == (2, 3)
        assert (await client.get("/healthz")).status_code == 200  # not queued behind them
        inner.release.set()
        assert [response.status_code for response in await asyncio.gather(*pages)] == [200] * 5
    assert (gate.inside, gate.waiting) == (0, 0)
    assert sorted(inner.seen) == sorted(["/healthz", *(f"/api/page/{n}" for n in range(5))])


async def test_a_body_still_arriving_holds_no_turn() -> None:
    """A client trickling its body waits outside the gate: a slow upload never takes a turn
    from everyone else (its connection is closed at the body timeout)."""
    inner = Held()
    inner.release.set()
    gate = RequestGate(inner, limit=1)
    stalled = asyncio.Event()  # the rest of the slow body, never sent
    started = asyncio.Event()

    async def slow_body() -> Message:
        if not started.is_set():
            started.set()
            return {"type": "http.request", "body": b'{"ki', "more_body": True}
        await stalled.wait()
        return {"type": "http.disconnect"}

    sent: list[Message] = []

    async def collect(message: Message) -> None:
        sent.append(message)

    def scope(method: str, path: str) -> Scope:
        return {"type": "http", "method": method, "path": path, "root_path": "", "headers": []}

    upload = asyncio.create_task(gate(scope("POST", "/api/jobs"), slow_body, collect))
    await started.wait()  # it is reading its body
    assert (gate.inside, gate.waiting) == (0, 0)

    async def empty() -> Message:
        return {"type": "http.request", "body": b"", "more_body": False}

    await gate(scope("GET", "/api/jobs"), empty, collect)  # gets the only turn at once
    assert inner.seen == ["/api/jobs"] and sent[0]["status"] == 200
    stalled.set()
    await upload


async def test_the_api_is_gated_by_its_setting(make_app: MakeApp) -> None:
    app = make_app(ApiSettings(max_concurrent_requests=3))
    gates = [m for m in app.user_middleware if cast(object, m.cls) is RequestGate]
    assert [gate.kwargs["limit"] for gate in gates] == [3]
    async with asgi_client(app) as client:
        assert (await client.get("/healthz")).json() == {"ok": True}


def test_a_gate_needs_room_for_one_request() -> None:
    with pytest.raises(InvalidInput, match="max_concurrent_requests"):
        ApiSettings(max_concurrent_requests=0)
    with pytest.raises(ValueError, match="at least 1"):
        RequestGate(Held(), limit=0)
