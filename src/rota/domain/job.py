"""The job: its states, what a caller asks for (JobSpec), and what the store holds (Job).

A job moves through one state machine (docs/architecture.md draws it)::

    waiting ──every parent succeeded (or ended, on_parent_failure="run")──> pending
       │  └──a parent ended dead or cancelled──> cancelled ──that parent retried──> waiting
    pending ──claim──> running ──success──> succeeded
       ^  ^               │  ├──error, attempts left──> pending (run_at = now + backoff)
       │  │               │  ├──permanent error / last attempt──> dead
       │  └──snooze / release / lease expired (see rota.domain.blame)──┘
       │                  └──lease expired on the last attempt, running alone──> dead
       └──retry── dead, cancelled <──cancel── waiting, pending, running
    pending ──expires_at passed──> cancelled ("expired")      succeeded ──rerun──> pending
    waiting, pending ──hold──> held ──release──> waiting (parents left) or pending
    held ──cancel──> cancelled

A held job is never claimed, expired or ended for want of a worker, and never pruned or
purged: it waits for an operator's release. It keeps its unique key (it is active), its
run_at (released, it is due at its time) and its count of parents left: a parent that
succeeds counts it down, one that ends dead or cancelled on a "cancel" edge cancels it as it
cancels a waiting job (docs/concepts/hold.md).
"""

from __future__ import annotations

import copy
import functools
import json
import math
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, fields, replace
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from types import SimpleNamespace
from typing import Any

import msgspec

from rota.domain.errors import InvalidInput, InvalidJob
from rota.domain.lease import Lease

DEFAULT_QUEUE = "default"
DEFAULT_MAX_ATTEMPTS = 3
MIN_PRIORITY, MAX_PRIORITY = -100, 100
MAX_ATTEMPTS_LIMIT = 1000
MAX_NAME_LENGTH = 128
MAX_UNIQUE_KEY_LENGTH = 255
MAX_PAYLOAD_BYTES = 1024 * 1024
#: The largest result kept in its job's row, as JSON text (and the largest signal payload):
#: rows are read by lists and claims, so they stay small. A larger result is stored apart, in
#: a results table read only for that job, up to the worker's cap.
MAX_RESULT_BYTES = 64 * 1024
#: The worker's default cap on a result (``WorkerSettings.max_result_bytes``): a handler that
#: returns more fails its attempt, permanently, saying so.
DEFAULT_MAX_RESULT_BYTES = 16 * 1024 * 1024
#: The highest cap a worker may set: a result travels whole in one statement.
MAX_RESULT_CAP = 256 * 1024 * 1024
#: The longest message a handler's progress report may carry.
MAX_PROGRESS_MESSAGE_LENGTH = 200
MAX_PAYLOAD_DEPTH = 64
MAX_ERROR_LENGTH = 8 * 1024
MAX_TRACEBACK_LENGTH = 32 * 1024
#: A job's trace context: a few propagation headers (W3C traceparent and tracestate, or what
#: the configured propagator writes), small enough to travel with every claim.
MAX_TRACE_CONTEXT_ENTRIES = 8
MAX_TRACE_CONTEXT_BYTES = 4096
#: The earliest and latest instants a job may be scheduled for.
EARLIEST_RUN_AT = datetime(1970, 1, 1, tzinfo=UTC)
LATEST_RUN_AT = datetime(9999, 1, 1, tzinfo=UTC)
MAX_DELAY = timedelta(days=365 * 100)

#: Kinds, queues and tenants: letters, digits and ``_ . : -``; they appear in URLs, metrics
#: labels and logs, so the grammar is deliberately narrow.
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:\-]*")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
#: The instants rota reads from text: RFC 3339 (``T`` or a space between date and time,
#: seconds and fraction optional, ``Z`` or ``+HH:MM``), ASCII digits only. Python's own
#: ``fromisoformat`` takes any character as the separator (NUL included) and other scripts'
#: digits, so the shape is checked first and the calendar by ``fromisoformat`` after.
INSTANT_PATTERN = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ][0-9]{2}:[0-9]{2}(?::[0-9]{2}(?:\.[0-9]{1,9})?)?"
    r"(?:[Zz]|[+-][0-9]{2}:[0-9]{2})"
)
#: The years INSTANT_PATTERN's instants may name whatever their offset (1971-9998), so a
#: schema can describe exactly the text that lies between EARLIEST_RUN_AT and LATEST_RUN_AT.
SAFE_YEARS_PATTERN = r"(?:197[1-9]|19[89][0-9]|[2-8][0-9]{3}|9[0-8][0-9]{2}|99[0-8][0-9]|999[0-8])"
_NAIVE_INSTANT = re.compile(INSTANT_PATTERN.pattern.split("(?:[Zz]")[0])
MAX_INSTANT_LENGTH = 64
#: Trace context entries are HTTP header fields: a token name, a printable ASCII value.
_HEADER_NAME = re.compile(r"[a-z0-9!#$%&'*+.^_`|~-]{1,64}")
_HEADER_VALUE = re.compile(r"[\x20-\x7e]*")


class JobState(StrEnum):
    """Where a job is in its life. The same strings are used in SQL, JSON and metrics."""

    #: has parents that have not all succeeded (rota.domain.workflow); never claimed
    WAITING = "waiting"
    PENDING = "pending"  #: claimable once run_at <= now
    RUNNING = "running"  #: leased to a worker until lease_until
    SUCCEEDED = "succeeded"  #: terminal: the handler returned
    #: terminal: attempts used up, permanent error, or its worker died on its last attempt
    #: while it ran alone (rota.domain.blame)
    DEAD = "dead"
    CANCELLED = "cancelled"  #: terminal: cancelled before it could finish
    #: put aside by an operator (``hold``) from waiting or pending; never claimed until
    #: released, then waiting again if parents are left, else pending
    HELD = "held"

    @property
    def is_terminal(self) -> bool:
        return self in _TERMINAL

    @property
    def is_active(self) -> bool:
        return self in (JobState.WAITING, JobState.PENDING, JobState.RUNNING, JobState.HELD)


_TERMINAL = frozenset({JobState.SUCCEEDED, JobState.DEAD, JobState.CANCELLED})
#: The states a job's unique key is always held in (a held job keeps its key).
ACTIVE_STATES = frozenset({JobState.PENDING, JobState.RUNNING, JobState.HELD})
#: The states a unique key is held in when ``unique_for`` is given without ``unique_states``.
HELD_BY_DEFAULT = ACTIVE_STATES | {JobState.SUCCEEDED}
#: One bit per state, for the stores' ``unique_states`` column.
STATE_BITS = {
    JobState.PENDING: 1,
    JobState.RUNNING: 2,
    JobState.SUCCEEDED: 4,
    JobState.DEAD: 8,
    JobState.CANCELLED: 16,
    # Named for completeness: a workflow job (the only kind that waits) holds no unique key.
    JobState.WAITING: 32,
    JobState.HELD: 64,
}


#: SQL for the bit of the row's ``state`` (a constant of ours, spliced into statements).
STATE_BIT_SQL = (
    "(CASE state WHEN 'pending' THEN 1 WHEN 'running' THEN 2 WHEN 'succeeded' THEN 4 "
    "WHEN 'dead' THEN 8 WHEN 'cancelled' THEN 16 WHEN 'waiting' THEN 32 WHEN 'held' THEN 64 "
    "ELSE 0 END)"
)


def state_mask(states: frozenset[JobState]) -> int:
    return sum(STATE_BITS[state] for state in states)


def mask_states(mask: int) -> frozenset[JobState]:
    return frozenset(state for state, bit in STATE_BITS.items() if mask & bit)


#: Finished states: what a purge deletes.
FINISHED_STATES = _TERMINAL
#: States from which a manual retry is allowed.
RETRYABLE_STATES = frozenset({JobState.DEAD, JobState.CANCELLED})
#: States an operator may hold a job in (``hold``): it has not started.
HOLDABLE_STATES = frozenset({JobState.WAITING, JobState.PENDING})
#: Every state a job has not ended in: what cancel accepts.
UNFINISHED_STATES = frozenset(JobState) - _TERMINAL


class Outcome(StrEnum):
    """How one attempt ended."""

    RUNNING = "running"  #: not ended yet
    SUCCEEDED = "succeeded"
    FAILED = "failed"  #: the handler raised; the job retried or went dead
    SNOOZED = "snoozed"  #: the handler asked to run later; the attempt was given back
    RELEASED = "released"  #: the worker shut down and handed the job back
    LEASE_EXPIRED = "lease_expired"  #: the worker went silent past its lease
    SLEPT = "slept"  #: the handler began a durable sleep; the attempt was given back
    WAITED = "waited"  #: the handler began waiting for a signal; the attempt was given back
    CANCELLED = "cancelled"


#: The last_error of a job cancelled because it expired before it could start.
EXPIRED = "expired"


#: The last_error of a job ended because no live worker runs its kind (``unrunnable``).
UNRUNNABLE = "no live worker runs kind '{kind}': ended after waiting for one"


def unrunnable(kind: str) -> str:
    """The last error of a job ended because no live worker runs its kind."""
    return UNRUNNABLE.replace("{kind}", kind)


#: A job whose worker died this often while running it runs alone from then on.
ALONE_AFTER_CRASHES = 2


def runs_alone(crashes: int, attempt: int, max_attempts: int) -> bool:
    """Whether attempt ``attempt`` of a job with ``crashes`` runs alone: a crash suspect's
    last attempt, and every attempt once its worker died ``ALONE_AFTER_CRASHES`` times."""
    return crashes >= ALONE_AFTER_CRASHES or (crashes > 0 and attempt >= max_attempts)


@functools.lru_cache(maxsize=4096)
def _is_valid_name(value: str) -> bool:
    """Kinds, queues and tenants repeat endlessly: remember the ones already checked."""
    return len(value) <= MAX_NAME_LENGTH and NAME_PATTERN.fullmatch(value) is not None


def validate_name(field_name: str, value: object, *, required: bool = True) -> str | None:
    """Check a kind, queue or tenant against NAME_PATTERN; raise InvalidJob naming the field."""
    if value is None:
        if required:
            raise InvalidJob(field_name, "is required")
        return None
    if type(value) is str and _is_valid_name(value):
        return value
    if not isinstance(value, str):
        raise InvalidJob(field_name, "must be a string")
    if not value:
        raise InvalidJob(field_name, "must not be empty")
    if len(value) > MAX_NAME_LENGTH:
        raise InvalidJob(field_name, f"must be at most {MAX_NAME_LENGTH} characters")
    if not NAME_PATTERN.fullmatch(value):
        raise InvalidJob(
            field_name,
            "may contain only letters, digits and _ . : - and must start with a letter or digit",
        )
    return value


#: How many known kinds an "unknown kind" message lists before it says how many more there are.
_KINDS_LISTED = 20


def check_known_kind(kind: str, known: Collection[str] | None) -> str:
    """``kind``, if jobs of it can be enqueued where handlers exist for the ``known`` kinds.

    ``None`` accepts every kind: nothing is known about the handlers (code that only enqueues,
    its workers elsewhere). Otherwise raises InvalidJob("kind") listing the known kinds, so a
    mistyped kind is refused at the enqueue instead of going dead at the first worker.
    """
    if known is None or kind in known:
        return kind
    names = sorted(known)
    listed = ", ".join(names[:_KINDS_LISTED]) or "(none)"
    if len(names) > _KINDS_LISTED:
        listed += f" and {len(names) - _KINDS_LISTED} more"
    raise InvalidJob("kind", f"unknown kind {kind!r} (known kinds: {listed})")


def encode_payload(
    payload: object, field_name: str = "payload", *, max_bytes: int = MAX_PAYLOAD_BYTES
) -> str:
    """The canonical JSON text of ``payload``; raises InvalidJob unless it is plain, finite JSON.

    Refused: non-JSON types, NaN and infinities, NUL characters and lone surrogates (neither
    survives a round trip through PostgreSQL), non-string keys, nesting deeper than
    MAX_PAYLOAD_DEPTH and text longer than ``max_bytes`` (MAX_PAYLOAD_BYTES).
    """
    # One walk checks types, keys, NUL characters and depth; exact type checks keep it cheap
    # for the plain dicts most payloads are (enqueue_many builds one spec per job). A dict of
    # names to strings, integers, booleans and None (most payloads) is checked in one loop,
    # with nothing left to walk.
    flat = type(payload) is dict and _flat(payload)
    stack: list[tuple[object, int]] = [] if flat else [(payload, 1)]
    # Whether the payload holds only the exact types msgspec writes as json does, letter for
    # letter (a float's exponent, e.g. 1e+16, and subclasses are left to json).
    exact = True
    while stack:
        value, depth = stack.pop()
        kind = type(value)
        if kind is str:
            if "\x00" in value:  # type: ignore[operator]
                raise InvalidJob(field_name, "must not contain NUL characters")
        elif kind is int or kind is bool or value is None:
            continue
        elif kind is float:
            exact = False
            if not math.isfinite(value):  # type: ignore[arg-type]
                raise InvalidJob(field_name, "must not contain NaN or Infinity")
        elif depth >= MAX_PAYLOAD_DEPTH and isinstance(value, dict | list | tuple):
            raise InvalidJob(field_name, f"is nested deeper than {MAX_PAYLOAD_DEPTH} levels")
        elif isinstance(value, dict):
            exact = exact and kind is dict
            for key, item in value.items():
                if type(key) is not str:
                    raise InvalidJob(field_name, "object keys must be strings")
                if "\x00" in key:
                    raise InvalidJob(field_name, "must not contain NUL characters")
                stack.append((item, depth + 1))
        elif isinstance(value, list | tuple):
            exact = exact and (kind is list or kind is tuple)
            stack.extend((item, depth + 1) for item in value)
        elif isinstance(value, str | int | float):  # subclasses: check as their base type
            exact = False
            stack.append((_plain(value), depth))
        else:
            raise InvalidJob(field_name, f"is not JSON: {type(value).__name__} is not allowed")
    try:
        # msgspec writes the UTF-8 bytes in a tenth of json's time.
        encoded = _encode_exact(payload) if exact else _encode(payload).encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidJob(field_name, "must be valid Unicode (no lone surrogates)") from None
    except (ValueError, OverflowError, RecursionError) as error:
        # What the walk cannot see coming: an integer past Python's int-to-str digit limit
        # (ValueError), one msgspec cannot write, a structure too deep for the encoder.
        raise InvalidJob(field_name, f"cannot be written as JSON: {error}") from None
    if len(encoded) > max_bytes:
        raise InvalidJob(field_name, f"is larger than {max_bytes} bytes as JSON")
    return encoded.decode("utf-8")


def _flat(payload: dict[Any, Any]) -> bool:
    """Whether every key of ``payload`` is a str and every value a str, int, bool or None
    (exact types), none of the strings holding a NUL character."""
    for key, value in payload.items():
        if type(key) is not str or "\x00" in key:
            return False
        kind = type(value)
        if kind is str:
            if "\x00" in value:
                return False
        elif not (kind is int or kind is bool or value is None):
            return False
    return True


def encode_result(value: object, max_bytes: int = DEFAULT_MAX_RESULT_BYTES) -> str | None:
    """The JSON text a handler's return value is stored as, None for None (nothing stored).

    Raises InvalidJob("result") for anything ``encode_payload`` refuses and for text longer
    than ``max_bytes``: the worker then fails the attempt permanently with that message.
    """
    if value is None:
        return None
    return encode_payload(value, "result", max_bytes=max_bytes)


def stored_apart(text: str | None) -> bool:
    """Whether a result's JSON text is too long for its job's row (MAX_RESULT_BYTES in
    UTF-8): stores keep it in their results table instead."""
    if text is None or len(text) * 4 <= MAX_RESULT_BYTES:  # at most 4 bytes a character
        return False
    return len(text) > MAX_RESULT_BYTES or len(text.encode("utf-8")) > MAX_RESULT_BYTES


@dataclass(frozen=True, slots=True)
class Progress:
    """How far a running handler says it is: a fraction in [0, 1] and an optional message.

    Construction raises InvalidInput (a ValueError) for a fraction out of range, not a
    number, or a message that is not text of at most MAX_PROGRESS_MESSAGE_LENGTH characters
    without control characters.
    """

    fraction: float
    message: str | None = None

    def __post_init__(self) -> None:
        fraction = self.fraction
        if isinstance(fraction, bool) or not isinstance(fraction, int | float):
            raise InvalidInput("progress must be a number between 0 and 1")
        if not (math.isfinite(fraction) and 0 <= fraction <= 1):
            raise InvalidInput("progress must be between 0 and 1")
        object.__setattr__(self, "fraction", float(fraction))
        message = self.message
        if message is None:
            return
        if not isinstance(message, str):
            raise InvalidInput("progress message must be a string")
        if len(message) > MAX_PROGRESS_MESSAGE_LENGTH:
            raise InvalidInput(
                f"progress message must be at most {MAX_PROGRESS_MESSAGE_LENGTH} characters"
            )
        if _CONTROL.search(message):
            raise InvalidInput("progress message must not contain control characters")
        try:
            message.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidInput("progress message must be valid Unicode") from None


_encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode
_encode_exact = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder().decode


def decode_json(text: bytes | memoryview | str) -> Any:
    """The value of stored JSON text (a payload, a result, a trace context), as ``json.loads``
    reads it: dicts, lists, exact integers of any size, floats, strings, booleans, None.

    The fast decoder refuses a few texts ``json.loads`` accepts (a number beyond a float's
    range, an escaped lone surrogate); those, never written by rota, are read as before.
    """
    try:
        return _decode(text)
    except msgspec.DecodeError:
        return json.loads(bytes(text) if isinstance(text, memoryview) else text)


def _plain(value: str | int | float) -> str | int | float:
    for base in (bool, int, float, str):
        if isinstance(value, base):
            return base(value)
    return value


def _check_text(field_name: str, text: str) -> None:
    if "\x00" in text:
        raise InvalidJob(field_name, "must not contain NUL characters")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidJob(field_name, "must be valid Unicode (no lone surrogates)") from None


def _optional_text(field_name: str, value: object, max_length: int) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidJob(field_name, "must be a string")
    if not value:
        raise InvalidJob(field_name, "must not be empty")
    if len(value) > max_length:
        raise InvalidJob(field_name, f"must be at most {max_length} characters")
    if _CONTROL.search(value):
        raise InvalidJob(field_name, "must not contain control characters")
    _check_text(field_name, value)
    return value


def _int_in_range(field_name: str, value: object, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidJob(field_name, "must be an integer")
    if not low <= value <= high:
        raise InvalidJob(field_name, f"must be between {low} and {high}")
    return value


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
        if not (type(kind) is str and _is_valid_name(kind)):
            validate_name("kind", kind)
        if not (type(queue) is str and _is_valid_name(queue)):
            validate_name("queue", queue)
        if tenant is not None and not (type(tenant) is str and _is_valid_name(tenant)):
            validate_name("tenant", tenant)
        if self.schedule is not None:
            validate_name("schedule", self.schedule)
        priority, attempts = self.priority, self.max_attempts
        if type(priority) is not int or not MIN_PRIORITY <= priority <= MAX_PRIORITY:
            _int_in_range("priority", priority, MIN_PRIORITY, MAX_PRIORITY)
        if type(attempts) is not int or not 1 <= attempts <= MAX_ATTEMPTS_LIMIT:
            _int_in_range("max_attempts", attempts, 1, MAX_ATTEMPTS_LIMIT)
        if self.unique_key is not None:
            _optional_text("unique_key", self.unique_key, MAX_UNIQUE_KEY_LENGTH)
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
            object.__setattr__(self, "run_at", _valid_instant("run_at", self.run_at))
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
            object.__setattr__(self, "slot_at", _valid_instant("slot_at", self.slot_at))
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
            object.__setattr__(self, "expires_at", _valid_instant("expires_at", self.expires_at))
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
            object.__setattr__(self, "run_at", _valid_instant("run_at", self.run_at))
        if self.priority is not None:
            _int_in_range("priority", self.priority, MIN_PRIORITY, MAX_PRIORITY)
        if self.queue is not None:
            validate_name("queue", self.queue)
        if (
            self.run_at is None
            and not self.run_now
            and self.priority is None
            and self.queue is None
        ):
            raise InvalidJob("run_at", "give at least one of run_at (or now), priority, queue")


def valid_trace_context(carrier: object) -> dict[str, str]:
    """A plain copy of ``carrier``: at most MAX_TRACE_CONTEXT_ENTRIES header fields (lowercase
    token names, printable ASCII values), MAX_TRACE_CONTEXT_BYTES in all; else InvalidJob."""
    if not isinstance(carrier, Mapping):
        raise InvalidJob("trace_context", "must be a mapping of header names to values")
    if len(carrier) > MAX_TRACE_CONTEXT_ENTRIES:
        raise InvalidJob("trace_context", f"has more than {MAX_TRACE_CONTEXT_ENTRIES} entries")
    size = 0
    plain: dict[str, str] = {}
    for name, value in carrier.items():
        if not (isinstance(name, str) and _HEADER_NAME.fullmatch(name)):
            raise InvalidJob("trace_context", "names must be lowercase header names")
        if not (isinstance(value, str) and _HEADER_VALUE.fullmatch(value)):
            raise InvalidJob("trace_context", "values must be printable ASCII text")
        size += len(name) + len(value)
        plain[name] = value
    if size > MAX_TRACE_CONTEXT_BYTES:
        raise InvalidJob("trace_context", f"is larger than {MAX_TRACE_CONTEXT_BYTES} bytes")
    return plain


def _valid_instant(field_name: str, value: object) -> datetime:
    if not isinstance(value, datetime):
        raise InvalidJob(field_name, "must be a datetime")
    if value.tzinfo is None or value.utcoffset() is None:
        raise InvalidJob(field_name, "must be timezone-aware")
    try:
        instant = value.astimezone(UTC)
    except OverflowError:  # an offset that pushes year 1 or 9999 past the calendar
        raise InvalidJob(field_name, "must be between 1970 and 9999") from None
    if not EARLIEST_RUN_AT <= instant < LATEST_RUN_AT:
        raise InvalidJob(field_name, "must be between 1970 and 9999")
    return instant


def parse_instant(field_name: str, text: str) -> datetime:
    """The aware UTC instant ``text`` names (see INSTANT_PATTERN); InvalidJob naming
    ``field_name`` for any other text, an impossible date or an instant outside 1970-9999."""
    if len(text) > MAX_INSTANT_LENGTH or INSTANT_PATTERN.fullmatch(text) is None:
        if _NAIVE_INSTANT.fullmatch(text):
            raise InvalidJob(field_name, "needs a UTC offset such as Z or +02:00")
        raise InvalidJob(
            field_name, "must be an ISO 8601 date and time such as 2026-05-01T09:30:00Z"
        )
    try:
        value = datetime.fromisoformat(text[:-1] + "+00:00" if text[-1] in "Zz" else text)
    except ValueError:
        raise InvalidJob(field_name, "is not a valid date and time") from None
    return _valid_instant(field_name, value)


#: How much of a payload, error or result a list shows: enough to recognise a job.
PREVIEW_BYTES = 300


def preview(text: str | None, limit: int = PREVIEW_BYTES) -> tuple[str | None, bool]:
    """At most ``limit`` bytes of ``text`` as UTF-8 (never a split character), and whether it
    was cut. Lists show these; a job's detail carries the whole value."""
    if text is None:
        return None, False
    data = text.encode("utf-8", "replace")
    if len(data) <= limit:
        return text, False
    return data[:limit].decode("utf-8", "ignore"), True


#: How many characters of a payload's or result's JSON a list reads (a character more than
#: the preview holds, so that a longer text shows as cut): stores cut them as they read.
PREVIEW_CHARS = PREVIEW_BYTES + 1


@dataclass(frozen=True, slots=True)
class Preview:
    """The first characters of a stored JSON value's text, as the store read them: PREVIEW_CHARS
    (at most) for a list, so that a list page never holds whole payloads or results whatever
    they weigh; a job's own answer reads more (``Store.get_preview``)."""

    text: str

    @classmethod
    def of(cls, value: object, chars: int = PREVIEW_CHARS) -> Preview:
        """The preview of a whole value (stores that hold values in memory)."""
        return cls(payload_text(value)[:chars])


def payload_text(payload: object) -> str:
    """The canonical JSON text of a stored (hence valid) payload; a Preview's text as read."""
    if isinstance(payload, Preview):
        return payload.text
    return _encode(payload)


def truncate(text: str | None, limit: int) -> str | None:
    """``text`` cut to ``limit`` characters with a marker saying so; NULs become U+FFFD."""
    if text is None:
        return None
    text = text.replace("\x00", "\ufffd").encode("utf-8", "replace").decode("utf-8")
    if len(text) <= limit:
        return text
    marker = "... [truncated]"
    return text[: limit - len(marker)] + marker


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
