"""Jobs as the store holds them: the request to run one (JobSpec, checked on construction),
its edits, the job itself, its attempts, and what an enqueue answers. Its states are in
``rota.domain.job_state``, its payload's encoding in ``rota.domain.payload``, and the checks
of its names and fields in ``rota.domain.names``."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from datetime import datetime, timedelta
from types import SimpleNamespace
from typing import Any

from rota.domain.errors import InvalidJob
from rota.domain.job_state import ACTIVE_STATES, HELD_BY_DEFAULT, JobState, Outcome, runs_alone
from rota.domain.lease import Lease
from rota.domain.names import (
    LATEST_RUN_AT,
    int_in_range,
    is_valid_name,
    optional_text,
    valid_instant,
    valid_trace_context,
    validate_name,
)
from rota.domain.payload import PREVIEW_CHARS, Preview, encode_payload

DEFAULT_QUEUE = "default"
DEFAULT_MAX_ATTEMPTS = 3
MIN_PRIORITY, MAX_PRIORITY = -100, 100
MAX_ATTEMPTS_LIMIT = 1000
MAX_UNIQUE_KEY_LENGTH = 255
MAX_ERROR_LENGTH = 8 * 1024
MAX_TRACEBACK_LENGTH = 32 * 1024
MAX_DELAY = timedelta(days=365 * 100)


#: JobSpec's default payload: an empty dict of its own for each spec (None is JSON null).
_NO_PAYLOAD: Any = object()


@dataclass(frozen=True, slots=True, init=False)
class JobSpec:
    """A request to run ``kind`` with ``payload``: validated on construction.

    ``payload`` not given is an empty dict, a new one for each spec (None is JSON null).
    ``run_at`` (an aware instant) or ``delay`` (from the store's clock) sets when it is due;
    neither means now. Construction raises ``InvalidJob`` naming the field; nothing is written.
    """

    kind: str
    payload: Any = field(default_factory=dict)
    queue: str = DEFAULT_QUEUE
    priority: int = 0
    run_at: datetime | None = None
    delay: timedelta | None = None
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    tenant: str | None = None
    unique_key: str | None = None
    timeout: timedelta | None = None
    schedule: str | None = None
    slot_at: datetime | None = None
    #: The trace context of the code that enqueued the job (propagation headers such as
    #: ``traceparent``), for the execution's span to join that trace; None outside a trace.
    trace_context: Mapping[str, str] | None = field(default=None, repr=False)
    #: No attempt starts at or after this instant: a job still pending then is cancelled
    #: (last_error "expired"), even one that was due later. ``expire_after`` says the same
    #: from the store's now.
    expires_at: datetime | None = None
    expire_after: timedelta | None = None
    #: The unique key is held beyond the job's active states: for ``unique_for`` from this
    #: enqueue (forever when only ``unique_states`` is given), while the job is in one of
    #: ``unique_states`` (pending and running always; by default succeeded too).
    unique_for: timedelta | None = None
    unique_states: frozenset[JobState] | None = None
    #: What a second enqueue of a held key does: ``"skip"`` (report the holder as a
    #: duplicate) or ``"replace"`` (a holder still pending takes this payload and run_at).
    on_conflict: str = "skip"
    payload_json: str = field(init=False, repr=False, compare=False)

    def __init__(
        self,
        kind: str,
        payload: Any = _NO_PAYLOAD,
        queue: str = DEFAULT_QUEUE,
        priority: int = 0,
        run_at: datetime | None = None,
        delay: timedelta | None = None,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        tenant: str | None = None,
        unique_key: str | None = None,
        timeout: timedelta | None = None,
        schedule: str | None = None,
        slot_at: datetime | None = None,
        trace_context: Mapping[str, str] | None = None,
        expires_at: datetime | None = None,
        expire_after: timedelta | None = None,
        unique_for: timedelta | None = None,
        unique_states: frozenset[JobState] | None = None,
        on_conflict: str = "skip",
    ) -> None:
        # The fields' order and defaults, as @dataclass would write this (a unit test
        # compares them). Each field is set through its slot's own setter: the
        # object.__setattr__ call a frozen dataclass's __init__ makes per field costs twice
        # as much, and enqueue_many makes one spec per job.
        set_ = _SPEC_SETTERS
        set_.kind(self, kind)
        set_.payload(self, {} if payload is _NO_PAYLOAD else payload)
        set_.queue(self, queue)
        set_.priority(self, priority)
        set_.run_at(self, run_at)
        set_.delay(self, delay)
        set_.max_attempts(self, max_attempts)
        set_.tenant(self, tenant)
        set_.unique_key(self, unique_key)
        set_.timeout(self, timeout)
        set_.schedule(self, schedule)
        set_.slot_at(self, slot_at)
        set_.trace_context(self, trace_context)
        set_.expires_at(self, expires_at)
        set_.expire_after(self, expire_after)
        set_.unique_for(self, unique_for)
        set_.unique_states(self, unique_states)
        set_.on_conflict(self, on_conflict)
        self.__post_init__()

    def __post_init__(self) -> None:
        # enqueue_many makes one spec per job: each check's passing case is inline (the call,
        # and its message, only when it fails), and the fields most specs leave unset are
        # checked only when set, in the same order (the first error raised is the same).
        kind, queue, tenant = self.kind, self.queue, self.tenant
        if not (type(kind) is str and is_valid_name(kind)):
            validate_name("kind", kind)
        if not (type(queue) is str and is_valid_name(queue)):
            validate_name("queue", queue)
        if tenant is not None and not (type(tenant) is str and is_valid_name(tenant)):
            validate_name("tenant", tenant)
        if self.schedule is not None:
            validate_name("schedule", self.schedule)
        priority, attempts = self.priority, self.max_attempts
        if type(priority) is not int or not MIN_PRIORITY <= priority <= MAX_PRIORITY:
            int_in_range("priority", priority, MIN_PRIORITY, MAX_PRIORITY)
        if type(attempts) is not int or not 1 <= attempts <= MAX_ATTEMPTS_LIMIT:
            int_in_range("max_attempts", attempts, 1, MAX_ATTEMPTS_LIMIT)
        if self.unique_key is not None:
            optional_text("unique_key", self.unique_key, MAX_UNIQUE_KEY_LENGTH)
        if (
            self.run_at is not None
            or self.delay is not None
            or self.timeout is not None
            or self.slot_at is not None
            or self.trace_context is not None
            or self.expires_at is not None
            or self.expire_after is not None
            or self.unique_for is not None
            or self.unique_states is not None
        ):
            self._check_options()
        if self.on_conflict != "skip":
            if self.on_conflict != "replace":
                raise InvalidJob("on_conflict", 'must be "skip" or "replace"')
            if self.unique_key is None:
                raise InvalidJob("on_conflict", "needs a unique_key")
        _SPEC_SETTERS.payload_json(self, encode_payload(self.payload))

    def _check_options(self) -> None:
        """The instants, durations, trace context, expiry and hold, when any is set."""
        if self.run_at is not None and self.delay is not None:
            raise InvalidJob("run_at", "give run_at or delay, not both")
        if self.run_at is not None:
            object.__setattr__(self, "run_at", valid_instant("run_at", self.run_at))
        if self.delay is not None:
            if not isinstance(self.delay, timedelta):
                raise InvalidJob("delay", "must be a timedelta")
            if self.delay < timedelta(0):
                raise InvalidJob("delay", "must not be negative")
            if self.delay > MAX_DELAY:
                raise InvalidJob("delay", "must be at most 100 years")
        if self.timeout is not None and (
            not isinstance(self.timeout, timedelta) or self.timeout <= timedelta(0)
        ):
            raise InvalidJob("timeout", "must be a positive timedelta")
        if self.timeout is not None and self.timeout > MAX_DELAY:
            raise InvalidJob("timeout", "must be at most 100 years")
        if self.slot_at is not None:
            object.__setattr__(self, "slot_at", valid_instant("slot_at", self.slot_at))
        if self.trace_context is not None:
            object.__setattr__(self, "trace_context", valid_trace_context(self.trace_context))
        if self.expires_at is not None or self.expire_after is not None:
            self._check_expiry()
        if self.unique_for is not None or self.unique_states is not None:
            self._check_hold()

    def _check_expiry(self) -> None:
        if self.expires_at is not None and self.expire_after is not None:
            raise InvalidJob("expires_at", "give expires_at or expire_after, not both")
        if self.expires_at is not None:
            object.__setattr__(self, "expires_at", valid_instant("expires_at", self.expires_at))
        if self.expire_after is not None:
            if not isinstance(self.expire_after, timedelta):
                raise InvalidJob("expire_after", "must be a timedelta")
            if self.expire_after <= timedelta(0) or self.expire_after > MAX_DELAY:
                raise InvalidJob("expire_after", "must be positive and at most 100 years")

    def with_trace_context(self, carrier: Mapping[str, str]) -> JobSpec:
        """This spec carrying ``carrier`` as its trace context (checked as on construction;
        InvalidJob if it does not fit); the rest, already checked, is not checked again."""
        traced = copy.copy(self)
        object.__setattr__(traced, "trace_context", valid_trace_context(carrier))
        return traced

    def _check_hold(self) -> None:
        if self.unique_key is None:
            given = "unique_for" if self.unique_for is not None else "unique_states"
            raise InvalidJob(given, "needs a unique_key")
        if self.unique_for is not None and (
            not isinstance(self.unique_for, timedelta)
            or not timedelta(0) < self.unique_for <= MAX_DELAY
        ):
            raise InvalidJob("unique_for", "must be a positive timedelta of at most 100 years")
        states = self.unique_states
        if states is None:
            states = HELD_BY_DEFAULT
        try:
            held = frozenset(JobState(state) for state in states) | ACTIVE_STATES
        except (TypeError, ValueError):
            raise InvalidJob("unique_states", "must be job states") from None
        object.__setattr__(self, "unique_states", held)

    @property
    def holds_beyond_active(self) -> bool:
        """Whether the unique key is held beyond the active states, or replaces (both take
        the serialised enqueue path)."""
        return self.unique_states is not None or self.on_conflict == "replace"

    @property
    def keyed(self) -> bool:
        """Whether an enqueue of this spec can find it taken: it has a unique key, or a
        schedule's slot (a schedule or a slot alone cannot conflict)."""
        return self.unique_key is not None or (
            self.schedule is not None and self.slot_at is not None
        )

    @property
    def plain(self) -> bool:
        """Whether the spec sets none of the options most jobs leave unset: no unique key,
        schedule or slot, expiry or trace context (a store may enqueue it more simply)."""
        return (
            self.unique_key is None
            and self.schedule is None
            and self.slot_at is None
            and self.expires_at is None
            and self.expire_after is None
            and self.trace_context is None
        )

    def hold_until(self, now: datetime) -> datetime | None:
        """Until when, by the store's ``now``, the key is held in ``unique_states``."""
        if self.unique_states is None:
            return None
        return now + self.unique_for if self.unique_for is not None else LATEST_RUN_AT

    def expiry_at(self, now: datetime) -> datetime | None:
        """When the job expires unless started, given the store's ``now`` (None: never)."""
        if self.expire_after is not None:
            return now + self.expire_after
        return self.expires_at

    def due_at(self, now: datetime) -> datetime:
        """When the job becomes due, given the store's ``now``."""
        if self.run_at is not None:
            return self.run_at
        if self.delay is not None:
            return now + self.delay
        return now

    def inserted(
        self, job_id: int, run_at: datetime, created_at: datetime, expires_at: datetime | None
    ) -> Job:
        """The job a store just inserted for this spec: everything but its id and instants is
        what the spec says."""
        # Job's first fields positionally, in their order (id, kind, queue, payload, state,
        # priority, run_at, attempt, max_attempts, created_at, tenant, unique_key, timeout):
        # a bulk enqueue builds one Job per spec, and keywords cost more than the rest of the
        # call. Most specs set none of the fields after those.
        head = (
            job_id,
            self.kind,
            self.queue,
            self.payload,
            JobState.PENDING,
            self.priority,
            run_at,
            0,
            self.max_attempts,
            created_at,
            self.tenant,
            self.unique_key,
            self.timeout,
        )
        if (
            self.schedule is None
            and self.slot_at is None
            and self.trace_context is None
            and expires_at is None
        ):
            return Job(*head)
        return Job(
            *head,
            schedule=self.schedule,
            slot_at=self.slot_at,
            trace_context=None if self.trace_context is None else dict(self.trace_context),
            expires_at=expires_at,
        )


#: The setter of each of JobSpec's slots, by field name (see JobSpec.__init__).
_SPEC_SETTERS = SimpleNamespace(
    **{spec_field.name: getattr(JobSpec, spec_field.name).__set__ for spec_field in fields(JobSpec)}
)


@dataclass(frozen=True, slots=True)
class JobEdit:
    """What an operator changes on a pending job (``Store.reschedule``): each field left None
    is kept; ``run_now`` makes the job due at the store's now. Validated on construction
    (InvalidJob naming the field); an edit that changes nothing is refused too."""

    run_at: datetime | None = None
    run_now: bool = False
    priority: int | None = None
    queue: str | None = None

    def __post_init__(self) -> None:
        if self.run_at is not None and self.run_now:
            raise InvalidJob("run_at", "give a time or now, not both")
        if self.run_at is not None:
            object.__setattr__(self, "run_at", valid_instant("run_at", self.run_at))
        if self.priority is not None:
            int_in_range("priority", self.priority, MIN_PRIORITY, MAX_PRIORITY)
        if self.queue is not None:
            validate_name("queue", self.queue)
        if (
            self.run_at is None
            and not self.run_now
            and self.priority is None
            and self.queue is None
        ):
            raise InvalidJob("run_at", "give at least one of run_at (or now), priority, queue")


@dataclass(slots=True)
class Job:
    """A job as the store holds it: a snapshot, never changed in place (every change is a
    store verb, and stores build a new Job with ``dataclasses.replace``). Not frozen only
    because frozen construction costs five times as much, and claims build thousands."""

    id: int
    kind: str
    queue: str
    payload: Any
    state: JobState
    priority: int
    run_at: datetime
    attempt: int
    max_attempts: int
    created_at: datetime
    tenant: str | None = None
    unique_key: str | None = None
    timeout: timedelta | None = None
    lease_token: int | None = None
    lease_until: datetime | None = None
    worker: str | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    last_error: str | None = None
    schedule: str | None = None
    slot_at: datetime | None = None
    #: Expired leases under which its handler had started (rota.domain.blame): above 0, the
    #: job is a crash suspect and runs alone.
    crashes: int = 0
    #: The enqueuer's trace context (see JobSpec.trace_context).
    trace_context: dict[str, str] | None = None
    #: What the handler returned (JSON), kept with a succeeded job; None when it returned None.
    result: Any = None
    #: The last progress the running attempt reported (Progress), carried by a heartbeat;
    #: cleared when an attempt starts.
    progress: float | None = None
    progress_message: str | None = None
    #: No attempt starts at or after this instant (see JobSpec.expires_at).
    expires_at: datetime | None = None
    #: The workflow the job belongs to (the id of its first job), None outside workflows.
    workflow: int | None = None
    #: How many of its parents have not yet succeeded (or ended, for on_parent_failure="run").
    waiting_on: int = 0
    #: Heartbeats of its latest attempt (written by the heartbeat that renews its lease), and
    #: the store's instant of the last one; a claim sets them back to 0 and None.
    heartbeats: int = 0
    last_heartbeat_at: datetime | None = None

    @property
    def is_terminal(self) -> bool:
        return self.state.is_terminal

    @property
    def is_suspect(self) -> bool:
        """A crash suspect: a worker died while running it (rota.domain.blame)."""
        return self.crashes > 0

    @property
    def runs_alone(self) -> bool:
        """Whether this attempt (of a claimed job) runs alone on its worker (rota.domain.blame)."""
        return runs_alone(self.crashes, self.attempt, self.max_attempts)

    def is_due(self, now: datetime) -> bool:
        return self.state is JobState.PENDING and self.run_at <= now

    def is_expired(self, now: datetime) -> bool:
        """Whether no attempt may start at ``now``: its expires_at has come."""
        return self.expires_at is not None and self.expires_at <= now

    @property
    def lease(self) -> Lease:
        """The lease this job is held under; only meaningful for a job returned by claim."""
        if self.lease_token is None or self.worker is None:
            raise ValueError(f"job {self.id} is not leased")
        # Positional: every claimed job builds its lease (job_id, token, attempt, worker, until).
        return Lease(self.id, self.lease_token, self.attempt, self.worker, self.lease_until)


@dataclass(frozen=True, slots=True)
class Attempt:
    """One execution of a job, as recorded in its history."""

    attempt: int
    token: int
    worker: str | None
    started_at: datetime
    finished_at: datetime | None
    outcome: Outcome
    error: str | None = None
    traceback: str | None = None
    #: Heartbeats that renewed this attempt's lease, and the store's instant of the last one
    #: (None: none came); a running attempt's are the job's so far.
    heartbeats: int = 0
    last_heartbeat_at: datetime | None = None
    #: For an attempt whose lease expired (LEASE_EXPIRED), when its lease ran out; else None.
    lease_until: datetime | None = None


@dataclass(frozen=True, slots=True)
class EnqueueResult:
    """What enqueue did: the job, and whether a job already held its unique key (then
    nothing was inserted; ``replaced`` says whether that holder was updated instead)."""

    job: Job
    duplicate: bool = False
    #: With ``on_conflict="replace"``: the pending holder took the new payload and run_at.
    replaced: bool = False


def previewed(job: Job, *, chars: int = PREVIEW_CHARS) -> Job:
    """``job`` as a list shows it: its payload and result as Previews of ``chars`` characters,
    its last error cut alike."""
    result = None if job.result is None else Preview.of(job.result, chars)
    error = None if job.last_error is None else job.last_error[:chars]
    return replace(job, payload=Preview.of(job.payload, chars), result=result, last_error=error)
