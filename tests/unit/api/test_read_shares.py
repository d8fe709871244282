"""One client cannot starve the others (issue 41, point 4): each identity's reads are bounded
in flight and per second (429 with Retry-After past either), and the request gate hands turns
round the identities, so another identity's write waits for one turn, not a greedy queue."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from starlette.types import Receive, Scope, Send

from rota.api import ApiSettings
from rota.api.credentials import Credential, Role
from rota.api.gate import RequestGate
from rota.api.security import PRINCIPAL_KEY, Principal
from rota.api.shares import ReadShare
from rota.domain.errors import InvalidInput
from rota.testing import FakeClock
from tests.unit.api.conftest import TOKEN, MakeApp, asgi_client

READER = "reader-token-0123456789abc"


async def test_a_reader_that_waits_for_each_answer_is_never_refused(
    make_app: MakeApp, clock: FakeClock
) -> None:
    settings = ApiSettings(
        auth_token=TOKEN,
        credentials=(Credential("dashboards", Role.READ_ONLY, token=READER),),
        read_rate_per_identity=2.0,  # a bucket of 3 seconds' worth: 6 reads
    )
    app = make_app(settings, clock=clock)
    reader = {"authorization": f"Bearer {READER}"}
    admin = {"authorization": f"Bearer {TOKEN}"}
    async with asgi_client(app) as api:
        # A script calling one read after another, far past the bucket, with no time passing:
        # none of them finds another of its identity's in flight.
        for _ in range(50):
            assert (await api.get("/api/jobs?limit=500", headers=reader)).status_code == 200
        created = await api.post("/api/jobs", json={"kind": "email"}, headers=admin)
        assert created.status_code == 201
        assert (await api.get("/api/jobs", headers=admin)).status_code == 200


class Held:
    """An ASGI app whose requests wait until released, recording the order they came in; the
    paths in ``at_once`` are answered without waiting."""

    def __init__(self, at_once: tuple[str, ...] = ()) -> None:
        self.release = asyncio.Event()
        self.seen: list[str] = []
        self.at_once = at_once

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.seen.append(f"{scope['method']} {scope['path']}")
        if scope["path"] not in self.at_once:
            await self.release.wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})


async def test_a_greedy_reader_is_refused_past_its_share_and_a_write_goes_next() -> None:
    inner = Held()
    gate = RequestGate(inner, limit=1)
    shares = ReadShare(gate, concurrent=3, per_second=1000.0, monotonic=lambda: 0.0)
    arrived: dict[str, asyncio.Event] = {}

    async def front(scope: Scope, receive: Receive, send: Send) -> None:
        # Stands for the security middleware: the x-who header names the principal. The
        # event is set before the request goes on in this same task, so once the test sees it
        # the request has reached its first wait (the gate) or finished (a refusal).
        who = dict(scope["headers"])[b"x-who"].decode()
        scope[PRINCIPAL_KEY] = Principal(who, Role.ADMIN)
        arrived.setdefault(scope["path"], asyncio.Event()).set()
        await shares(scope, receive, send)

    async def reach(path: str) -> None:
        await arrived.setdefault(path, asyncio.Event()).wait()

    transport = httpx.ASGITransport(app=front)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        reads = []
        for n in range(5):
            reads.append(asyncio.create_task(client.get(f"/api/r{n}", headers={"x-who": "greedy"})))
            await reach(f"/api/r{n}")
        refused = await asyncio.gather(reads[3], reads[4])
        assert [r.status_code for r in refused] == [429, 429]
        assert all(r.headers["retry-after"] == "1" for r in refused)
        assert (gate.inside, gate.waiting) == (1, 2)
        write = asyncio.create_task(client.post("/api/w", headers={"x-who": "admin"}))
        await reach("/api/w")
        assert (gate.inside, gate.waiting) == (1, 3)
        inner.release.set()
        done = await asyncio.gather(*reads[:3], write)
        assert [r.status_code for r in done] == [200] * 4
    assert inner.seen == ["GET /api/r0", "POST /api/w", "GET /api/r1", "GET /api/r2"]
    assert (gate.inside, gate.waiting) == (0, 0)


async def test_one_identitys_reads_leave_a_turn_free_for_another_write() -> None:
    inner = Held()
    gate = RequestGate(inner, limit=2)
    arrived: dict[str, asyncio.Event] = {}

    async def front(scope: Scope, receive: Receive, send: Send) -> None:
        who = dict(scope["headers"])[b"x-who"].decode()
        scope[PRINCIPAL_KEY] = Principal(who, Role.ADMIN)
        arrived.setdefault(scope["path"], asyncio.Event()).set()
        await gate(scope, receive, send)

    transport = httpx.ASGITransport(app=front)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        reads = []
        for n in range(4):
            reads.append(asyncio.create_task(client.get(f"/r{n}", headers={"x-who": "greedy"})))
            await arrived.setdefault(f"/r{n}", asyncio.Event()).wait()
        assert (gate.inside, gate.waiting) == (1, 3), "its reads hold one turn of two"
        write = asyncio.create_task(client.post("/w", headers={"x-who": "admin"}))
        await arrived.setdefault("/w", asyncio.Event()).wait()
        assert (gate.inside, gate.waiting) == (2, 3), "the write went straight in"
        assert inner.seen == ["GET /r0", "POST /w"]
        inner.release.set()
        assert all(r.status_code == 200 for r in await asyncio.gather(*reads, write))
    assert (gate.inside, gate.waiting) == (0, 0)


class Front:
    """Stands for the security middleware before ``inner``: the x-who header names the
    principal. The arrival of a path is set before the request goes on in this same task, so
    once a test sees it the request has reached its first wait or finished (a refusal)."""

    def __init__(self, inner: ReadShare) -> None:
        self.inner = inner
        self.arrived: dict[str, asyncio.Event] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        who = dict(scope["headers"])[b"x-who"].decode()
        scope[PRINCIPAL_KEY] = Principal(who, Role.ADMIN)
        self.arrived.setdefault(scope["path"], asyncio.Event()).set()
        await self.inner(scope, receive, send)

    async def reach(self, path: str) -> None:
        await self.arrived.setdefault(path, asyncio.Event()).wait()


async def test_reads_beside_their_own_in_flight_spend_the_rate_and_get_429_past_it() -> None:
    inner = Held()
    now = [0.0]
    shares = ReadShare(inner, concurrent=100, per_second=2.0, monotonic=lambda: now[0])
    front = Front(shares)
    who = {"x-who": "reader"}
    transport = httpx.ASGITransport(app=front)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        held = []
        for n in range(6):  # a bucket of 6: the first in flight takes one, five more beside it
            held.append(asyncio.create_task(client.get(f"/api/r{n}", headers=who)))
            await front.reach(f"/api/r{n}")
        refused = await client.get("/api/r6", headers=who)
        assert refused.status_code == 429 and refused.headers["retry-after"] == "1"
        assert "too many reads" in refused.json()["error"]
        other = asyncio.create_task(client.get("/api/o", headers={"x-who": "another"}))
        await front.reach("/api/o")
        now[0] += 1.0  # two reads' worth comes back
        for n in (7, 8):
            held.append(asyncio.create_task(client.get(f"/api/r{n}", headers=who)))
            await front.reach(f"/api/r{n}")
        assert (await client.get("/api/r9", headers=who)).status_code == 429
        inner.release.set()
        assert all(r.status_code == 200 for r in await asyncio.gather(*held, other))
        # None in flight, the bucket empty: a read alone is served all the same.
        assert (await client.get("/api/r10", headers=who)).status_code == 200
    assert "GET /api/r6" not in inner.seen and "GET /api/r9" not in inner.seen


async def test_healthz_writes_and_the_dashboards_files_are_not_counted() -> None:
    counted_never = ("/healthz", "/", "/static/app.js", "/api/queues/a/pause")
    inner = Held(at_once=counted_never)
    shares = ReadShare(inner, concurrent=100, per_second=0.5, monotonic=lambda: 0.0)
    front = Front(shares)
    who = {"x-who": "admin"}
    transport = httpx.ASGITransport(app=front)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        first = asyncio.create_task(client.get("/api/queues", headers=who))
        await front.reach("/api/queues")
        for _ in range(3):  # 0.5 a second, a burst of 1.5: the held read took the one token
            assert (await client.post("/api/queues/a/pause", headers=who)).status_code == 200
            for path in ("/healthz", "/", "/static/app.js"):
                assert (await client.get(path, headers=who)).status_code == 200
        assert (await client.get("/api/stats", headers=who)).status_code == 429
        inner.release.set()
        assert (await first).status_code == 200


def test_shares_need_sane_limits() -> None:
    with pytest.raises(InvalidInput, match="max_reads_per_identity"):
        ApiSettings(max_reads_per_identity=0)
    with pytest.raises(InvalidInput, match="read_rate_per_identity"):
        ApiSettings(read_rate_per_identity=0)
