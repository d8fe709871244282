"""Schedule rules: when the slots of an interval or cron schedule fall, DST included.

A :class:`Rule` is either an interval (slots at ``anchor + k * every``, in absolute time) or a
5-field cron expression read in an IANA time zone. ``Rule.next_after(instant)`` is the one
question the rest of rota asks: it is pure (time is passed in), always answers with a strictly
later instant and is bounded in time. :class:`ScheduleSpec` carries the rest of a schedule's
definition; what to fire after a pause lives in ``rota.domain.schedule_plan``, and cron's
firing instants in a time zone in ``rota.domain.schedule_cron``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any, TypeVar

from rota.domain.errors import InvalidJob, InvalidSchedule
from rota.domain.job import (
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_QUEUE,
    MAX_ATTEMPTS_LIMIT,
    MAX_PRIORITY,
    MIN_PRIORITY,
    JobSpec,
)
from rota.domain.names import validate_name
from rota.domain.payload import encode_payload
from rota.domain.schedule_count import count_cron_slots
from rota.domain.schedule_cron import Cron, cron_zone, next_cron_slot, normalise_cron
from rota.domain.schedule_plan import (
    MAX_MISFIRE_LIMIT,
    Misfire,
    Plan,
    describe_rule,
    jitter_offset,
    plan,
)

__all__ = [
    "EPOCH",
    "MAX_GRACE",
    "MAX_INTERVAL",
    "MAX_JITTER",
    "MAX_MISFIRE_LIMIT",
    "MIN_INTERVAL",
    "Misfire",
    "Overlap",
    "Plan",
    "Rule",
    "ScheduleSpec",
    "first_slot",
    "jitter_offset",
    "plan",
]

MIN_INTERVAL = timedelta(seconds=1)
MAX_INTERVAL = timedelta(days=366)
MAX_JITTER = timedelta(days=1)
MAX_GRACE = timedelta(days=1)
#: The default interval anchor: slots of ``every=15 minutes`` fall at :00, :15, :30 and :45.
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
#: Instants next_after accepts; far enough from datetime's limits that its arithmetic cannot
#: overflow.
_EARLIEST_INSTANT = datetime(1900, 1, 1, tzinfo=UTC)
_LATEST_INSTANT = datetime(9999, 1, 1, tzinfo=UTC)

_MICROSECOND = timedelta(microseconds=1)


class Overlap(StrEnum):
    """What to do with a due slot while the schedule's previous run is still active."""

    SKIP = "skip"  #: drop the slot; the schedule continues with the next one
    ALLOW = "allow"  #: enqueue it anyway; runs may overlap


@dataclass(frozen=True, slots=True)
class Rule:
    """When a schedule's slots fall: ``every`` an interval, or a ``cron`` expression in a zone.

    Build one with :meth:`every` or :meth:`cron`; construction validates and raises
    ``InvalidSchedule`` naming the field (``every``, ``cron``, ``timezone``, ``anchor``, or
    ``rule`` when both or neither of every/cron are given). Cron nicknames (``@daily`` ...) are
    stored as their 5-field form.
    """

    interval: timedelta | None = None
    expression: str | None = None
    timezone: str = "UTC"
    #: Interval slots are ``anchor + k * interval``; None means the 1970 epoch until a store
    #: anchors the rule at its creation instant (see :meth:`anchored`).
    anchor: datetime | None = None
    _cron: Cron | None = field(init=False, repr=False, compare=False)

    @classmethod
    def every(cls, interval: timedelta, *, anchor: datetime | None = None) -> Rule:
        """Slots ``interval`` apart in absolute time (``every=1 day`` is 24 hours, DST or not)."""
        return cls(interval=interval, anchor=anchor)

    @classmethod
    def cron(cls, expression: str, timezone: str = "UTC") -> Rule:
        """Slots where a 5-field cron expression (or ``@hourly`` ...) matches in ``timezone``."""
        return cls(expression=expression, timezone=timezone)

    def __post_init__(self) -> None:
        if (self.interval is None) == (self.expression is None):
            raise InvalidSchedule("rule", "give exactly one of every or cron")
        if self.interval is not None:
            _check_interval(self.interval)
            if self.timezone != "UTC":
                raise InvalidSchedule("timezone", "applies only to cron schedules")
            if self.anchor is not None:
                object.__setattr__(self, "anchor", _check_anchor(self.anchor))
            object.__setattr__(self, "_cron", None)
            return
        if self.anchor is not None:
            raise InvalidSchedule("anchor", "applies only to interval schedules")
        zone = cron_zone(self.timezone)
        expression = normalise_cron(self.expression)
        object.__setattr__(self, "expression", expression)
        object.__setattr__(self, "_cron", Cron(expression, zone))

    def anchored(self, at: datetime) -> Rule:
        """This rule with its interval grid starting at ``at`` if it has no anchor yet."""
        if self.interval is None or self.anchor is not None:
            return self
        return replace(self, anchor=at)

    def next_after(self, instant: datetime) -> datetime:
        """The first slot strictly after ``instant``, as an aware UTC datetime.

        ``instant`` must be timezone-aware (naive raises ``ValueError``). Raises
        ``InvalidSchedule`` for a cron expression that never fires and ``ValueError`` when the
        next slot would fall in or after the year 9999.
        """
        at = _utc_instant("instant", instant)
        if self._cron is not None:
            result = next_cron_slot(self._cron, at)
        else:
            assert self.interval is not None  # one of the two, checked on construction
            anchor = self.anchor or EPOCH
            result = anchor + ((at - anchor) // self.interval + 1) * self.interval
        if result >= _LATEST_INSTANT:
            raise ValueError("no slot before the year 9999")
        return result

    def count_slots(self, after: datetime, until: datetime) -> int:
        """How many slots lie in (``after``, ``until``], exactly, however many there are
        (by arithmetic for an interval, by whole days for cron: ``schedule_count``)."""
        after = _utc_instant("after", after)
        until = _utc_instant("until", until)
        if until <= after:
            return 0
        if self._cron is None:
            assert self.interval is not None
            anchor = self.anchor or EPOCH
            return (until - anchor) // self.interval - (after - anchor) // self.interval
        cron = self._cron
        return count_cron_slots(
            cron.expression,
            after,
            until,
            next_after=self.next_after,
            first_change=cron._first_change,
            offset=cron._offset,
        )

    def preview(self, after: datetime, count: int) -> list[datetime]:
        """The next ``count`` slots (1..1000) strictly after ``after``."""
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= 1000:
            raise ValueError("count must be an integer between 1 and 1000")
        slots: list[datetime] = []
        at = after
        for _ in range(count):
            at = self.next_after(at)
            slots.append(at)
        return slots

    def describe(self) -> str:
        """A short English description ("every 15 minutes"); never raises."""
        return describe_rule(self.interval, self.expression, self.timezone)

    def to_dict(self) -> dict[str, Any]:
        """Plain fields for a store row or JSON: every_seconds, cron, timezone, anchor."""
        return {
            "every_seconds": None if self.interval is None else self.interval.total_seconds(),
            "cron": self.expression,
            "timezone": self.timezone,
            "anchor": self.anchor,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Rule:
        """The rule :meth:`to_dict` described; ``anchor`` may also be an ISO 8601 string."""
        unknown = set(data) - {"every_seconds", "cron", "timezone", "anchor"}
        if unknown:
            raise InvalidSchedule(sorted(unknown)[0], "is not a rule field")
        seconds = data.get("every_seconds")
        interval = None if seconds is None else _seconds("every", seconds)
        anchor = data.get("anchor")
        if isinstance(anchor, str):
            try:
                anchor = datetime.fromisoformat(anchor)
            except ValueError:
                raise InvalidSchedule("anchor", "must be an ISO 8601 instant") from None
        timezone = data.get("timezone")
        return cls(
            interval=interval,
            expression=data.get("cron"),
            timezone="UTC" if timezone is None else timezone,
            anchor=anchor,
        )


def first_slot(rule: Rule, created_at: datetime) -> datetime:
    """The first slot of a schedule created at ``created_at``.

    For an interval rule without an anchor that is ``created_at`` itself: persist
    ``rule.anchored(created_at)`` so the later slots follow from it. Otherwise it is the first
    slot at or after ``created_at``.
    """
    at = _utc_instant("created_at", created_at)
    if rule.interval is not None and rule.anchor is None:
        return at
    return rule.next_after(at - _MICROSECOND)


@dataclass(frozen=True, slots=True)
class ScheduleSpec:
    """A schedule's definition: which job to enqueue for each slot of ``rule``, and the policies.

    ``misfire`` decides what fires after missed slots (see ``schedule_plan.plan``): at most
    ``misfire_limit`` slots, and under ``Misfire.SKIP`` only those at most ``grace`` late.
    ``jitter`` delays every slot by a fixed offset derived from ``name``. ``overlap`` is carried
    for the store, which applies it. With ``workflow``, each slot writes the graph a builder
    registered in code under this schedule's name returns (rota.domain.workflow.slot_graph),
    and ``kind`` is that name; queue, priority, tenant and max_attempts are then the graph's
    jobs' own business. Construction raises ``InvalidSchedule`` naming the field.
    """

    name: str
    kind: str
    rule: Rule
    payload: Any = field(default_factory=dict)
    queue: str = DEFAULT_QUEUE
    priority: int = 0
    tenant: str | None = None
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    jitter: timedelta = timedelta(0)
    misfire: Misfire = Misfire.LATEST
    misfire_limit: int = 100
    grace: timedelta = timedelta(minutes=1)
    overlap: Overlap = Overlap.SKIP
    workflow: bool = False
    payload_json: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        try:
            validate_name("name", self.name)
            validate_name("kind", self.kind)
            validate_name("queue", self.queue)
            validate_name("tenant", self.tenant, required=False)
            payload_json = encode_payload(self.payload)
        except InvalidJob as error:
            raise InvalidSchedule(error.field, error.reason) from None
        object.__setattr__(self, "payload_json", payload_json)
        if not isinstance(self.rule, Rule):
            raise InvalidSchedule("rule", "must be a Rule (Rule.every(...) or Rule.cron(...))")
        _check_int("priority", self.priority, MIN_PRIORITY, MAX_PRIORITY)
        _check_int("max_attempts", self.max_attempts, 1, MAX_ATTEMPTS_LIMIT)
        _check_int("misfire_limit", self.misfire_limit, 1, MAX_MISFIRE_LIMIT)
        _check_duration("jitter", self.jitter, MAX_JITTER)
        _check_duration("grace", self.grace, MAX_GRACE)
        object.__setattr__(self, "misfire", _member("misfire", Misfire, self.misfire))
        object.__setattr__(self, "overlap", _member("overlap", Overlap, self.overlap))
        if not isinstance(self.workflow, bool):
            raise InvalidSchedule("workflow", "must be true or false")
        if self.workflow and self.kind != self.name:
            raise InvalidSchedule("kind", "a workflow schedule's kind is its name")

    @property
    def jitter_offset(self) -> timedelta:
        """This schedule's fixed delay in [0, jitter): the same on every process and restart."""
        return jitter_offset(self.name, self.jitter)

    def plan(self, next_slot: datetime, now: datetime) -> Plan:
        """Which slots to enqueue at ``now`` and the next slot to wait for; see ``plan``."""
        return plan(
            self.rule,
            next_slot,
            now,
            misfire=self.misfire,
            misfire_limit=self.misfire_limit,
            grace=self.grace,
            jitter_offset=self.jitter_offset,
        )

    def job_spec(self, slot_at: datetime) -> JobSpec:
        """The job to enqueue for ``slot_at``; the store keeps one job per (schedule, slot)."""
        return JobSpec(
            kind=self.kind,
            payload=self.payload,
            queue=self.queue,
            priority=self.priority,
            max_attempts=self.max_attempts,
            tenant=self.tenant,
            schedule=self.name,
            slot_at=slot_at,
        )


def _utc_instant(name: str, value: object) -> datetime:
    if not isinstance(value, datetime):
        raise TypeError(f"{name} must be a datetime")
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"{name} must be timezone-aware")
    instant = value.astimezone(UTC)
    if not _EARLIEST_INSTANT <= instant < _LATEST_INSTANT:
        raise ValueError(f"{name} must be between 1900 and 9999")
    return instant


def _check_interval(value: object) -> None:
    if not isinstance(value, timedelta):
        raise InvalidSchedule("every", "must be a timedelta")
    if value <= timedelta(0):
        raise InvalidSchedule("every", "must be positive")
    if value < MIN_INTERVAL:
        raise InvalidSchedule("every", "must be at least 1 second")
    if value > MAX_INTERVAL:
        raise InvalidSchedule("every", "must be at most 366 days; use cron for rarer schedules")


def _seconds(name: str, value: object) -> timedelta:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidSchedule(name, "must be a number of seconds")
    try:
        return timedelta(seconds=value)
    except (OverflowError, ValueError):
        raise InvalidSchedule(name, "must be a finite number of seconds") from None


def _check_anchor(value: object) -> datetime:
    if not isinstance(value, datetime):
        raise InvalidSchedule("anchor", "must be a datetime")
    if value.tzinfo is None or value.utcoffset() is None:
        raise InvalidSchedule("anchor", "must be timezone-aware")
    anchor = value.astimezone(UTC)
    if not EPOCH <= anchor < _LATEST_INSTANT:
        raise InvalidSchedule("anchor", "must be between 1970 and 9999")
    return anchor


def _check_int(name: str, value: object, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidSchedule(name, "must be an integer")
    if not low <= value <= high:
        raise InvalidSchedule(name, f"must be between {low} and {high}")


def _check_duration(name: str, value: object, high: timedelta) -> None:
    if not isinstance(value, timedelta):
        raise InvalidSchedule(name, "must be a timedelta")
    if value < timedelta(0):
        raise InvalidSchedule(name, "must not be negative")
    if value > high:
        raise InvalidSchedule(name, f"must be at most {high}")


_E = TypeVar("_E", bound=StrEnum)


def _member(name: str, enum: type[_E], value: object) -> _E:
    if isinstance(value, str):
        with contextlib.suppress(ValueError):
            return enum(value)
    # Spelled out only for the error: every stored schedule read is checked here.
    choices = ", ".join(member.value for member in enum)
    raise InvalidSchedule(name, f"must be one of {choices}")
