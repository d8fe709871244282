"""Schedule rules: when the slots of an interval or cron schedule fall, DST included.

A :class:`Rule` is either an interval (slots at ``anchor + k * every``, in absolute time) or a
5-field cron expression read in an IANA time zone. ``Rule.next_after(instant)`` is the one
question the rest of rota asks: it is pure (time is passed in), always answers with a strictly
later instant and is bounded in time. :class:`ScheduleSpec` carries the rest of a schedule's
definition; what to fire after a pause lives in ``rota.domain.schedule_plan``.

Cron follows Debian cron(8). cronsim parses the expression and does the calendar arithmetic,
but only on naive wall-clock times: given aware datetimes, cronsim 2.8 returns instants earlier
than its input after a fall-back, drops wildcard firings next to 30-minute shifts, and never
returns for some expressions in America/St_Johns and Pacific/Chatham. Time zones are applied
here instead, over zoneinfo's offsets:

- a job with ``*`` at the start of its minute or hour field follows the real local clock: it
  fires whenever the clock shows a matching minute, so a repeated hour fires twice and a skipped
  hour not at all;
- any other job fires once per wall time: a repeated wall time fires on its first pass only, and
  a wall time skipped by a spring-forward gap fires right after the gap, when the clock lands.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any, TypeVar
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from rota.domain.errors import InvalidJob, InvalidSchedule
from rota.domain.job import (
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_QUEUE,
    MAX_ATTEMPTS_LIMIT,
    MAX_PRIORITY,
    MIN_PRIORITY,
    JobSpec,
    encode_payload,
    validate_name,
)
from rota.domain.schedule_count import count_cron_slots
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
    "MAX_CRON_LENGTH",
    "MAX_GRACE",
    "MAX_INTERVAL",
    "MAX_JITTER",
    "MAX_MISFIRE_LIMIT",
    "MAX_TIMEZONE_LENGTH",
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
MAX_CRON_LENGTH = 200
MAX_TIMEZONE_LENGTH = 64
MAX_JITTER = timedelta(days=1)
MAX_GRACE = timedelta(days=1)
#: The default interval anchor: slots of ``every=15 minutes`` fall at :00, :15, :30 and :45.
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
#: Instants next_after accepts; far enough from datetime's limits that its arithmetic cannot
#: overflow.
_EARLIEST_INSTANT = datetime(1900, 1, 1, tzinfo=UTC)
_LATEST_INSTANT = datetime(9999, 1, 1, tzinfo=UTC)

_NICKNAMES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_FIELD_NAMES = ("minute", "hour", "day-of-month", "month", "day-of-week")
_FIELD = re.compile(r"[0-9A-Za-z*/,#-]+")
_STEPPED_RANGE = re.compile(r"(?P<first>[0-9A-Za-z]+)-(?P<last>[0-9A-Za-z]+)/[0-9]+")
#: Zone keys: tzdata's own alphabet. "localtime" and "posixrules" name the host's setting, so a
#: schedule stored with them would fire at different instants on different machines.
_ZONE_KEY = re.compile(r"[A-Za-z0-9_+-]+(?:/[A-Za-z0-9_+-]+)*")
_HOST_ZONES = frozenset({"localtime", "posixrules"})

_MINUTE = timedelta(minutes=1)
_MICROSECOND = timedelta(microseconds=1)
#: Offset changes in tzdata are about a week apart at the closest (6.9 days, 1970-2045), so
#: probing offsets this often cannot step over a change and back.
_PROBE = timedelta(hours=12)
#: The longest repeated wall-clock stretch since 1970 is 7 hours (Antarctica/Vostok, 1994).
_LOOKBACK = timedelta(hours=25)
#: How much real time around a clock change the verifying minute scan covers.
_SCAN_MARGIN = timedelta(hours=1)
#: cronsim gives up after 50 years; two changes a year bound the changes crossed on the way.
_MAX_HOPS = 256


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
    _cron: _Cron | None = field(init=False, repr=False, compare=False)

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
        zone = _zone(self.timezone)
        expression = _normalise_cron(self.expression)
        object.__setattr__(self, "expression", expression)
        object.__setattr__(self, "_cron", _Cron(expression, zone))

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
            result = _next_cron_slot(self._cron, at)
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


#: How many (rule, instant) answers of cron rules are remembered: a sparse rule (Feb 29 in a
#: zone with DST) takes tens of milliseconds to answer, and every schedule asks the same
#: questions again and again (its next slot, then the next runs that lists show), so each is
#: computed once per process. Far more than the slots a few thousand schedules look ahead.
CRON_MEMO_SIZE = 65_536


@functools.lru_cache(maxsize=CRON_MEMO_SIZE)
def _next_cron_slot(cron: _Cron, at: datetime) -> datetime:
    """``cron.next_after(at)``, remembered: the answer depends only on the expression, the
    zone and ``at`` (rules are rebuilt from every row read, so the key is their values)."""
    return cron.next_after(at)


class _Cron:
    """A validated cron expression in a zone: Debian cron's firing instants.

    Equal (and hashed) by expression and zone, so that equal rules share remembered answers.
    """

    __slots__ = ("expression", "wildcard", "zone")

    def __init__(self, expression: str, zone: ZoneInfo) -> None:
        self.expression = expression
        self.zone = zone
        minute, hour = expression.split()[:2]
        self.wildcard = minute.startswith("*") or hour.startswith("*")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, _Cron):
            return NotImplemented
        return self.expression == other.expression and self.zone.key == other.zone.key

    def __hash__(self) -> int:
        return hash((self.expression, self.zone.key))

    def next_after(self, at: datetime) -> datetime:
        result = self._next_on_clock(at) if self.wildcard else self._next_by_wall_time(at)
        return self._verified(at, result)

    def _next_on_clock(self, at: datetime) -> datetime:
        # Between offset changes wall time is UTC plus a constant, so cronsim's naive answer
        # converts exactly; when a change comes first, restart from it in the new offset.
        cursor, inclusive = at, False
        for _ in range(_MAX_HOPS):
            offset = self._offset(cursor)
            wall = self._naive_next(self._wall(cursor), inclusive=inclusive)
            candidate = (wall - offset).replace(tzinfo=UTC)
            change = self._first_change(cursor, candidate)
            if change is None:
                return candidate
            cursor, inclusive = change, True
        raise InvalidSchedule("cron", f"{self.expression!r}: no slot found within 50 years")

    def _next_by_wall_time(self, at: datetime) -> datetime:
        # Debian runs such a job once per wall time, when the highest wall time seen so far
        # reaches it: a repeated hour is not run again, and the wall times a gap skips all run
        # as the clock lands after it.
        wall = self._naive_next(self._seen(at), inclusive=False)
        cursor = at
        for _ in range(_MAX_HOPS):
            candidate = (wall - self._offset(cursor)).replace(tzinfo=UTC)
            change = self._first_change(cursor, candidate)
            if change is None:
                return candidate
            if wall <= self._wall(change):
                return change
            cursor = change
        raise InvalidSchedule("cron", f"{self.expression!r}: no slot found within 50 years")

    def _verified(self, at: datetime, result: datetime) -> datetime:
        # Debian's own minute loop re-checks the hours around every clock change between ``at``
        # and ``result``: a firing the arithmetic above missed there is still found, and an
        # answer that is not strictly later is never returned.
        start = at - _LOOKBACK
        while (change := self._first_change(start, result)) is not None:
            shift = abs(self._offset(change) - self._offset(change - _MICROSECOND))
            low, high = max(at, change - _SCAN_MARGIN), min(result, change + shift + _SCAN_MARGIN)
            found = self._scan(low, high) if low < high else None
            if found is not None and found < result:
                return found
            start = change
        if result > at:
            return result
        return self._scan(at, at + _LOOKBACK) or self.next_after(at + _LOOKBACK)

    def _scan(self, after: datetime, until: datetime) -> datetime | None:
        """Debian cron's loop, one minute at a time: the first firing in (after, until]."""
        at = after.replace(second=0, microsecond=0) + _MINUTE
        seen = self._seen(at - _MINUTE).replace(second=0, microsecond=0)
        previous: datetime | None = None
        match: datetime | None = None
        while at <= until:
            wall = self._wall(at)
            if self.wildcard:
                if match is None or previous is None or wall < previous or wall > match:
                    match = self._naive_next(wall, inclusive=True)
                fired = wall == match
            else:
                fired = False
                if wall > seen:
                    if match is None or match <= seen:
                        match = self._naive_next(seen, inclusive=False)
                    fired = match <= wall
                    seen = wall
            if fired:
                return at
            previous = wall
            at += _MINUTE
        return None

    def _naive_next(self, wall: datetime, *, inclusive: bool) -> datetime:
        """The first matching naive wall time after ``wall`` (or at it, if ``inclusive``)."""
        # cronsim drops the microseconds and steps one second before it searches.
        start = wall - _MICROSECOND if inclusive else wall
        try:
            return next(CronSim(self.expression, start))
        except StopIteration:
            raise InvalidSchedule(
                "cron", f"{self.expression!r} never fires (no match within 50 years)"
            ) from None
        except OverflowError:
            raise ValueError("no slot before the year 9999") from None

    def _offset(self, at: datetime) -> timedelta:
        offset = at.astimezone(self.zone).utcoffset()
        assert offset is not None  # a ZoneInfo always has one
        return offset

    def _wall(self, at: datetime) -> datetime:
        return at.astimezone(self.zone).replace(tzinfo=None)

    def _seen(self, at: datetime) -> datetime:
        """The highest wall time the clock has shown up to ``at`` (inside a repeated hour, the
        end of its first pass)."""
        wall = self._wall(at)
        earlier = at - _LOOKBACK
        before = self._offset(earlier)
        if before > self._offset(at):
            change = self._first_change(earlier, at)
            assert change is not None  # the offsets differ, so it changed in between
            wall = max(wall, (change + before).replace(tzinfo=None) - _MICROSECOND)
        return wall

    def _first_change(self, after: datetime, until: datetime) -> datetime | None:
        """The first instant in (after, until] whose UTC offset differs from ``after``'s."""
        base = self._offset(after)
        low = after
        while low < until:
            high = min(low + _PROBE, until)
            if self._offset(high) != base:
                while high - low > _MICROSECOND:
                    middle = low + (high - low) // 2
                    if self._offset(middle) == base:
                        low = middle
                    else:
                        high = middle
                return high
            low = high
        return None


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


def _zone(key: object) -> ZoneInfo:
    if not isinstance(key, str):
        raise InvalidSchedule("timezone", "must be a string such as 'Europe/Berlin'")
    if not key or len(key) > MAX_TIMEZONE_LENGTH or not _ZONE_KEY.fullmatch(key):
        raise InvalidSchedule("timezone", f"{key[:MAX_TIMEZONE_LENGTH]!r} is not an IANA zone")
    if key in _HOST_ZONES:
        raise InvalidSchedule("timezone", f"{key!r} depends on the host; name the zone")
    try:
        return ZoneInfo(key)
    except (ZoneInfoNotFoundError, ValueError, OSError, UnicodeError):
        raise InvalidSchedule("timezone", f"unknown time zone {key!r}") from None


def _normalise_cron(value: object) -> str:
    if not isinstance(value, str):
        raise InvalidSchedule("cron", "must be a string")
    if len(value) > MAX_CRON_LENGTH:
        raise InvalidSchedule("cron", f"must be at most {MAX_CRON_LENGTH} characters")
    text = " ".join(value.split())
    if text.startswith("@"):
        if text.lower() not in _NICKNAMES:
            names = ", ".join(sorted(_NICKNAMES))
            raise InvalidSchedule("cron", f"unknown nickname {text!r}; use one of {names}")
        text = _NICKNAMES[text.lower()]
    fields = text.split(" ")
    if len(fields) != len(_FIELD_NAMES):
        fields_named = " ".join(_FIELD_NAMES)
        raise InvalidSchedule("cron", f"{text!r} must have 5 fields ({fields_named})")
    for name, part in zip(_FIELD_NAMES, fields, strict=True):
        if not _FIELD.fullmatch(part):
            raise InvalidSchedule("cron", f"{name} field {part!r} has characters cron does not use")
    text = " ".join(_single_value_ranges(part) for part in fields)
    try:
        CronSim(text, EPOCH.replace(tzinfo=None))
    except CronSimError as error:
        raise InvalidSchedule("cron", _cron_error(text, str(error))) from None
    return text


def _single_value_ranges(field: str) -> str:
    # cronsim reads a one-value range with a step ("5-5/10") as "5/10", i.e. 5 through the
    # field's maximum; in Debian cron it is the value 5 alone.
    terms = []
    for term in field.split(","):
        match = _STEPPED_RANGE.fullmatch(term)
        if match and match["first"].upper().lstrip("0") == match["last"].upper().lstrip("0"):
            term = match["first"]
        terms.append(term)
    return ",".join(terms)


def _cron_error(text: str, message: str) -> str:
    # cronsim reports a day that no listed month has (``0 0 30 2 *``) as a bad day-of-month;
    # say what is actually wrong.
    fields = text.split(" ")
    if message == "Bad day-of-month" and fields[3] != "*":
        try:
            CronSim(" ".join([*fields[:3], "*", fields[4]]), EPOCH.replace(tzinfo=None))
        except CronSimError:
            pass
        else:
            return f"{text!r} never fires: day {fields[2]} is in none of months {fields[3]}"
    return f"{text!r}: {message.lower()} field"


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
    choices = ", ".join(member.value for member in enum)
    if not isinstance(value, str):
        raise InvalidSchedule(name, f"must be one of {choices}")
    try:
        return enum(value)
    except ValueError:
        raise InvalidSchedule(name, f"must be one of {choices}") from None
