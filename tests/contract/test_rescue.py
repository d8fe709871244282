"""The rescuer: expired leases become dead on the last attempt, pending otherwise, fenced."""

from __future__ import annotations

from datetime import timedelta

from rota.domain.job import JobSpec
from rota.domain.job_state import JobState, Outcome
from rota.store import Store
from rota.testing import FakeClock
from tests.contract.helpers import LEASE, add, claim_one


async def test_rescue_requeues_expired_leases_with_attempts_left(
    store: Store, clock: FakeClock
) -> None:
    job = await add(store, max_attempts=3)
    held = await claim_one(store, lease=timedelta(seconds=5))
    assert held is not None
    assert await store.rescue() == type(await store.rescue())()  # nothing expired yet
    clock.advance(timedelta(seconds=6))
    result = await store.rescue()
    assert (result.requeued, result.dead) == ([job.id], [])
    rescued = await store.get(job.id)
    assert (rescued.state, rescued.attempt, rescued.run_at) == (JobState.PENDING, 1, job.run_at)
    [attempt] = await store.attempts(job.id)
    assert attempt.outcome is Outcome.LEASE_EXPIRED
    again = await claim_one(store)
    assert again is not None and again.attempt == 2


async def test_rescue_never_overwrites_a_completed_job(store: Store, clock: FakeClock) -> None:
    job = await add(store, max_attempts=1)
    held = await claim_one(store, lease=timedelta(seconds=5))
    assert held is not None
    await store.complete(held.lease)
    clock.advance(timedelta(minutes=5))
    assert await store.rescue() == type(await store.rescue())()
    assert (await store.get(job.id)).state is JobState.SUCCEEDED


async def test_rescue_never_touches_a_reclaimed_job(store: Store, clock: FakeClock) -> None:
    job = await add(store, max_attempts=2)
    await claim_one(store, "A", lease=timedelta(seconds=5))
    clock.advance(timedelta(seconds=6))
    b = await claim_one(store, "B", lease=LEASE)  # takes the expired lease: attempt 2 of 2
    assert b is not None and b.attempt == 2
    result = await store.rescue()
    assert (result.dead, result.requeued) == ([], [])
    current = await store.get(job.id)
    assert (current.state, current.lease_token, current.worker) == (
        JobState.RUNNING,
        b.lease_token,
        "B",
    )


async def test_rescue_leaves_live_leases_alone_and_respects_its_limit(
    store: Store, clock: FakeClock
) -> None:
    await store.enqueue([JobSpec(kind="a", max_attempts=3) for _ in range(5)])
    await store.claim("w", queues=["default"], limit=5, lease=timedelta(seconds=5))
    await add(store)
    await claim_one(store, lease=timedelta(hours=1))
    clock.advance(timedelta(seconds=6))
    first = await store.rescue(limit=3)
    second = await store.rescue(limit=3)
    assert (len(first.requeued), len(second.requeued)) == (3, 2)
    counts = await store.counts()
    assert (counts.by_state[JobState.PENDING], counts.by_state[JobState.RUNNING]) == (5, 1)


async def test_a_rescued_job_keeps_its_place_ahead_of_jobs_due_after_it(
    store: Store, clock: FakeClock
) -> None:
    """Taken over after its worker died, a job is claimed before the backlog that built up
    while its lease ran out, as when a claim takes the expired lease over itself: a takeover
    waits for the lease and the rescuer, not for the whole queue (bench/takeover.py)."""
    job = await add(store)
    held = await claim_one(store, "killed", lease=timedelta(seconds=5))
    assert held is not None and held.id == job.id
    clock.advance(timedelta(seconds=1))
    backlog = await store.enqueue([JobSpec(kind="a") for _ in range(5)])
    clock.advance(timedelta(seconds=5))

    assert (await store.rescue()).requeued == [job.id]
    again = await claim_one(store, "other")

    assert again is not None and (again.id, again.attempt) == (job.id, 2)
    assert again.id not in {result.job.id for result in backlog}
