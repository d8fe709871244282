"""Operator verbs on every store: delete and purge, reschedule, re-run, expiry."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

from rota.domain.errors import InvalidJob, JobNotFound, JobRunning, StateConflict
from rota.domain.flow import Limit, LimitScope
from rota.domain.job import JobEdit, JobSpec
from rota.domain.job_state import JobState, Outcome
from rota.store import JobFilter, Store, open_store
from rota.testing import FakeClock
from tests.contract.helpers import add, claim_one
from tests.support.processes import eventually


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


# ---------------------------------------------------------------------- reschedule


async def test_reschedule_pulls_a_delayed_job_forward_to_now(
    store: Store, clock: FakeClock
) -> None:
    job = await add(store, delay=timedelta(hours=1))
    assert await claim_one(store) is None
    edited = await store.reschedule(job.id, JobEdit(run_now=True))
    assert edited.run_at == clock.now() and edited.state is JobState.PENDING
    claimed = await claim_one(store)
    assert claimed is not None and claimed.id == job.id


async def test_reschedule_changes_run_at_priority_and_queue(store: Store, clock: FakeClock) -> None:
    job = await add(store)
    later = clock.now() + timedelta(minutes=5)
    edited = await store.reschedule(job.id, JobEdit(run_at=later, priority=7, queue="urgent"))
    assert (edited.run_at, edited.priority, edited.queue) == (later, 7, "urgent")
    assert await store.get(job.id) == edited
    assert (await store.counts()).by_queue["urgent"][JobState.PENDING] == 1
    assert await claim_one(store, queues=("urgent",)) is None
    kept = await store.reschedule(job.id, JobEdit(priority=-3))
    assert (kept.run_at, kept.priority, kept.queue) == (later, -3, "urgent")
    clock.advance(timedelta(minutes=5))
    claimed = await claim_one(store, queues=("urgent",))
    assert claimed is not None and claimed.id == job.id


async def test_a_claimed_job_is_reported_not_rescheduled(store: Store) -> None:
    await add(store)
    running = await claim_one(store)
    assert running is not None
    with pytest.raises(JobRunning):
        await store.reschedule(running.id, JobEdit(run_now=True, priority=5))
    assert await store.get(running.id) == running


async def test_a_finished_job_cannot_be_rescheduled(store: Store) -> None:
    job = await add(store)
    cancelled = await store.cancel(job.id)
    with pytest.raises(StateConflict):
        await store.reschedule(job.id, JobEdit(queue="other"))
    assert await store.get(job.id) == cancelled
    with pytest.raises(JobNotFound):
        await store.reschedule(424242, JobEdit(priority=1))


@pytest.mark.postgres
async def test_reschedule_waiting_on_a_concurrent_claim_reports_the_claim(
    pg_url: str, clock: FakeClock
) -> None:
    """PostgreSQL, two connections: a claim holding the row's lock makes the edit wait; once
    the claim commits, the edit finds the job running and changes nothing. (Memory and SQLite
    run one writer at a time: there an edit comes wholly before or after a claim.)"""
    store = open_store(pg_url, clock=clock)
    try:
        await _edit_races_a_claim(store, pg_url)
    finally:
        await store.close()


async def _edit_races_a_claim(store: Store, store_url: str) -> None:
    job = await add(store, priority=1)
    async with await psycopg.AsyncConnection.connect(store_url) as claimer:
        async with claimer.transaction():
            await claimer.execute(
                "UPDATE rota_jobs SET state = 'running', attempt = 1, worker = 'w', "
                "lease_token = nextval('rota_lease_token_seq'), lease_until = now() "
                "+ interval '30 seconds', started_at = now() WHERE id = %s",
                [job.id],
            )
            edit = asyncio.create_task(store.reschedule(job.id, JobEdit(priority=9)))

            async def edit_waits_on_the_lock() -> bool:
                # From another connection: one transaction sees one snapshot of the activity.
                async with await psycopg.AsyncConnection.connect(
                    store_url, autocommit=True
                ) as observer:
                    cursor = await observer.execute(
                        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                        "AND datname = current_database()"
                    )
                    row = await cursor.fetchone()
                return bool(row and row[0])

            await eventually(edit_waits_on_the_lock, what="the edit waiting on the claim")
        with pytest.raises(JobRunning):
            await edit
    after = await store.get(job.id)
    assert (after.state, after.priority) == (JobState.RUNNING, 1)


def test_an_edit_that_changes_nothing_or_is_out_of_range_is_refused() -> None:
    with pytest.raises(InvalidJob, match="give at least one"):
        JobEdit()
    with pytest.raises(InvalidJob, match="priority"):
        JobEdit(priority=1000)
    with pytest.raises(InvalidJob, match="queue"):
        JobEdit(queue="no spaces")
    with pytest.raises(InvalidJob, match="not both"):
        JobEdit(run_now=True, run_at=datetime(2030, 1, 1, tzinfo=UTC))


# ---------------------------------------------------------------------- re-run


async def test_rerun_starts_a_new_attempt_series_and_keeps_the_history(
    store: Store, clock: FakeClock
) -> None:
    job_id = await _succeeded_after_a_failure(store)
    clock.advance(timedelta(minutes=1))
    rerun = await store.rerun(job_id)
    assert (rerun.state, rerun.attempt, rerun.run_at) == (JobState.PENDING, 0, clock.now())
    assert (rerun.finished_at, rerun.last_error) == (None, None)
    claimed = await claim_one(store)
    assert claimed is not None and (claimed.id, claimed.attempt) == (job_id, 1)
    await store.complete(claimed.lease)
    history = await store.attempts(job_id)
    assert [(a.attempt, a.outcome) for a in history] == [
        (1, Outcome.FAILED),
        (2, Outcome.SUCCEEDED),
        (1, Outcome.SUCCEEDED),
    ]
    tokens = [a.token for a in history]
    assert tokens == sorted(tokens) and len(set(tokens)) == 3
    assert all(a.finished_at is not None for a in history)


async def test_only_a_succeeded_job_reruns(store: Store) -> None:
    pending = await add(store)
    with pytest.raises(StateConflict, match="only succeeded jobs re-run"):
        await store.rerun(pending.id)
    await store.cancel(pending.id)
    with pytest.raises(StateConflict):
        await store.rerun(pending.id)
    with pytest.raises(JobNotFound):
        await store.rerun(424242)


async def test_rerun_refuses_while_another_job_holds_its_unique_key(store: Store) -> None:
    job = await add(store, unique_key="k")
    claimed = await claim_one(store)
    assert claimed is not None
    await store.complete(claimed.lease)
    holder = await add(store, unique_key="k")
    assert holder.id != job.id
    with pytest.raises(StateConflict):
        await store.rerun(job.id)
    assert (await store.get(job.id)).state is JobState.SUCCEEDED
    await store.delete(holder.id)
    assert (await store.rerun(job.id)).state is JobState.PENDING


# ---------------------------------------------------------------------- expiry


async def test_expiry_is_kept_and_expire_after_counts_from_the_store_clock(
    store: Store, clock: FakeClock
) -> None:
    at = clock.now() + timedelta(hours=1)
    fixed = await add(store, expires_at=at)
    relative = await add(store, expire_after=timedelta(minutes=5))
    assert fixed.expires_at == at
    assert relative.expires_at == clock.now() + timedelta(minutes=5)
    assert (await store.get(fixed.id)).expires_at == at
    listed = await store.list_jobs(JobFilter())
    assert {job.id: job.expires_at for job in listed.jobs} == {
        fixed.id: at,
        relative.id: clock.now() + timedelta(minutes=5),
    }
    claimed = await claim_one(store)
    assert claimed is not None and claimed.expires_at is not None


async def test_an_expired_job_is_never_claimed_and_ends_cancelled_as_expired(
    store: Store, clock: FakeClock
) -> None:
    job = await add(store, expire_after=timedelta(minutes=1), unique_key="k")
    keeper = await add(store, "b", delay=timedelta(minutes=2))
    clock.advance(timedelta(minutes=1))  # expires_at <= now: no attempt may start
    assert await claim_one(store) is None  # before any expiry pass ran
    assert (await store.get(job.id)).state is JobState.PENDING
    assert await store.expire() == [job.id]
    expired = await store.get(job.id)
    assert (expired.state, expired.last_error, expired.attempt) == (
        JobState.CANCELLED,
        "expired",
        0,
    )
    assert expired.finished_at == clock.now()
    assert await store.expire() == []
    again = await add(store, unique_key="k")  # its key is free again
    assert again.id != job.id
    clock.advance(timedelta(minutes=1))
    claimed = await store.claim("w", queues=["default"], limit=5, lease=timedelta(seconds=30))
    assert {c.id for c in claimed} == {keeper.id, again.id}  # jobs without expiry run


async def test_a_job_claimed_before_its_expiry_runs_and_a_retry_after_it_does_not(
    store: Store, clock: FakeClock
) -> None:
    job = await add(store, expire_after=timedelta(minutes=1))
    claimed = await claim_one(store)
    assert claimed is not None and claimed.id == job.id
    clock.advance(timedelta(minutes=2))
    assert await store.expire() == []  # running: no longer waiting to start
    await store.fail(claimed.lease, error="boom", retry_in=timedelta(0))
    assert await claim_one(store) is None  # the retry would start after expires_at
    assert await store.expire() == [job.id]
    history = await store.attempts(job.id)
    assert [a.outcome for a in history] == [Outcome.FAILED]


async def test_expiry_holds_for_a_large_batch(store: Store, clock: FakeClock) -> None:
    specs = [JobSpec(kind="bulk", expire_after=timedelta(seconds=30)) for _ in range(2_100)]
    results = await store.enqueue(specs)
    assert {r.job.expires_at for r in results} == {clock.now() + timedelta(seconds=30)}
    clock.advance(timedelta(seconds=30))
    assert await claim_one(store) is None
    assert len(await store.expire(limit=5_000)) == 2_100


# ---------------------------------------------------------------------- unique keys over time


async def _complete_next(store: Store) -> None:
    claimed = await claim_one(store)
    assert claimed is not None
    await store.complete(claimed.lease)


async def test_a_key_held_for_a_period_dedupes_a_succeeded_job_until_it_ends(
    store: Store, clock: FakeClock
) -> None:
    webhook = await add(store, unique_key="hook:1", unique_for=timedelta(hours=24))
    await _complete_next(store)
    clock.advance(timedelta(hours=23))
    [again] = await store.enqueue(
        [JobSpec(kind="a", unique_key="hook:1", unique_for=timedelta(hours=24))]
    )
    assert again.duplicate and again.job.id == webhook.id
    assert again.job.state is JobState.SUCCEEDED
    clock.advance(timedelta(hours=1))  # 24 h from the first enqueue: the hold has ended
    [later] = await store.enqueue(
        [JobSpec(kind="a", unique_key="hook:1", unique_for=timedelta(hours=24))]
    )
    assert not later.duplicate and later.job.id != webhook.id


async def test_a_hold_covers_only_the_states_it_names(store: Store, clock: FakeClock) -> None:
    dead_states = frozenset({JobState.DEAD})
    failing = await add(store, unique_key="k", unique_states=dead_states, max_attempts=1)
    claimed = await claim_one(store)
    assert claimed is not None
    await store.fail(claimed.lease, error="boom", retry_in=timedelta(0))
    clock.advance(timedelta(days=400))  # unique_states alone: held for good
    [held] = await store.enqueue([JobSpec(kind="a", unique_key="k", unique_states=dead_states)])
    assert held.duplicate and held.job.id == failing.id
    plain = await add(store, unique_key="k")  # a plain key only looks at active jobs
    assert plain.id != failing.id
    default = await add(store, unique_key="d", unique_for=timedelta(hours=1))
    await store.cancel(default.id)  # by default succeeded holds, cancelled does not
    [fresh] = await store.enqueue(
        [JobSpec(kind="a", unique_key="d", unique_for=timedelta(hours=1))]
    )
    assert not fresh.duplicate


async def test_concurrent_enqueues_of_a_held_key_insert_one_job(store: Store) -> None:
    spec = JobSpec(kind="a", unique_key="once", unique_for=timedelta(hours=1))
    results = await asyncio.gather(*(store.enqueue([spec]) for _ in range(8)))
    inserted = [r for [r] in results if not r.duplicate]
    assert len(inserted) == 1
    assert {r.job.id for [r] in results} == {inserted[0].job.id}
    await _complete_next(store)
    again = await asyncio.gather(*(store.enqueue([spec]) for _ in range(8)))
    assert all(r.duplicate and r.job.id == inserted[0].job.id for [r] in again)


async def test_replace_updates_the_waiting_jobs_payload_and_run_at(
    store: Store, clock: FakeClock
) -> None:
    first = await add(store, unique_key="debounce", payload={"n": 1}, delay=timedelta(seconds=30))
    clock.advance(timedelta(seconds=10))
    spec = JobSpec(
        kind="a",
        unique_key="debounce",
        payload={"n": 2},
        delay=timedelta(seconds=30),
        on_conflict="replace",
    )
    [replaced] = await store.enqueue([spec])
    assert (replaced.duplicate, replaced.replaced, replaced.job.id) == (True, True, first.id)
    assert replaced.job.payload == {"n": 2}
    assert replaced.job.run_at == clock.now() + timedelta(seconds=30)
    assert await store.get(first.id) == replaced.job
    clock.advance(timedelta(seconds=30))
    running = await claim_one(store)
    assert running is not None and running.payload == {"n": 2}
    [kept] = await store.enqueue([spec])  # a running holder is not changed
    assert (kept.duplicate, kept.replaced) == (True, False)
    assert (await store.get(first.id)).payload == {"n": 2}


def test_holds_and_replace_need_a_unique_key() -> None:
    with pytest.raises(InvalidJob, match="unique_key"):
        JobSpec(kind="a", unique_for=timedelta(hours=1))
    with pytest.raises(InvalidJob, match="unique_key"):
        JobSpec(kind="a", on_conflict="replace")
    with pytest.raises(InvalidJob, match="on_conflict"):
        JobSpec(kind="a", unique_key="k", on_conflict="merge")
    with pytest.raises(InvalidJob, match="unique_for"):
        JobSpec(kind="a", unique_key="k", unique_for=timedelta(0))
    spec = JobSpec(kind="a", unique_key="k", unique_states=frozenset({JobState.DEAD}))
    assert spec.unique_states == {
        JobState.PENDING,
        JobState.RUNNING,
        JobState.HELD,
        JobState.DEAD,
    }


async def test_an_expired_job_is_not_claimed_under_limits_either(
    store: Store, clock: FakeClock
) -> None:
    await store.set_limit(Limit(LimitScope.KIND, "a", concurrency=5))
    job = await add(store, expire_after=timedelta(seconds=10))
    fresh = await add(store)
    clock.advance(timedelta(seconds=10))
    claimed = await store.claim("w", queues=["default"], limit=5, lease=timedelta(seconds=30))
    assert [c.id for c in claimed] == [fresh.id]
    assert await store.expire() == [job.id]
