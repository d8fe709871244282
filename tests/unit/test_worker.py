"""The worker on the in-memory store, driven by ticks and a fake clock."""

from __future__ import annotations

import asyncio
import logging
import threading
from datetime import timedelta
from typing import Any

import pytest

from rota import App, JobContext, JobState, Permanent, RetryPolicy, Snooze, WorkerSettings
from rota.domain.errors import StoreUnavailable
from rota.domain.job_state import Outcome
from rota.domain.lease import Lease
from rota.runtime.completions import Completer
from rota.runtime.execution import Stop
from rota.runtime.worker import Worker
from rota.store.memory import MemoryStore
from rota.testing import FakeClock, drain
from tests.unit.conftest import settings

NO_JITTER = RetryPolicy(base=timedelta(seconds=10), jitter=0)


async def test_async_and_sync_handlers_both_succeed(app: App) -> None:
    seen: list[tuple[str, Any, int]] = []

    @app.job("async-kind")
    async def handle_async(ctx: JobContext, payload: Any) -> None:
        seen.append(("async", payload, ctx.attempt))

    @app.job("sync-kind")
    def handle_sync(ctx: JobContext, payload: Any) -> None:
        assert threading.current_thread() is not threading.main_thread()
        seen.append(("sync", payload, ctx.attempt))

    a = await app.enqueue("async-kind", {"n": 1})
    s = await app.enqueue("sync-kind", {"n": 2})
    assert await drain(app) == 2
    assert sorted(seen) == [("async", {"n": 1}, 1), ("sync", {"n": 2}, 1)]
    assert (await app.jobs.get(a.job.id)).state is JobState.SUCCEEDED
    assert (await app.jobs.get(s.job.id)).state is JobState.SUCCEEDED


async def test_handler_sees_its_fencing_token_and_worker(app: App) -> None:
    tokens: list[tuple[int, str, int]] = []

    @app.job("t")
    async def handle(ctx: JobContext, payload: Any) -> None:
        tokens.append((ctx.fencing_token, ctx.worker, ctx.job_id))

    job = (await app.enqueue("t")).job
    await drain(app)
    [(token, worker, job_id)] = tokens
    assert (worker, job_id) == ("rota-testing", job.id)
    [attempt] = await app.store.attempts(job.id)
    assert attempt.token == token


async def test_error_retries_with_the_kinds_backoff_then_dead(app: App, clock: FakeClock) -> None:
    @app.job("flaky", max_attempts=2, retry=NO_JITTER)
    async def handle(ctx: JobContext, payload: Any) -> None:
        raise RuntimeError("upstream returned 503")

    job = (await app.enqueue("flaky")).job
    await drain(app)
    failed = await app.jobs.get(job.id)
    assert (failed.state, failed.attempt) == (JobState.PENDING, 1)
    assert failed.run_at == clock.now() + timedelta(seconds=10)
    assert failed.last_error == "RuntimeError: upstream returned 503"
    clock.advance(timedelta(seconds=10))
    await drain(app)
    dead = await app.jobs.get(job.id)
    assert (dead.state, dead.attempt) == (JobState.DEAD, 2)
    history = await app.store.attempts(job.id)
    assert [a.outcome for a in history] == [Outcome.FAILED, Outcome.FAILED]
    assert history[0].traceback is not None
    assert "RuntimeError: upstream returned 503" in history[0].traceback


async def test_permanent_error_is_dead_at_once(app: App) -> None:
    @app.job("p", max_attempts=5)
    def handle(ctx: JobContext, payload: Any) -> None:
        raise Permanent("invalid email address")

    job = (await app.enqueue("p")).job
    await drain(app)
    dead = await app.jobs.get(job.id)
    assert (dead.state, dead.attempt, dead.last_error) == (
        JobState.DEAD,
        1,
        "Permanent: invalid email address",
    )


async def test_snooze_runs_later_and_gives_the_attempt_back(app: App, clock: FakeClock) -> None:
    calls: list[int] = []

    @app.job("s", max_attempts=1)
    async def handle(ctx: JobContext, payload: Any) -> None:
        calls.append(ctx.attempt)
        if len(calls) == 1:
            raise Snooze(timedelta(minutes=5))

    job = (await app.enqueue("s")).job
    await drain(app)
    snoozed = await app.jobs.get(job.id)
    assert (snoozed.state, snoozed.attempt) == (JobState.PENDING, 0)
    assert snoozed.run_at == clock.now() + timedelta(minutes=5)
    clock.advance(timedelta(minutes=5))
    await drain(app)
    assert (await app.jobs.get(job.id)).state is JobState.SUCCEEDED
    assert calls == [1, 1]


async def test_a_kind_the_worker_does_not_run_is_left_for_a_worker_that_does(
    app: App, clock: FakeClock
) -> None:
    """A rolling deploy: the job of a kind only newer code knows waits for newer code."""
    job = (await app.enqueue("added-in-the-next-release", max_attempts=5)).job
    assert await drain(app) == 0
    left = await app.jobs.get(job.id)
    assert (left.state, left.attempt, left.last_error) == (JobState.PENDING, 0, None)

    @app.job("added-in-the-next-release")
    async def handle(ctx: JobContext, payload: Any) -> None:
        pass

    assert await drain(app) == 1
    assert (await app.jobs.get(job.id)).state is JobState.SUCCEEDED


async def test_a_worker_registers_the_kinds_it_runs(app: App) -> None:
    @app.job("k1")
    async def handle(ctx: JobContext, payload: Any) -> None:
        pass

    worker = app.worker(settings())
    await worker.registration.register()
    [info] = await app.store.list_workers()
    assert info.kinds == ("k1",)


async def test_timeout_fails_the_attempt_and_cancels_the_handler(app: App) -> None:
    cancelled = asyncio.Event()

    @app.job("hangs", timeout=0.01, max_attempts=1)
    async def handle(ctx: JobContext, payload: Any) -> None:
        try:
            await asyncio.Event().wait()
        finally:
            cancelled.set()

    job = (await app.enqueue("hangs")).job
    await drain(app)
    assert cancelled.is_set()
    dead = await app.jobs.get(job.id)
    assert (dead.state, dead.last_error) == (JobState.DEAD, "timed out after 0.01s")


async def test_a_handlers_own_timeout_error_is_an_ordinary_failure(app: App) -> None:
    @app.job("raises-timeout", timeout=30, max_attempts=1)
    async def handle(ctx: JobContext, payload: Any) -> None:
        raise TimeoutError("the API did not answer")

    job = (await app.enqueue("raises-timeout")).job
    await drain(app)
    assert (await app.jobs.get(job.id)).last_error == "TimeoutError: the API did not answer"


class Unprintable(RuntimeError):
    """An exception whose ``__str__`` raises (a broken library error)."""

    def __str__(self) -> str:
        raise ValueError("no text for you")


class UnprintablePermanent(Permanent):
    def __str__(self) -> str:
        raise ValueError("no text for you")


class Unformattable(RuntimeError):
    """An exception that even ``traceback.format_exception`` cannot format."""

    @property
    def __notes__(self) -> list[str]:
        raise ValueError("no notes for you")

    def __str__(self) -> str:
        raise ValueError("no text for you")


@pytest.mark.parametrize("handler_kind", ["async", "sync"])
async def test_an_exception_that_cannot_be_printed_is_recorded_like_any_failure(
    app: App, clock: FakeClock, handler_kind: str
) -> None:
    raised = iter([Unprintable(), Unformattable()])

    def fail() -> None:
        raise next(raised)

    if handler_kind == "async":

        @app.job("broken", max_attempts=3, retry=NO_JITTER)
        async def handle(ctx: JobContext, payload: Any) -> None:
            fail()

    else:

        @app.job("broken", max_attempts=3, retry=NO_JITTER)
        def handle_sync(ctx: JobContext, payload: Any) -> None:
            fail()

    @app.job("broken-for-good", max_attempts=3)
    async def handle_permanent(ctx: JobContext, payload: Any) -> None:
        raise UnprintablePermanent()

    job = (await app.enqueue("broken")).job
    dead = (await app.enqueue("broken-for-good")).job
    await drain(app)
    retried = await app.jobs.get(job.id)
    assert (retried.state, retried.attempt) == (JobState.PENDING, 1), "failed, not left running"
    assert retried.last_error == "Unprintable: unprintable error"
    assert retried.run_at == clock.now() + timedelta(seconds=10)
    clock.advance(timedelta(seconds=10))
    await drain(app)
    again = await app.jobs.get(job.id)
    assert (again.state, again.attempt) == (JobState.PENDING, 2)
    assert again.last_error == "Unformattable: unprintable error"
    first, second = await app.store.attempts(job.id)
    assert (first.outcome, second.outcome) == (Outcome.FAILED, Outcome.FAILED)
    assert first.traceback is not None and "Unprintable" in first.traceback
    assert second.traceback is not None
    assert "in fail" in second.traceback, "the frames are kept"
    assert second.traceback.endswith("Unformattable: unprintable error\n")
    permanent = await app.jobs.get(dead.id)
    assert (permanent.state, permanent.attempt, permanent.last_error) == (
        JobState.DEAD,
        1,
        "UnprintablePermanent: unprintable error",
    )


async def test_claims_never_exceed_free_slots(app: App) -> None:
    release = asyncio.Event()

    @app.job("block")
    async def handle(ctx: JobContext, payload: Any) -> None:
        await release.wait()

    await app.enqueue_many([app.spec("block") for _ in range(5)])
    worker = app.worker(settings(concurrency=2))
    assert len(await worker.claim_tick()) == 2
    assert await worker.claim_tick() == []
    assert worker.free_slots() == 0
    release.set()
    await worker.wait_for_running()
    assert len(await worker.claim_tick()) == 2
    await worker.wait_for_running()


async def test_cancel_reaches_a_running_handler_within_one_heartbeat(app: App) -> None:
    started = asyncio.Event()
    stopped = asyncio.Event()

    @app.job("long")
    async def handle(ctx: JobContext, payload: Any) -> None:
        started.set()
        try:
            await asyncio.Event().wait()
        finally:
            stopped.set()

    job = (await app.enqueue("long")).job
    worker = app.worker(settings())
    await worker.claim_tick()
    await started.wait()
    await app.jobs.cancel(job.id)
    lost = await worker.heartbeater.tick()
    assert [j.id for j in lost] == [job.id]
    await worker.wait_for_running()
    assert stopped.is_set()
    assert (await app.jobs.get(job.id)).state is JobState.CANCELLED


async def test_a_job_stopped_before_its_task_first_ran_frees_its_slot(
    app: App, clock: FakeClock
) -> None:
    """A claim that answers after a stall past the lease, then a heartbeat tick in the same
    turn of the loop: the job is stopped before its task ever ran. Its slot comes back (held
    for good, it would also keep a crash suspect claimed later waiting to run alone)."""
    ran: list[int] = []

    @app.job("quick")
    async def handle(ctx: JobContext, payload: Any) -> None:
        ran.append(ctx.job.id)

    job = (await app.enqueue("quick")).job
    worker = app.worker(settings(concurrency=2))
    assert [claimed.id for claimed in await worker.claim_tick()] == [job.id]
    clock.advance(timedelta(seconds=31))  # stalled past the lease before its task started
    assert [lost.id for lost in await worker.heartbeater.tick()] == [job.id]
    await asyncio.wait_for(worker.wait_for_running(), timeout=5)
    assert (worker.held, worker.free_slots(), ran) == ([], 2, [])
    [taken] = await app.store.claim("other", queues=["default"], limit=1, lease=timedelta(60))
    assert (taken.id, taken.attempt) == (job.id, 2)


async def test_lost_lease_cancels_the_handler_and_discards_its_result(
    app: App, clock: FakeClock
) -> None:
    started = asyncio.Event()
    finish = asyncio.Event()
    ctxs: list[JobContext] = []

    @app.job("slow")
    async def handle(ctx: JobContext, payload: Any) -> None:
        ctxs.append(ctx)
        started.set()
        await finish.wait()

    job = (await app.enqueue("slow")).job
    paused = app.worker(settings(name="paused"))
    await paused.claim_tick()
    await started.wait()
    clock.advance(timedelta(seconds=31))  # the paused worker missed its heartbeats
    [taken] = await app.store.claim("other", queues=["default"], limit=1, lease=timedelta(60))
    assert taken.attempt == 2
    assert await paused.heartbeater.tick() != []
    await paused.wait_for_running()
    assert ctxs[0].is_cancelled
    await app.store.complete(taken.lease)
    final = await app.jobs.get(job.id)
    assert (final.state, final.worker, final.attempt) == (JobState.SUCCEEDED, "other", 2)


async def running_slow_job(app: App, heartbeat: timedelta) -> Worker:
    """A worker (30 s lease, beating every ``heartbeat``) running one ``slow`` job, whose
    handler waits until cancelled."""
    started = asyncio.Event()

    @app.job("slow")
    async def handle(ctx: JobContext, payload: Any) -> None:
        started.set()
        await asyncio.Event().wait()

    await app.enqueue("slow")
    worker = app.worker(settings(lease=timedelta(seconds=30), heartbeat=heartbeat))
    await worker.claim_tick()
    await started.wait()
    return worker


async def test_heartbeat_outage_past_the_lease_stops_the_handler(
    app: App, clock: FakeClock
) -> None:
    worker = await running_slow_job(app, heartbeat=timedelta(seconds=10))
    original = app.store.heartbeat

    async def unreachable(*args: Any, **kwargs: Any) -> Any:
        raise StoreUnavailable("connection refused")

    app.store.heartbeat = unreachable  # type: ignore[method-assign]
    try:
        clock.advance(timedelta(seconds=15))
        with pytest.raises(StoreUnavailable):
            await worker.heartbeater.tick()
        assert len(worker.held) == 1, "still within the lease: keep working"
        clock.advance(timedelta(seconds=10))  # 25 s since the claim: past lease - margin
        assert [job.kind for job in await worker.heartbeater.tick()] == ["slow"]
        await worker.wait_for_running()
        assert worker.held == []
    finally:
        app.store.heartbeat = original  # type: ignore[method-assign]


async def test_a_heartbeat_slower_than_its_interval_still_renews_the_lease(
    app: App, clock: FakeClock
) -> None:
    """On a machine starved of CPU every round trip is slow. A heartbeat that answers after
    its interval, but well within the lease, renews the lease: the worker keeps waiting for it
    beside the next one instead of throwing it away, and keeps its job."""
    # A 40 ms heartbeat: the tick waits a quarter of it for an answer.
    worker = await running_slow_job(app, heartbeat=timedelta(seconds=0.04))
    original = app.store.heartbeat
    answer = asyncio.Event()
    calls = 0

    async def slow_then_unreachable(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls > 1:
            raise StoreUnavailable("connection refused")
        await answer.wait()  # the first is slow: it answers after its interval
        return await original(*args, **kwargs)

    app.store.heartbeat = slow_then_unreachable  # type: ignore[method-assign]
    clock.advance(timedelta(seconds=20))
    with pytest.raises(StoreUnavailable, match="no answer within"):
        await worker.heartbeater.tick()
    answer.set()
    # The next tick's heartbeat fails at once, while the slow one answers: it counts.
    assert await worker.heartbeater.tick() == []
    clock.advance(timedelta(seconds=15))  # 35 s after the claim, 15 s after the slow beat
    with pytest.raises(StoreUnavailable, match="connection refused"):
        await worker.heartbeater.tick()
    assert [execution.stop for execution in worker._held.values()] == [None]
    assert (await app.store.get(worker.held[0].id)).lease_until == clock.now() + timedelta(
        seconds=15
    )
    worker.request_stop()
    for execution in worker._held.values():
        execution.interrupt(Stop.ABANDON)
    await worker.wait_for_running()


async def test_a_claim_answered_late_in_its_lease_is_heartbeaten_at_once(
    app: App, clock: FakeClock
) -> None:
    """A claim whose answer took most of the lease (a starved machine) leaves its leases less
    time than the heartbeat's interval: the heartbeat goes out now, not on its schedule."""

    @app.job("quick")
    async def handle(ctx: JobContext, payload: Any) -> None:
        pass

    await app.enqueue("quick")
    worker = app.worker(settings(lease=timedelta(seconds=30), heartbeat=timedelta(seconds=10)))
    original = app.store.claim

    async def slow_claim(*args: Any, **kwargs: Any) -> Any:
        jobs = await original(*args, **kwargs)
        clock.advance(timedelta(seconds=23))  # the answer comes 23 s after it was sent
        return jobs

    app.store.claim = slow_claim  # type: ignore[method-assign]
    assert not worker.heartbeater.nudged.is_set()
    [_] = await worker.claim_tick()
    assert worker.heartbeater.nudged.is_set()
    await worker.wait_for_running()


async def test_successful_completions_are_batched(app: App) -> None:
    calls: list[int] = []
    original = app.store.complete_many

    async def counting(leases: Any, **kwargs: Any) -> Any:
        calls.append(len(leases))
        return await original(leases, **kwargs)

    app.store.complete_many = counting  # type: ignore[method-assign]

    @app.job("noop")
    async def handle(ctx: JobContext, payload: Any) -> None:
        return None

    await app.enqueue_many([app.spec("noop") for _ in range(50)])
    worker = app.worker(settings(concurrency=50))
    await worker.run_until_idle()
    assert sum(calls) == 50
    assert len(calls) <= 3, calls


async def test_jobs_claimed_together_share_one_lease_alarm_that_stops_them_all() -> None:
    # The real clock, a short lease and no heartbeats (claim_tick alone runs no services): only
    # the local lease alarm can stop these handlers.
    started = 0
    all_started = asyncio.Event()

    async with App("memory://") as app:

        @app.job("hangs")
        async def hangs(ctx: JobContext, payload: Any) -> None:
            nonlocal started
            started += 1
            if started == 3:
                all_started.set()
            await asyncio.Event().wait()

        await app.enqueue_many([app.spec("hangs") for _ in range(3)])
        worker = app.worker(
            settings(lease=timedelta(seconds=0.2), heartbeat=timedelta(seconds=0.1))
        )
        assert len(await worker.claim_tick()) == 3
        assert len(worker._alarms) == 1, "one timer for the claim, not one per job"
        await all_started.wait()
        await worker.wait_for_running()
        assert worker.held == []
        assert worker._alarms == {}
        lost = app.metrics.registry.get_sample_value("rota_leases_lost_total", {"kind": "hangs"})
        assert lost == 3


async def test_completions_queued_behind_an_unanswered_batch_fail_with_it() -> None:
    sent = asyncio.Event()
    batches: list[list[int]] = []

    class Unanswering:
        async def complete_many(self, leases: Any, **options: Any) -> Any:
            batches.append([lease.job_id for lease in leases])
            sent.set()
            await asyncio.Event().wait()

    completer = Completer(Unanswering(), timeout_s=0.05)  # type: ignore[arg-type]
    first = asyncio.create_task(completer.complete(Lease(1, 1, 1, "w1")))
    await sent.wait()
    queued = asyncio.create_task(completer.complete(Lease(2, 2, 1, "w1")))
    for task in (first, queued):
        with pytest.raises(StoreUnavailable):
            await task
    # The queued completion failed with the batch ahead of it, never sent to the same store
    # (its caller retries it, as after any failed write).
    assert batches == [[1]]


async def test_graceful_stop_finishes_fast_jobs_and_releases_slow_ones(
    app: App, clock: FakeClock
) -> None:
    fast_started = asyncio.Event()
    slow_started = asyncio.Event()
    let_fast_finish = asyncio.Event()

    @app.job("fast")
    async def fast(ctx: JobContext, payload: Any) -> None:
        fast_started.set()
        await let_fast_finish.wait()

    @app.job("slow")
    async def slow(ctx: JobContext, payload: Any) -> None:
        slow_started.set()
        await asyncio.Event().wait()

    f = (await app.enqueue("fast")).job
    s = (await app.enqueue("slow")).job
    worker = app.worker(settings(shutdown_timeout=timedelta(seconds=0.05)))
    running = asyncio.create_task(worker.run())
    await fast_started.wait()
    await slow_started.wait()
    worker.request_stop()
    let_fast_finish.set()
    await running
    assert (await app.jobs.get(f.id)).state is JobState.SUCCEEDED
    released = await app.jobs.get(s.id)
    assert (released.state, released.attempt, released.run_at) == (
        JobState.PENDING,
        0,
        clock.now(),
    )
    assert await app.store.list_workers() == []


async def test_second_stop_hands_running_jobs_back_at_once(app: App, clock: FakeClock) -> None:
    """A hard stop does not leave the job running for the rest of its lease: it is released,
    fenced on its lease, and due again now with its attempt given back."""
    started = asyncio.Event()

    @app.job("stuck")
    async def handle(ctx: JobContext, payload: Any) -> None:
        started.set()
        await asyncio.Event().wait()

    job = (await app.enqueue("stuck")).job
    worker = app.worker(settings(shutdown_timeout=timedelta(hours=1)))
    running = asyncio.create_task(worker.run())
    await started.wait()
    worker.request_stop()
    worker.request_stop()
    await running
    assert worker.aborted
    handed_back = await app.jobs.get(job.id)
    assert (handed_back.state, handed_back.attempt, handed_back.run_at) == (
        JobState.PENDING,
        0,
        clock.now(),
    )


@pytest.mark.parametrize("process_ends", [False, True])
async def test_a_hard_stop_hands_back_a_sync_handlers_job_only_if_its_thread_ends_too(
    app: App, process_ends: bool
) -> None:
    """A sync handler's thread cannot be stopped: in a process that goes on, handing its job
    back would let another worker run it beside the thread, so it is left to lease expiry; in
    `rota worker`, whose process ends at once, it is handed back."""
    started, release = threading.Event(), threading.Event()

    @app.job("blocking")
    def handle(ctx: JobContext, payload: Any) -> None:
        started.set()
        release.wait(timeout=30)

    job = (await app.enqueue("blocking")).job
    worker = app.worker(settings(shutdown_timeout=timedelta(hours=1)))
    worker.threads_end_with_process = process_ends
    running = asyncio.create_task(worker.run())
    await asyncio.to_thread(started.wait, 30)
    worker.request_stop()
    worker.request_stop()
    await running
    release.set()
    state = (await app.jobs.get(job.id)).state
    assert state is (JobState.PENDING if process_ends else JobState.RUNNING)


async def test_a_hard_stop_does_not_wait_on_a_store_that_cannot_release(app: App) -> None:
    """The release at a hard stop gets a second: a store that does not answer leaves the job
    to its lease, and the worker still stops."""
    started = asyncio.Event()

    @app.job("stuck")
    async def handle(ctx: JobContext, payload: Any) -> None:
        started.set()
        await asyncio.Event().wait()

    job = (await app.enqueue("stuck")).job
    worker = app.worker(settings(shutdown_timeout=timedelta(hours=1)))

    async def never(*args: Any, **kwargs: Any) -> None:
        await asyncio.Event().wait()

    app.store.release = never  # type: ignore[method-assign]
    running = asyncio.create_task(worker.run())
    await started.wait()
    worker.request_stop()
    worker.request_stop()
    await running
    assert (await app.jobs.get(job.id)).state is JobState.RUNNING


async def test_worker_wakes_when_a_job_is_enqueued(app: App) -> None:
    done = asyncio.Event()

    @app.job("ping")
    async def handle(ctx: JobContext, payload: Any) -> None:
        done.set()

    worker = app.worker(settings(poll=timedelta(hours=1)))
    running = asyncio.create_task(worker.run())
    try:
        await app.enqueue("ping", delay=60)  # not due: the worker goes idle
        await worker.idle.wait()
        await app.enqueue("ping")
        await asyncio.wait_for(done.wait(), timeout=10)
    finally:
        worker.request_stop()
        await running


async def test_records_logged_by_a_handler_carry_the_job_context(
    app: App, caplog: pytest.LogCaptureFixture
) -> None:
    from rota.observability.logging import JobContextFilter

    @app.job("logs")
    def handle(ctx: JobContext, payload: Any) -> None:
        logging.getLogger("user.code").warning("sending the email")

    job = (await app.enqueue("logs")).job
    caplog.handler.addFilter(JobContextFilter())
    with caplog.at_level(logging.INFO):
        await drain(app)
    [record] = [r for r in caplog.records if r.name == "user.code"]
    assert (record.job_id, record.kind, record.attempt, record.worker) == (  # type: ignore[attr-defined]
        job.id,
        "logs",
        1,
        "rota-testing",
    )


def test_enqueue_sync_works_without_a_running_loop(tmp_path: Any) -> None:
    app = App(f"sqlite:///{tmp_path / 'sync.db'}")
    result = app.enqueue_sync("email", {"to": "a@example.com"}, delay=5)
    assert result.job.state is JobState.PENDING
    assert result.job.payload == {"to": "a@example.com"}
    asyncio.run(app.close())


async def test_registering_a_kind_twice_or_with_bad_options_is_refused(app: App) -> None:
    from rota.domain.errors import InvalidInput

    @app.job("once")
    async def first(ctx: JobContext, payload: Any) -> None:
        return None

    with pytest.raises(InvalidInput, match="already has a handler"):
        app.job("once")(first)
    with pytest.raises(InvalidInput, match="queue"):
        app.job("other", queue="bad queue!")(first)


def test_worker_settings_refuse_a_lease_shorter_than_two_heartbeats() -> None:
    from rota.domain.errors import InvalidInput

    with pytest.raises(InvalidInput, match="twice the heartbeat"):
        WorkerSettings(lease=timedelta(seconds=10), heartbeat=timedelta(seconds=6)).validated()


def test_memory_store_is_shared_by_sixteen_threads_without_sharing_a_job() -> None:
    from rota.domain.job import JobSpec

    store = MemoryStore()
    asyncio.run(store.enqueue([JobSpec(kind="a") for _ in range(800)]))
    taken: list[list[int]] = [[] for _ in range(16)]

    def claimer(index: int) -> None:
        async def run() -> None:
            while jobs := await store.claim(
                f"t{index}", queues=["default"], limit=3, lease=timedelta(seconds=30)
            ):
                taken[index].extend(job.id for job in jobs)

        asyncio.run(run())

    threads = [threading.Thread(target=claimer, args=(i,)) for i in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    claimed = [job_id for ids in taken for job_id in ids]
    assert len(claimed) == 800
    assert len(set(claimed)) == 800


async def test_the_pruner_deletes_only_jobs_finished_before_the_retention(
    app: App, clock: FakeClock
) -> None:
    from rota.domain.errors import JobNotFound
    from rota.runtime.pruner import Pruner

    @app.job("quick")
    async def handle(ctx: JobContext, payload: Any) -> None:
        return None

    old = (await app.enqueue("quick")).job
    await drain(app)
    clock.advance(timedelta(days=8))
    recent = (await app.enqueue("quick")).job
    waiting = (await app.enqueue("quick", delay=timedelta(days=30))).job
    await drain(app)
    assert await Pruner(app.store, retention=timedelta(days=7)).tick() == 1
    with pytest.raises(JobNotFound):
        await app.jobs.get(old.id)
    assert (await app.jobs.get(recent.id)).state is JobState.SUCCEEDED
    assert (await app.jobs.get(waiting.id)).state is JobState.PENDING


async def test_the_pruner_deletes_audit_entries_past_their_own_retention(
    app: App, clock: FakeClock
) -> None:
    from rota.domain.audit import AuditAction, AuditFilter, AuditRecord
    from rota.runtime.pruner import Pruner

    record = AuditRecord(identity="cli:ops", action=AuditAction.QUEUE_PAUSE, target="queue:a")
    await app.open()
    old = await app.store.record_audit(record)
    clock.advance(timedelta(days=91))
    recent = await app.store.record_audit(record)
    # Finished jobs have a week, the audit log its own 90 days; None keeps the jobs.
    assert await Pruner(app.store, retention=None, audit_retention=timedelta(days=90)).tick() == 1
    assert [e.id for e in (await app.store.list_audit(AuditFilter())).entries] == [recent.id]
    assert old.id < recent.id
    assert await Pruner(app.store, retention=timedelta(days=7)).tick() == 0  # log kept


def test_workers_keep_the_audit_log_ninety_days_unless_told_otherwise() -> None:
    from rota.domain.errors import InvalidInput

    assert WorkerSettings().audit_retention == timedelta(days=90)
    assert WorkerSettings(audit_retention=None).validated().audit_retention is None
    with pytest.raises(InvalidInput, match="audit retention"):
        WorkerSettings(audit_retention=timedelta(seconds=5)).validated()


def test_workers_prune_after_seven_days_unless_told_otherwise() -> None:
    from rota.domain.errors import InvalidInput

    assert WorkerSettings().retention == timedelta(days=7)
    assert WorkerSettings(retention=None).validated().retention is None
    with pytest.raises(InvalidInput, match="retention"):
        WorkerSettings(retention=timedelta(seconds=5)).validated()


async def test_the_first_claim_goes_before_any_background_service(app: App) -> None:
    """A restarted worker's first claim does not queue behind a prune, a rescue or a
    schedule's firing on the store's connection: the services start once it has answered."""
    done = asyncio.Event()

    @app.job("due")
    async def handle(ctx: JobContext, payload: Any) -> None:
        done.set()

    await app.enqueue("due")
    calls: list[str] = []
    for name in ("claim", "rescue", "prune", "fire_due", "next_fire_at", "beat_worker"):
        original = getattr(app.store, name)

        async def recorded(*args: Any, _name: str = name, _call: Any = original, **kw: Any) -> Any:
            calls.append(_name)
            return await _call(*args, **kw)

        setattr(app.store, name, recorded)
    worker = app.worker(settings())
    running = asyncio.create_task(worker.run())
    await done.wait()
    worker.request_stop()
    await running
    assert calls[0] == "claim", calls
