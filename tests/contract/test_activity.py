"""The per-minute activity tallies behind the kind and queue pages: attempts that ended, their
run times and waits, and their errors grouped by message, on every store."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from rota.domain.activity import DURATION_BUCKETS, ActivityBucket, duration_bucket
from rota.domain.errors import InvalidInput, LeaseLost
from rota.domain.job import JobSpec
from rota.store import Store
from rota.testing import FakeClock
from tests.contract.helpers import LEASE

MINUTE = timedelta(minutes=1)


def _histogram(*durations: timedelta) -> tuple[int, ...]:
    counts = [0] * DURATION_BUCKETS
    for duration in durations:
        counts[duration_bucket(duration // timedelta(microseconds=1))] += 1
    return tuple(counts)


def _totals(buckets: list[ActivityBucket]) -> list[tuple[int, int, int]]:
    return [(b.succeeded, b.failed, b.dead) for b in buckets]


async def test_ended_attempts_are_tallied_per_minute_queue_and_kind(
    store: Store, clock: FakeClock
) -> None:
    start = clock.now()
    await store.enqueue(
        [JobSpec(kind="resize", max_attempts=1) for _ in range(3)]
        + [JobSpec(kind="email", queue="mail", max_attempts=2)]
    )
    clock.advance(timedelta(seconds=3))  # every job waited 3 s from due to start
    resizes = await store.claim("w", queues=["default"], limit=3, lease=LEASE)
    [email] = await store.claim("w", queues=["mail"], limit=1, lease=LEASE)
    clock.advance(timedelta(milliseconds=40))
    assert await store.complete_many([job.lease for job in resizes[:2]]) == []
    clock.advance(timedelta(seconds=20))
    await store.fail(resizes[2].lease, error="boom", retry_in=timedelta(0))  # last attempt: dead
    await store.fail(email.lease, error="smtp down", retry_in=timedelta(0))  # retried
    clock.advance(MINUTE)
    [retry] = await store.claim("w", queues=["mail"], limit=1, lease=LEASE)
    await store.complete(retry.lease)
    clock.advance(MINUTE)

    by_kind = await store.activity(since=start, bucket=MINUTE, kind="resize")
    assert [b.start for b in by_kind] == [start, start + MINUTE, start + 2 * MINUTE]
    assert _totals(by_kind) == [(2, 1, 1), (0, 0, 0), (0, 0, 0)]
    first = by_kind[0]
    assert first.run == _histogram(
        timedelta(milliseconds=40),
        timedelta(milliseconds=40),
        timedelta(seconds=20, milliseconds=40),
    )
    assert first.wait == _histogram(*[timedelta(seconds=3)] * 3)
    # 40 ms falls in [20 ms, 50 ms): the median (rank 1.5 of 3) reads three quarters of the way
    # through that bucket, which holds 2; the 95th percentile falls in the [20 s, 50 s) bucket.
    assert first.run_quantile(0.5) == pytest.approx(0.0425)
    assert first.run_quantile(0.95) == pytest.approx(20 + 30 * (2.85 - 2))
    assert first.wait_quantile(0.95) == pytest.approx(2 + 3 * 0.95)

    by_queue = await store.activity(since=start, bucket=MINUTE, queue="mail")
    assert _totals(by_queue) == [(0, 1, 0), (1, 0, 0), (0, 0, 0)]
    # The retry was due at its failure and started a minute later.
    assert by_queue[1].wait == _histogram(MINUTE)
    everything = await store.activity(since=start, bucket=3 * MINUTE)
    assert _totals(everything) == [(3, 2, 1)]
    assert await store.activity(since=start, bucket=MINUTE, kind="resize", queue="mail") == [
        ActivityBucket(start + i * MINUTE) for i in range(3)
    ]


async def test_a_lost_lease_adds_nothing_to_the_tallies(store: Store, clock: FakeClock) -> None:
    start = clock.now()
    await store.enqueue([JobSpec(kind="a"), JobSpec(kind="a")])
    jobs = await store.claim("w", queues=["default"], limit=2, lease=LEASE)
    stale = [replace(job.lease, token=job.lease.token + 1000) for job in jobs]
    assert await store.complete_many(stale) == stale
    with pytest.raises(LeaseLost):
        await store.fail(stale[0], error="late", retry_in=timedelta(0))
    clock.advance(MINUTE)
    assert _totals(await store.activity(since=start, bucket=MINUTE)) == [(0, 0, 0)]
    assert await store.top_errors(since=start) == []


async def test_top_errors_group_messages_by_fingerprint_over_the_window(
    store: Store, clock: FakeClock
) -> None:
    start = clock.now()

    async def fail_with(error: str, kind: str = "sync", queue: str = "default") -> None:
        await store.enqueue([JobSpec(kind=kind, queue=queue, max_attempts=1)])
        [job] = await store.claim("w", queues=[queue], limit=1, lease=LEASE)
        await store.fail(job.lease, error=error, retry_in=timedelta(0))

    await fail_with("old error")  # outside the window read below
    clock.advance(MINUTE)
    since = clock.now()
    for order in (11, 12, 13):
        await fail_with(f"timeout after 30 s on order {order}")
    for user in ("a1b2c3d4e5", "ffff0000aa"):
        await fail_with(f"no user '{user}'")
    await fail_with("quota exceeded", kind="bill")
    await fail_with("timeout after 30 s on order 99", queue="slow")
    clock.advance(MINUTE)

    groups = await store.top_errors(since=since)
    assert [(g.fingerprint, g.count) for g in groups] == [
        ("timeout after N s on order N", 4),
        ("no user '…'", 2),
        ("quota exceeded", 1),
    ]
    assert groups[0].last_at == since
    assert groups[0].sample.startswith("timeout after 30 s on order ")
    assert [g.count for g in await store.top_errors(since=since, kind="sync")] == [4, 2]
    assert [g.count for g in await store.top_errors(since=since, queue="slow")] == [1]
    assert [g.fingerprint for g in await store.top_errors(since=since, limit=1)] == [
        "timeout after N s on order N"
    ]
    assert [g.fingerprint for g in await store.top_errors(since=start, kind="sync")][-1] == (
        "old error"
    )


async def test_activity_refuses_buckets_that_are_no_whole_minutes(store: Store) -> None:
    since = (await store.now()).replace(second=0, microsecond=0)
    with pytest.raises(InvalidInput):
        await store.activity(since=since, bucket=timedelta(seconds=30))
    with pytest.raises(InvalidInput):
        await store.activity(since=since + timedelta(seconds=1), bucket=MINUTE)


async def test_the_tallies_of_pruned_minutes_go_with_their_jobs(
    store: Store, clock: FakeClock
) -> None:
    start = clock.now()
    await store.enqueue([JobSpec(kind="a", max_attempts=1), JobSpec(kind="a")])
    first, second = await store.claim("w", queues=["default"], limit=2, lease=LEASE)
    await store.complete(first.lease)
    await store.fail(second.lease, error="boom", retry_in=timedelta(0), permanent=True)
    clock.advance(timedelta(days=2))
    later = clock.now().replace(second=0, microsecond=0)
    await store.enqueue([JobSpec(kind="a")])
    [third] = await store.claim("w", queues=["default"], limit=1, lease=LEASE)
    await store.complete(third.lease)
    clock.advance(MINUTE)
    # As retention runs it: passes until one prunes nothing.
    while await store.prune(older_than=clock.now() - timedelta(days=1)):
        pass
    pruned = await store.activity(since=start, bucket=MINUTE, now=start + 2 * MINUTE)
    assert _totals(pruned) == [(0, 0, 0), (0, 0, 0)]
    assert await store.top_errors(since=start) == []
    kept = await store.activity(since=later, bucket=MINUTE)
    assert _totals(kept) == [(1, 0, 0)]
