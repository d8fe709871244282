"""T6 / T7: every interleaving of a stale worker's writes with its successor's and the
rescuer's, and rescuers racing each other, at the store level on memory, SQLite and PostgreSQL.

Time is injected (``now=``), so each order is deterministic: A claims at T0 with a 10 s lease;
at T1 = T0 + 11 s the lease has expired and B takes the job over, either by claiming the
expired lease directly or after the rescuer returned it to pending. Then all 720 orders of
{A.heartbeat, A.complete, A.fail, B.heartbeat, B.complete, rescuer.run} run, one job per order.
Pass: every A operation reports the lost lease (heartbeat returns it, complete and fail raise
LeaseLost) and leaves the whole row and its attempts unchanged; B's completion is the one and
only terminal transition; the rescuer never touches B's live lease.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from rota.domain.errors import LeaseLost
from rota.domain.job import Job, JobSpec
from rota.domain.job_state import JobState, Outcome
from rota.store import Store, open_store
from rota.testing import FakeClock

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
LEASE = timedelta(seconds=10)
T1 = T0 + LEASE + timedelta(seconds=1)
OPS = ("A.heartbeat", "A.complete", "A.fail", "B.heartbeat", "B.complete", "rescuer.run")
ORDERS = list(itertools.permutations(OPS))


@pytest.fixture
async def store(store_url: str) -> AsyncIterator[Store]:
    store = open_store(store_url, clock=FakeClock(T0))
    await store.migrate()
    yield store
    await store.close()


async def snapshot(store: Store, job_id: int) -> tuple[Job, list[Any]]:
    return await store.get(job_id), await store.attempts(job_id)


async def taken_over(store: Store, count: int, *, via_rescue: bool) -> list[tuple[Job, Job]]:
    """``count`` jobs claimed by A at T0 and, after A's lease expired, by B at T1."""
    specs = [JobSpec(kind="k", payload={"n": n}, max_attempts=3) for n in range(count)]
    await store.enqueue(specs, now=T0)
    a_jobs = await store.claim("A", queues=["default"], limit=count, lease=LEASE, now=T0)
    if via_rescue:
        rescued = await store.rescue(now=T1, limit=count)
        assert len(rescued.requeued) == count and not rescued.dead
    b_jobs = await store.claim("B", queues=["default"], limit=count, lease=LEASE, now=T1)
    assert len(a_jobs) == len(b_jobs) == count
    by_id = {job.id: job for job in b_jobs}
    pairs = [(a, by_id[a.id]) for a in sorted(a_jobs, key=lambda job: job.id)]
    for a, b in pairs:
        assert (b.attempt, b.worker) == (2, "B") and (b.lease_token or 0) > (a.lease_token or 0)
    return pairs


async def run_order(store: Store, a: Job, b: Job, order: tuple[str, ...]) -> None:
    at = T1 + timedelta(milliseconds=1)
    terminal_transitions = 0
    for op in order:
        before = await snapshot(store, a.id)
        if op == "A.heartbeat":
            assert (await store.heartbeat([a.lease], lease=LEASE, now=at)).lost == [a.lease], order
        elif op == "A.complete":
            with pytest.raises(LeaseLost):
                await store.complete(a.lease, now=at)
        elif op == "A.fail":
            with pytest.raises(LeaseLost):
                await store.fail(a.lease, error="late", retry_in=timedelta(0), now=at)
        elif op == "B.heartbeat":
            lost = (await store.heartbeat([b.lease], lease=LEASE, now=at)).lost
            assert lost == ([b.lease] if before[0].state is JobState.SUCCEEDED else []), order
        elif op == "B.complete":
            await store.complete(b.lease, now=at)
        else:
            result = await store.rescue(now=at)
            assert a.id not in result.requeued + result.dead, order
        after = await snapshot(store, a.id)
        if op.startswith("A.") or op == "rescuer.run":
            assert after == before, f"{op} changed the row in order {order}"
        if after[0].state.is_terminal and not before[0].state.is_terminal:
            terminal_transitions += 1
    job, attempts = await snapshot(store, a.id)
    assert terminal_transitions == 1, order
    assert (job.state, job.attempt, job.lease_token, job.worker) == (
        JobState.SUCCEEDED,
        2,
        b.lease_token,
        "B",
    ), order
    assert [(x.attempt, x.token, x.worker, x.outcome) for x in attempts] == [
        (1, a.lease_token, "A", Outcome.LEASE_EXPIRED),
        (2, b.lease_token, "B", Outcome.SUCCEEDED),
    ], order


@pytest.mark.parametrize("via_rescue", [False, True], ids=["claim-takes-over", "rescued-first"])
@pytest.mark.timeout(300)
async def test_every_order_of_stale_and_current_writes_fences_the_stale_worker(
    store: Store, via_rescue: bool
) -> None:
    pairs = await taken_over(store, len(ORDERS), via_rescue=via_rescue)
    for (a, b), order in zip(pairs, ORDERS, strict=True):
        await run_order(store, a, b, order)


async def expired(store: Store, count: int) -> list[Job]:
    specs = [JobSpec(kind="k", payload={"n": n}, max_attempts=3) for n in range(count)]
    await store.enqueue(specs, now=T0)
    return await store.claim("A", queues=["default"], limit=count, lease=LEASE, now=T0)


async def test_two_rescuers_in_parallel_never_act_twice_on_one_job(store: Store) -> None:
    jobs = await expired(store, 300)
    results = await asyncio.gather(*(store.rescue(now=T1, limit=50) for _ in range(8)))
    rescued = [job_id for result in results for job_id in result.requeued + result.dead]
    assert len(rescued) == len(set(rescued)), "a job was rescued twice"
    while more := await store.rescue(now=T1):
        if not more.requeued and not more.dead:
            break
        rescued += more.requeued + more.dead
    assert sorted(rescued) == sorted(job.id for job in jobs)
    for job in jobs:
        row, attempts = await snapshot(store, job.id)
        assert (row.state, row.attempt) == (JobState.PENDING, 1)
        assert [x.outcome for x in attempts] == [Outcome.LEASE_EXPIRED]


async def test_a_rescue_racing_a_claim_or_a_completion_acts_once(store: Store) -> None:
    """T7 without a pause hook: the rescuer runs concurrently with B's claim of the same
    expired leases (a) and with A's own late completion (b), many times over."""
    jobs = await expired(store, 200)
    claimed, rescue = await asyncio.gather(
        store.claim("B", queues=["default"], limit=200, lease=LEASE, now=T1),
        store.rescue(now=T1),
    )
    claimed_ids = {job.id for job in claimed}
    rescued_ids = set(rescue.requeued + rescue.dead)
    for job in jobs:
        row, attempts = await snapshot(store, job.id)
        if job.id in claimed_ids:  # B took the expired lease, or the row the rescuer freed
            assert (row.state, row.attempt, row.worker) == (JobState.RUNNING, 2, "B")
        else:
            assert job.id in rescued_ids and (row.state, row.attempt) == (JobState.PENDING, 1)
        assert attempts[0].outcome is Outcome.LEASE_EXPIRED
        assert sum(x.outcome is Outcome.LEASE_EXPIRED for x in attempts) == 1

    more = await expired(store, 200)

    async def late_complete(job: Job) -> bool:
        try:
            await store.complete(job.lease, now=T1)
            return True
        except LeaseLost:
            return False

    outcomes = await asyncio.gather(store.rescue(now=T1), *(late_complete(j) for j in more))
    rescue_result, accepted = outcomes[0], outcomes[1:]
    requeued = set(rescue_result.requeued)
    for job, ok in zip(more, accepted, strict=True):
        row = await store.get(job.id)
        assert ok != (job.id in requeued), f"job {job.id}: completed={ok}, rescued"
        assert row.state is (JobState.SUCCEEDED if ok else JobState.PENDING)
