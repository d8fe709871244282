"""T1: the history checker flags each seeded violation by name, and passes clean histories."""

from __future__ import annotations

import asyncio
import copy
import os
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from rota import JobContext
from rota.domain.errors import LeaseLost
from rota.domain.job import Attempt, Job, JobSpec
from rota.domain.job_state import JobState, Outcome
from rota.domain.schedule import Rule, ScheduleSpec
from rota.store import JobFilter
from rota.store.memory import MemoryStore
from rota.testing import FakeClock
from tests.support import history as h
from tests.support.history import Event, Recorder, Stopped, check, check_store, read_events

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
MS = 1_000_000  # nanoseconds


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def a_job(
    job_id: int,
    state: JobState,
    attempt: int,
    token: int | None,
    worker: str | None,
    **fields: Any,
) -> Job:
    values: dict[str, Any] = {
        "id": job_id,
        "kind": "k",
        "queue": "default",
        "payload": {},
        "state": state,
        "priority": 0,
        "run_at": T0,
        "attempt": attempt,
        "max_attempts": 3,
        "created_at": T0,
        "lease_token": token,
        "worker": worker,
    }
    values.update(fields)
    return Job(**values)


def an_attempt(
    n: int, token: int, worker: str, outcome: Outcome, start: float, end: float
) -> Attempt:
    return Attempt(n, token, worker, at(start), at(end), outcome)


def a_run(
    job: int, attempt: int, token: int, worker: str, start_ms: int, end_ms: int | None, end: str
) -> list[Event]:
    """The events of one execution: ``start`` and, unless the process died, its end."""
    events = [Event(job, attempt, token, worker, 100, h.START, start_ms * MS, 0.0)]
    if end_ms is not None:
        events.append(Event(job, attempt, token, worker, 100, end, end_ms * MS, 0.0))
    return events


@dataclass
class Run:
    """A whole run as the checker sees it; tests seed one violation into a clean copy."""

    enqueued: list[int] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    jobs: dict[int, Job] = field(default_factory=dict)
    attempts: dict[int, list[Attempt]] = field(default_factory=dict)
    expected: dict[int, JobState] = field(default_factory=dict)
    schedules: list[str] = field(default_factory=list)

    def check(self) -> h.Report:
        return check(
            enqueued=self.enqueued,
            events=self.events,
            jobs=self.jobs,
            attempts=self.attempts,
            expected=self.expected,
            schedules=self.schedules,
        )


def clean_run() -> Run:
    """Every allowed shape of history, one job each:

    1 succeeded at once; 2 failed, then succeeded; 3 killed mid-run, lease expired, re-run
    elsewhere (the dead run never ended); 4 released at shutdown and finished elsewhere with the
    same attempt number; 5 dead by a permanent error; 6 cancelled while running; 7 paused past
    its lease: re-run elsewhere while the paused handler was still running (its result refused);
    8 and 9 fired by schedule "tick" for two slots (never acknowledged to the test).
    """
    run = Run()

    def add(job: Job, attempts: list[Attempt], *runs: list[Event]) -> None:
        run.enqueued.append(job.id)
        run.jobs[job.id] = job
        run.attempts[job.id] = attempts
        run.expected[job.id] = job.state
        for events in runs:
            run.events.extend(events)

    add(
        a_job(1, JobState.SUCCEEDED, 1, 1, "w1"),
        [an_attempt(1, 1, "w1", Outcome.SUCCEEDED, 0, 1)],
        a_run(1, 1, 1, "w1", 0, 900, h.END_OK),
    )
    add(
        a_job(2, JobState.SUCCEEDED, 2, 5, "w2"),
        [
            an_attempt(1, 2, "w1", Outcome.FAILED, 0, 1),
            an_attempt(2, 5, "w2", Outcome.SUCCEEDED, 2, 3),
        ],
        a_run(2, 1, 2, "w1", 0, 900, h.END_ERR),
        a_run(2, 2, 5, "w2", 2000, 2900, h.END_OK),
    )
    add(
        a_job(3, JobState.SUCCEEDED, 2, 6, "w2"),
        [
            an_attempt(1, 3, "w1", Outcome.LEASE_EXPIRED, 0, 3),
            an_attempt(2, 6, "w2", Outcome.SUCCEEDED, 3, 4),
        ],
        a_run(3, 1, 3, "w1", 0, None, h.END_OK),
        a_run(3, 2, 6, "w2", 3000, 3900, h.END_OK),
    )
    add(
        a_job(4, JobState.SUCCEEDED, 1, 7, "w2"),
        [
            an_attempt(1, 4, "w1", Outcome.RELEASED, 0, 1),
            an_attempt(1, 7, "w2", Outcome.SUCCEEDED, 2, 3),
        ],
        a_run(4, 1, 4, "w1", 0, 1000, h.CANCELLED),
        a_run(4, 1, 7, "w2", 2000, 2900, h.END_OK),
    )
    add(
        a_job(5, JobState.DEAD, 1, 8, "w1"),
        [an_attempt(1, 8, "w1", Outcome.FAILED, 0, 1)],
        a_run(5, 1, 8, "w1", 0, 500, h.END_ERR),
    )
    add(
        a_job(6, JobState.CANCELLED, 1, 9, "w1"),
        [an_attempt(1, 9, "w1", Outcome.CANCELLED, 0, 1)],
        a_run(6, 1, 9, "w1", 0, 1200, h.CANCELLED),
    )
    add(
        a_job(7, JobState.SUCCEEDED, 2, 11, "w2"),
        [
            an_attempt(1, 10, "w1", Outcome.LEASE_EXPIRED, 0, 3),
            an_attempt(2, 11, "w2", Outcome.SUCCEEDED, 3, 6),
        ],
        a_run(7, 1, 10, "w1", 0, 4500, h.CANCELLED),  # resumed at 4.5 s, after the re-run began
        a_run(7, 2, 11, "w2", 3000, 6000, h.END_OK),
    )
    run.schedules.append("tick")
    for job_id, slot, token in ((8, 10.0, 12), (9, 20.0, 13)):
        run.jobs[job_id] = a_job(
            job_id, JobState.SUCCEEDED, 1, token, "w1", schedule="tick", slot_at=at(slot)
        )
        run.attempts[job_id] = [an_attempt(1, token, "w1", Outcome.SUCCEEDED, slot, slot + 1)]
        run.events.extend(
            a_run(job_id, 1, token, "w1", int(slot * 1000), int(slot * 1000) + 9, h.END_OK)
        )
    return run


def test_a_clean_history_passes() -> None:
    report = clean_run().check()
    assert report.violations == [], report.summary()
    assert report.reexecuted() == [2, 3, 4, 7]
    assert set(report.jobs) == set(range(1, 10))


def _swap_attempts(run: Run, job_id: int, *attempts: Attempt) -> None:
    run.attempts[job_id] = list(attempts)


def seed_lost_pending(run: Run) -> None:
    run.jobs[1] = replace(run.jobs[1], state=JobState.PENDING)
    del run.expected[1]  # the test did not say how it should end: only "lost" applies


def seed_lost_row(run: Run) -> None:
    run.enqueued.append(20)


def seed_unexpected_row(run: Run) -> None:
    run.jobs[30] = a_job(30, JobState.PENDING, 0, None, None)
    run.attempts[30] = []


def seed_unexpected_execution(run: Run) -> None:
    run.events.extend(a_run(31, 1, 99, "w1", 0, 100, h.END_OK))


def seed_unfinished_slot(run: Run) -> None:
    # A job a schedule fired must end like any enqueued job.
    run.jobs[9] = replace(run.jobs[9], state=JobState.PENDING)


def seed_unknown_schedule(run: Run) -> None:
    # A slot job of a schedule the run never defined.
    run.jobs[32] = a_job(32, JobState.PENDING, 0, None, None, schedule="other", slot_at=at(1))
    run.attempts[32] = []


def seed_duplicate_slot(run: Run) -> None:
    # A second job for schedule tick's slot at 10 s, which job 8 holds.
    run.jobs[33] = replace(run.jobs[8], id=33, lease_token=14, worker="w2")
    run.attempts[33] = [an_attempt(1, 14, "w2", Outcome.SUCCEEDED, 10, 11)]
    run.events.extend(a_run(33, 1, 14, "w2", 10_000, 10_009, h.END_OK))


def seed_duplicate_success(run: Run) -> None:
    # A second success accepted (from a later claim) for a job that had already succeeded.
    run.attempts[1].append(an_attempt(2, 40, "w2", Outcome.SUCCEEDED, 2, 3))
    run.jobs[1] = replace(run.jobs[1], attempt=2, lease_token=40, worker="w2")
    run.events.extend(a_run(1, 2, 40, "w2", 2000, 2900, h.END_OK))


def seed_stale_accept(run: Run) -> None:
    # w1's handler returned in time, but its completion arrived (and was accepted) after w2
    # had claimed the job with a newer token.
    _swap_attempts(
        run,
        3,
        an_attempt(1, 3, "w1", Outcome.SUCCEEDED, 0, 3.5),
        an_attempt(2, 6, "w2", Outcome.LEASE_EXPIRED, 3, 6),
    )
    run.events = [e for e in run.events if e.job != 3]
    run.events.extend(a_run(3, 1, 3, "w1", 0, 2900, h.END_OK))
    run.events.extend(a_run(3, 2, 6, "w2", 3000, None, h.END_OK))


def seed_phantom_success(run: Run) -> None:
    # The store accepted a success for token 1, whose handler was cancelled.
    run.events = [e for e in run.events if e.job != 1]
    run.events.extend(a_run(1, 1, 1, "w1", 0, 900, h.CANCELLED))


def seed_unrecorded_execution(run: Run) -> None:
    # A handler ran under a token the store never issued for the job: no committed claim.
    run.events.extend(a_run(5, 1, 77, "w2", 5000, 5100, h.END_ERR))


def seed_overlap(run: Run) -> None:
    # Attempt 1 failed (its lease never expired) but was still running when attempt 2 began.
    run.events = [e for e in run.events if e.job != 2]
    run.events.extend(a_run(2, 1, 2, "w1", 0, 2500, h.END_ERR))
    run.events.extend(a_run(2, 2, 5, "w2", 2000, 2900, h.END_OK))


def seed_overlap_after_release(run: Run) -> None:
    # Released at shutdown, yet its handler kept running after another worker started it.
    run.events = [e for e in run.events if e.job != 4]
    run.events.extend(a_run(4, 1, 4, "w1", 0, None, h.END_OK))
    run.events.extend(a_run(4, 1, 7, "w2", 2000, 2900, h.END_OK))


def seed_token_regression(run: Run) -> None:
    # The second attempt of job 5 was claimed under a smaller token than the first.
    run.attempts[5].append(an_attempt(2, 4, "w2", Outcome.FAILED, 2, 2.5))
    run.jobs[5] = replace(run.jobs[5], attempt=2, lease_token=4, worker="w2")


def seed_stale_start(run: Run) -> None:
    # w1 was paused between its claim and its handler's start; when it resumed it started the
    # handler although w2 had claimed the job (lease expired) and was running it.
    run.events = [e for e in run.events if e.job != 3]
    run.events.extend(a_run(3, 1, 3, "w1", 3500, 3600, h.CANCELLED))
    run.events.extend(a_run(3, 2, 6, "w2", 3000, 3900, h.END_OK))


def seed_attempts_exceeded(run: Run) -> None:
    run.jobs[2] = replace(run.jobs[2], max_attempts=1)


def seed_wrong_state(run: Run) -> None:
    run.expected[5] = JobState.SUCCEEDED


SEEDS: list[tuple[Callable[[Run], None], str, int]] = [
    (seed_lost_pending, h.LOST, 1),
    (seed_lost_row, h.LOST, 20),
    (seed_unexpected_row, h.UNEXPECTED, 30),
    (seed_unexpected_execution, h.UNEXPECTED, 31),
    (seed_unfinished_slot, h.LOST, 9),
    (seed_unknown_schedule, h.UNEXPECTED, 32),
    (seed_duplicate_slot, h.DUPLICATE_SLOT, 33),
    (seed_duplicate_success, h.DUPLICATE_SUCCESS, 1),
    (seed_stale_accept, h.STALE_ACCEPT, 3),
    (seed_phantom_success, h.PHANTOM_SUCCESS, 1),
    (seed_unrecorded_execution, h.UNRECORDED_EXECUTION, 5),
    (seed_overlap, h.OVERLAP, 2),
    (seed_overlap_after_release, h.OVERLAP, 4),
    (seed_stale_start, h.STALE_START, 3),
    (seed_token_regression, h.TOKEN_REGRESSION, 5),
    (seed_attempts_exceeded, h.ATTEMPTS_EXCEEDED, 2),
    (seed_wrong_state, h.WRONG_STATE, 5),
]


@pytest.mark.parametrize(
    ("seed", "name", "job_id"), SEEDS, ids=[seed.__name__[5:] for seed, _, _ in SEEDS]
)
def test_each_seeded_violation_is_flagged_by_name_and_nothing_else(
    seed: Callable[[Run], None], name: str, job_id: int
) -> None:
    run = copy.deepcopy(clean_run())
    seed(run)
    report = run.check()
    assert [(v.name, v.job) for v in report.violations] == [(name, job_id)], report.summary()
    with pytest.raises(AssertionError, match=name):
        report.assert_clean()
    report.assert_clean(tolerate={name})


def test_every_violation_name_has_a_seed() -> None:
    assert {name for _, name, _ in SEEDS} == set(h.VIOLATIONS)


# ---------------------------------------------------------------------- the recorder


def a_context(job_id: int = 1, token: int = 7, attempt: int = 1) -> JobContext:
    job = a_job(job_id, JobState.RUNNING, attempt, token, "w1")
    return JobContext(job=job, worker="w1")


def test_recorder_records_how_each_execution_ended(tmp_path: Path) -> None:
    path = tmp_path / "history.jsonl"
    recorder = Recorder(path)
    with recorder.execution(a_context(1)):
        pass
    with pytest.raises(RuntimeError), recorder.execution(a_context(2)):
        raise RuntimeError("boom")
    with pytest.raises(asyncio.CancelledError), recorder.execution(a_context(3)):
        raise asyncio.CancelledError
    with pytest.raises(Stopped), recorder.execution(a_context(4)):
        raise Stopped
    recorder.close()
    events = read_events(path)
    assert [(e.job, e.event) for e in events] == [
        (1, "start"),
        (1, "end_ok"),
        (2, "start"),
        (2, "end_err"),
        (3, "start"),
        (3, "cancelled"),
        (4, "start"),
        (4, "cancelled"),
    ]
    assert {(e.token, e.attempt, e.worker, e.pid) for e in events} == {(7, 1, "w1", os.getpid())}
    assert [e.mono_ns for e in events] == sorted(e.mono_ns for e in events)


def test_recorders_of_several_writers_append_whole_lines_and_a_torn_tail_is_skipped(
    tmp_path: Path,
) -> None:
    path = tmp_path / "history.jsonl"
    writers = [Recorder(path) for _ in range(3)]
    for round_ in range(50):
        for index, writer in enumerate(writers):
            writer.record(a_context(job_id=index + 1, token=round_ + 1), h.START)
    for writer in writers:
        writer.close()
    with path.open("a") as handle:
        handle.write('{"job": 9, "attem')  # a write cut short (never happens with one write(2))
    events = read_events(path)
    assert len(events) == 150
    assert {e.job for e in events} == {1, 2, 3}


# ---------------------------------------------------------------------- against a real store


async def test_check_store_reads_jobs_and_attempts_from_a_store(tmp_path: Path) -> None:
    """A worker loses its lease, another finishes the job, the stale completion is refused:
    the checker finds the overlap allowed; a refused success stays refused."""
    clock = FakeClock(T0)
    store = MemoryStore(clock=clock)
    lease = timedelta(seconds=2)
    [result] = await store.enqueue([JobSpec(kind="k")])
    job_id = result.job.id
    [first] = await store.claim("w1", queues=["default"], limit=1, lease=lease)
    clock.advance(3)
    [second] = await store.claim("w2", queues=["default"], limit=1, lease=lease)
    await store.complete(second.lease)
    with pytest.raises(LeaseLost):
        await store.complete(first.lease)

    path = tmp_path / "history.jsonl"
    path.write_text(
        "".join(
            e.to_json() + "\n"
            for e in [
                *a_run(job_id, 1, first.lease.token, "w1", 0, 3500, h.END_OK),
                *a_run(job_id, 2, second.lease.token, "w2", 3000, 3200, h.END_OK),
            ]
        )
    )
    report = await check_store(store, path, enqueued=[job_id])
    report.assert_clean()
    assert len(report.executed(job_id)) == 2

    unacknowledged = await check_store(store, path, enqueued=[])
    assert unacknowledged.names == {h.UNEXPECTED}


async def test_check_store_knows_the_jobs_a_schedule_fired_after_the_test_listed_its_own(
    tmp_path: Path,
) -> None:
    """The soak's race: the test listed the jobs, a firer in a worker then enqueued a slot and
    ran it, and only then did the checker read the store and the history. The slot's job was
    "unexpected". The checker takes a schedule's jobs from the store itself."""
    clock = FakeClock(T0)
    store = MemoryStore(clock=clock)
    await store.upsert_schedule(
        ScheduleSpec(name="tick", kind="k", rule=Rule.every(timedelta(seconds=10)))
    )
    [result] = await store.enqueue([JobSpec(kind="k")])
    listed = [job.id for job in (await store.list_jobs(JobFilter())).jobs]
    [fired] = [r.job.id for firing in await store.fire_due() for r in firing.inserted]
    path = tmp_path / "history.jsonl"
    recorder = Recorder(path)
    while claimed := await store.claim("w1", queues=["default"], limit=10, lease=timedelta(1)):
        for job in claimed:
            with recorder.execution(JobContext(job=job, worker="w1")):
                pass
            await store.complete(job.lease)
    recorder.close()

    report = await check_store(store, path, enqueued=listed)
    report.assert_clean()
    assert listed == [result.job.id]
    assert sorted(report.jobs) == [result.job.id, fired]
    assert {job.schedule for job in report.jobs.values()} == {None, "tick"}
