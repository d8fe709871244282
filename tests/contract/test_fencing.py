"""Every write after a claim is fenced on the lease token."""

from __future__ import annotations

from datetime import timedelta

import pytest

from rota.domain.errors import LeaseLost
from rota.domain.job import JobSpec
from rota.domain.job_state import JobState, Outcome
from rota.domain.lease import Lease
from rota.store import Beat, Store
from rota.testing import FakeClock
from tests.contract.helpers import LEASE, add, claim_one, reclaimed


@pytest.mark.parametrize(
    "stale_write",
    ["complete", "complete_many", "fail", "fail_permanent", "snooze", "release", "heartbeat"],
)
async def test_stale_worker_write_is_fenced_and_changes_nothing(
    store: Store, clock: FakeClock, stale_write: str
) -> None:
    a, b = await reclaimed(store, clock)
    before = await store.get(b.id)
    if stale_write == "complete":
        with pytest.raises(LeaseLost):
            await store.complete(a.lease)
    elif stale_write == "complete_many":
        assert await store.complete_many([a.lease]) == [a.lease]
    elif stale_write in ("fail", "fail_permanent"):
        with pytest.raises(LeaseLost):
            await store.fail(
                a.lease, error="late", retry_in=timedelta(0), permanent=stale_write.endswith("t")
            )
    elif stale_write == "snooze":
        with pytest.raises(LeaseLost):
            await store.snooze(a.lease, timedelta(seconds=1))
    elif stale_write == "release":
        with pytest.raises(LeaseLost):
            await store.release(a.lease)
    else:
        assert (await store.heartbeat([a.lease], lease=LEASE)).lost == [a.lease]
    assert await store.get(b.id) == before
    await store.complete(b.lease)
    assert (await store.get(b.id)).state is JobState.SUCCEEDED


async def test_fenced_writes_after_completion_are_rejected(store: Store) -> None:
    await add(store)
    job = await claim_one(store)
    assert job is not None
    await store.complete(job.lease)
    with pytest.raises(LeaseLost):
        await store.complete(job.lease)
    with pytest.raises(LeaseLost):
        await store.fail(job.lease, error="x", retry_in=timedelta(0))
    assert (await store.get(job.id)).state is JobState.SUCCEEDED


async def test_lease_for_unknown_job_is_lost(store: Store) -> None:
    ghost = Lease(job_id=987654, token=1, attempt=1, worker="w")
    with pytest.raises(LeaseLost):
        await store.complete(ghost)
    assert (await store.heartbeat([ghost], lease=LEASE)).lost == [ghost]


async def test_a_heartbeat_of_no_lease_reads_the_stores_clock(
    store: Store, clock: FakeClock
) -> None:
    clock.advance(timedelta(minutes=3))
    assert await store.heartbeat([], lease=LEASE) == Beat([], clock.now())


async def test_heartbeat_extends_every_held_lease_and_reports_only_lost_ones(
    store: Store, clock: FakeClock
) -> None:
    await store.enqueue([JobSpec(kind="a") for _ in range(3)])
    held = await store.claim("w", queues=["default"], limit=3, lease=timedelta(seconds=10))
    await store.cancel(held[1].id)
    clock.advance(timedelta(seconds=8))
    beat = await store.heartbeat([job.lease for job in held], lease=timedelta(seconds=10))
    assert (beat.lost, beat.now) == ([held[1].lease], clock.now())
    clock.advance(timedelta(seconds=8))  # past the original lease, within the renewed one
    assert await store.claim("x", queues=["default"], limit=3, lease=LEASE) == []
    assert (await store.get(held[0].id)).lease_until == clock.now() + timedelta(seconds=2)


async def test_complete_many_completes_held_leases_and_returns_lost_ones(
    store: Store, clock: FakeClock
) -> None:
    await store.enqueue([JobSpec(kind="a") for _ in range(4)])
    jobs = await store.claim("w", queues=["default"], limit=4, lease=timedelta(seconds=5))
    stale = jobs[0]
    clock.advance(timedelta(seconds=6))
    retaken = await store.claim("v", queues=["default"], limit=1, lease=LEASE)
    assert [job.id for job in retaken] == [stale.id]
    clock.advance(timedelta(seconds=1))
    # The other three leases expired too, but no one re-claimed them: the tokens still match.
    lost = await store.complete_many([job.lease for job in jobs])
    assert lost == [stale.lease]
    states = [(await store.get(job.id)).state for job in jobs]
    assert states == [JobState.RUNNING] + [JobState.SUCCEEDED] * 3
    assert await store.complete_many([]) == []


async def test_snooze_gives_the_attempt_back_and_delays_the_job(
    store: Store, clock: FakeClock
) -> None:
    await add(store, max_attempts=1)
    job = await claim_one(store)
    assert job is not None
    await store.snooze(job.lease, timedelta(seconds=30))
    snoozed = await store.get(job.id)
    assert (snoozed.state, snoozed.attempt) == (JobState.PENDING, 0)
    assert snoozed.run_at == clock.now() + timedelta(seconds=30)
    clock.advance(timedelta(seconds=29))
    assert await claim_one(store) is None
    clock.advance(timedelta(seconds=1))
    again = await claim_one(store)
    assert again is not None and again.attempt == 1
    assert [a.outcome for a in await store.attempts(job.id)] == [Outcome.SNOOZED, Outcome.RUNNING]


async def test_release_gives_the_attempt_back_and_is_due_at_once(
    store: Store, clock: FakeClock
) -> None:
    await add(store)
    job = await claim_one(store, "leaving")
    assert job is not None
    await store.release(job.lease)
    released = await store.get(job.id)
    assert (released.state, released.attempt, released.run_at) == (
        JobState.PENDING,
        0,
        clock.now(),
    )
    other = await claim_one(store, "staying")
    assert other is not None and (other.attempt, other.worker) == (1, "staying")
