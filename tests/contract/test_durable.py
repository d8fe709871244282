"""Durable jobs at the store (C11, C12): step checkpoints fenced on the lease and replayed,
sleeps and waits that give the worker back, signals before and after a wait, timeouts,
expiry, and effects committed only under the lease."""

from __future__ import annotations

from datetime import timedelta

import pytest

from rota.domain.durable import StepKind, StepState
from rota.domain.errors import InvalidInput, LeaseLost
from rota.domain.job import Job
from rota.domain.job_state import JobState, Outcome
from rota.store import JobFilter, Store, open_store
from rota.testing import FakeClock
from tests.contract.helpers import LEASE, claim_one, claimed, reclaimed

DAY = timedelta(days=1)


# ---------------------------------------------------------------------- steps


async def test_a_checkpoint_is_kept_for_every_later_run_of_the_job(
    store: Store, clock: FakeClock
) -> None:
    a, b = await reclaimed(store, clock)
    assert await store.steps(a.id) == []
    await store.checkpoint(
        b.lease, "charge", result='{"charge": "ch_1"}', duration=timedelta(seconds=1)
    )
    await store.checkpoint(b.lease, "email", result=None)
    await store.fail(b.lease, error="later step failed", retry_in=timedelta(0))
    c = await claim_one(store, "C")
    assert c is not None and c.attempt == 3
    steps = await store.steps(c.id)
    assert [(s.name, s.kind, s.state, s.result) for s in steps] == [
        ("charge", StepKind.STEP, StepState.SUCCEEDED, {"charge": "ch_1"}),
        ("email", StepKind.STEP, StepState.SUCCEEDED, None),
    ]
    [charge, _] = steps
    assert (charge.attempts, charge.token, charge.finished_at) == (1, b.lease_token, clock.now())
    assert charge.duration == timedelta(seconds=1)


async def test_a_stale_workers_checkpoint_is_fenced_and_writes_nothing(
    store: Store, clock: FakeClock
) -> None:
    a, b = await reclaimed(store, clock)
    before = await store.get(b.id)
    with pytest.raises(LeaseLost):
        await store.checkpoint(a.lease, "charge", result='"from A"')
    with pytest.raises(LeaseLost):
        await store.fail_step(a.lease, "charge", error="A's error", retry_in=timedelta(seconds=1))
    assert await store.steps(a.id) == []
    assert await store.get(b.id) == before


async def test_a_checkpoint_after_the_job_finished_is_fenced(store: Store) -> None:
    job = await claimed(store)
    await store.complete(job.lease)
    with pytest.raises(LeaseLost):
        await store.checkpoint(job.lease, "late", result="1")
    assert await store.steps(job.id) == []


async def test_a_step_that_succeeded_keeps_its_first_result(store: Store) -> None:
    job = await claimed(store)
    await store.checkpoint(job.lease, "pick", result="1")
    await store.checkpoint(job.lease, "pick", result="2")
    await store.fail_step(job.lease, "pick", error="too late to fail")
    [pick] = await store.steps(job.id)
    assert (pick.state, pick.result, pick.attempts) == (StepState.SUCCEEDED, 1, 1)


async def test_step_failures_are_counted_and_kept_until_it_succeeds(
    store: Store, clock: FakeClock
) -> None:
    job = await claimed(store, max_attempts=5)
    await store.fail_step(job.lease, "sync", error="ValueError: page 43", traceback="tb")
    [failed] = await store.steps(job.id)
    assert (failed.state, failed.attempts, failed.error) == (
        StepState.FAILED,
        1,
        "ValueError: page 43",
    )
    # Without retry_in only the step is written: the job is still the handler's to end.
    assert (await store.get(job.id)).state is JobState.RUNNING
    await store.fail(job.lease, error="ValueError: page 43", retry_in=timedelta(0))
    again = await claim_one(store)
    assert again is not None
    await store.fail_step(again.lease, "sync", error="ValueError: page 44")
    await store.checkpoint(again.lease, "sync", result="44")
    [done] = await store.steps(job.id)
    assert (done.state, done.attempts, done.result) == (StepState.SUCCEEDED, 3, 44)


async def test_a_step_with_attempts_of_its_own_gives_the_jobs_attempt_back(
    store: Store, clock: FakeClock
) -> None:
    job = await claimed(store, max_attempts=1)
    await store.fail_step(
        job.lease,
        "call",
        error="TimeoutError: model",
        traceback="tb",
        retry_in=timedelta(seconds=5),
    )
    pending = await store.get(job.id)
    assert (pending.state, pending.attempt, pending.last_error) == (
        JobState.PENDING,
        0,
        "TimeoutError: model",
    )
    assert pending.run_at == clock.now() + timedelta(seconds=5)
    [attempt] = await store.attempts(job.id)
    assert (attempt.outcome, attempt.error) == (Outcome.FAILED, "TimeoutError: model")
    clock.advance(timedelta(seconds=5))
    again = await claim_one(store)
    assert again is not None and again.attempt == 1


# ---------------------------------------------------------------------- sleeps


async def test_a_sleep_gives_the_worker_back_and_the_job_is_due_at_its_wake_time(
    store: Store, clock: FakeClock
) -> None:
    job = await claimed(store, max_attempts=1)
    wake = await store.sleep(job.lease, "sleep-1", delay=timedelta(hours=6))
    assert wake == clock.now() + timedelta(hours=6)
    asleep = await store.get(job.id)
    assert (asleep.state, asleep.attempt, asleep.run_at) == (JobState.PENDING, 0, wake)
    assert [a.outcome for a in await store.attempts(job.id)] == [Outcome.SLEPT]
    # The lease ended with the sleep: nothing of the old attempt can be written any more.
    assert (await store.heartbeat([job.lease], lease=LEASE)).lost == [job.lease]
    with pytest.raises(LeaseLost):
        await store.complete(job.lease)
    clock.advance(timedelta(hours=6) - timedelta(seconds=1))
    assert await claim_one(store) is None
    clock.advance(timedelta(seconds=1))
    woken = await claim_one(store)
    assert woken is not None and woken.attempt == 1
    assert await store.sleep(woken.lease, "sleep-1", delay=timedelta(hours=6)) is None
    [slept] = await store.steps(job.id)
    assert (slept.kind, slept.state, slept.wake_at) == (StepKind.SLEEP, StepState.SLEPT, wake)


async def test_a_sleep_woken_early_sleeps_again_until_its_first_wake_time(
    store: Store, clock: FakeClock
) -> None:
    from rota.domain.job import JobEdit

    job = await claimed(store)
    wake = await store.sleep(job.lease, "cool-off", delay=timedelta(hours=1))
    clock.advance(timedelta(minutes=10))
    await store.reschedule(job.id, JobEdit(run_now=True))
    early = await claim_one(store)
    assert early is not None
    # The same sleep called again (even with another delay) keeps its first wake time.
    assert await store.sleep(early.lease, "cool-off", delay=timedelta(hours=5)) == wake
    assert (await store.get(job.id)).run_at == wake


async def test_a_sleep_until_an_instant_that_passed_returns_at_once(
    store: Store, clock: FakeClock
) -> None:
    job = await claimed(store)
    assert await store.sleep(job.lease, "s", until=clock.now() - timedelta(seconds=1)) is None
    assert (await store.get(job.id)).state is JobState.RUNNING
    [slept] = await store.steps(job.id)
    assert slept.state is StepState.SLEPT


async def test_a_stale_workers_sleep_is_fenced(store: Store, clock: FakeClock) -> None:
    a, b = await reclaimed(store, clock)
    with pytest.raises(LeaseLost):
        await store.sleep(a.lease, "s", delay=timedelta(hours=1))
    assert (await store.get(b.id)).state is JobState.RUNNING
    assert await store.steps(a.id) == []


# ---------------------------------------------------------------------- waits and signals


async def test_a_signal_sent_before_the_wait_is_kept_and_delivered(
    store: Store, clock: FakeClock
) -> None:
    sent = await store.signal("payment:order-42", '{"paid": true}', expire_after=DAY)
    assert (sent.delivered_to, sent.expires_at) == (None, clock.now() + DAY)
    job = await claimed(store)
    outcome = await store.wait_for(job.lease, "wait-1", "payment:order-42", timeout=DAY)
    assert (outcome.state, outcome.data) == (StepState.RECEIVED, {"paid": True})
    assert (await store.get(job.id)).state is JobState.RUNNING
    # Replayed, the wait answers the same; the signal reached this wait only.
    again = await store.wait_for(job.lease, "wait-1", "payment:order-42", timeout=DAY)
    assert (again.state, again.data) == (StepState.RECEIVED, {"paid": True})
    other = await claimed(store)
    waiting = await store.wait_for(other.lease, "wait-1", "payment:order-42", timeout=DAY)
    assert waiting.state is StepState.WAITING


async def test_a_signal_sent_during_the_wait_wakes_the_job_at_once(
    store: Store, clock: FakeClock
) -> None:
    job = await claimed(store, max_attempts=1)
    outcome = await store.wait_for(job.lease, "wait-1", "webhook:7", timeout=timedelta(days=2))
    assert (outcome.state, outcome.deadline) == (StepState.WAITING, clock.now() + 2 * DAY)
    waiting = await store.get(job.id)
    assert (waiting.state, waiting.attempt, waiting.run_at) == (
        JobState.PENDING,
        0,
        clock.now() + 2 * DAY,
    )
    assert [a.outcome for a in await store.attempts(job.id)] == [Outcome.WAITED]
    clock.advance(timedelta(minutes=3))
    assert await claim_one(store) is None
    sent = await store.signal("webhook:7", '{"tracking": "1Z"}', expire_after=DAY)
    assert sent.delivered_to == job.id
    woken = await claim_one(store)
    assert woken is not None and woken.id == job.id and woken.attempt == 1
    outcome = await store.wait_for(woken.lease, "wait-1", "webhook:7", timeout=timedelta(days=2))
    assert (outcome.state, outcome.data) == (StepState.RECEIVED, {"tracking": "1Z"})
    [received] = await store.steps(job.id)
    assert (received.kind, received.state, received.key) == (
        StepKind.WAIT,
        StepState.RECEIVED,
        "webhook:7",
    )


async def test_each_signal_reaches_one_wait_once_first_come_first_served(
    store: Store, clock: FakeClock
) -> None:
    first = await claimed(store)
    await store.wait_for(first.lease, "w", "k", timeout=DAY)
    clock.advance(timedelta(seconds=1))
    second = await claimed(store)
    await store.wait_for(second.lease, "w", "k", timeout=DAY)
    assert (await store.signal("k", "1", expire_after=DAY)).delivered_to == first.id
    assert (await store.signal("k", "2", expire_after=DAY)).delivered_to == second.id
    assert (await store.signal("k", "3", expire_after=DAY)).delivered_to is None
    data = {
        step.job_id: step.result for job in (first, second) for step in await store.steps(job.id)
    }
    assert data == {first.id: 1, second.id: 2}


async def test_a_signal_to_nobody_expires_and_is_never_delivered_after(
    store: Store, clock: FakeClock
) -> None:
    await store.signal("nobody", '"late"', expire_after=timedelta(hours=1))
    clock.advance(timedelta(hours=1))
    job = await claimed(store)
    outcome = await store.wait_for(job.lease, "wait-1", "nobody", timeout=timedelta(minutes=5))
    assert outcome.state is StepState.WAITING
    assert await store.prune_durable(older_than=clock.now()) == 1
    assert await store.prune_durable(older_than=clock.now()) == 0


async def test_a_wait_past_its_deadline_times_out_and_stays_timed_out(
    store: Store, clock: FakeClock
) -> None:
    job = await claimed(store)
    await store.wait_for(job.lease, "wait-1", "never", timeout=timedelta(hours=2))
    clock.advance(timedelta(hours=2))
    woken = await claim_one(store)
    assert woken is not None
    timed_out = await store.wait_for(woken.lease, "wait-1", "never", timeout=timedelta(hours=2))
    assert timed_out.state is StepState.TIMED_OUT
    # A signal now finds no wait: it is kept, and the replayed wait still timed out.
    assert (await store.signal("never", "1", expire_after=DAY)).delivered_to is None
    again = await store.wait_for(woken.lease, "wait-1", "never", timeout=timedelta(hours=2))
    assert again.state is StepState.TIMED_OUT


async def test_a_signal_is_not_delivered_to_a_cancelled_waiting_job(
    store: Store, clock: FakeClock
) -> None:
    job = await claimed(store)
    await store.wait_for(job.lease, "wait-1", "k", timeout=DAY)
    await store.cancel(job.id)
    assert (await store.signal("k", "1", expire_after=DAY)).delivered_to is None


async def test_a_cancelled_runs_wait_takes_no_signal_once_the_job_is_retried(
    store: Store, clock: FakeClock
) -> None:
    job = await claimed(store, max_attempts=1)
    await store.wait_for(job.lease, "wait-1", "approval:5", timeout=DAY)
    await store.cancel(job.id)
    await store.retry(job.id)
    # The cancel ended that wait: a signal now is kept for the retried run's own wait.
    sent = await store.signal("approval:5", '{"ok": true}', expire_after=DAY)
    assert sent.delivered_to is None
    retried = await claim_one(store)
    assert retried is not None and retried.id == job.id
    outcome = await store.wait_for(retried.lease, "approval", "approval:5", timeout=DAY)
    assert (outcome.state, outcome.data) == (StepState.RECEIVED, {"ok": True})
    assert [(s.name, s.state) for s in await store.steps(job.id)] == [
        ("approval", StepState.RECEIVED)
    ]
    # Reached once: nothing of it is left for another wait on the key.
    other = await claimed(store)
    later = await store.wait_for(other.lease, "wait-1", "approval:5", timeout=DAY)
    assert later.state is StepState.WAITING


async def test_a_retried_jobs_wait_waits_anew_past_its_cancelled_runs_deadline(
    store: Store, clock: FakeClock
) -> None:
    job = await claimed(store, max_attempts=1)
    await store.wait_for(job.lease, "wait-1", "approval:6", timeout=DAY)
    await store.cancel(job.id)
    clock.advance(2 * DAY)
    assert await store.bulk_retry(JobFilter(kind=job.kind)) == 1
    retried = await claim_one(store)
    assert retried is not None and retried.id == job.id
    waiting = await store.wait_for(retried.lease, "wait-1", "approval:6", timeout=DAY)
    assert (waiting.state, waiting.deadline) == (StepState.WAITING, clock.now() + DAY)
    sent = await store.signal("approval:6", "1", expire_after=DAY)
    assert sent.delivered_to == job.id
    woken = await claim_one(store)
    assert woken is not None and woken.id == job.id
    outcome = await store.wait_for(woken.lease, "wait-1", "approval:6", timeout=DAY)
    assert (outcome.state, outcome.data) == (StepState.RECEIVED, 1)
    assert (await store.signal("approval:6", "2", expire_after=DAY)).delivered_to is None


async def test_a_rerun_jobs_wait_left_waiting_by_its_earlier_run_takes_no_signal(
    store: Store, clock: FakeClock
) -> None:
    job = await claimed(store)
    await store.wait_for(job.lease, "wait-1", "approval:7", timeout=DAY)
    clock.advance(DAY)
    # Woken at its deadline, the run no longer reaches that wait (its code changed) and ends.
    woken = await claim_one(store)
    assert woken is not None and woken.id == job.id
    await store.complete(woken.lease)
    await store.rerun(job.id)
    assert (await store.signal("approval:7", "1", expire_after=DAY)).delivered_to is None
    rerun = await claim_one(store)
    assert rerun is not None and rerun.id == job.id
    outcome = await store.wait_for(rerun.lease, "approval", "approval:7", timeout=DAY)
    assert (outcome.state, outcome.data) == (StepState.RECEIVED, 1)


async def test_a_signal_to_a_held_waiting_job_is_delivered_once_when_it_is_released(
    store: Store, clock: FakeClock
) -> None:
    job = await claimed(store, max_attempts=1)
    await store.wait_for(job.lease, "wait-1", "approval:9", timeout=2 * DAY)
    clock.advance(timedelta(minutes=1))
    assert (await store.hold(job.id)).state is JobState.HELD
    sent = await store.signal("approval:9", '{"ok": true}', expire_after=timedelta(hours=1))
    # The held job's wait began first: the signal is its, not kept for a later wait.
    assert (sent.delivered_to, sent.expires_at) == (job.id, None)
    assert await claim_one(store) is None, "a held job is never claimed"

    clock.advance(timedelta(hours=2))  # longer than the signal would have been kept
    released = await store.release_held(job.id)
    assert released.state is JobState.PENDING and released.run_at <= clock.now()
    woken = await claim_one(store)
    assert woken is not None and woken.id == job.id and woken.attempt == 1
    outcome = await store.wait_for(woken.lease, "wait-1", "approval:9", timeout=2 * DAY)
    assert (outcome.state, outcome.data) == (StepState.RECEIVED, {"ok": True})
    again = await store.wait_for(woken.lease, "wait-1", "approval:9", timeout=2 * DAY)
    assert (again.state, again.data) == (StepState.RECEIVED, {"ok": True})
    # Delivered once: nothing of it is left for another wait on the key.
    other = await claimed(store)
    later = await store.wait_for(other.lease, "wait-1", "approval:9", timeout=DAY)
    assert later.state is StepState.WAITING
    [received] = await store.steps(job.id)
    assert (received.state, received.result) == (StepState.RECEIVED, {"ok": True})


async def test_a_held_waiting_job_released_without_a_signal_waits_on(
    store: Store, clock: FakeClock
) -> None:
    job = await claimed(store)
    await store.wait_for(job.lease, "wait-1", "approval:10", timeout=DAY)
    await store.hold(job.id)
    released = await store.release_held(job.id)
    assert (released.state, released.run_at) == (JobState.PENDING, clock.now() + DAY)
    assert await claim_one(store) is None
    sent = await store.signal("approval:10", "1", expire_after=DAY)
    assert sent.delivered_to == job.id
    woken = await claim_one(store)
    assert woken is not None and woken.id == job.id


async def test_a_stale_workers_wait_is_fenced_and_takes_no_signal(
    store: Store, clock: FakeClock
) -> None:
    await store.signal("k", "1", expire_after=DAY)
    a, b = await reclaimed(store, clock)
    with pytest.raises(LeaseLost):
        await store.wait_for(a.lease, "wait-1", "k", timeout=DAY)
    outcome = await store.wait_for(b.lease, "wait-1", "k", timeout=DAY)
    assert (outcome.state, outcome.data) == (StepState.RECEIVED, 1)


# ---------------------------------------------------------------------- retention


async def test_the_records_of_a_deleted_job_are_pruned_and_others_kept(
    store: Store, clock: FakeClock
) -> None:
    gone = await claimed(store)
    await store.checkpoint(gone.lease, "a", result="1")
    await store.complete(gone.lease)
    kept = await claimed(store)
    await store.checkpoint(kept.lease, "a", result="1")
    await store.delete(gone.id)
    clock.advance(timedelta(seconds=1))
    await store.prune_durable(older_than=clock.now())
    assert await store.steps(gone.id) == []
    assert [step.name for step in await store.steps(kept.id)] == ["a"]


# ---------------------------------------------------------------------- effects (C12)


async def _effects_table(store_url: str) -> None:
    """The table a handler writes its effects to, in the store's own database."""
    import sqlite3

    import psycopg

    if store_url.startswith("sqlite"):
        conn = sqlite3.connect(store_url.removeprefix("sqlite:///"))
        conn.execute("CREATE TABLE IF NOT EXISTS charges (job INTEGER, amount INTEGER)")
        conn.commit()
        conn.close()
    else:
        with psycopg.connect(store_url.partition("?")[0], autocommit=True) as pg:
            pg.execute("CREATE TABLE IF NOT EXISTS charges (job bigint, amount integer)")


async def _charges(store_url: str) -> list[tuple[int, int]]:
    import sqlite3

    import psycopg

    if store_url.startswith("sqlite"):
        conn = sqlite3.connect(store_url.removeprefix("sqlite:///"))
        try:
            return [tuple(row) for row in conn.execute("SELECT job, amount FROM charges")]
        finally:
            conn.close()
    with psycopg.connect(store_url.partition("?")[0], autocommit=True) as pg:
        return [tuple(row) for row in pg.execute("SELECT job, amount FROM charges").fetchall()]  # type: ignore[misc]


async def _charge(store: Store, store_url: str, job: Job, commit: str | None) -> None:
    """Write a charge in an effects transaction and commit it with a step's checkpoint, with
    the job's completion, or not at all (None: the handler raises instead)."""
    async with store.effects(job.lease) as effects:
        await effects.connection.execute(_insert(store_url), (job.id, 100))
        if commit == "step":
            await effects.commit_step("charge", result="1", duration=timedelta(0))
        elif commit == "completion":
            await effects.commit_completion(result=None)
        else:
            raise RuntimeError("the handler failed")


def _insert(store_url: str) -> str:
    if store_url.startswith("sqlite"):
        return "INSERT INTO charges (job, amount) VALUES (?, ?)"
    return "INSERT INTO charges (job, amount) VALUES (%s, %s)"


async def test_effects_commit_with_the_steps_checkpoint(store: Store, store_url: str) -> None:
    if store_url.startswith("memory"):
        pytest.skip("the memory store has no database to write effects into")
    await _effects_table(store_url)
    job = await claimed(store)
    async with store.effects(job.lease) as effects:
        await effects.connection.execute(_insert(store_url), (job.id, 42))
        await effects.commit_step("charge", result='"ch_1"', duration=timedelta(0))
    assert await _charges(store_url) == [(job.id, 42)]
    [charge] = await store.steps(job.id)
    assert (charge.state, charge.result) == (StepState.SUCCEEDED, "ch_1")


async def test_effects_commit_with_the_jobs_completion(store: Store, store_url: str) -> None:
    if store_url.startswith("memory"):
        pytest.skip("the memory store has no database to write effects into")
    await _effects_table(store_url)
    job = await claimed(store)
    async with store.effects(job.lease) as effects:
        await effects.connection.execute(_insert(store_url), (job.id, 7))
        await effects.commit_completion(result='{"ok": 1}')
    done = await store.get(job.id)
    assert (done.state, done.result) == (JobState.SUCCEEDED, {"ok": 1})
    assert await _charges(store_url) == [(job.id, 7)]


async def test_a_stale_workers_effects_roll_back_whole_with_lease_lost(
    store: Store, store_url: str, clock: FakeClock
) -> None:
    """C12: a worker that lost its lease commits nothing from its transaction."""
    if store_url.startswith("memory"):
        pytest.skip("the memory store has no database to write effects into")
    await _effects_table(store_url)
    a, b = await reclaimed(store, clock)
    for commit in ("step", "completion", None):
        with pytest.raises(LeaseLost if commit else RuntimeError):
            await _charge(store, store_url, a, commit)
    assert await _charges(store_url) == []
    assert await store.steps(a.id) == []
    assert (await store.get(b.id)).state is JobState.RUNNING


async def test_effects_left_without_a_commit_roll_back(store: Store, store_url: str) -> None:
    if store_url.startswith("memory"):
        pytest.skip("the memory store has no database to write effects into")
    await _effects_table(store_url)
    job = await claimed(store)
    with pytest.raises(RuntimeError):
        await _charge(store, store_url, job, None)
    async with store.effects(job.lease) as effects:
        await effects.connection.execute(_insert(store_url), (job.id, 2))
    assert await _charges(store_url) == []
    assert await store.steps(job.id) == []


async def test_the_memory_store_refuses_effects_saying_why(clock: FakeClock) -> None:
    store = open_store("memory://", clock=clock)
    job = await claimed(store)
    with pytest.raises(InvalidInput, match="memory store"):
        async with store.effects(job.lease):
            pass
