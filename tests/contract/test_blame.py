"""Attempt accounting after a crash (C9, rota.domain.blame): expired leases make crash
suspects, a suspect's last attempt (and every attempt after two crashes) is claimed alone, an
attempt whose handler never started is given back, a shared crash never uses up the last
attempt, and a poison pill ends dead with a reason while its batch-mates live."""

from __future__ import annotations

from datetime import timedelta

import pytest

from rota.domain import blame
from rota.domain.errors import LeaseLost
from rota.domain.flow import Limit, LimitScope
from rota.domain.job import Job, JobSpec
from rota.domain.job_state import JobState, Outcome
from rota.store import Store
from rota.testing import FakeClock
from tests.contract.helpers import LEASE, add, claim_one

SHORT = timedelta(seconds=5)
PAST_IT = timedelta(seconds=6)


async def crashed_batch(store: Store, clock: FakeClock, count: int, **fields: object) -> list[Job]:
    """``count`` jobs claimed in one batch whose worker then died (leases expired, rescued)."""
    await store.enqueue([JobSpec(kind="a", payload={"n": n}, **fields) for n in range(count)])  # type: ignore[arg-type]
    batch = await store.claim("dead-worker", queues=["default"], limit=count, lease=SHORT)
    assert len(batch) == count
    clock.advance(PAST_IT)
    assert sorted((await store.rescue()).requeued) == sorted(job.id for job in batch)
    return batch


async def test_a_crashed_batch_counts_one_attempt_and_makes_every_job_a_suspect(
    store: Store, clock: FakeClock
) -> None:
    batch = await crashed_batch(store, clock, 4, max_attempts=3)
    for job in batch:
        row = await store.get(job.id)
        assert (row.state, row.attempt, row.crashes, row.is_suspect) == (
            JobState.PENDING,
            1,
            1,
            True,
        )
        assert row.last_error == blame.LEASE_EXPIRED
        assert blame.quarantine(row) == (
            "crash suspect: its lease ran out once while its handler ran (its worker died, hung or lost the store), so its last attempt runs alone"
        )
        [attempt] = await store.attempts(job.id)
        assert (attempt.outcome, attempt.error) == (Outcome.LEASE_EXPIRED, blame.LEASE_EXPIRED)


async def test_suspects_with_attempts_to_spare_are_claimed_in_batches(
    store: Store, clock: FakeClock
) -> None:
    suspects = await crashed_batch(store, clock, 3, max_attempts=3)
    again = await store.claim("w", queues=["default"], limit=10, lease=LEASE)
    assert sorted(job.id for job in again) == sorted(job.id for job in suspects)
    assert {(job.attempt, job.crashes, job.runs_alone) for job in again} == {(2, 1, False)}


@pytest.mark.parametrize("fair", [True, False], ids=["fair", "plain"])
async def test_a_suspects_last_attempt_is_claimed_alone_and_ends_the_batch_before_it(
    store: Store, clock: FakeClock, fair: bool
) -> None:
    lone = await crashed_batch(store, clock, 3, max_attempts=2)  # next: the last attempt
    early = await add(store, priority=5)  # ahead of them in claim order
    late = await add(store)  # behind them: the same run_at, a higher id
    first = await store.claim("w", queues=["default"], limit=10, lease=LEASE, fair=fair)
    assert [job.id for job in first] == [early.id], "the batch ends before the first lone one"
    seen = []
    for _ in lone:
        [alone] = await store.claim("w", queues=["default"], limit=10, lease=LEASE, fair=fair)
        assert (alone.attempt, alone.runs_alone) == (2, True)
        seen.append(alone.id)
    assert sorted(seen) == sorted(job.id for job in lone)
    rest = await store.claim("w", queues=["default"], limit=10, lease=LEASE, fair=fair)
    assert [job.id for job in rest] == [late.id]


async def test_a_job_whose_worker_died_twice_runs_alone_from_then_on(
    store: Store, clock: FakeClock
) -> None:
    [job] = await crashed_batch(store, clock, 1, max_attempts=5)
    held = await claim_one(store, lease=SHORT)
    assert held is not None and not held.runs_alone  # attempt 2 of 5: still in batches
    clock.advance(PAST_IT)
    await store.rescue()
    await add(store)
    [alone] = await store.claim("w", queues=["default"], limit=10, lease=LEASE)
    assert (alone.id, alone.attempt, alone.crashes, alone.runs_alone) == (job.id, 3, 2, True)


async def test_lone_attempts_are_claimed_alone_under_limits_too(
    store: Store, clock: FakeClock
) -> None:
    await store.set_limit(Limit(LimitScope.KIND, "a", concurrency=100))
    lone = await crashed_batch(store, clock, 2, max_attempts=2)
    await add(store)
    claimed = [await store.claim("w", queues=["default"], limit=10, lease=LEASE) for _ in range(3)]
    assert [len(batch) for batch in claimed] == [1, 1, 1]
    assert {batch[0].id for batch in claimed[:2]} == {job.id for job in lone}
    assert not claimed[2][0].is_suspect


async def test_taking_over_expired_leases_settles_them_first(
    store: Store, clock: FakeClock
) -> None:
    await store.enqueue([JobSpec(kind="a") for _ in range(3)])
    batch = await store.claim("A", queues=["default"], limit=3, lease=SHORT)
    clock.advance(PAST_IT)
    taken = await store.claim("B", queues=["default"], limit=3, lease=LEASE)
    assert [(job.attempt, job.crashes) for job in taken] == [(2, 1)] * 3
    assert {job.last_error for job in taken} == {blame.LEASE_EXPIRED}
    with pytest.raises(LeaseLost):
        await store.complete(batch[0].lease)


async def test_taking_over_an_expired_last_attempt_gives_it_back_and_takes_it_alone(
    store: Store, clock: FakeClock
) -> None:
    await store.enqueue([JobSpec(kind="a", max_attempts=1) for _ in range(3)])
    batch = await store.claim("A", queues=["default"], limit=3, lease=SHORT)
    clock.advance(PAST_IT)
    [taken] = await store.claim("B", queues=["default"], limit=3, lease=LEASE)
    assert (taken.id, taken.attempt, taken.crashes, taken.runs_alone) == (batch[0].id, 1, 1, True)
    assert taken.last_error == blame.LAST_SHARED


async def test_a_suspect_whose_handler_never_started_gets_its_attempt_back(
    store: Store, clock: FakeClock
) -> None:
    [job] = await crashed_batch(store, clock, 1, max_attempts=2)
    held = await claim_one(store, lease=SHORT)  # attempt 2, the last: never begun
    assert held is not None and held.attempt == 2
    clock.advance(PAST_IT)
    assert (await store.rescue()).requeued == [job.id]
    row = await store.get(job.id)
    assert (row.state, row.attempt, row.crashes, row.last_error) == (
        JobState.PENDING,
        1,
        1,
        blame.NOT_STARTED,
    )


async def test_a_suspect_that_crashes_alone_is_charged_and_dead_on_its_last_attempt(
    store: Store, clock: FakeClock
) -> None:
    [job] = await crashed_batch(store, clock, 1, max_attempts=2)
    held = await claim_one(store, lease=SHORT)
    assert held is not None
    await store.begin(held.lease)
    clock.advance(PAST_IT)
    assert await claim_one(store) is None, "its expiry makes it dead: the rescuer's"
    assert (await store.rescue()).dead == [job.id]
    row = await store.get(job.id)
    assert (row.state, row.attempt, row.crashes, row.last_error) == (
        JobState.DEAD,
        2,
        2,
        "worker died during this job 2 times (lease expired on the last attempt)",
    )
    outcomes = [(a.attempt, a.outcome, a.error) for a in await store.attempts(job.id)]
    assert outcomes == [
        (1, Outcome.LEASE_EXPIRED, blame.LEASE_EXPIRED),
        (2, Outcome.LEASE_EXPIRED, blame.died(2)),
    ]


async def test_begin_is_fenced(store: Store, clock: FakeClock) -> None:
    [job] = await crashed_batch(store, clock, 1)
    a = await claim_one(store, "A", lease=SHORT)
    assert a is not None
    clock.advance(PAST_IT)
    b = await claim_one(store, "B")
    assert b is not None and b.id == job.id
    with pytest.raises(LeaseLost):
        await store.begin(a.lease)
    await store.begin(b.lease)
    await store.complete(b.lease)
    with pytest.raises(LeaseLost):
        await store.begin(b.lease)


async def test_a_retried_suspect_stays_a_suspect(store: Store, clock: FakeClock) -> None:
    [job] = await crashed_batch(store, clock, 1, max_attempts=1)
    held = await claim_one(store)
    assert held is not None
    await store.fail(held.lease, error="boom", retry_in=timedelta(0), permanent=True)
    retried = await store.retry(job.id)
    assert (retried.attempt, retried.crashes) == (0, 1)


async def test_a_poison_pill_dies_after_its_attempts_and_its_batch_mates_succeed(
    store: Store, clock: FakeClock
) -> None:
    """The store's side of a poison pill: a worker that claims a batch, or a lone attempt
    (beginning it), and dies whenever it runs the pill."""
    results = await store.enqueue(
        [JobSpec(kind="pill", max_attempts=3)] + [JobSpec(kind="ok") for _ in range(4)]
    )
    pill = results[0].job.id
    deaths = 0
    for _ in range(50):  # bounded: every step either finishes a job or kills the worker
        jobs = await store.claim("w", queues=["default"], limit=4, lease=SHORT)
        if not jobs:
            clock.advance(PAST_IT)
            await store.rescue()
            if (await store.counts()).total(JobState.PENDING) == 0:
                break
            continue
        if jobs[0].runs_alone:
            assert len(jobs) == 1
            await store.begin(jobs[0].lease)
        if any(job.id == pill for job in jobs):  # the pill's handler kills the worker
            deaths += 1
            clock.advance(PAST_IT)
            await store.rescue()
            continue
        assert await store.complete_many([job.lease for job in jobs]) == []
    final = {job_id: await store.get(job_id) for job_id in (r.job.id for r in results)}
    assert deaths == 3, "the pill kills the worker once per attempt, no more"
    assert final[pill].state is JobState.DEAD
    assert final[pill].last_error == blame.died(3)
    innocents = [job for job_id, job in final.items() if job_id != pill]
    assert {job.state for job in innocents} == {JobState.SUCCEEDED}
