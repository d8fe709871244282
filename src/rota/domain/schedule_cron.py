"""Cron rules in a time zone: Debian cron's firing instants, DST included.

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
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from rota.domain.errors import InvalidSchedule

MAX_CRON_LENGTH = 200
MAX_TIMEZONE_LENGTH = 64
#: Where cronsim starts when it checks that an expression parses.
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

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


#: How many (rule, instant) answers of cron rules are remembered: a sparse rule (Feb 29 in a
#: zone with DST) takes tens of milliseconds to answer, and every schedule asks the same
#: questions again and again (its next slot, then the next runs that lists show), so each is
#: computed once per process. Far more than the slots a few thousand schedules look ahead.
CRON_MEMO_SIZE = 65_536


@functools.lru_cache(maxsize=CRON_MEMO_SIZE)
def next_cron_slot(cron: Cron, at: datetime) -> datetime:
    """``cron.next_after(at)``, remembered: the answer depends only on the expression, the
    zone and ``at`` (rules are rebuilt from every row read, so the key is their values)."""
    return cron.next_after(at)


class Cron:
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
        if not isinstance(other, Cron):
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


def cron_zone(key: object) -> ZoneInfo:
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


def normalise_cron(value: object) -> str:
    if not isinstance(value, str):
        raise InvalidSchedule("cron", "must be a string")
    if len(value) > MAX_CRON_LENGTH:
        raise InvalidSchedule("cron", f"must be at most {MAX_CRON_LENGTH} characters")
    return _normalised(value)


#: How many cron expressions' normal forms are remembered. Every schedule row read is turned
#: back into a rule, and checking an expression with cronsim costs tens of microseconds: a
#: page of 500 schedules would spend most of its time re-checking the same few rules.
RULE_MEMO_SIZE = 4_096


@functools.lru_cache(maxsize=RULE_MEMO_SIZE)
def _normalised(value: str) -> str:
    """The canonical 5-field form of ``value`` (a refusal raises and is not remembered)."""
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
        CronSim(text, _EPOCH.replace(tzinfo=None))
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
            CronSim(" ".join([*fields[:3], "*", fields[4]]), _EPOCH.replace(tzinfo=None))
        except CronSimError:
            pass
        else:
            return f"{text!r} never fires: day {fields[2]} is in none of months {fields[3]}"
    return f"{text!r}: {message.lower()} field"
