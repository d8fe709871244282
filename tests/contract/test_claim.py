"""Claiming: order, due times, batch limits, queues, tokens, expired leases."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from rota.domain import blame
from rota.domain.errors import LeaseLost
from rota.domain.job import JobSpec
from rota.domain.job_state import JobState, Outcome
from rota.store import Store
from rota.testing import FakeClock
from tests.contract.helpers import LEASE, add, claim_one


async def test_claims_due_job_before_delayed_one_and_delayed_one_once_due(
    store: Store, clock: FakeClock
) -> None:
    later = await add(store, "a", run_at=clock.now() + timedelta(minutes=1))
    first = await add(store, "b")
    job = await claim_one(store, "w1")
    assert job is not None
    assert (job.id, job.attempt, job.state) == (first.id, 1, JobState.RUNNING)
    assert await claim_one(store, "w2") is None, "the delayed job is not due yet"
    await store.complete(job.lease)
    clock.advance(timedelta(minutes=1))
    job = await claim_one(store, "w2")
    assert job is not None and job.id == later.id


async def test_delay_is_measured_from_the_store_clock(store: Store, clock: FakeClock) -> None:
    job = await add(store, delay=timedelta(seconds=10))
    assert job.run_at == clock.now() + timedelta(seconds=10)
    clock.advance(timedelta(seconds=9))
    assert await claim_one(store) is None
    clock.advance(timedelta(seconds=1))
    claimed = await claim_one(store)
    assert claimed is not None and claimed.id == job.id


async def test_claim_orders_by_priority_then_run_at_then_id(store: Store, clock: FakeClock) -> None:
    now = clock.now()
    low_early = await add(store, priority=-5, run_at=now - timedelta(minutes=5))
    mid_late = await add(store, priority=0, run_at=now - timedelta(minutes=1))
    mid_early = await add(store, priority=0, run_at=now - timedelta(minutes=2))
    mid_early_twin = await add(store, priority=0, run_at=now - timedelta(minutes=2))
    high = await add(store, priority=10)
    jobs = await store.claim("w", queues=["default"], limit=10, lease=LEASE)
    assert [job.id for job in jobs] == [
        high.id,
        mid_early.id,
        mid_early_twin.id,
        mid_late.id,
        low_early.id,
    ]


async def test_claim_never_returns_more_than_the_limit(store: Store) -> None:
    await store.enqueue([JobSpec(kind="a") for _ in range(7)])
    first = await store.claim("w", queues=["default"], limit=3, lease=LEASE)
    second = await store.claim("w", queues=["default"], limit=3, lease=LEASE)
    third = await store.claim("w", queues=["default"], limit=3, lease=LEASE)
    assert [len(first), len(second), len(third)] == [3, 3, 1]
    assert len({job.id for job in first + second + third}) == 7
    assert await store.claim("w", queues=["default"], limit=0, lease=LEASE) == []


async def test_claim_takes_only_the_named_queues(store: Store) -> None:
    mail = await add(store, queue="mail")
    await add(store, queue="reports")
    jobs = await store.claim("w", queues=["mail", "other"], limit=10, lease=LEASE)
    assert [job.id for job in jobs] == [mail.id]
    assert await store.claim("w", queues=["default"], limit=10, lease=LEASE) == []


async def test_each_claim_issues_a_strictly_greater_token(store: Store, clock: FakeClock) -> None:
    await store.enqueue([JobSpec(kind="a") for _ in range(5)])
    tokens: list[int] = []
    for _ in range(5):
        job = await claim_one(store, lease=timedelta(seconds=1))
        assert job is not None and job.lease_token is not None
        tokens.append(job.lease_token)
    clock.advance(timedelta(seconds=2))  # every lease expires: re-claims issue new tokens
    again = await store.claim("w2", queues=["default"], limit=5, lease=LEASE)
    tokens += [job.lease_token for job in again if job.lease_token is not None]
    assert tokens == sorted(tokens) and len(set(tokens)) == len(tokens) == 10


async def test_claim_sets_lease_from_store_clock(store: Store, clock: FakeClock) -> None:
    await add(store)
    job = await claim_one(store, "w", lease=timedelta(seconds=45))
    assert job is not None
    assert job.lease_until == clock.now() + timedelta(seconds=45)
    assert job.started_at == clock.now()
    assert job.worker == "w"


async def test_expired_lease_is_reclaimed_and_stale_worker_fenced(
    store: Store, clock: FakeClock
) -> None:
    await add(store)
    a = await claim_one(store, "A")
    assert a is not None
    clock.advance(timedelta(seconds=20))
    assert (await store.heartbeat([a.lease], lease=LEASE)).lost == []  # lease now ends at +50 s
    clock.advance(timedelta(seconds=25))
    assert await claim_one(store, "B") is None, "the heartbeat kept A's lease alive"
    clock.advance(timedelta(seconds=10))  # A stays silent: its lease expires
    b = await claim_one(store, "B")
    assert b is not None and b.attempt == 2 and b.lease_token > a.lease_token  # type: ignore[operator]
    with pytest.raises(LeaseLost):
        await store.complete(a.lease)
    assert (await store.heartbeat([a.lease], lease=LEASE)).lost == [a.lease]
    await store.complete(b.lease)
    final = await store.get(b.id)
    assert (final.state, final.attempt) == (JobState.SUCCEEDED, 2)


async def test_lease_at_exactly_its_expiry_instant_is_still_held(
    store: Store, clock: FakeClock
) -> None:
    await add(store)
    a = await claim_one(store, "A", lease=timedelta(seconds=30))
    assert a is not None
    clock.advance(timedelta(seconds=30))
    assert await claim_one(store, "B") is None
    clock.advance(timedelta(microseconds=1))
    assert await claim_one(store, "B") is not None


async def test_an_ordinary_lease_expired_on_the_last_attempt_is_given_back_and_run_alone(
    store: Store, clock: FakeClock
) -> None:
    job = await add(store, max_attempts=1)
    assert await claim_one(store, "A") is not None
    clock.advance(timedelta(minutes=1))
    [taken] = await store.claim("B", queues=["default"], limit=5, lease=LEASE)
    assert (taken.id, taken.attempt, taken.crashes) == (job.id, 1, 1)
    [expired] = (await store.attempts(job.id))[:1]
    assert (expired.outcome, expired.error) == (Outcome.LEASE_EXPIRED, blame.LAST_SHARED)


async def test_a_suspects_lease_expired_on_the_last_attempt_is_not_claimed(
    store: Store, clock: FakeClock
) -> None:
    job = await add(store, max_attempts=1)
    assert await claim_one(store, "A") is not None
    clock.advance(timedelta(minutes=1))
    suspect = await claim_one(store, "B")  # attempt 1 again, now a suspect
    assert suspect is not None and suspect.is_suspect
    await store.begin(suspect.lease)
    clock.advance(timedelta(minutes=1))
    assert await claim_one(store, "C") is None, "no attempts left"
    result = await store.rescue()
    assert result.dead == [job.id]
    dead = await store.get(job.id)
    assert (dead.state, dead.attempt, dead.crashes) == (JobState.DEAD, 1, 2)
    assert dead.last_error == blame.died(2)


async def test_concurrent_claimers_never_share_a_job(store: Store) -> None:
    await store.enqueue([JobSpec(kind="a") for _ in range(60)])

    async def claimer(name: str) -> list[int]:
        taken: list[int] = []
        while jobs := await store.claim(name, queues=["default"], limit=4, lease=LEASE):
            taken += [job.id for job in jobs]
        return taken

    results = await asyncio.gather(*(claimer(f"w{i}") for i in range(8)))
    claimed = [job_id for taken in results for job_id in taken]
    assert len(claimed) == 60 and len(set(claimed)) == 60


async def test_zombie_job_is_reclaimed_after_its_lease(store: Store, clock: FakeClock) -> None:
    job = await add(store)
    zombie = await claim_one(store, "crashed", lease=timedelta(seconds=30))
    assert zombie is not None
    clock.advance(timedelta(seconds=31))
    taken = await claim_one(store, "healthy")
    assert taken is not None and (taken.id, taken.worker, taken.attempt) == (job.id, "healthy", 2)


async def test_expired_leases_are_reclaimed_in_claim_order_not_expiry_order(
    store: Store, clock: FakeClock
) -> None:
    first = (await store.enqueue([JobSpec(kind="a"), JobSpec(kind="a")]))[0]
    held = await store.claim("A", queues=["default"], limit=2, lease=timedelta(seconds=30))
    clock.advance(timedelta(seconds=1))
    await store.heartbeat([held[0].lease], lease=timedelta(seconds=30))  # first expires later
    clock.advance(timedelta(seconds=31))
    taken = await claim_one(store, "B")
    assert taken is not None
    assert taken.id == first.job.id, "same run_at and priority: the lower id comes first"
