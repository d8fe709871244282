"""Firing plans: which of a schedule's slots to enqueue now, its jitter, and its description.

:func:`plan` is pure: given a rule, the slot the schedule is waiting for and the current
instant, it says which nominal slots to enqueue and which slot to wait for next. It never looks
at the real clock, never returns a slot at or before one it has already passed on, and bounds
its work however long the schedule was stopped.
"""

from __future__ import annotations

import functools
import hashlib
from collections import deque
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Protocol

from cronsim import CronSim


class Slots(Protocol):
    """What a plan needs of a rule (``rota.domain.schedule.Rule``): its slots, one by one,
    and its interval when it has one (a grid it can step along without asking each slot)."""

    @property
    def interval(self) -> timedelta | None: ...

    def next_after(self, instant: datetime) -> datetime: ...


#: The most slots one plan fires, so a long pause cannot flood the queue or the planner.
MAX_MISFIRE_LIMIT = 1000
_MICROSECOND = timedelta(microseconds=1)
#: Bisection on the width of the window that holds the latest slots converges well within this.
_MAX_WINDOW_TRIES = 64


class Misfire(StrEnum):
    """What fires when several slots are due at once (the scheduler was stopped or slow)."""

    LATEST = "latest"  #: one run, for the latest due slot; the rest are dropped
    SKIP = "skip"  #: only slots at most ``grace`` late fire; later ones are dropped
    ALL = "all"  #: every due slot fires, but at most ``misfire_limit``: the most recent ones


@dataclass(frozen=True, slots=True)
class Plan:
    """The outcome of :func:`plan`: nominal slots to enqueue now, oldest first, and the next
    slot to wait for."""

    slots: list[datetime]
    next_slot: datetime


def plan(
    rule: Slots,
    next_slot: datetime,
    now: datetime,
    *,
    misfire: Misfire = Misfire.LATEST,
    misfire_limit: int = 100,
    grace: timedelta = timedelta(minutes=1),
    jitter_offset: timedelta = timedelta(0),
) -> Plan:
    """What to fire at ``now`` for a schedule waiting for ``next_slot``.

    A slot is due once ``slot + jitter_offset <= now``. If ``next_slot`` is not due (including
    when the clock went backwards) nothing fires and ``next_slot`` is kept, so a slot can never
    fire twice. Otherwise ``next_slot`` and every later slot of ``rule`` that is due are
    candidates; ``misfire`` picks among them, and the new next slot is the rule's first slot
    strictly after ``now - jitter_offset``, computed from the schedule rather than from ``now``
    so slots never drift. Slots are returned with their nominal instants, not ``now``.
    Raises ``ValueError`` for naive datetimes or out-of-range policy values.
    """
    next_slot = _aware("next_slot", next_slot)
    now = _aware("now", now)
    policy = Misfire(misfire)
    if isinstance(misfire_limit, bool) or not isinstance(misfire_limit, int):
        raise ValueError("misfire_limit must be an integer")
    if not 1 <= misfire_limit <= MAX_MISFIRE_LIMIT:
        raise ValueError(f"misfire_limit must be between 1 and {MAX_MISFIRE_LIMIT}")
    if grace < timedelta(0) or jitter_offset < timedelta(0):
        raise ValueError("grace and jitter_offset must not be negative")
    horizon = now - jitter_offset
    if next_slot > horizon:
        return Plan(slots=[], next_slot=next_slot)
    limit = 1 if policy is Misfire.LATEST else misfire_limit
    slots = _latest_slots(rule, next_slot, horizon, limit)
    if policy is Misfire.SKIP:
        slots = [slot for slot in slots if now - (slot + jitter_offset) <= grace]
    return Plan(slots=slots, next_slot=rule.next_after(horizon))


def jitter_offset(name: str, jitter: timedelta) -> timedelta:
    """A fixed offset in [0, jitter) for the schedule ``name``, the same in every process.

    Derived from a BLAKE2b digest of the name (not ``hash()``, which is randomised per
    process), so schedules sharing a rule spread over the jitter window instead of all firing
    at the top of the hour.
    """
    span = jitter // _MICROSECOND
    if span <= 0:
        return timedelta(0)
    digest = hashlib.blake2b(
        name.encode("utf-8", "surrogatepass"), digest_size=8, person=b"rota.jitter"
    ).digest()
    return timedelta(microseconds=int.from_bytes(digest, "big") % span)


def _aware(name: str, value: datetime) -> datetime:
    if not isinstance(value, datetime):
        raise TypeError(f"{name} must be a datetime")
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"{name} must be timezone-aware")
    return value.astimezone(UTC)


def _latest_slots(rule: Slots, first: datetime, upto: datetime, limit: int) -> list[datetime]:
    """The latest ``limit`` slots in [first, upto], oldest first; ``first`` counts as a slot."""
    interval = rule.interval
    if interval is not None:
        # Arithmetic, so a year of one-second slots costs what one slot does.
        grid = rule.next_after(first)
        if grid > upto:
            return [first]
        count = (upto - grid) // interval + 1
        last = grid + (count - 1) * interval
        taken = min(count, limit)
        slots = [last - (taken - 1 - index) * interval for index in range(taken)]
        return [first, *slots] if taken < limit else slots
    budget = 2 * limit + 64
    walked, after, complete = _walk(rule, first - _MICROSECOND, upto, limit, budget)
    if complete:
        return walked
    # Too many slots are due to walk them all: bisect on the width of a window ending at
    # ``upto`` until it holds at least ``limit`` slots but no more than a walk's budget.
    width = (after - first) / budget * (limit + 1)
    too_few: timedelta | None = None
    too_many: timedelta | None = None
    best: list[datetime] = []
    for _ in range(_MAX_WINDOW_TRIES):
        start = max(upto - width, after - _MICROSECOND)
        tail, _, complete = _walk(rule, start, upto, limit, budget)
        if complete:
            best = tail
            if len(tail) >= limit:
                return tail
            if start <= after - _MICROSECOND:
                return [*walked, *tail][-limit:]
            too_few = width
        else:
            too_many = width
        if too_many is None:
            width *= 2
        elif too_few is None:
            width /= 2
        else:
            width = (too_few + too_many) / 2
    return best


def _walk(
    rule: Slots, after: datetime, upto: datetime, limit: int, budget: int
) -> tuple[list[datetime], datetime, bool]:
    """Slots in (after, upto], at most ``budget`` of them, keeping the latest ``limit``.

    Returns them, the first slot not taken, and whether that slot is past ``upto``.
    """
    kept: deque[datetime] = deque(maxlen=limit)
    slot = rule.next_after(after)
    for _ in range(budget):
        if slot > upto:
            return list(kept), slot, True
        kept.append(slot)
        slot = rule.next_after(slot)
    return list(kept), slot, slot > upto


# ---------------------------------------------------------------- descriptions

_WEEKDAYS = ("Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday")
_MONTHS = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)
_WEEKDAY_CODES = {name[:3].upper(): index for index, name in enumerate(_WEEKDAYS)}
_DASH = "\u2013"  # an en dash: ranges read "Monday to Friday" typographically
_MONTH_CODES = {name[:3].upper(): index + 1 for index, name in enumerate(_MONTHS)}


@functools.lru_cache(maxsize=4_096)  # a list describes the same few rules on every page
def describe_rule(interval: timedelta | None, expression: str | None, timezone: str) -> str:
    """A short English description of a rule; falls back to the expression, never raises."""
    try:
        if interval is not None:
            return f"every {_duration(interval)}"
        assert expression is not None
        text = _describe_cron(expression) or _explain(expression) or f"cron {expression}"
    except Exception:  # a description must never break a listing or a dashboard
        text = f"cron {expression}"
    return text if timezone == "UTC" else f"{text} ({timezone})"


def _duration(interval: timedelta) -> str:
    micros = interval // _MICROSECOND
    for unit, name in ((604_800, "week"), (86_400, "day"), (3_600, "hour"), (60, "minute")):
        if micros % (unit * 1_000_000) == 0:
            count = micros // (unit * 1_000_000)
            return name if count == 1 else f"{count} {name}s"
    seconds = interval.total_seconds()
    return "second" if seconds == 1 else f"{seconds:g} seconds"


def _describe_cron(expression: str) -> str | None:
    minute, hour, day, month, weekday = expression.upper().split(" ")
    when = _time_of_day(minute, hour)
    days = _days(day, month, weekday)
    if when is None or days is None:
        return None
    text, at_clock_time = when
    if at_clock_time and not days:
        return f"every day {text}"
    return f"{text} {days}".strip()


def _time_of_day(minute: str, hour: str) -> tuple[str, bool] | None:
    minutes = _numbers(minute)
    if hour == "*" and (minute == "*" or minute == "*/1"):
        return "every minute", False
    if hour == "*" and minute.startswith("*/") and minute[2:].isdigit():
        return f"every {minute[2:]} minutes", False
    if minutes is None:
        return None
    if len(minutes) == 1 and hour == "*":
        only = minutes[0]
        return ("every hour" if only == 0 else f"at minute {only} of every hour"), False
    if len(minutes) == 1 and hour.startswith("*/") and hour[2:].isdigit():
        step = int(hour[2:])
        every = "every hour" if step == 1 else f"every {_ordinal(step)} hour"
        return f"at minute {minutes[0]} of {every}", False
    hours = _numbers(hour)
    if hours is None or len(hours) * len(minutes) > 6:
        return None
    times = [f"{h:02d}:{m:02d}" for h in hours for m in minutes]
    return f"at {_join(times)}", True


def _days(day: str, month: str, weekday: str) -> str | None:
    months = "" if month == "*" else _names(month, _MONTH_CODES, _MONTHS, 1)
    if months is None:
        return None
    if day == "*" and weekday == "*":
        on = ""
    elif day == "*":
        names = _names(weekday.replace("7", "0"), _WEEKDAY_CODES, _WEEKDAYS, 0)
        if names is None:
            return None
        on = f"on {names}"
    elif weekday == "*":
        if day == "L":
            on = "on the last day of the month"
        else:
            numbers = _numbers(day)
            if numbers is None:
                return None
            if len(numbers) == 1 and months and "," not in months and _DASH not in months:
                return f"on {numbers[0]} {months}"
            plural = "s" if len(numbers) > 1 else ""
            on = f"on day{plural} {_join([str(n) for n in numbers])} of the month"
    else:
        return None  # both restricted: cron runs on either; let cronsim word that
    return " ".join(part for part in (on, f"in {months}" if months else "") if part)


def _numbers(field: str) -> list[int] | None:
    if not all(part.isdigit() for part in field.split(",")):
        return None
    return [int(part) for part in field.split(",")]


def _names(field: str, codes: dict[str, int], names: tuple[str, ...], base: int) -> str | None:
    def one(token: str) -> int | None:
        value = codes.get(token, int(token) if token.isdigit() else None)
        return value if value is not None and 0 <= value - base < len(names) else None

    if "-" in field and "," not in field and "/" not in field:
        low, high = (one(token) for token in field.split("-", 1))
        if low is None or high is None:
            return None
        return f"{names[low - base]}{_DASH}{names[high - base]}"
    values = [one(token) for token in field.split(",")]
    if any(value is None for value in values):
        return None
    return _join([names[value - base] for value in values if value is not None])


def _join(items: list[str]) -> str:
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def _ordinal(number: int) -> str:
    suffix = (
        "th" if 10 <= number % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(number % 10, "th")
    )
    return f"{number}{suffix}"


def _explain(expression: str) -> str | None:
    text: str = CronSim(expression, datetime(2000, 1, 1)).explain()  # noqa: DTZ001 (cronsim's wall-clock input)
    return text[:1].lower() + text[1:] if text else None
