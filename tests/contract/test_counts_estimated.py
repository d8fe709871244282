"""Counts past a threshold: exact where the store holds the number or counts few jobs, an
estimate labelled as one where counting one by one would not be cheap (the memory store
always counts exactly)."""

from __future__ import annotations

from datetime import timedelta

import httpx

from rota.api import ApiSettings, create_app
from rota.client import Client
from rota.domain.job import JobSpec
from rota.domain.job_state import JobState
from rota.store import JobFilter, Store
from rota.store.records import Counted
from tests.contract.helpers import claim_one


async def _jobs(store: Store) -> None:
    """Ten pending jobs of tenant acme, one dead, and three of another tenant."""
    await store.enqueue([JobSpec(kind="mail", tenant="acme") for _ in range(10)])
    await store.enqueue([JobSpec(kind="sms", tenant="zed", priority=-1) for _ in range(3)])
    await store.enqueue([JobSpec(kind="mail", tenant="acme", priority=9)])
    job = await claim_one(store)
    assert job is not None and job.priority == 9
    state = await store.fail(job.lease, error="boom", retry_in=timedelta(0), permanent=True)
    assert state is JobState.DEAD


def _estimating(store: Store) -> bool:
    return type(store).__name__ != "MemoryStore"


async def test_a_count_is_exact_up_to_the_threshold_and_labelled_past_it(store: Store) -> None:
    await _jobs(store)
    acme = JobFilter(tenant="acme", states=frozenset({JobState.PENDING}))
    assert await store.count_or_estimate(acme, exact_up_to=10) == Counted(10)
    assert await store.count_or_estimate(acme, exact_up_to=100) == Counted(10)
    dead = JobFilter(tenant="acme", states=frozenset({JobState.DEAD}))
    assert await store.count_or_estimate(dead, exact_up_to=3) == Counted(1)
    nobody = JobFilter(tenant="nobody")
    assert await store.count_or_estimate(nobody, exact_up_to=0) == Counted(0)

    past = await store.count_or_estimate(acme, exact_up_to=3)
    if _estimating(store):
        assert past.estimated and past.n >= 4
    else:
        assert past == Counted(10)


async def test_a_count_the_store_keeps_is_exact_past_the_threshold(store: Store) -> None:
    await _jobs(store)
    mail = JobFilter(kind="mail", states=frozenset({JobState.PENDING}))
    counted = await store.count_or_estimate(mail, exact_up_to=3)
    if "Postgres" in type(store).__name__:
        # The maintained counts (017) hold each kind's jobs per queue and state.
        assert counted == Counted(10)
    elif _estimating(store):
        assert counted.estimated and counted.n >= 4
    else:
        assert counted == Counted(10)


async def test_the_state_counts_route_names_the_estimated_states(store: Store) -> None:
    await _jobs(store)
    app = create_app(Client(store), settings=ApiSettings(exact_count_up_to=3))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as api:
        answer = (await api.get("/api/jobs/counts?tenant=acme")).json()
        zed = (await api.get("/api/jobs/counts?tenant=zed")).json()
    assert answer["counts"]["dead"] == 1 and answer["counts"]["succeeded"] == 0
    assert zed == {
        "counts": dict.fromkeys((s.value for s in JobState), 0) | {"pending": 3},
        "exact": True,
        "estimated": [],
    }
    if _estimating(store):
        assert answer["estimated"] == ["pending"] and answer["counts"]["pending"] >= 4
    else:
        assert answer["estimated"] == [] and answer["counts"]["pending"] == 10
