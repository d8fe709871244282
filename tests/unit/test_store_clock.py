"""Time on the worker (C6, C10): the store's clock decides. A worker whose wall clock is off
still wakes at the store's due time; one whose clock runs at another rate than the store's
measures it, and heartbeats and self-fences on the store's time."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from rota import App, JobContext, WorkerSettings
from rota.domain.errors import StoreUnavailable
from rota.runtime.storeclock import StoreClock
from rota.runtime.worker import Worker
from rota.store.memory import MemoryStore
from rota.testing import FakeClock

T0 = datetime(2026, 5, 1, 9, 0, tzinfo=UTC)


def two_clocks(behind: timedelta = timedelta(0)) -> tuple[FakeClock, FakeClock]:
    """The store's clock at T0 and the worker's, ``behind`` it."""
    return FakeClock(T0), FakeClock(T0 - behind)


def ping_app(store_clock: FakeClock, worker_clock: FakeClock) -> tuple[App, asyncio.Event]:
    """An app on a memory store with the store's clock, and a ``ping`` kind that sets the
    event it returns."""
    app = App(store=MemoryStore(clock=store_clock), clock=worker_clock)
    ran = asyncio.Event()

    @app.job("ping")
    async def ping(ctx: JobContext, payload: Any) -> None:
        ran.set()

    return app, ran


@contextlib.asynccontextmanager
async def idle_worker(app: App) -> AsyncIterator[Worker]:
    """A worker of ``app`` running, once it found nothing to claim; stopped after."""
    worker = app.worker(WorkerSettings(name="w", poll=timedelta(hours=1)))
    running = asyncio.create_task(worker.run())
    try:
        await asyncio.wait_for(worker.idle.wait(), timeout=10)
        yield worker
    finally:
        worker.request_stop()
        await running


@pytest.mark.parametrize("delay_s", [0.0, 0.2], ids=["due-now", "due-soon"])
async def test_a_worker_whose_wall_clock_is_ten_minutes_behind_wakes_at_the_stores_due_time(
    delay_s: float,
) -> None:
    store_clock, worker_clock = two_clocks(behind=timedelta(minutes=10))
    app, ran = ping_app(store_clock, worker_clock)
    async with app, idle_worker(app):
        await app.enqueue("ping", delay=delay_s)  # the store wakes the worker for its run_at
        store_clock.advance(delay_s)  # by the store's clock the job is due (now or soon)
        await asyncio.wait_for(ran.wait(), timeout=10)


async def test_a_job_due_within_the_store_clocks_uncertainty_is_claimed_at_once() -> None:
    """The latest reading of the store's clock took a long round trip, and the store read its
    clock at the start of it: the worker's estimate of the store's now lags the store by half
    of it. A job enqueued for now is claimed at once all the same, not when the estimate has
    caught up with its run_at."""
    store_clock, worker_clock = two_clocks()
    app, ran = ping_app(store_clock, worker_clock)
    async with app, idle_worker(app) as worker:
        now = worker_clock.monotonic()
        round_trip = 3600.0
        worker.store_clock.observe(
            now - round_trip,
            now,
            store_clock.now() - timedelta(seconds=round_trip),
            for_rate=False,
        )
        assert worker.store_clock.delay_s(store_clock.now()) == round_trip / 2
        await app.enqueue("ping")
        await asyncio.wait_for(ran.wait(), timeout=10)


def skewed_app(rate: float) -> tuple[App, FakeClock, FakeClock, Any]:
    """An app whose store's clock moves ``rate`` seconds per second of the worker's clock,
    with a ``block`` kind that runs until cancelled."""
    store_clock, worker_clock = two_clocks()
    app = App(store=MemoryStore(clock=store_clock), clock=worker_clock)
    started = asyncio.Event()

    @app.job("block")
    async def block(ctx: JobContext, payload: Any) -> None:
        started.set()
        await asyncio.Event().wait()

    def advance(local_s: float) -> None:
        worker_clock.advance(local_s)
        store_clock.advance(local_s * rate)

    return app, store_clock, worker_clock, (advance, started)


async def beat_twice(app: App, worker: Any, advance: Any, local_s: float) -> None:
    """A claim, then heartbeats ``local_s`` apart: enough readings to measure the rate."""
    await app.enqueue("block")
    [_] = await worker.claim_tick()
    assert (await worker.heartbeater.tick()) == []
    assert worker.store_clock.measured is None
    advance(local_s)
    assert (await worker.heartbeater.tick()) == []


async def fail_heartbeats(app: App) -> None:
    async def unreachable(*args: Any, **kwargs: Any) -> Any:
        raise StoreUnavailable("connection refused")

    app.store.heartbeat = unreachable  # type: ignore[method-assign]


async def test_a_slow_local_clock_is_measured_and_the_worker_self_fences_on_store_time(
    caplog: pytest.LogCaptureFixture,
) -> None:
    app, _, _, (advance, started) = skewed_app(rate=5.0)  # like libfaketime x0.2
    async with app:
        worker = app.worker(WorkerSettings(name="w", lease=timedelta(seconds=30)))
        with caplog.at_level(logging.WARNING, logger="rota.worker"):
            await beat_twice(app, worker, advance, 1.0)
            await started.wait()
            assert (worker.store_clock.measured, worker.store_clock.rate) == (5.0, 5.0)
            assert worker.heartbeater.interval_s() == pytest.approx(10 / 5)
            advance(1.0)
            await worker.heartbeater.tick()  # measuring again warns no more
        warnings = [r for r in caplog.records if "runs at" in r.getMessage()]
        assert len(warnings) == 1
        rate = app.metrics.registry.get_sample_value("rota_store_clock_rate_ratio")
        assert rate == pytest.approx(5.0)
        await fail_heartbeats(app)
        # 5 local seconds are 25 of the store's: past lease less margin (24 s), within the
        # lease (30 s). A worker trusting its own clock would run on to 24 local seconds,
        # two minutes of the store's, long after another worker took the job.
        advance(5.0)
        stopped = await worker.heartbeater.tick()
        assert [job.kind for job in stopped] == ["block"]
        await worker.wait_for_running()


async def test_a_fast_local_clock_does_not_fence_itself_out_early() -> None:
    app, _, _, (advance, started) = skewed_app(rate=0.2)  # like libfaketime x5
    async with app:
        worker = app.worker(WorkerSettings(name="w", lease=timedelta(seconds=30)))
        await beat_twice(app, worker, advance, 10.0)
        await started.wait()
        assert worker.store_clock.rate == pytest.approx(0.2)
        assert worker.heartbeater.interval_s() == pytest.approx(10 / 0.2)
        await fail_heartbeats(app)
        advance(25.0)  # 5 s of the store's: the lease is far from over
        with pytest.raises(StoreUnavailable):
            await worker.heartbeater.tick()
        assert len(worker.held) == 1, "still well within the lease by the store's clock"
        advance(100.0)  # 20 s more of the store's: 25 s since the last heartbeat
        assert [job.kind for job in await worker.heartbeater.tick()] == ["block"]
        await worker.wait_for_running()


def test_agreeing_clocks_keep_the_rate_at_exactly_one() -> None:
    local = FakeClock(T0)
    clock = StoreClock(local)
    for second in range(5):
        clock.observe(second, second + 0.001, T0 + timedelta(seconds=second * 1.01))
    assert clock.measured == pytest.approx(1.01, rel=1e-3)
    assert clock.rate == 1.0, "within the tolerance: local waits are not rescaled"


def test_a_step_of_the_stores_clock_does_not_pass_for_a_rate() -> None:
    clock = StoreClock(FakeClock(T0))
    step = timedelta(0)
    for second in range(12):
        if second == 6:
            step = timedelta(minutes=5)  # the database's clock was stepped once
        clock.observe(second, second + 0.001, T0 + timedelta(seconds=second) + step)
    assert clock.rate == 1.0


def test_readings_too_imprecise_to_tell_measure_nothing() -> None:
    clock = StoreClock(FakeClock(T0))
    for second in range(4):  # half-second answers, a second apart: +-50 %
        clock.observe(2 * second, 2 * second + 0.5, T0 + timedelta(seconds=10 * second))
    assert (clock.measured, clock.rate) == (None, 1.0)


def test_the_stores_now_is_extrapolated_from_the_latest_reading_at_its_rate() -> None:
    local = FakeClock(T0)
    clock = StoreClock(local)
    assert clock.now() is None and clock.delay_s(T0) is None
    for second in range(3):
        clock.observe(second, second, T0 + timedelta(seconds=2 * second))
    local.advance(3.0)  # a local second after the last reading: 2 s of the store's
    assert clock.now() == T0 + timedelta(seconds=6)
    assert clock.delay_s(T0 + timedelta(seconds=10)) == pytest.approx(2.0)


def test_a_local_clock_that_slows_down_is_followed_at_the_next_reading() -> None:
    clock = StoreClock(FakeClock(T0))
    store_s = 0.0
    for second in range(20):  # in step for 20 s, then the local clock runs at a fifth
        clock.observe(second, second, T0 + timedelta(seconds=store_s))
        store_s += 1.0 if second < 19 else 5.0
    assert clock.rate == 1.0
    clock.observe(20, 20, T0 + timedelta(seconds=store_s))
    assert clock.measured == pytest.approx(1.0)  # the median has not moved yet
    assert clock.rate == pytest.approx(5.0)  # but waits follow the slow clock already


def test_readings_too_noisy_for_a_short_baseline_measure_over_a_longer_one() -> None:
    """A machine starved of CPU, and a local clock running five times fast: every answer
    takes 0.2 local seconds, so two readings a second of the store's apart (5 local seconds)
    tell the rate to +-4 %, too coarse. Readings further apart make the same round trips a
    finer measure, and the rate is measured all the same."""
    clock = StoreClock(FakeClock(T0))
    for step in range(100):  # a quarter of a local second apart, as before the first measure
        local = step * 0.25
        clock.observe(local, local + 0.2, T0 + timedelta(seconds=(local + 0.1) * 0.2))
    assert clock.measured == pytest.approx(0.2, rel=0.02)
    assert clock.rate == pytest.approx(0.2, rel=0.02)


def test_a_fast_clock_is_followed_at_its_bound_before_answers_are_precise_enough() -> None:
    """A machine starved of CPU, and a local clock running five times fast: answers take 1.5
    local seconds, far too slow for a measure, and a lease would be given up at a fifth of its
    time. What the readings surely say (the store's clock moves at most 0.29 s a local second
    after two readings, 0.21 s after six) is followed meanwhile: never below the truth, so no wait outlasts the store's time."""
    clock = StoreClock(FakeClock(T0))
    rates = []
    for step in range(6):  # a store second apart, each answer 1.5 local seconds late
        local = step * 5.0
        clock.observe(local, local + 1.5, T0 + timedelta(seconds=(local + 0.75) * 0.2))
        rates.append(clock.rate)
    assert clock.measured is None, "too imprecise to measure"
    assert rates[0] == 1.0, "one reading says nothing of the rate"
    assert all(0.2 <= rate < 1.0 for rate in rates[1:]), rates
    # 5 s of the store's over at least 23.5 local (from the first answer to the last request).
    assert rates[-1] == pytest.approx(5 / 23.5)


def test_a_slow_or_steady_clock_is_not_followed_at_a_bound() -> None:
    """The bound only ever speeds waits up when it is surely below 1: answers too slow to
    measure a clock in step, or one running slow, leave the rate at 1 until measured."""
    for truth in (1.0, 3.0):
        clock = StoreClock(FakeClock(T0))
        for step in range(6):
            local = step * 1.0
            clock.observe(local, local + 0.4, T0 + timedelta(seconds=(local + 0.2) * truth))
        assert (clock.measured, clock.rate) == (None, 1.0), truth
