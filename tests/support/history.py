"""Execution histories: recorded by handlers in worker processes, checked against the store.

The recorder appends one JSON line per event to a file shared by every worker of a test::

    {"job", "attempt", "token", "worker", "pid", "event", "mono_ns", "wall"}

Each line is one ``write(2)`` on a descriptor opened with ``O_APPEND``: nothing is buffered in
the process, so a SIGKILL loses no line that was written, and lines of several processes never
interleave. ``mono_ns`` is CLOCK_MONOTONIC, which Linux shares between processes, so events of
different workers can be ordered on it. A test whose workers run with a faked CLOCK_MONOTONIC
(libfaketime without ``FAKETIME_DONT_FAKE_MONOTONIC``) sets ``ROTA_TEST_HISTORY_CLOCK=uptime``
for every worker: ``mono_ns`` then comes from /proc/uptime (the kernel's boot clock, which
libfaketime does not touch, at 10 ms resolution).

The checker (TESTPLAN section 6) reads those lines, the final job rows and each job's attempt
history from the store, and names every violation of the guarantees it finds (TESTPLAN's
properties in brackets):

- ``lost`` [P-loss]: an acknowledged enqueue, or a job a schedule fired, not terminal (or with
  no row) at the end.
- ``unexpected`` [P-unexpected]: a job in the store or the history that nobody enqueued: not
  acknowledged to the test, and not fired by one of the run's schedules.
- ``duplicate_slot`` [C5, T27]: a second job for one (schedule, slot).
- ``duplicate_success`` [P-accept]: more than one attempt of a job accepted as succeeded.
- ``stale_accept`` [P-accept]: a success accepted from an attempt that was not the job's
  latest claim.
- ``phantom_success`` [P-accept]: a success accepted for a token whose execution never
  returned (no ``end_ok`` of that token and worker in the history).
- ``unrecorded_execution``: a handler ran under a token the store has no attempt record for
  (or under another attempt number or worker than the record says).
- ``overlap`` [P-overlap]: two executions of one job overlapped although the earlier claim
  (lower token) did not end by lease expiry (C2: only an expired lease may be overlapped by its
  successor).
- ``stale_start`` [P-overlap]: a handler started after a newer claim of the job had already
  started its handler: the worker ran a handler on a lease it had lost.
- ``token_regression`` [P-fence]: a job's attempt tokens do not strictly increase.
- ``attempts_exceeded`` [P-attempts]: an attempt numbered above the job's max_attempts.
- ``wrong_state``: the job ended in another state than the test expected.

The jobs a schedule fired are taken from the store itself (their ``schedule`` field names one of
the run's schedules): the test cannot know them, as the firers in its workers make them.

The checker needs one consistent picture: take it once nothing runs any more (workers stopped,
or at least no schedule firing and no job left to run). A job fired or run while the store is
being read is in one half of the picture and not the other, and is flagged ``unexpected``.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import time
from collections import defaultdict
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from rota import JobContext
from rota.domain.job import Attempt, Job
from rota.domain.job_state import JobState, Outcome
from rota.store import JobFilter, Store

#: The environment variable naming the history file of a worker process.
HISTORY_ENV = "ROTA_TEST_HISTORY"
#: Set to ``uptime`` to take event instants from /proc/uptime (see the module docstring).
HISTORY_CLOCK_ENV = "ROTA_TEST_HISTORY_CLOCK"

START, END_OK, END_ERR, CANCELLED = "start", "end_ok", "end_err", "cancelled"
EVENTS = (START, END_OK, END_ERR, CANCELLED)
ENDS = frozenset({END_OK, END_ERR, CANCELLED})

LOST = "lost"
UNEXPECTED = "unexpected"
DUPLICATE_SLOT = "duplicate_slot"
DUPLICATE_SUCCESS = "duplicate_success"
STALE_ACCEPT = "stale_accept"
PHANTOM_SUCCESS = "phantom_success"
UNRECORDED_EXECUTION = "unrecorded_execution"
OVERLAP = "overlap"
STALE_START = "stale_start"
TOKEN_REGRESSION = "token_regression"
ATTEMPTS_EXCEEDED = "attempts_exceeded"
WRONG_STATE = "wrong_state"
VIOLATIONS = (
    LOST,
    UNEXPECTED,
    DUPLICATE_SLOT,
    DUPLICATE_SUCCESS,
    STALE_ACCEPT,
    PHANTOM_SUCCESS,
    UNRECORDED_EXECUTION,
    OVERLAP,
    STALE_START,
    TOKEN_REGRESSION,
    ATTEMPTS_EXCEEDED,
    WRONG_STATE,
)


@dataclass(frozen=True, slots=True)
class Event:
    """One line of the history: what a handler did, under which claim, and when."""

    job: int
    attempt: int
    token: int
    worker: str
    pid: int
    event: str
    mono_ns: int
    wall: float

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, line: str) -> Event:
        return cls(**json.loads(line))


class Stopped(Exception):
    """Raised by a sync handler that saw ``ctx.is_cancelled``: recorded as ``cancelled``."""


class Recorder:
    """Appends events to a history file; safe to share between threads and processes."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._uptime = os.environ.get(HISTORY_CLOCK_ENV) == "uptime"

    def record(self, ctx: JobContext, event: str) -> Event:
        if event not in EVENTS:
            raise ValueError(f"unknown history event {event!r}")
        entry = Event(
            job=ctx.job_id,
            attempt=ctx.attempt,
            token=ctx.fencing_token,
            worker=ctx.worker,
            pid=os.getpid(),
            event=event,
            mono_ns=uptime_ns() if self._uptime else time.monotonic_ns(),
            wall=time.time(),
        )
        os.write(self._fd, (entry.to_json() + "\n").encode())
        return entry

    @contextlib.contextmanager
    def execution(self, ctx: JobContext) -> Iterator[None]:
        """Record ``start``, then how the block ended: ``end_ok``, ``end_err`` for any
        exception (Snooze and Permanent included), ``cancelled`` when it was cancelled."""
        self.record(ctx, START)
        try:
            yield
        except (asyncio.CancelledError, Stopped):
            self.record(ctx, CANCELLED)
            raise
        except BaseException:
            self.record(ctx, END_ERR)
            raise
        self.record(ctx, END_OK)

    def close(self) -> None:
        os.close(self._fd)


def uptime_ns() -> int:
    """The kernel's boot clock from /proc/uptime (beyond libfaketime's reach), in ns."""
    with open("/proc/uptime", "rb") as uptime:
        seconds = uptime.read().split()[0].decode()
    whole, _, fraction = seconds.partition(".")
    return int(whole) * 1_000_000_000 + int(fraction.ljust(9, "0")[:9])


def read_events(path: str | os.PathLike[str]) -> list[Event]:
    """Every complete line of a history file (a line cut short by a crash is skipped)."""
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        return []
    return [Event.from_json(line) for line in text.splitlines(keepends=True) if line.endswith("\n")]


@dataclass(slots=True)
class Execution:
    """One run of a handler: from its ``start`` to its end event, if one was written."""

    job: int
    token: int
    attempt: int
    worker: str
    pid: int
    start_ns: int
    end_ns: int | None = None
    end: str | None = None

    @property
    def finished(self) -> bool:
        return self.end is not None


def executions(events: Iterable[Event]) -> dict[int, list[Execution]]:
    """Events grouped into executions per job, ordered by token."""
    by_key: dict[tuple[int, int], Execution] = {}
    ends: list[Event] = []
    for event in events:
        if event.event == START:
            by_key[(event.job, event.token)] = Execution(
                event.job, event.token, event.attempt, event.worker, event.pid, event.mono_ns
            )
        else:
            ends.append(event)
    for event in ends:
        run = by_key.get((event.job, event.token))
        if run is None:  # an end without a start: keep it visible as a zero-length run
            run = by_key[(event.job, event.token)] = Execution(
                event.job, event.token, event.attempt, event.worker, event.pid, event.mono_ns
            )
        if run.end is None or event.mono_ns < (run.end_ns or 0):
            run.end, run.end_ns = event.event, event.mono_ns
    grouped: dict[int, list[Execution]] = defaultdict(list)
    for run in by_key.values():
        grouped[run.job].append(run)
    for runs in grouped.values():
        runs.sort(key=lambda run: run.token)
    return dict(grouped)


@dataclass(frozen=True, slots=True)
class Violation:
    name: str
    job: int
    detail: str

    def __str__(self) -> str:
        return f"{self.name}: job {self.job}: {self.detail}"


@dataclass(slots=True)
class Report:
    """What the checker found. ``violations`` must be empty for a run to pass."""

    violations: list[Violation]
    runs: dict[int, list[Execution]] = field(default_factory=dict)
    #: The final job rows the check was made against (by id).
    jobs: dict[int, Job] = field(default_factory=dict)

    @property
    def names(self) -> set[str]:
        return {violation.name for violation in self.violations}

    def of(self, name: str) -> list[Violation]:
        return [violation for violation in self.violations if violation.name == name]

    def executed(self, job_id: int) -> list[Execution]:
        return self.runs.get(job_id, [])

    def reexecuted(self) -> list[int]:
        """Jobs that ran more than once (allowed: retries, lease expiry, release)."""
        return sorted(job for job, runs in self.runs.items() if len(runs) > 1)

    def summary(self, limit: int = 20) -> str:
        if not self.violations:
            return "no violations"
        counts: dict[str, int] = defaultdict(int)
        for violation in self.violations:
            counts[violation.name] += 1
        head = ", ".join(f"{name}={n}" for name, n in sorted(counts.items()))
        lines = [str(violation) for violation in self.violations[:limit]]
        more = len(self.violations) - limit
        if more > 0:
            lines.append(f"... and {more} more")
        return head + "\n" + "\n".join(lines)

    def assert_clean(self, *, tolerate: Iterable[str] = ()) -> None:
        """Fail with a summary unless every violation is one of the ``tolerate`` names."""
        allowed = set(tolerate)
        assert all(v.name in allowed for v in self.violations), self.summary()


def check(
    *,
    enqueued: Iterable[int],
    events: Iterable[Event],
    jobs: Mapping[int, Job],
    attempts: Mapping[int, Sequence[Attempt]],
    expected: Mapping[int, JobState] | None = None,
    schedules: Collection[str] = (),
) -> Report:
    """Check a run: ``enqueued`` ids acknowledged to the test, the handlers' ``events``, the
    store's final ``jobs`` and ``attempts`` (per job, oldest first), and the names of the run's
    ``schedules``, whose jobs count as enqueued (by their firer)."""
    fired = {job_id for job_id, job in jobs.items() if job.schedule in schedules}
    acknowledged = set(enqueued) | fired
    runs = executions(events)
    found: list[Violation] = []

    def flag(name: str, job: int, detail: str) -> None:
        found.append(Violation(name, job, detail))

    for job_id in sorted(acknowledged):
        job = jobs.get(job_id)
        if job is None:
            flag(LOST, job_id, "no row in the store")
        elif not job.state.is_terminal:
            flag(LOST, job_id, f"still {job.state.value} (attempt {job.attempt})")
    for job_id in sorted((set(jobs) | set(runs) | set(attempts)) - acknowledged):
        stray = jobs.get(job_id)
        if stray is not None and stray.schedule is not None:
            flag(UNEXPECTED, job_id, f"fired by schedule {stray.schedule!r}, not one of the run's")
        else:
            flag(UNEXPECTED, job_id, "in the store or the history but never enqueued")
    _check_slots(jobs, flag)

    for job_id in sorted(set(jobs) | set(attempts)):
        job = jobs.get(job_id)
        history = list(attempts.get(job_id, ()))
        job_runs = runs.get(job_id, [])
        by_token = {attempt.token: attempt for attempt in history}
        _check_tokens(job_id, history, flag)
        if job is not None:
            _check_attempt_limit(job, history, job_runs, flag)
            _check_success(job, history, job_runs, flag)
            if expected is not None and job_id in expected and job.state is not expected[job_id]:
                flag(WRONG_STATE, job_id, f"ended {job.state.value}, expected {expected[job_id]}")
        _check_runs(job_id, job_runs, by_token, flag)
    return Report(found, runs, dict(jobs))


def _check_slots(jobs: Mapping[int, Job], flag: Any) -> None:
    by_slot: dict[tuple[str, datetime | None], list[int]] = defaultdict(list)
    for job_id in sorted(jobs):
        job = jobs[job_id]
        if job.schedule is not None:
            by_slot[(job.schedule, job.slot_at)].append(job_id)
    for (schedule, slot), ids in by_slot.items():
        for job_id in ids[1:]:
            at = "?" if slot is None else slot.isoformat()
            flag(
                DUPLICATE_SLOT, job_id, f"schedule {schedule!r} slot {at} already had job {ids[0]}"
            )


def _check_tokens(job_id: int, history: Sequence[Attempt], flag: Any) -> None:
    for earlier, later in itertools.pairwise(history):
        if later.token <= earlier.token:
            flag(
                TOKEN_REGRESSION,
                job_id,
                f"attempt {later.attempt} has token {later.token} after token {earlier.token}",
            )


def _check_attempt_limit(
    job: Job, history: Sequence[Attempt], job_runs: Sequence[Execution], flag: Any
) -> None:
    numbers = [job.attempt, *(a.attempt for a in history), *(r.attempt for r in job_runs)]
    if max(numbers) > job.max_attempts:
        flag(
            ATTEMPTS_EXCEEDED,
            job.id,
            f"attempt {max(numbers)} of at most {job.max_attempts}",
        )


def _check_success(
    job: Job, history: Sequence[Attempt], job_runs: Sequence[Execution], flag: Any
) -> None:
    successes = [a for a in history if a.outcome is Outcome.SUCCEEDED]
    if len(successes) > 1:
        tokens = ", ".join(str(a.token) for a in successes)
        flag(DUPLICATE_SUCCESS, job.id, f"{len(successes)} accepted successes (tokens {tokens})")
    if job.state is not JobState.SUCCEEDED:
        return
    if not successes:
        flag(STALE_ACCEPT, job.id, "succeeded without a succeeded attempt in its history")
        return
    accepted = successes[-1]
    latest = max(a.token for a in history)
    if accepted.token != latest:
        flag(
            STALE_ACCEPT,
            job.id,
            f"success accepted from token {accepted.token}, but token {latest} claimed it later",
        )
    if not any(
        run.token == accepted.token and run.worker == accepted.worker and run.end == END_OK
        for run in job_runs
    ):
        flag(
            PHANTOM_SUCCESS,
            job.id,
            f"success accepted for token {accepted.token} on {accepted.worker}, "
            "whose handler never returned",
        )


def _check_runs(
    job_id: int, job_runs: Sequence[Execution], by_token: Mapping[int, Attempt], flag: Any
) -> None:
    for run in job_runs:
        record = by_token.get(run.token)
        if record is None:
            flag(UNRECORDED_EXECUTION, job_id, f"ran under token {run.token}, never issued")
        elif (record.attempt, record.worker) != (run.attempt, run.worker):
            flag(
                UNRECORDED_EXECUTION,
                job_id,
                f"token {run.token} ran as attempt {run.attempt} on {run.worker}; the store "
                f"says attempt {record.attempt} on {record.worker}",
            )
    # Runs are ordered by token: the claim order, whatever order their handlers started in.
    for index, earlier in enumerate(job_runs):
        for later in job_runs[index + 1 :]:
            if later.start_ns < earlier.start_ns:
                flag(
                    STALE_START,
                    job_id,
                    f"token {earlier.token} started on {earlier.worker} "
                    f"{(earlier.start_ns - later.start_ns) / 1e6:.1f} ms after token "
                    f"{later.token} had started on {later.worker}",
                )
            if not _intersect(earlier, later):
                continue
            record = by_token.get(earlier.token)
            if record is not None and record.outcome is Outcome.LEASE_EXPIRED:
                continue
            outcome = record.outcome.value if record is not None else "no record"
            flag(
                OVERLAP,
                job_id,
                f"token {earlier.token} on {earlier.worker} ({outcome}, not lease_expired) "
                f"and token {later.token} on {later.worker} ran at the same time",
            )


def _intersect(one: Execution, other: Execution) -> bool:
    """Whether two runs overlapped in time (a run with no end event never ended)."""
    inf = float("inf")
    one_end = one.end_ns if one.end_ns is not None else inf
    other_end = other.end_ns if other.end_ns is not None else inf
    return one.start_ns < other_end and other.start_ns < one_end


@dataclass(slots=True)
class Snapshot:
    """The store's final state, read once for ``check``: every job, each one's attempts (oldest
    first), and the names of the schedules whose firers may have made jobs."""

    jobs: dict[int, Job]
    attempts: dict[int, list[Attempt]]
    schedules: set[str]


async def snapshot(store: Store, *, concurrency: int = 8) -> Snapshot:
    """Every job in the store, each one's attempts and the store's schedules."""
    jobs: dict[int, Job] = {}
    cursor: str | None = None
    while True:
        page = await store.list_jobs(JobFilter(), cursor=cursor, limit=500)
        jobs.update((job.id, job) for job in page.jobs)
        cursor = page.next_cursor
        if cursor is None:
            break
    attempts: dict[int, list[Attempt]] = {}
    gate = asyncio.Semaphore(concurrency)

    async def fetch(job_id: int) -> None:
        async with gate:
            attempts[job_id] = await store.attempts(job_id)

    await asyncio.gather(*(fetch(job_id) for job_id in jobs))
    schedules = {schedule.name for schedule in await store.list_schedules()}
    return Snapshot(jobs, attempts, schedules)


def check_snapshot(
    final: Snapshot,
    history: str | os.PathLike[str],
    *,
    enqueued: Iterable[int],
    expected: Mapping[int, JobState] | None = None,
) -> Report:
    """``check`` the history file against a snapshot of the store (its schedules' jobs need not
    be in ``enqueued``)."""
    return check(
        enqueued=enqueued,
        events=read_events(history),
        jobs=final.jobs,
        attempts=final.attempts,
        expected=expected,
        schedules=final.schedules,
    )


async def check_store(
    store: Store,
    history: str | os.PathLike[str],
    *,
    enqueued: Iterable[int],
    expected: Mapping[int, JobState] | None = None,
) -> Report:
    """``check_snapshot`` of the store as it is now. Call it once nothing runs any more."""
    final = await snapshot(store)
    return check_snapshot(final, history, enqueued=enqueued, expected=expected)
