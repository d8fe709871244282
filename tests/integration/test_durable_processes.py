"""Durable jobs in real `rota worker` processes, on SQLite and PostgreSQL (C11, C12).

Workers of ``tests.support.durableapp`` record every step's execution to an external record
(their own connection, outside rota's tables). A step that SIGKILLs its worker the first time
runs again, alone; a sleep frees the only slot; on PostgreSQL a signal wakes a waiting job by
NOTIFY, and a worker paused inside ``ctx.transaction()`` past its lease commits nothing.
Workers run with a 2 s lease and 0.5 s heartbeats and rescues; nothing waits a fixed time.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from rota.domain.durable import StepState
from rota.domain.job import JobSpec
from rota.domain.job_state import JobState
from rota.store import Store, open_store
from tests.support.durablerecord import (
    RECORD_ENV,
    create_record,
    create_tx_table,
    read_record,
    read_tx,
)
from tests.support.history import check_store
from tests.support.processes import (
    Fleet,
    WorkerOptions,
    WorkerProcess,
    eventually,
    reaped,
    supervise,
)

pytestmark = pytest.mark.slow

APP = "tests.support.durableapp:app"
OPTIONS = WorkerOptions()


@pytest.fixture
def record(database_url: str, tmp_path: Path) -> str:
    """The external record: a table of the same PostgreSQL database (own connections), or a
    SQLite file of its own."""
    target = database_url if database_url.startswith("postgresql") else str(tmp_path / "rec.db")
    create_record(target)
    create_tx_table(database_url)
    return target


@pytest.fixture
def fleet(database_url: str, store: Store, tmp_path: Path, record: str) -> Iterator[Fleet]:
    with reaped(Fleet(database_url, store, tmp_path, OPTIONS)) as fleet:
        yield fleet


def start(fleet: Fleet, record: str, name: str, **overrides: object) -> WorkerProcess:
    return fleet.start(name, app=APP, env={RECORD_ENV: record}, **overrides)


async def test_a_step_that_kills_its_worker_runs_again_alone_and_the_job_succeeds(
    fleet: Fleet, store: Store, record: str, database_url: str
) -> None:
    """A job of 5 steps whose third step SIGKILLs its worker the first time: steps 1 and 2
    ran once, step 3 at most twice, steps 4 and 5 once, and the job succeeded."""
    [result] = await store.enqueue(
        [JobSpec(kind="steps", payload={"steps": 5, "kill_at": 3}, max_attempts=5)]
    )
    job_id = result.job.id

    async def finished() -> bool:
        return (await store.get(job_id)).is_terminal

    deaths = await supervise(
        fleet, "w", finished, max_restarts=3, within_s=60, env={RECORD_ENV: record}, app=APP
    )
    done = await store.get(job_id)
    assert (done.state, done.result) == (JobState.SUCCEEDED, 15)
    assert deaths == 1
    runs = Counter(step for job, step, _, _ in read_record(record) if job == job_id)
    assert runs == {"step-1": 1, "step-2": 1, "step-3": 2, "step-4": 1, "step-5": 1}
    steps = await store.steps(job_id)
    assert [(s.name, s.state) for s in steps] == [
        (f"step-{n}", StepState.SUCCEEDED) for n in range(1, 6)
    ]
    # Step 2's transaction landed once, with its checkpoint, under the first lease.
    assert read_tx(database_url) == [(job_id, steps[1].token)]
    report = await check_store(store, fleet.history, enqueued=[job_id])
    report.assert_clean()


async def test_a_sleeping_job_lets_another_run_in_the_only_slot_then_finishes(
    fleet: Fleet, store: Store, record: str
) -> None:
    """With concurrency 1, a job sleeping 5 s lets another job run meanwhile, then finishes."""
    worker = start(fleet, record, "w", concurrency=1)
    [sleeper] = await store.enqueue([JobSpec(kind="sleep_then", payload={"s": 5})])

    async def asleep() -> bool:
        return (await store.get(sleeper.job.id)).state is JobState.PENDING

    await eventually(asleep, within_s=30, what="the job to go to sleep")
    [other] = await store.enqueue([JobSpec(kind="quick")])

    async def other_done() -> bool:
        return (await store.get(other.job.id)).state is JobState.SUCCEEDED

    await eventually(other_done, within_s=30, what="the other job to run in the freed slot")
    sleeping = await store.get(sleeper.job.id)
    assert sleeping.state is JobState.PENDING, "the sleeper still sleeps as the other finished"

    async def woke() -> bool:
        return (await store.get(sleeper.job.id)).state is JobState.SUCCEEDED

    await eventually(woke, within_s=60, what="the sleeper to wake and finish")
    assert (await store.get(sleeper.job.id)).result == "woke"
    assert [a.outcome.value for a in await store.attempts(sleeper.job.id)] == [
        "slept",
        "succeeded",
    ]
    assert worker.alive


@pytest.mark.postgres
async def test_a_signal_wakes_a_waiting_job_by_notify_not_by_polling(
    pg_url: str, tmp_path: Path
) -> None:
    """On PostgreSQL the signal's statement notifies the job's workers: a worker polling once
    a minute runs the woken job well within that minute."""
    store = open_store(pg_url)
    await store.migrate()
    record = str(tmp_path / "rec.db")
    create_record(record)
    fleet = Fleet(pg_url, store, tmp_path, WorkerOptions(poll_s=60.0))
    try:
        worker = fleet.start("w", app=APP, env={RECORD_ENV: record})
        await fleet.wait_ready(worker)
        [waiter] = await store.enqueue(
            [JobSpec(kind="wait_then", payload={"key": "paid:9", "timeout": 3600})]
        )

        async def waiting() -> bool:
            steps = await store.steps(waiter.job.id)
            return bool(steps) and steps[0].state is StepState.WAITING

        await eventually(waiting, within_s=30, what="the job to wait")
        sent = await store.signal("paid:9", '"ok"', expire_after=timedelta(days=1))
        assert sent.delivered_to == waiter.job.id

        async def done() -> bool:
            return (await store.get(waiter.job.id)).state is JobState.SUCCEEDED

        # Under the poll interval: only the NOTIFY can have woken the worker.
        await eventually(done, within_s=30, what="the signal to wake the job")
        assert (await store.get(waiter.job.id)).result == "ok"
    finally:
        fleet.close()
        print(fleet.logs(tail=40))
        await store.close()


@pytest.mark.postgres
async def test_a_worker_paused_inside_a_transaction_past_its_lease_commits_nothing(
    pg_url: str, tmp_path: Path
) -> None:
    """T49: worker A is SIGSTOPped inside ctx.transaction() past its lease; B takes the job over
    and finishes it; A resumes and commits: its transaction rolls back with LeaseLost, none of
    its rows exist, B's do, once."""
    store = open_store(pg_url)
    await store.migrate()
    create_tx_table(pg_url)
    record = str(tmp_path / "rec.db")
    create_record(record)
    fleet = Fleet(pg_url, store, tmp_path, OPTIONS)
    try:
        a = fleet.start("a", app=APP, env={RECORD_ENV: record})
        [result] = await store.enqueue([JobSpec(kind="tx_pause", payload=8)])
        inside = Path(f"{fleet.history}.inside-1")
        await eventually(inside.exists, within_s=30, what="A inside its transaction")
        a.pause()
        b = fleet.start("b", app=APP, env={RECORD_ENV: record})

        async def succeeded() -> bool:
            return (await store.get(result.job.id)).state is JobState.SUCCEEDED

        await eventually(succeeded, within_s=60, what="B to take the job over and finish it")
        finished = await store.get(result.job.id)
        a.resume()

        async def a_gave_up() -> bool:
            # At its commit (LeaseLost), or stopped by its lease alarm on the way (cancelled):
            # either way its transaction rolled back.
            return "lease lost before" in a.stderr()

        await eventually(a_gave_up, within_s=60, what="A to find its lease lost")
        assert read_tx(pg_url) == [(result.job.id, finished.lease_token)]
        [book] = await store.steps(result.job.id)
        assert (book.state, book.token) == (StepState.SUCCEEDED, finished.lease_token)
        assert (await store.get(result.job.id)).state is JobState.SUCCEEDED
        b.terminate()
        await b.wait_exit()
    finally:
        fleet.close()
        print(fleet.logs(tail=40))
        await store.close()
