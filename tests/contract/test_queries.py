"""Reading jobs: get, keyset lists, counts, attempt history, prune, workers."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from rota.domain.errors import InvalidCursor, JobNotFound
from rota.domain.job import JobSpec
from rota.domain.job_state import JobState, Outcome
from rota.store import JobFilter, Store, WorkerInfo
from rota.testing import FakeClock
from tests.contract.helpers import LEASE, add, claim_one


async def test_get_unknown_job_is_not_found(store: Store) -> None:
    with pytest.raises(JobNotFound):
        await store.get(123456789)


async def test_list_pages_newest_first_and_is_stable_under_inserts(store: Store) -> None:
    results = await store.enqueue([JobSpec(kind="a", payload={"i": i}) for i in range(25)])
    ids = [result.job.id for result in results]
    first = await store.list_jobs(JobFilter(), limit=10)
    assert [job.id for job in first.jobs] == ids[::-1][:10]
    await store.enqueue([JobSpec(kind="a") for _ in range(5)])  # arrive between pages
    second = await store.list_jobs(JobFilter(), cursor=first.next_cursor, limit=10)
    assert [job.id for job in second.jobs] == ids[::-1][10:20]
    third = await store.list_jobs(JobFilter(), cursor=second.next_cursor, limit=10)
    assert [job.id for job in third.jobs] == ids[::-1][20:]
    assert third.next_cursor is None


async def test_list_filters_by_state_kind_queue_tenant(store: Store) -> None:
    a = await add(store, "alpha", queue="q1", tenant="t1")
    b = await add(store, "beta", queue="q2", tenant="t2")
    c = await add(store, "alpha", queue="q2", tenant="t1")
    held = await store.claim("w", queues=["q2"], limit=1, lease=LEASE)
    assert [job.id for job in held] == [b.id]

    async def ids(filter: JobFilter) -> list[int]:
        return [job.id for job in (await store.list_jobs(filter)).jobs]

    assert await ids(JobFilter(kind="alpha")) == [c.id, a.id]
    assert await ids(JobFilter(queue="q2")) == [c.id, b.id]
    assert await ids(JobFilter(tenant="t1")) == [c.id, a.id]
    assert await ids(JobFilter(states=frozenset({JobState.RUNNING}))) == [b.id]
    assert await ids(JobFilter(kind="alpha", queue="q2", tenant="t1")) == [c.id]
    assert await ids(JobFilter(kind="nothing")) == []


async def test_list_search_by_id_or_unique_key(store: Store) -> None:
    keyed = await add(store, unique_key="order-881")
    other = await add(store)
    found = await store.list_jobs(JobFilter(search="order-881"))
    assert [job.id for job in found.jobs] == [keyed.id]
    by_id = await store.list_jobs(JobFilter(search=str(other.id)))
    assert [job.id for job in by_id.jobs] == [other.id]


@pytest.mark.parametrize("term", ["²", "\u0661\u0662", "\uff11", "⑦", "0\u0663"])
async def test_search_takes_only_ascii_digits_as_a_job_id(store: Store, term: str) -> None:
    """Other scripts' digits and superscripts are text (``"²".isdigit()`` is true in Python):
    they match a unique key, never a job id, and never fail."""
    for _ in range(12):
        await add(store)
    keyed = await add(store, unique_key=term)
    found = await store.list_jobs(JobFilter(search=term))
    assert [job.id for job in found.jobs] == [keyed.id]
    assert await store.count_jobs(JobFilter(search=term)) == 1
    assert await store.bulk_cancel(JobFilter(search=term)) == 1
    assert (await store.get(keyed.id)).state is JobState.CANCELLED


@pytest.mark.parametrize("cursor", ["", "garbage!", "eDox", "ZZZZ", "j:12", "\x00"])
async def test_list_rejects_a_cursor_it_did_not_issue(store: Store, cursor: str) -> None:
    with pytest.raises(InvalidCursor):
        await store.list_jobs(JobFilter(), cursor=cursor)


async def test_counts_by_state_and_queue(store: Store, clock: FakeClock) -> None:
    await store.enqueue(
        [
            JobSpec(kind="a"),
            JobSpec(kind="a"),
            JobSpec(kind="a", queue="mail"),
            JobSpec(kind="a", delay=timedelta(hours=1)),
        ]
    )
    held = await claim_one(store)
    assert held is not None
    await store.complete(held.lease)
    clock.advance(timedelta(seconds=5))
    counts = await store.counts()
    assert counts.by_state[JobState.PENDING] == 3
    assert counts.by_state[JobState.SUCCEEDED] == 1
    assert counts.by_state[JobState.RUNNING] == 0
    assert counts.by_queue["mail"][JobState.PENDING] == 1
    assert counts.by_queue["default"][JobState.SUCCEEDED] == 1
    assert counts.oldest_due_at == clock.now() - timedelta(seconds=5)


async def test_attempt_history_records_every_attempt(store: Store, clock: FakeClock) -> None:
    job = await add(store, max_attempts=5)
    first = await claim_one(store, "w1", lease=timedelta(seconds=5))
    assert first is not None
    start1 = clock.now()
    clock.advance(timedelta(seconds=1))
    await store.fail(first.lease, error="boom", traceback="tb1", retry_in=timedelta(0))
    end1 = clock.now()
    second = await claim_one(store, "w2", lease=timedelta(seconds=5))
    assert second is not None
    clock.advance(timedelta(seconds=6))  # w2 goes silent
    third = await claim_one(store, "w3")
    assert third is not None
    clock.advance(timedelta(seconds=1))
    await store.complete(third.lease)
    history = await store.attempts(job.id)
    assert [(a.attempt, a.worker, a.outcome) for a in history] == [
        (1, "w1", Outcome.FAILED),
        (2, "w2", Outcome.LEASE_EXPIRED),
        (3, "w3", Outcome.SUCCEEDED),
    ]
    assert (history[0].started_at, history[0].finished_at) == (start1, end1)
    assert (history[0].error, history[0].traceback) == ("boom", "tb1")
    assert [a.token for a in history] == [first.lease_token, second.lease_token, third.lease_token]
    assert history[2].finished_at == clock.now()
    with pytest.raises(JobNotFound):
        await store.attempts(999999)


async def test_prune_deletes_only_old_finished_jobs(store: Store, clock: FakeClock) -> None:
    old_done = await add(store)
    held = await claim_one(store)
    assert held is not None
    await store.complete(held.lease)
    old_cancelled = await store.cancel((await add(store)).id)
    clock.advance(timedelta(days=8))
    still_pending = await add(store)
    recent = await add(store)
    recent_held = await claim_one(store)
    assert recent_held is not None and recent_held.id == still_pending.id
    await store.cancel(recent.id)
    pruned = await store.prune(older_than=clock.now() - timedelta(days=7))
    assert pruned == 2
    for gone in (old_done.id, old_cancelled.id):
        with pytest.raises(JobNotFound):
            await store.get(gone)
    assert (await store.get(still_pending.id)).state is JobState.RUNNING
    assert (await store.get(recent.id)).state is JobState.CANCELLED


async def test_prune_in_small_passes_reaches_every_old_job(store: Store, clock: FakeClock) -> None:
    old = [await store.cancel((await add(store)).id) for _ in range(5)]
    clock.advance(timedelta(days=8))
    recent = await store.cancel((await add(store)).id)
    cutoff = clock.now() - timedelta(days=7)
    passes = [await store.prune(older_than=cutoff, limit=2) for _ in range(4)]
    assert passes == [2, 2, 1, 0]
    for job in old:
        with pytest.raises(JobNotFound):
            await store.get(job.id)
    assert (await store.get(recent.id)).state is JobState.CANCELLED


async def test_workers_registry(store: Store, clock: FakeClock) -> None:
    info = WorkerInfo(name="host-1:123", host="host-1", pid=123, queues=("default",), concurrency=4)
    await store.register_worker(info)
    await add(store)
    assert await claim_one(store, "host-1:123") is not None
    clock.advance(timedelta(seconds=10))
    await store.beat_worker("host-1:123")
    [listed] = await store.list_workers()
    assert (listed.name, listed.queues, listed.concurrency, listed.running) == (
        "host-1:123",
        ("default",),
        4,
        1,
    )
    assert listed.beat_at == clock.now()
    assert listed.started_at == clock.now() - timedelta(seconds=10)
    clock.advance(timedelta(hours=2))
    assert await store.prune_workers(older_than=clock.now() - timedelta(hours=1)) == 1
    assert await store.list_workers() == []
    await store.register_worker(info)
    await store.deregister_worker(info.name)
    assert await store.list_workers() == []


async def test_a_worker_is_listed_with_its_own_heartbeat_interval(
    store: Store, clock: FakeClock
) -> None:
    quick = WorkerInfo(
        name="quick",
        host="h",
        pid=1,
        queues=("default",),
        concurrency=1,
        heartbeat=timedelta(seconds=0.5),
    )
    await store.register_worker(quick)
    await store.register_worker(replace(quick, name="unsaid", heartbeat=None))
    listed = {w.name: w for w in await store.list_workers()}
    assert listed["quick"].heartbeat == timedelta(seconds=0.5)
    assert listed["unsaid"].heartbeat is None
    clock.advance(timedelta(seconds=5))
    # Judged by its own interval (3 beats of 0.5 s), not by the 10 s assumed for the others.
    assert not listed["quick"].is_alive(clock.now(), timedelta(seconds=10))
    assert listed["unsaid"].is_alive(clock.now(), timedelta(seconds=10))


async def test_count_jobs_matches_the_filter_up_to_a_limit(store: Store) -> None:
    await store.enqueue([JobSpec(kind="a") for _ in range(7)] + [JobSpec(kind="b")])
    assert await store.count_jobs(JobFilter()) == 8
    assert await store.count_jobs(JobFilter(kind="a")) == 7
    assert await store.count_jobs(JobFilter(kind="a"), limit=5) == 5
    assert await store.count_jobs(JobFilter(states=frozenset({JobState.DEAD}))) == 0


async def test_throughput_counts_finished_jobs_per_bucket(store: Store, clock: FakeClock) -> None:
    start = clock.now()
    await store.enqueue([JobSpec(kind="a", max_attempts=1) for _ in range(5)])
    first = await store.claim("w", queues=["default"], limit=3, lease=LEASE)
    assert await store.complete_many([job.lease for job in first[:2]]) == []
    await store.fail(first[2].lease, error="x", retry_in=timedelta(0))
    clock.advance(timedelta(minutes=1))
    second = await store.claim("w", queues=["default"], limit=2, lease=LEASE)
    await store.complete(second[0].lease)
    await store.cancel(second[1].id)
    clock.advance(timedelta(minutes=1))
    buckets = await store.throughput(since=start, bucket=timedelta(minutes=1))
    assert [(b.start, b.succeeded, b.dead, b.cancelled) for b in buckets] == [
        (start, 2, 1, 0),
        (start + timedelta(minutes=1), 1, 0, 1),
    ]
