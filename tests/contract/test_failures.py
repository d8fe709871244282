"""Failures: backoff, dead, permanent errors, manual retry, cancel."""

from __future__ import annotations

from datetime import timedelta

import pytest

from rota.domain.errors import JobNotFound, StateConflict
from rota.domain.job_state import JobState, Outcome
from rota.store import Store
from rota.testing import FakeClock
from tests.contract.helpers import LEASE, add, claim_one


async def test_retry_backoff_then_dead_then_manual_retry(store: Store, clock: FakeClock) -> None:
    job = await add(store, max_attempts=3)
    for attempt, wait in enumerate([timedelta(seconds=10), timedelta(seconds=20)], start=1):
        held = await claim_one(store)
        assert held is not None, f"attempt {attempt} not claimable"
        state = await store.fail(held.lease, error="upstream 503", retry_in=wait)
        assert state is JobState.PENDING
        clock.advance(wait - timedelta(seconds=1))
        assert await claim_one(store) is None, f"claimed during backoff after attempt {attempt}"
        clock.advance(timedelta(seconds=1))
    held = await claim_one(store)
    assert held is not None
    assert await store.fail(held.lease, error="upstream 503", retry_in=LEASE) is JobState.DEAD
    dead = await store.get(job.id)
    assert (dead.state, dead.attempt, dead.last_error) == (JobState.DEAD, 3, "upstream 503")
    assert dead.finished_at == clock.now()
    retried = await store.retry(job.id)
    assert (retried.state, retried.attempt, retried.run_at) == (JobState.PENDING, 0, clock.now())
    again = await claim_one(store)
    assert again is not None and again.attempt == 1


async def test_permanent_errors_are_not_retried(store: Store) -> None:
    job = await add(store, max_attempts=5)
    held = await claim_one(store)
    assert held is not None
    state = await store.fail(
        held.lease, error="invalid email", retry_in=LEASE, permanent=True, traceback="Trace..."
    )
    assert state is JobState.DEAD
    dead = await store.get(job.id)
    assert (dead.state, dead.attempt) == (JobState.DEAD, 1)
    [attempt] = await store.attempts(job.id)
    assert (attempt.outcome, attempt.error, attempt.traceback) == (
        Outcome.FAILED,
        "invalid email",
        "Trace...",
    )


async def test_retry_can_raise_max_attempts_but_never_lowers_it(store: Store) -> None:
    job = await add(store, max_attempts=2)
    for _ in range(2):
        held = await claim_one(store)
        assert held is not None
        await store.fail(held.lease, error="boom", retry_in=timedelta(0))
    assert (await store.get(job.id)).state is JobState.DEAD
    raised = await store.retry(job.id, max_attempts=5)
    assert raised.max_attempts == 5
    held = await claim_one(store)
    assert held is not None
    await store.fail(held.lease, error="boom", retry_in=timedelta(0), permanent=True)
    kept = await store.retry(job.id, max_attempts=1)
    assert kept.max_attempts == 5


async def test_retry_applies_only_to_dead_or_cancelled_jobs(store: Store) -> None:
    job = await add(store)
    with pytest.raises(StateConflict):
        await store.retry(job.id)
    held = await claim_one(store)
    assert held is not None
    with pytest.raises(StateConflict):
        await store.retry(job.id)
    await store.complete(held.lease)
    with pytest.raises(StateConflict):
        await store.retry(job.id)
    with pytest.raises(JobNotFound):
        await store.retry(424242)


async def test_cancel_pending_job(store: Store, clock: FakeClock) -> None:
    job = await add(store)
    cancelled = await store.cancel(job.id)
    assert (cancelled.state, cancelled.finished_at) == (JobState.CANCELLED, clock.now())
    assert await claim_one(store) is None
    with pytest.raises(StateConflict):
        await store.cancel(job.id)
    retried = await store.retry(job.id)
    assert retried.state is JobState.PENDING


async def test_cancel_running_job_fences_its_worker(store: Store) -> None:
    from rota.domain.errors import LeaseLost

    job = await add(store)
    held = await claim_one(store)
    assert held is not None
    await store.cancel(job.id)
    assert (await store.heartbeat([held.lease], lease=LEASE)).lost == [held.lease]
    with pytest.raises(LeaseLost):
        await store.complete(held.lease)
    assert (await store.get(job.id)).state is JobState.CANCELLED
    [attempt] = await store.attempts(job.id)
    assert attempt.outcome is Outcome.CANCELLED


async def test_cancel_unknown_job_is_not_found(store: Store) -> None:
    with pytest.raises(JobNotFound):
        await store.cancel(31337)


async def test_error_text_is_truncated_to_its_limit(store: Store) -> None:
    from rota.domain.job import MAX_ERROR_LENGTH

    job = await add(store)
    held = await claim_one(store)
    assert held is not None
    await store.fail(held.lease, error="x" * (MAX_ERROR_LENGTH * 2), retry_in=timedelta(0))
    stored = (await store.get(job.id)).last_error
    assert stored is not None and len(stored) == MAX_ERROR_LENGTH
    assert stored.endswith("[truncated]")
