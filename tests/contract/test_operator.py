"""Operator verbs on every store: delete and purge, reschedule, re-run, expiry."""

from __future__ import annotations

from datetime import timedelta

import pytest

from rota.domain.errors import JobNotFound, JobRunning
from rota.domain.job import JobState, Outcome
from rota.store import JobFilter, Store
from rota.testing import FakeClock
from tests.contract.helpers import add, claim_one


async def _succeeded_after_a_failure(store: Store, kind: str = "a") -> int:
    """A job whose first attempt failed and whose second succeeded: two history entries."""
    job = await add(store, kind)
    first = await claim_one(store)
    assert first is not None and first.id == job.id
    await store.fail(first.lease, error="boom", retry_in=timedelta(0))
    second = await claim_one(store)
    assert second is not None and second.id == job.id
    await store.complete(second.lease)
    assert len(await store.attempts(job.id)) == 2
    return job.id


# ---------------------------------------------------------------------- delete and purge


async def test_deleting_a_finished_job_removes_it_and_its_history(store: Store) -> None:
    job_id = await _succeeded_after_a_failure(store)
    deleted = await store.delete(job_id)
    assert (deleted.id, deleted.state) == (job_id, JobState.SUCCEEDED)
    with pytest.raises(JobNotFound):
        await store.get(job_id)
    with pytest.raises(JobNotFound):
        await store.attempts(job_id)
    assert (await store.counts()).total(JobState.SUCCEEDED) == 0


async def test_deleting_a_pending_job_frees_its_unique_key(store: Store) -> None:
    job = await add(store, unique_key="k")
    await store.delete(job.id)
    again = await add(store, unique_key="k")
    assert again.id != job.id
    assert (await store.get(again.id)).state is JobState.PENDING


async def test_a_running_job_cannot_be_deleted(store: Store) -> None:
    await add(store)
    running = await claim_one(store)
    assert running is not None
    with pytest.raises(JobRunning):
        await store.delete(running.id)
    assert await store.get(running.id) == running
    await store.complete(running.lease)  # its lease still holds


async def test_deleting_an_unknown_job_is_not_found(store: Store) -> None:
    with pytest.raises(JobNotFound):
        await store.delete(424242)


async def test_purge_deletes_only_finished_jobs_matching_the_filter(store: Store) -> None:
    dead_a = await add(store, "a", max_attempts=1)
    claimed = await claim_one(store)
    assert claimed is not None and claimed.id == dead_a.id
    await store.fail(claimed.lease, error="boom", retry_in=timedelta(0))
    succeeded_a = await _succeeded_after_a_failure(store, "a")
    cancelled_b = await add(store, "b")
    await store.cancel(cancelled_b.id)
    pending_a = await add(store, "a")

    assert await store.purge(JobFilter(kind="a", states=frozenset({JobState.DEAD}))) == 1
    with pytest.raises(JobNotFound):
        await store.get(dead_a.id)
    assert await store.purge(JobFilter(kind="a")) == 1  # the succeeded one; pending stays
    with pytest.raises(JobNotFound):
        await store.attempts(succeeded_a)
    assert (await store.get(pending_a.id)).state is JobState.PENDING
    assert (await store.get(cancelled_b.id)).state is JobState.CANCELLED
    assert await store.purge(JobFilter(), limit=0) == 0
    assert await store.purge(JobFilter()) == 1
    assert (await store.counts()).total(JobState.CANCELLED) == 0


async def test_purge_never_touches_running_jobs(store: Store, clock: FakeClock) -> None:
    await add(store)
    running = await claim_one(store)
    assert running is not None
    states = frozenset({JobState.RUNNING, JobState.PENDING})
    assert await store.purge(JobFilter(states=states)) == 0
    assert (await store.attempts(running.id))[-1].outcome is Outcome.RUNNING
