"""Durable jobs through the real worker on the memory store and a fake clock: steps replayed
from their checkpoints, steps with attempts of their own, durable sleeps that free the slot,
waits for signals, and what a handler may not do."""

from __future__ import annotations

import threading
from collections import Counter
from datetime import timedelta
from typing import Any

import pytest

from rota import App, JobContext, JobState, RetryPolicy
from rota.domain.durable import StepKind, StepState, suspension
from rota.domain.errors import StepFailed, WaitTimeout
from rota.domain.job_state import Outcome
from rota.testing import FakeClock, drain

NO_JITTER = RetryPolicy(base=timedelta(seconds=10), jitter=0)


async def test_a_committed_step_never_runs_again_when_the_job_retries(app: App) -> None:
    ran: Counter[str] = Counter()

    @app.job("order", retry=RetryPolicy(base=timedelta(0), jitter=0), max_attempts=3)
    async def order(ctx: JobContext, payload: Any) -> str:
        async def charge() -> str:
            ran["charge"] += 1
            return "ch_1"

        async def email(charge_id: str) -> None:
            ran["email"] += 1
            if ran["email"] == 1:
                raise ConnectionError("smtp down")

        charge_id = await ctx.step("charge", charge)
        await ctx.step("email", email, charge_id)
        return str(charge_id)

    job = (await app.enqueue("order")).job
    await drain(app)
    done = await app.jobs.get(job.id)
    assert (done.state, done.result, done.attempt) == (JobState.SUCCEEDED, "ch_1", 2)
    assert ran == {"charge": 1, "email": 2}
    steps = await app.store.steps(job.id)
    assert [(s.name, s.state, s.attempts) for s in steps] == [
        ("charge", StepState.SUCCEEDED, 1),
        ("email", StepState.SUCCEEDED, 2),
    ]
    assert steps[1].error == "ConnectionError: smtp down"
    metrics = app.metrics.steps
    assert metrics.labels("order", "replayed").value == 1
    assert metrics.labels("order", "failed").value == 1


async def test_a_sync_handler_steps_in_its_own_thread(app: App) -> None:
    threads: list[str] = []

    @app.job("sync-order", retry=RetryPolicy(base=timedelta(0), jitter=0))
    def order(ctx: JobContext, payload: Any) -> int:
        def count() -> int:
            threads.append(threading.current_thread().name)
            return 41

        value = ctx.step_sync("count", count)
        if ctx.attempt == 1:
            raise RuntimeError("after the checkpoint")
        return int(value) + 1

    job = (await app.enqueue("sync-order")).job
    await drain(app)
    assert (await app.jobs.get(job.id)).result == 42
    assert len(threads) == 1 and threads[0].startswith("rota-job")


async def test_a_step_with_attempts_of_its_own_spares_the_jobs_attempts(
    app: App, clock: FakeClock
) -> None:
    calls = 0

    @app.job("model", max_attempts=1)
    async def model(ctx: JobContext, payload: Any) -> int:
        async def call() -> int:
            nonlocal calls
            calls += 1
            if calls < 3:
                raise TimeoutError("model busy")
            return calls

        return int(await ctx.step("call", call, max_attempts=3, retry=NO_JITTER))

    job = (await app.enqueue("model")).job
    await drain(app)
    pending = await app.jobs.get(job.id)
    assert (pending.state, pending.attempt, pending.last_error) == (
        JobState.PENDING,
        0,
        "TimeoutError: model busy",
    )
    assert pending.run_at == clock.now() + timedelta(seconds=10)
    clock.advance(timedelta(seconds=10))
    await drain(app)
    clock.advance(timedelta(seconds=20))
    await drain(app)
    done = await app.jobs.get(job.id)
    assert (done.state, done.result, calls) == (JobState.SUCCEEDED, 3, 3)


async def test_a_step_that_used_up_its_attempts_makes_the_job_dead(app: App) -> None:
    @app.job("flaky", max_attempts=5, retry=RetryPolicy(base=timedelta(0), jitter=0))
    async def flaky(ctx: JobContext, payload: Any) -> None:
        async def call() -> None:
            raise ValueError("bad request")

        await ctx.step("call", call, max_attempts=2, retry=RetryPolicy(base=timedelta(0)))

    job = (await app.enqueue("flaky")).job
    await drain(app)
    dead = await app.jobs.get(job.id)
    assert dead.state is JobState.DEAD
    assert (
        dead.last_error
        == "StepFailed: step 'call' failed 2 times; last error: ValueError: bad request"
    )


async def test_a_handler_may_catch_a_failed_step_and_carry_on(app: App) -> None:
    @app.job("fallback")
    async def fallback(ctx: JobContext, payload: Any) -> str:
        async def primary() -> str:
            raise ConnectionError("primary down")

        async def secondary() -> str:
            return "secondary"

        try:
            return str(await ctx.step("primary", primary, max_attempts=1))
        except StepFailed:
            return str(await ctx.step("secondary", secondary))

    job = (await app.enqueue("fallback")).job
    await drain(app)
    assert (await app.jobs.get(job.id)).result == "secondary"


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ("twice", "was used twice in one run"),
        ("nested", "steps do not nest"),
        ("not-json", "cannot be stored"),
        ("bad-name", "may contain only letters"),
        ("transaction", "memory store has none"),
    ],
)
async def test_misuse_fails_the_job_saying_why(app: App, body: str, error: str) -> None:
    async def one() -> int:
        return 1

    @app.job("misuse", max_attempts=1)
    async def misuse(ctx: JobContext, payload: Any) -> None:
        if body == "twice":
            await ctx.step("a", one)
            await ctx.step("a", one)
        elif body == "nested":

            async def outer() -> int:
                return int(await ctx.step("inner", one))

            await ctx.step("outer", outer)
        elif body == "not-json":

            async def value() -> object:
                return object()

            await ctx.step("value", value)
        elif body == "bad-name":
            await ctx.step("no spaces", one)
        else:
            async with ctx.transaction():
                pass

    job = (await app.enqueue("misuse")).job
    await drain(app)
    failed = await app.jobs.get(job.id)
    assert failed.state is JobState.DEAD
    assert error in (failed.last_error or "")


async def test_the_step_key_is_the_same_on_every_run_and_differs_per_step(app: App) -> None:
    keys: list[tuple[str, str]] = []

    @app.job("keys", retry=RetryPolicy(base=timedelta(0), jitter=0))
    async def keyed(ctx: JobContext, payload: Any) -> None:
        keys.append((ctx.step_key("charge"), ctx.step_key("refund")))
        if ctx.attempt == 1:
            raise RuntimeError("again")

    job = (await app.enqueue("keys")).job
    await drain(app)
    assert keys[0] == keys[1] == (f"rota-{job.id}-charge", f"rota-{job.id}-refund")


# ---------------------------------------------------------------------- sleeps


async def test_a_sleeping_job_frees_its_slot_for_another_then_finishes(
    app: App, clock: FakeClock
) -> None:
    """With concurrency 1, a job sleeping 5 s lets another job run meanwhile, then finishes."""
    order: list[str] = []

    @app.job("sleeper")
    async def sleeper(ctx: JobContext, payload: Any) -> str:
        async def before() -> str:
            order.append("before")
            return "b"

        await ctx.step("before", before)
        await ctx.sleep(timedelta(seconds=5))
        order.append("after")
        return "woke"

    @app.job("other")
    async def other(ctx: JobContext, payload: Any) -> None:
        order.append("other")

    sleeping = (await app.enqueue("sleeper")).job
    other_job = (await app.enqueue("other")).job
    # One slot: the sleeper is claimed first, sleeps, and its slot takes the other job.
    assert await drain(app, concurrency=1) == 2
    assert (await app.jobs.get(other_job.id)).state is JobState.SUCCEEDED
    asleep = await app.jobs.get(sleeping.id)
    assert (asleep.state, asleep.attempt) == (JobState.PENDING, 0)
    assert asleep.run_at == clock.now() + timedelta(seconds=5)
    found = suspension(asleep, await app.store.steps(sleeping.id))
    assert found is not None and (found.kind, found.until) == (StepKind.SLEEP, asleep.run_at)
    clock.advance(timedelta(seconds=5))
    await drain(app, concurrency=1)
    done = await app.jobs.get(sleeping.id)
    assert (done.state, done.result, done.attempt) == (JobState.SUCCEEDED, "woke", 1)
    assert order == ["before", "other", "after"]
    outcomes = [attempt.outcome for attempt in await app.jobs.attempts(sleeping.id)]
    assert outcomes == [Outcome.SLEPT, Outcome.SUCCEEDED]
    assert app.metrics.leases_lost.labels("sleeper")._value.get() == 0
    assert app.metrics.sleeps.labels("sleeper").value == 1


async def test_sleep_until_and_named_sleeps(app: App, clock: FakeClock) -> None:
    wake = clock.now() + timedelta(hours=2)

    @app.job("until")
    def until(ctx: JobContext, payload: Any) -> None:
        ctx.sleep_sync(timedelta(seconds=0))  # nothing to sleep: returns, records nothing
        ctx.sleep_sync(timedelta(minutes=1), name="cool-off")

    @app.job("at")
    async def at(ctx: JobContext, payload: Any) -> None:
        await ctx.sleep_until(wake)
        await ctx.sleep_until(clock.now() - timedelta(days=1))  # passed: returns at once

    first = (await app.enqueue("until")).job
    second = (await app.enqueue("at")).job
    await drain(app)
    assert [s.name for s in await app.store.steps(first.id)] == ["cool-off"]
    assert (await app.jobs.get(second.id)).run_at == wake
    clock.advance(timedelta(hours=2))
    await drain(app)
    assert (await app.jobs.get(first.id)).state is JobState.SUCCEEDED
    assert (await app.jobs.get(second.id)).state is JobState.SUCCEEDED


# ---------------------------------------------------------------------- waits


async def test_a_signal_sent_before_the_wait_is_delivered_without_suspending(app: App) -> None:
    @app.job("checkout")
    async def checkout(ctx: JobContext, payload: Any) -> Any:
        return await ctx.wait_for(f"paid:{payload['order']}", timeout=timedelta(days=2))

    sent = await app.signal("paid:42", {"amount": 10})
    assert not sent.delivered and sent.expires_at is not None
    job = (await app.enqueue("checkout", {"order": 42})).job
    await drain(app)
    done = await app.jobs.get(job.id)
    assert (done.state, done.result) == (JobState.SUCCEEDED, {"amount": 10})
    assert app.metrics.waits.labels("checkout", "received").value == 1


async def test_a_waiting_job_holds_no_slot_and_wakes_on_its_signal(
    app: App, clock: FakeClock
) -> None:
    @app.job("ship")
    async def ship(ctx: JobContext, payload: Any) -> Any:
        tracking = await ctx.wait_for("shipped:7", timeout=timedelta(days=2))
        return {"tracking": tracking}

    job = (await app.enqueue("ship")).job
    await drain(app)
    waiting = await app.jobs.get(job.id)
    found = suspension(waiting, await app.store.steps(job.id))
    assert found is not None and (found.kind, found.key) == (StepKind.WAIT, "shipped:7")
    clock.advance(timedelta(hours=5))
    sent = await app.signals.send("shipped:7", "1Z999")
    assert sent.delivered_to == job.id
    await drain(app)
    done = await app.jobs.get(job.id)
    assert (done.state, done.result) == (JobState.SUCCEEDED, {"tracking": "1Z999"})
    assert app.metrics.signals.labels("delivered")._value.get() == 1


async def test_a_held_waiting_job_runs_once_with_its_signal_when_released(
    app: App, clock: FakeClock
) -> None:
    runs: list[Any] = []

    @app.job("approve")
    async def approve(ctx: JobContext, payload: Any) -> Any:
        decision = await ctx.wait_for("approval:3", timeout=timedelta(hours=2))
        runs.append(decision)
        return decision

    job = (await app.enqueue("approve")).job
    await drain(app)
    await app.jobs.hold(job.id)
    assert (await app.signal("approval:3", "yes")).delivered_to == job.id
    assert await drain(app) == 0, "a held job does not run, signal or not"
    clock.advance(timedelta(hours=3))  # past the wait's deadline: the signal came first
    await app.jobs.release(job.id)
    await drain(app)
    done = await app.jobs.get(job.id)
    assert (done.state, done.result, runs) == (JobState.SUCCEEDED, "yes", ["yes"])


async def test_a_wait_times_out_with_an_error_the_handler_may_catch(
    app: App, clock: FakeClock
) -> None:
    @app.job("remind")
    def remind(ctx: JobContext, payload: Any) -> str:
        try:
            ctx.wait_for_sync("reply:1", timeout=timedelta(hours=1))
        except WaitTimeout:
            return "reminded"
        return "replied"

    job = (await app.enqueue("remind")).job
    await drain(app)
    clock.advance(timedelta(hours=1))
    await drain(app)
    assert (await app.jobs.get(job.id)).result == "reminded"
    # A signal now is kept for a wait to come: the job's wait timed out for good.
    assert not (await app.signal("reply:1", "too late")).delivered


async def test_a_signal_nobody_waits_for_expires(app: App, clock: FakeClock) -> None:
    @app.job("late")
    async def late(ctx: JobContext, payload: Any) -> Any:
        try:
            return await ctx.wait_for("k", timeout=timedelta(minutes=1))
        except WaitTimeout:
            return "nothing came"

    await app.signal("k", "early", expire_after=timedelta(minutes=10))
    clock.advance(timedelta(minutes=10))
    job = (await app.enqueue("late")).job
    await drain(app)
    clock.advance(timedelta(minutes=1))
    await drain(app)
    assert (await app.jobs.get(job.id)).result == "nothing came"
