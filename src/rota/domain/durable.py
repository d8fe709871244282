"""Durable jobs: the records a job's steps, sleeps and waits leave in the store, and signals.

A durable job is an ordinary job whose handler calls ``ctx.step``, ``ctx.sleep`` or
``ctx.wait_for``. Each leaves a record under its name, kept with the job:

- a **step** runs a function once: when it returns, its JSON result is checkpointed, fenced on
  the lease (C11: a step whose checkpoint committed never runs again for that job); every
  later run of the job (a retry, a takeover after a crash, a wake-up) returns the stored
  result instead of running it. A failure is recorded on the step (attempts, error).
- a **sleep** records when it wakes; until then the job is pending at that instant, holding
  no worker, connection or lease, and the attempt it was in is given back.
- a **wait** records the signal key it waits for and its deadline; a signal sent to that key
  (``app.signal``) is delivered to it once, or the deadline passes and the wait times out.

Records are keyed by name within their job: a replay finds a step by its name, not by its
position, so steps added to or removed from the code of a job that is asleep behave as the
guide says (docs/guides/durable-jobs.md). Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from rota.domain.errors import InvalidInput
from rota.domain.job import MAX_DELAY, Job
from rota.domain.job_state import JobState, Outcome
from rota.domain.names import NAME_PATTERN

#: Step names and signal keys share the grammar of kinds and queues (they appear in logs,
#: URLs and metrics' exemplars), with room for an id or two: ``payment:order-42``.
MAX_STEP_NAME_LENGTH = 128
MAX_SIGNAL_KEY_LENGTH = 255
#: How long a signal sent to a key nobody waits for is kept for a wait that comes later.
DEFAULT_SIGNAL_EXPIRY = timedelta(days=1)


class StepKind(StrEnum):
    """What left a record."""

    STEP = "step"
    SLEEP = "sleep"
    WAIT = "wait"


class StepState(StrEnum):
    """Where a record is. The same strings are used in SQL and JSON."""

    SUCCEEDED = "succeeded"  #: a step's checkpoint: its result is stored, it never runs again
    FAILED = "failed"  #: a step raised (``attempts``, ``error``); it runs again on a later run
    SLEEPING = "sleeping"  #: a sleep whose wake time has not come when it was last seen
    SLEPT = "slept"  #: a sleep whose wake time came: replays pass it at once
    WAITING = "waiting"  #: a wait with no signal yet, until its deadline
    RECEIVED = "received"  #: a wait that got its signal (``result`` is the signal's data)
    TIMED_OUT = "timed_out"  #: a wait whose deadline passed first

    @property
    def is_final(self) -> bool:
        """Whether a replay answers from the record alone (no write, no suspension)."""
        return self in _FINAL


_FINAL = frozenset({StepState.SUCCEEDED, StepState.SLEPT, StepState.RECEIVED, StepState.TIMED_OUT})


@dataclass(frozen=True, slots=True)
class Step:
    """One record of a durable job, as the store holds it."""

    job_id: int
    name: str
    kind: StepKind
    state: StepState
    #: Orders a job's records by when each was first written.
    seq: int
    #: A step's failures so far, plus one once it succeeded (0 for sleeps and waits).
    attempts: int = 0
    #: A step's result, or a received signal's data (JSON values; None for null).
    result: Any = None
    #: A step's last error.
    error: str | None = None
    #: When the record was first written, and when it reached its final state.
    started_at: datetime | None = None
    finished_at: datetime | None = None
    #: A sleep's wake time; a wait's deadline.
    wake_at: datetime | None = None
    #: The signal key a wait waits for.
    key: str | None = None
    #: The fencing token of the lease that last wrote the record.
    token: int | None = None

    @property
    def duration(self) -> timedelta | None:
        if self.started_at is None or self.finished_at is None:
            return None
        return self.finished_at - self.started_at


@dataclass(frozen=True, slots=True)
class WaitOutcome:
    """What ``Store.wait_for`` decided: the signal's ``data`` (state RECEIVED), a timeout
    (TIMED_OUT), or the job made pending until ``deadline`` (WAITING: stop the handler)."""

    state: StepState
    data: Any = None
    deadline: datetime | None = None


@dataclass(frozen=True, slots=True)
class SignalResult:
    """What sending a signal did: delivered to the waiting job ``delivered_to``, or kept
    until ``expires_at`` for a wait to come."""

    key: str
    delivered_to: int | None = None
    expires_at: datetime | None = None

    @property
    def delivered(self) -> bool:
        return self.delivered_to is not None


@dataclass(frozen=True, slots=True)
class Suspension:
    """Why a pending durable job is not running: asleep until ``until``, or waiting for
    ``key`` until ``until`` (its deadline)."""

    kind: StepKind
    step: str
    until: datetime | None
    key: str | None = None


class Settled(BaseException):
    """Raised through a handler once the store already holds its attempt's outcome: the job
    sleeps, waits, or a step with attempts of its own will be retried. A BaseException, so
    the handler's ``except Exception`` cannot swallow it: nothing may run after it."""

    def __init__(self, outcome: Outcome, why: str) -> None:
        super().__init__(why)
        self.outcome = outcome
        self.why = why


def check_step_name(name: object, what: str = "step name") -> str:
    """``name`` if it is a valid step (or sleep, or wait) name; InvalidInput otherwise."""
    return _check(name, what, MAX_STEP_NAME_LENGTH)


def check_signal_key(key: object) -> str:
    """``key`` if it is a valid signal key; InvalidInput otherwise."""
    return _check(key, "signal key", MAX_SIGNAL_KEY_LENGTH)


def _check(value: object, what: str, limit: int) -> str:
    if not isinstance(value, str) or not value:
        raise InvalidInput(f"{what} must be a non-empty string")
    if len(value) > limit:
        raise InvalidInput(f"{what} must be at most {limit} characters")
    if NAME_PATTERN.fullmatch(value) is None:
        raise InvalidInput(
            f"{what} {value!r} may contain only letters, digits and _ . : - "
            "and must start with a letter or digit"
        )
    return value


def check_duration(value: object, what: str, *, allow_zero: bool = False) -> timedelta:
    """``value`` (a timedelta or seconds) as a timedelta within 100 years; InvalidInput."""
    if isinstance(value, bool) or not isinstance(value, timedelta | int | float):
        raise InvalidInput(f"{what} must be a timedelta or a number of seconds")
    try:
        duration = value if isinstance(value, timedelta) else timedelta(seconds=value)
    except (OverflowError, ValueError):
        raise InvalidInput(f"{what} must be at most 100 years") from None
    if duration < timedelta(0) or (duration == timedelta(0) and not allow_zero):
        raise InvalidInput(f"{what} must be positive")
    if duration > MAX_DELAY:
        raise InvalidInput(f"{what} must be at most 100 years")
    return duration


def step_key(job_id: int, name: str) -> str:
    """A stable idempotency key for step ``name`` of job ``job_id``: the same on every run
    of the job, different for every other job or step. Pass it to outside APIs (a payment
    provider's Idempotency-Key) so a step that runs again after a crash is recognised there."""
    return f"rota-{job_id}-{name}"


def suspension(job: Job, steps: list[Step]) -> Suspension | None:
    """Why ``job`` is not running when it sleeps or waits: derived from its state and its
    records (docs/decisions/0006): a pending job whose latest record is an unfinished sleep
    or wait. None for any other job."""
    if job.state is not JobState.PENDING or not steps:
        return None
    last = max(steps, key=lambda step: step.seq)
    if last.state is StepState.SLEEPING:
        return Suspension(StepKind.SLEEP, last.name, last.wake_at)
    if last.state is StepState.WAITING:
        return Suspension(StepKind.WAIT, last.name, last.wake_at, last.key)
    return None
