"""Results and progress: what a handler returned is kept with its success, what it reported
rides the heartbeat, and both are fenced on the lease token like every write after a claim."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from datetime import timedelta
from typing import Any, TypeVar

import pytest

from rota.domain.errors import JobNotFound
from rota.domain.job_state import JobState
from rota.domain.payload import MAX_RESULT_BYTES, Progress
from rota.runtime.context import JobContext
from rota.runtime.registry import Registry
from rota.runtime.worker import Worker
from rota.runtime.worker_settings import WorkerSettings
from rota.store import Store
from rota.testing import FakeClock
from tests.contract.helpers import LEASE, add, claim_one, claimed, reclaimed

H = TypeVar("H", bound=Callable[..., Any])


def _handles(registry: Registry, kind: str, **options: Any) -> Callable[[H], H]:
    def register(handler: H) -> H:
        registry.register(kind, handler, **options)
        return handler

    return register


def _worker(store: Store, registry: Registry, clock: FakeClock) -> Worker:
    return Worker(store, registry, WorkerSettings(name="w", concurrency=4), clock=clock)


# ------------------------------------------------------------------ results at the store


async def test_completion_stores_the_result_with_the_success(store: Store) -> None:
    job = await claimed(store)
    assert await store.complete_many([job.lease], results=['{"answer":42,"n":[1,2.5]}']) == []
    done = await store.get(job.id)
    assert done.state is JobState.SUCCEEDED
    assert done.result == {"answer": 42, "n": [1, 2.5]}


async def test_a_completion_without_a_result_stores_nothing(store: Store) -> None:
    first, second = await claimed(store), await claimed(store)
    await store.complete(first.lease)
    assert await store.complete_many([second.lease], results=[None]) == []
    assert (await store.get(first.id)).result is None
    assert (await store.get(second.id)).result is None


async def test_each_result_of_a_batch_goes_to_its_own_job(store: Store, clock: FakeClock) -> None:
    stale, current = await reclaimed(store, clock)
    plain = await claimed(store)
    other = await claimed(store)
    lost = await store.complete_many(
        [stale.lease, plain.lease, other.lease], results=['"late"', None, '["other"]']
    )
    assert lost == [stale.lease]
    assert (await store.get(plain.id)).result is None
    assert (await store.get(other.id)).result == ["other"]
    assert (await store.get(current.id)).state is JobState.RUNNING


async def test_a_stale_lease_completion_writes_no_result(store: Store, clock: FakeClock) -> None:
    a, b = await reclaimed(store, clock)
    assert await store.complete_many([a.lease], results=['{"from":"A"}']) == [a.lease]
    assert (await store.get(b.id)).result is None
    assert await store.complete_many([b.lease], results=['{"from":"B"}']) == []
    assert (await store.get(b.id)).result == {"from": "B"}


async def test_get_many_returns_the_jobs_that_exist(store: Store) -> None:
    first, second = await add(store), await add(store)
    found = await store.get_many([second.id, first.id, 10_000_000, second.id])
    assert sorted(job.id for job in found) == [first.id, second.id]
    assert await store.get_many([]) == []


async def test_expecting_jobs_changes_nothing_about_them(store: Store, clock: FakeClock) -> None:
    job = await claimed(store)
    await store.expect_finished([job.id, job.id, 10_000_000])
    await store.expect_finished([job.id])
    before = await store.get(job.id)
    assert await store.complete_many([job.lease], results=["1"]) == []
    after = await store.get(job.id)
    assert (after.state, after.result) == (JobState.SUCCEEDED, 1)
    assert before.state is JobState.RUNNING
    await store.expect_finished([job.id])  # a finished job: harmless too
    await store.expect_finished([])


async def test_retention_prunes_the_result_with_its_job(store: Store, clock: FakeClock) -> None:
    job = await claimed(store)
    await store.complete_many([job.lease], results=['{"big":"' + "x" * 1000 + '"}'])
    clock.advance(timedelta(days=8))
    assert await store.prune(older_than=clock.now() - timedelta(days=7)) == 1
    with pytest.raises(JobNotFound):
        await store.get(job.id)
    assert await store.get_many([job.id]) == []


# ------------------------------------------------------------------ results through the worker


async def test_a_handler_s_return_value_is_stored_with_its_success(
    store: Store, clock: FakeClock
) -> None:
    registry = Registry()

    @_handles(registry, "answer")
    async def answer(ctx: JobContext, payload: Any) -> Any:
        return {"answer": payload["n"] * 2, "unicode": "é✓"}

    @_handles(registry, "nothing")
    def nothing(ctx: JobContext, payload: Any) -> None:
        return None

    job = await add(store, "answer", payload={"n": 21})
    silent = await add(store, "nothing")
    assert await _worker(store, registry, clock).run_until_idle() == 2
    done = await store.get(job.id)
    assert (done.state, done.result) == (JobState.SUCCEEDED, {"answer": 42, "unicode": "é✓"})
    quiet = await store.get(silent.id)
    assert (quiet.state, quiet.result) == (JobState.SUCCEEDED, None)


@pytest.mark.parametrize(
    ("returned", "why"),
    [
        ({1, 2}, "result: is not JSON: set is not allowed"),
        ({"x": float("nan")}, "result: must not contain NaN or Infinity"),
    ],
    ids=["not-json", "nan"],
)
async def test_a_result_that_cannot_be_stored_fails_the_job_permanently(
    store: Store, clock: FakeClock, returned: Any, why: str
) -> None:
    registry = Registry()

    @_handles(registry, "bad", max_attempts=5)
    async def bad(ctx: JobContext, payload: Any) -> Any:
        return returned

    job = await add(store, "bad", max_attempts=5)
    await _worker(store, registry, clock).run_until_idle()
    dead = await store.get(job.id)
    assert dead.state is JobState.DEAD, "no retry: the same value would come back"
    assert dead.attempt == 1
    assert dead.result is None
    assert dead.last_error == f"the handler's return value cannot be stored: {why}"


async def test_an_integer_too_long_for_json_fails_a_single_attempt_job_once(
    store: Store, clock: FakeClock
) -> None:
    # Python refuses to turn an int of more than 4,300 digits into text (a ValueError inside
    # the JSON encoder): the attempt fails with that error, and the job runs exactly once.
    registry = Registry()
    runs: list[int] = []

    @_handles(registry, "huge", max_attempts=1)
    async def huge(ctx: JobContext, payload: Any) -> Any:
        runs.append(ctx.attempt)
        return 10**5000

    job = await add(store, "huge", max_attempts=1)
    worker = _worker(store, registry, clock)
    await worker.run_until_idle()
    dead = await store.get(job.id)
    assert dead.state is JobState.DEAD
    assert dead.last_error is not None
    assert dead.last_error.startswith(
        "the handler's return value cannot be stored: result: cannot be written as JSON: "
        "Exceeds the limit (4300 digits) for integer string conversion"
    )
    clock.advance(LEASE * 3)  # nothing is left to a lease: no rescue brings it back
    await store.rescue()
    await worker.run_until_idle()
    assert runs == [1]
    assert [a.attempt for a in await store.attempts(job.id)] == [1]
    assert (await store.get(job.id)).state is JobState.DEAD


async def test_an_outcome_write_that_raises_fails_the_attempt_instead_of_rerunning_it(
    store: Store, clock: FakeClock
) -> None:
    # A store error (not an outage) on the completion: left to its lease, the attempt would
    # count as a worker crash, given back on the last attempt, and the job would run twice.
    registry = Registry()
    runs: list[int] = []

    @_handles(registry, "once", max_attempts=1)
    async def once(ctx: JobContext, payload: Any) -> Any:
        runs.append(ctx.attempt)
        return {"ok": True}

    async def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("the result column refused the value")

    job = await add(store, "once", max_attempts=1)
    worker = _worker(store, registry, clock)
    original = store.complete_many
    store.complete_many = broken  # type: ignore[method-assign]
    try:
        await worker.run_until_idle()
    finally:
        store.complete_many = original  # type: ignore[method-assign]
    dead = await store.get(job.id)
    assert dead.state is JobState.DEAD
    assert dead.last_error == (
        "internal error while running the job: RuntimeError: the result column refused the value"
    )
    clock.advance(LEASE * 3)
    await store.rescue()
    await worker.run_until_idle()
    assert runs == [1]
    assert [a.attempt for a in await store.attempts(job.id)] == [1]


# ------------------------------------------------------------------ long results, kept apart

#: A result too long for its job's row (MAX_RESULT_BYTES), with characters of 1 to 4 bytes.
LONG = {"rows": ["é✓𝄞x" * 40] * 1200}


def _text(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


async def test_a_result_longer_than_a_row_holds_is_kept_whole(store: Store) -> None:
    assert len(_text(LONG).encode()) > MAX_RESULT_BYTES
    short, long, silent = await claimed(store), await claimed(store), await claimed(store)
    lost = await store.complete_many(
        [short.lease, long.lease, silent.lease], results=['{"n":1}', _text(LONG), None]
    )
    assert lost == []
    assert (await store.get(long.id)).result == LONG
    by_id = {job.id: job.result for job in await store.get_many([short.id, long.id, silent.id])}
    assert by_id == {short.id: {"n": 1}, long.id: LONG, silent.id: None}


async def test_a_fenced_out_completion_keeps_no_long_result(store: Store, clock: FakeClock) -> None:
    stale, current = await reclaimed(store, clock)
    assert await store.complete_many([stale.lease], results=[_text(LONG)]) == [stale.lease]
    assert await store.complete_many([current.lease], results=[None]) == []
    assert (await store.get(current.id)).result is None


@pytest.mark.parametrize("first", [_text(LONG), '{"n":1}'], ids=["long", "short"])
async def test_a_rerun_that_returns_nothing_drops_the_result_before(
    store: Store, first: str
) -> None:
    job = await claimed(store)
    assert await store.complete_many([job.lease], results=[first]) == []
    await store.rerun(job.id)
    again = await claim_one(store)
    assert again is not None and again.id == job.id
    assert await store.complete_many([again.lease], results=[None]) == []
    assert (await store.get(job.id)).result is None


async def test_a_worker_stores_a_long_result_and_refuses_one_over_its_cap(
    store: Store, clock: FakeClock
) -> None:
    registry = Registry()

    @_handles(registry, "long", max_attempts=3)
    async def long(ctx: JobContext, payload: Any) -> Any:
        return "x" * payload["n"]

    kept = await add(store, "long", payload={"n": 90_000}, max_attempts=3)
    refused = await add(store, "long", payload={"n": 150_000}, max_attempts=3)
    settings = WorkerSettings(name="w", concurrency=2, max_result_bytes=100_000)
    await Worker(store, registry, settings, clock=clock).run_until_idle()
    done = await store.get(kept.id)
    assert (done.state, done.result) == (JobState.SUCCEEDED, "x" * 90_000)
    dead = await store.get(refused.id)
    assert (dead.state, dead.attempt, dead.result) == (JobState.DEAD, 1, None)
    assert dead.last_error == (
        "the handler's return value cannot be stored: result: is larger than 100000 bytes as JSON"
    )


# ------------------------------------------------------------------ progress


async def test_a_heartbeat_carries_progress_onto_the_job(store: Store) -> None:
    job = await claimed(store)
    other = await claimed(store)
    beat = await store.heartbeat(
        [job.lease, other.lease],
        lease=LEASE,
        progress={job.id: Progress(0.42, "page 42 of 100")},
    )
    assert beat.lost == []
    reported = await store.get(job.id)
    assert (reported.progress, reported.progress_message) == (0.42, "page 42 of 100")
    silent = await store.get(other.id)
    assert (silent.progress, silent.progress_message) == (None, None)
    # A beat without a report keeps the last one.
    await store.heartbeat([job.lease], lease=LEASE)
    assert (await store.get(job.id)).progress == 0.42


async def test_a_stale_lease_s_progress_is_dropped(store: Store, clock: FakeClock) -> None:
    a, b = await reclaimed(store, clock)
    beat = await store.heartbeat([a.lease], lease=LEASE, progress={a.id: Progress(0.9, "stale")})
    assert beat.lost == [a.lease]
    after = await store.get(b.id)
    assert (after.progress, after.progress_message) == (None, None)


async def test_a_new_attempt_starts_without_the_last_one_s_progress(
    store: Store, clock: FakeClock
) -> None:
    await add(store)
    a = await claim_one(store, "A", lease=timedelta(seconds=5))
    assert a is not None
    await store.heartbeat([a.lease], lease=timedelta(seconds=5), progress={a.id: Progress(0.5)})
    clock.advance(timedelta(seconds=6))
    b = await claim_one(store, "B")
    assert b is not None
    assert (b.progress, (await store.get(b.id)).progress) == (None, None)


async def test_progress_reported_by_a_handler_rides_the_next_heartbeat(
    store: Store, clock: FakeClock
) -> None:
    registry = Registry()
    reported = asyncio.Event()
    finish = asyncio.Event()

    @_handles(registry, "pages")
    async def pages(ctx: JobContext, payload: Any) -> str:
        for page in range(1, 43):
            await ctx.progress(page / 100, message=f"page {page} of 100")
        reported.set()
        await finish.wait()
        return "done"

    job = await add(store, "pages")
    worker = _worker(store, registry, clock)
    await worker.claim_tick()
    await reported.wait()
    assert (await store.get(job.id)).progress is None, "no write of its own per report"
    await worker.heartbeater.tick()
    running = await store.get(job.id)
    assert (running.progress, running.progress_message) == (0.42, "page 42 of 100")
    finish.set()
    await worker.wait_for_running()
    assert (await store.get(job.id)).result == "done"


async def test_a_succeeded_job_s_progress_is_one_whatever_it_last_reported(store: Store) -> None:
    reported, silent = await claimed(store), await claimed(store)
    await store.heartbeat([reported.lease], lease=LEASE, progress={reported.id: Progress(0.92)})
    assert await store.complete_many([reported.lease, silent.lease], results=['"ok"', None]) == []
    assert (await store.get(reported.id)).progress == 1.0
    assert (await store.get(silent.id)).progress == 1.0


async def test_a_dead_job_keeps_the_progress_it_last_reported(store: Store) -> None:
    job = await claimed(store, max_attempts=1)
    await store.heartbeat([job.lease], lease=LEASE, progress={job.id: Progress(0.3)})
    await store.fail(job.lease, error="boom", retry_in=timedelta(0))
    dead = await store.get(job.id)
    assert (dead.state, dead.progress) == (JobState.DEAD, 0.3)


async def test_a_report_is_written_within_a_second_and_at_most_once_a_second(
    store: Store, clock: FakeClock
) -> None:
    registry = Registry()
    go = asyncio.Event()
    reported = asyncio.Event()
    finish = asyncio.Event()

    @_handles(registry, "pages")
    async def pages(ctx: JobContext, payload: Any) -> str:
        for page in range(1, 43):
            await ctx.progress(page / 100, message=f"page {page} of 100")
        reported.set()
        await go.wait()
        for page in range(43, 61):
            await ctx.progress(page / 100, message=f"page {page} of 100")
        reported.set()
        await finish.wait()
        return "done"

    job = await add(store, "pages")
    worker = _worker(store, registry, clock)
    writes: list[Any] = []
    original = store.heartbeat

    async def counted(*args: Any, **kwargs: Any) -> Any:
        writes.append(kwargs.get("progress"))
        return await original(*args, **kwargs)

    store.heartbeat = counted  # type: ignore[method-assign]
    try:
        await worker.claim_tick()
        await reported.wait()
        progress = worker.progress
        assert progress.nudged.is_set(), "a report wakes the writer"
        assert progress.interval_s() == 0, "nothing written yet: due at once"
        assert await progress.tick() == 1
        running = await store.get(job.id)
        assert (running.progress, running.progress_message) == (0.42, "page 42 of 100")
        assert len(writes) == 1, "42 reports, one write"

        reported.clear()
        go.set()
        await reported.wait()
        assert await progress.tick() == 0, "under a second since the last write: coalesced"
        assert (await store.get(job.id)).progress == 0.42
        assert 0 < progress.interval_s() <= 1.0
        clock.advance(timedelta(seconds=1))
        assert progress.interval_s() == 0
        assert await progress.tick() == 1
        assert (await store.get(job.id)).progress == 0.6
        assert await progress.tick() == 0, "nothing new to say"
        assert len(writes) == 2
        assert progress.interval_s() == worker.settings.heartbeat.total_seconds()
        finish.set()
        await worker.wait_for_running()
    finally:
        store.heartbeat = original  # type: ignore[method-assign]
    done = await store.get(job.id)
    assert (done.state, done.progress, done.result) == (JobState.SUCCEEDED, 1.0, "done")


async def test_a_report_of_a_lease_no_longer_held_is_not_written(
    store: Store, clock: FakeClock
) -> None:
    registry = Registry()
    reported = asyncio.Event()
    finish = asyncio.Event()

    @_handles(registry, "pages")
    async def pages(ctx: JobContext, payload: Any) -> None:
        await ctx.progress(0.5, message="half")
        reported.set()
        await finish.wait()

    job = await add(store, "pages")
    worker = _worker(store, registry, clock)
    await worker.claim_tick()
    await reported.wait()
    await store.cancel(job.id)  # the lease is no longer held; the worker has not heard yet
    assert await worker.progress.tick() == 0
    assert (await store.get(job.id)).progress is None, "fenced on the lease token"
    finish.set()
    await worker.wait_for_running()
