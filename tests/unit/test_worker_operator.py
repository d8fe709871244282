"""The worker's side of operator controls: the rescuer expires jobs; hooks and middleware."""

from __future__ import annotations

import asyncio
import contextvars
import logging
from datetime import timedelta
from typing import Any

import pytest

from rota import App, InvalidInput, JobContext, JobResult, JobState, RetryPolicy
from rota.domain.errors import StoreUnavailable
from rota.domain.job_state import Outcome
from rota.testing import FakeClock
from tests.unit.conftest import settings


async def test_the_rescuer_cancels_jobs_that_expired_before_they_started(
    app: App, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    ran: list[int] = []

    @app.job("report")
    async def report(ctx: JobContext, payload: Any) -> None:
        ran.append(ctx.job_id)

    stale = (await app.enqueue("report", delay=120, expire_after=60)).job
    fresh = (await app.enqueue("report", delay=120)).job
    worker = app.worker(settings())
    clock.advance(timedelta(seconds=120))
    with caplog.at_level(logging.INFO, logger="rota.worker"):
        result = await worker.rescuer.tick()
    assert result.expired == [stale.id]
    assert "1 job cancelled as expired" in caplog.text
    expired = await app.jobs.get(stale.id)
    assert (expired.state, expired.last_error) == (JobState.CANCELLED, "expired")
    await worker.run_until_idle()
    assert ran == [fresh.id]


async def test_the_rescuer_counts_several_expired_jobs_in_the_plural(
    app: App, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    app.job("report")(lambda ctx, payload: None)
    for _ in range(2):
        await app.enqueue("report", delay=120, expire_after=60)
    worker = app.worker(settings())
    clock.advance(timedelta(seconds=120))
    with caplog.at_level(logging.INFO, logger="rota.worker"):
        result = await worker.rescuer.tick()
    assert len(result.expired) == 2
    assert "2 jobs cancelled as expired" in caplog.text


# ---------------------------------------------------------------------- middleware and hooks

current_job: contextvars.ContextVar[int | None] = contextvars.ContextVar(
    "current_job", default=None
)


async def test_middleware_wraps_every_handler_first_registered_outermost(app: App) -> None:
    events: list[str] = []

    @app.middleware
    async def outer(ctx: JobContext, call_next: Any) -> Any:
        events.append(f"outer in {ctx.job.kind}")
        token = current_job.set(ctx.job_id)
        try:
            return await call_next()
        finally:
            current_job.reset(token)
            events.append(f"outer out {ctx.job.kind}")

    @app.middleware
    async def inner(ctx: JobContext, call_next: Any) -> Any:
        events.append(f"inner in {ctx.job.kind}")
        result = await call_next()
        events.append(f"inner out {ctx.job.kind}")
        return result

    seen: list[tuple[str, int | None]] = []

    @app.job("async")
    async def run_async(ctx: JobContext, payload: Any) -> None:
        seen.append(("async", current_job.get()))

    @app.job("sync")
    def run_sync(ctx: JobContext, payload: Any) -> None:
        seen.append(("sync", current_job.get()))

    a = (await app.enqueue("async", priority=1)).job
    s = (await app.enqueue("sync")).job
    await app.worker(settings(concurrency=1)).run_until_idle()
    assert seen == [("async", a.id), ("sync", s.id)]
    assert events == [
        "outer in async", "inner in async", "inner out async", "outer out async",
        "outer in sync", "inner in sync", "inner out sync", "outer out sync",
    ]  # fmt: skip
    assert (await app.jobs.get(s.id)).state is JobState.SUCCEEDED


async def test_a_middleware_may_turn_an_error_into_a_success(app: App) -> None:
    @app.middleware
    async def forgiving(ctx: JobContext, call_next: Any) -> Any:
        try:
            return await call_next()
        except ValueError:
            return None

    @app.job("flaky")
    async def flaky(ctx: JobContext, payload: Any) -> None:
        raise ValueError("ignored by the middleware")

    job = (await app.enqueue("flaky")).job
    await app.worker(settings()).run_until_idle()
    assert (await app.jobs.get(job.id)).state is JobState.SUCCEEDED


def test_a_middleware_must_be_async() -> None:
    app = App("memory://")

    def plain(ctx: JobContext, call_next: Any) -> Any:
        return call_next()

    with pytest.raises(InvalidInput, match="async def"):
        app.middleware(plain)


async def test_hooks_see_the_job_and_its_outcome(app: App) -> None:
    results: list[tuple[str, JobResult]] = []

    @app.on_success
    async def succeeded(ctx: JobContext, result: JobResult) -> None:
        results.append(("success", result))

    @app.on_failure
    def retrying(ctx: JobContext, result: JobResult) -> None:  # a plain def: in a thread
        results.append(("failure", result))

    @app.on_dead
    async def dead(ctx: JobContext, result: JobResult) -> None:
        results.append(("dead", result))

    @app.job("charge", max_attempts=2, retry=RetryPolicy(base=timedelta(0), jitter=0))
    async def charge(ctx: JobContext, payload: Any) -> None:
        if payload["fail"]:
            raise RuntimeError("declined")

    ok = (await app.enqueue("charge", {"fail": False}, priority=1)).job
    bad = (await app.enqueue("charge", {"fail": True})).job
    await app.worker(settings(concurrency=1)).run_until_idle()
    assert [(event, r.job.id, r.job.attempt, r.state) for event, r in results] == [
        ("success", ok.id, 1, JobState.SUCCEEDED),
        ("failure", bad.id, 1, JobState.PENDING),
        ("dead", bad.id, 2, JobState.DEAD),
    ]
    failure = results[1][1]
    assert (failure.outcome, failure.error, failure.retry_in) == (
        Outcome.FAILED,
        "RuntimeError: declined",
        timedelta(0),
    )
    assert isinstance(failure.exception, RuntimeError)
    assert results[0][1].error is None and results[0][1].outcome is Outcome.SUCCEEDED


async def test_a_failing_hook_is_logged_in_one_line_and_the_outcome_stands(
    app: App, caplog: pytest.LogCaptureFixture
) -> None:
    after: list[int] = []

    @app.on_success
    async def broken(ctx: JobContext, result: JobResult) -> None:
        raise KeyError("alerting is down")

    @app.on_success
    def still_runs(ctx: JobContext, result: JobResult) -> None:
        after.append(ctx.job_id)

    @app.job("noop")
    async def noop(ctx: JobContext, payload: Any) -> None:
        return None

    job = (await app.enqueue("noop")).job
    with caplog.at_level(logging.WARNING, logger="rota.worker"):
        await app.worker(settings()).run_until_idle()
    assert (await app.jobs.get(job.id)).state is JobState.SUCCEEDED
    assert after == [job.id]
    [record] = [r for r in caplog.records if "hook" in r.getMessage()]
    assert record.getMessage() == (
        "on_success hook "
        "test_a_failing_hook_is_logged_in_one_line_and_the_outcome_stands.<locals>.broken "
        "failed (the job's outcome stands): KeyError: 'alerting is down'"
    )
    assert record.exc_info is None


async def test_a_middleware_that_swallows_a_lost_lease_cannot_complete_the_job(
    app: App, clock: FakeClock
) -> None:
    started = asyncio.Event()
    successes: list[int] = []

    @app.middleware
    async def swallow_everything(ctx: JobContext, call_next: Any) -> Any:
        try:
            return await call_next()
        except BaseException:
            return None

    @app.on_success
    async def succeeded(ctx: JobContext, result: JobResult) -> None:
        successes.append(ctx.job_id)

    @app.job("slow")
    async def slow(ctx: JobContext, payload: Any) -> None:
        started.set()
        await asyncio.Event().wait()

    job = (await app.enqueue("slow")).job
    worker = app.worker(settings(lease=timedelta(seconds=30), heartbeat=timedelta(seconds=10)))
    await worker.claim_tick()
    await started.wait()
    original = app.store.heartbeat

    async def unreachable(*args: Any, **kwargs: Any) -> Any:
        raise StoreUnavailable("connection refused")

    app.store.heartbeat = unreachable  # type: ignore[method-assign]
    try:
        clock.advance(timedelta(seconds=25))  # past the local lease deadline: lease lost
        assert [j.id for j in await worker.heartbeater.tick()] == [job.id]
        await worker.wait_for_running()
    finally:
        app.store.heartbeat = original  # type: ignore[method-assign]
    # The store still shows the lease (nobody took the job yet), so a completion would have
    # been accepted: the worker wrote nothing, as for any lost lease.
    after = await app.jobs.get(job.id)
    assert (after.state, after.attempt) == (JobState.RUNNING, 1)
    assert successes == []
    assert worker.metrics.leases_lost.labels("slow")._value.get() == 1


async def test_a_middleware_that_swallows_the_shutdown_still_releases_the_job(
    app: App, clock: FakeClock
) -> None:
    started = asyncio.Event()

    @app.middleware
    async def swallow_cancellation(ctx: JobContext, call_next: Any) -> Any:
        try:
            return await call_next()
        except asyncio.CancelledError:
            return "pretend it worked"

    @app.job("slow")
    async def slow(ctx: JobContext, payload: Any) -> None:
        started.set()
        await asyncio.Event().wait()

    job = (await app.enqueue("slow")).job
    worker = app.worker(settings(shutdown_timeout=timedelta(seconds=0.05)))
    running = asyncio.create_task(worker.run())
    await started.wait()
    worker.request_stop()
    await running
    released = await app.jobs.get(job.id)
    assert (released.state, released.attempt) == (JobState.PENDING, 0)


async def test_a_hook_outliving_the_lease_deadline_is_not_taken_for_a_lost_lease(
    app: App, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    in_hook = asyncio.Event()
    release = asyncio.Event()
    finished: list[int] = []

    @app.on_success
    async def slow_alert(ctx: JobContext, result: JobResult) -> None:
        in_hook.set()
        await release.wait()
        finished.append(ctx.job_id)

    @app.job("noop")
    async def noop(ctx: JobContext, payload: Any) -> None:
        return None

    job = (await app.enqueue("noop")).job
    worker = app.worker(settings(lease=timedelta(seconds=30), heartbeat=timedelta(seconds=10)))
    await worker.claim_tick()
    await in_hook.wait()
    clock.advance(timedelta(seconds=29))  # past the local lease deadline, within the bound
    with caplog.at_level(logging.WARNING, logger="rota.worker"):
        assert await worker.heartbeater.tick() == []
        release.set()
        await worker.wait_for_running()
    assert finished == [job.id]
    assert "lease" not in caplog.text
    assert (await app.jobs.get(job.id)).state is JobState.SUCCEEDED
