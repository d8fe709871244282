"""Each attempt's heartbeats: the heartbeat that renews a lease counts itself and records the
store's instant on the job, fenced on the token; an attempt that ends keeps both in its history
entry, however it ends; a new claim starts again from none."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from rota.domain.job import Attempt, Job
from rota.domain.job_state import Outcome
from rota.store import Store
from rota.testing import FakeClock
from tests.contract.helpers import LEASE, add, claim_one, claimed

SECOND = timedelta(seconds=1)


async def beat(store: Store, clock: FakeClock, job: Job, *, after: timedelta = SECOND) -> datetime:
    """Advance the clock by ``after``, renew the job's lease; the instant of that heartbeat."""
    clock.advance(after)
    assert (await store.heartbeat([job.lease], lease=LEASE)).lost == []
    return clock.now()


async def test_each_heartbeat_is_counted_on_the_job_and_its_running_attempt(
    store: Store, clock: FakeClock
) -> None:
    job = await claimed(store)
    assert (job.heartbeats, job.last_heartbeat_at) == (0, None)
    await beat(store, clock, job)
    last = await beat(store, clock, job, after=2 * SECOND)
    held = await store.get(job.id)
    assert (held.heartbeats, held.last_heartbeat_at) == (2, last)
    assert held.lease_until == last + LEASE
    [running] = await store.attempts(job.id)
    assert (running.outcome, running.heartbeats, running.last_heartbeat_at) == (
        Outcome.RUNNING,
        2,
        last,
    )


async def end(store: Store, clock: FakeClock, job: Job, how: str) -> Outcome:
    """End the job's attempt ``how``; the outcome its history entry should say."""
    if how == "complete":
        await store.complete(job.lease)
        return Outcome.SUCCEEDED
    if how == "fail":
        await store.fail(job.lease, error="boom", retry_in=timedelta(0))
        return Outcome.FAILED
    if how == "snooze":
        await store.snooze(job.lease, SECOND)
        return Outcome.SNOOZED
    if how == "release":  # a graceful shutdown, or a hard stop, hands the job back
        await store.release(job.lease)
        return Outcome.RELEASED
    if how == "cancel":
        await store.cancel(job.id)
        return Outcome.CANCELLED
    clock.advance(LEASE + SECOND)  # "rescue": the worker went silent past its lease
    assert job.id in (await store.rescue()).requeued
    return Outcome.LEASE_EXPIRED


@pytest.mark.parametrize("how", ["complete", "fail", "snooze", "release", "cancel", "rescue"])
async def test_an_attempt_keeps_its_heartbeats_however_it_ends(
    store: Store, clock: FakeClock, how: str
) -> None:
    job = await claimed(store, max_attempts=3)
    await beat(store, clock, job)
    last = await beat(store, clock, job)
    outcome = await end(store, clock, job, how)
    [ended] = await store.attempts(job.id)
    assert (ended.outcome, ended.heartbeats, ended.last_heartbeat_at) == (outcome, 2, last)
    assert ended.token == job.lease_token
    # Only a lease that ran out says when it did: its last heartbeat's renewal.
    assert ended.lease_until == (last + LEASE if how == "rescue" else None)


async def test_a_new_claim_starts_from_no_heartbeats_and_the_last_attempt_keeps_its_own(
    store: Store, clock: FakeClock
) -> None:
    job = await claimed(store, max_attempts=3)
    first = await beat(store, clock, job)
    await store.fail(job.lease, error="boom", retry_in=timedelta(0))
    again = await claim_one(store)
    assert again is not None and again.id == job.id
    assert (again.heartbeats, again.last_heartbeat_at) == (0, None)
    fresh = await store.get(job.id)
    assert (fresh.heartbeats, fresh.last_heartbeat_at) == (0, None)
    ended, running = await store.attempts(job.id)
    assert (ended.heartbeats, ended.last_heartbeat_at) == (1, first)
    assert (running.outcome, running.heartbeats, running.last_heartbeat_at) == (
        Outcome.RUNNING,
        0,
        None,
    )


async def test_a_taken_over_attempt_shows_its_last_heartbeat_before_its_lease_ran_out(
    store: Store, clock: FakeClock
) -> None:
    await add(store)
    short = timedelta(seconds=5)
    silent = await claim_one(store, "A", lease=short)
    assert silent is not None
    clock.advance(2 * SECOND)
    assert (await store.heartbeat([silent.lease], lease=short)).lost == []
    last = clock.now()
    clock.advance(short + SECOND)  # A goes silent; its lease ends at last + short
    taker = await claim_one(store, "B")
    assert taker is not None and taker.lease_token != silent.lease_token
    assert (taker.heartbeats, taker.last_heartbeat_at) == (0, None)
    await beat(store, clock, taker)
    await store.complete(taker.lease)
    expired, succeeded = await store.attempts(silent.id)
    assert _beats(expired) == (Outcome.LEASE_EXPIRED, 1, last)
    # Its last heartbeat, then its lease's end, then the takeover's start.
    assert expired.lease_until == last + short
    assert last < expired.lease_until < succeeded.started_at == expired.finished_at
    assert _beats(succeeded) == (Outcome.SUCCEEDED, 1, succeeded.started_at + SECOND)


def _beats(attempt: Attempt) -> tuple[Outcome, int, datetime | None]:
    return attempt.outcome, attempt.heartbeats, attempt.last_heartbeat_at
