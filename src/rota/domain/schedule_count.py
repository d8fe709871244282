"""How many slots of a cron rule lie in a span of time, exactly, without visiting each one.

Counting by stepping from slot to slot costs tens of microseconds a slot: a year of a
minute-by-minute rule would take half a minute. Between two changes of its zone's UTC offset
a cron rule fires at exactly the instants whose wall time matches the expression (the wall
time is UTC plus a constant), so there the count is a count of matching wall times, done a
day at a time: every day the expression matches holds the same number of matching minutes.
Only the hours around each offset change, where Debian cron's rules for repeated and skipped
wall times apply, are stepped through slot by slot, with the rule's own ``next_after``.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

from cronsim import CronSim

#: Stepped through slot by slot before and after each offset change: past the hour of wall
#: times a change repeats or skips, and past the 25 hours over which a rule looks back for a
#: change it may still be inside (``rota.domain.schedule_cron``'s ``_LOOKBACK``).
_BEFORE_CHANGE = timedelta(hours=3)
_AFTER_CHANGE = timedelta(hours=27)
#: Below this many slots, stepping costs less than setting up the count by days.
_STEPPED = 64
_DAY = timedelta(days=1)
_SECOND = timedelta(seconds=1)


def count_cron_slots(
    expression: str,
    after: datetime,
    until: datetime,
    *,
    next_after: Callable[[datetime], datetime],
    first_change: Callable[[datetime, datetime], datetime | None],
    offset: Callable[[datetime], timedelta],
) -> int:
    """How many slots lie in (``after``, ``until``] (aware UTC instants): those ``next_after``
    would return one after another. ``first_change(a, b)`` is the first instant in (a, b]
    whose UTC offset differs from ``a``'s, ``offset(t)`` the zone's offset at ``t``."""
    count, low = _step(next_after, after, until, _STEPPED)
    if low is None:
        return count
    while low < until:
        change = first_change(low, until)
        if change is None:
            return count + _count_on_wall(expression, low, until, offset(low))
        fast_until = change - _BEFORE_CHANGE
        if fast_until > low:
            count += _count_on_wall(expression, low, fast_until, offset(low))
            low = fast_until
        stepped_until = min(until, change + _AFTER_CHANGE)
        stepped, _ = _step(next_after, low, stepped_until, None)
        count += stepped
        low = stepped_until
    return count


def _step(
    next_after: Callable[[datetime], datetime], after: datetime, until: datetime, most: int | None
) -> tuple[int, datetime | None]:
    """Slots in (after, until] one by one, up to ``most``: their number, and where the count
    stopped (None: it reached ``until``)."""
    count, at = 0, after
    while most is None or count < most:
        try:
            at = next_after(at)
        except ValueError:  # no slot before the year 9999
            return count, None
        if at > until:
            return count, None
        count += 1
    return count, at


def _count_on_wall(expression: str, after: datetime, until: datetime, offset: timedelta) -> int:
    """Matching wall times in (after, until], the offset being ``offset`` throughout."""
    low = (after + offset).replace(tzinfo=None)
    high = (until + offset).replace(tzinfo=None)
    per_day: int | None = None
    count = 0
    cursor = low
    while True:
        match = _next_match(expression, cursor)
        if match is None or match > high:
            return count
        day = match.replace(hour=0, minute=0, second=0, microsecond=0)
        following = day + _DAY
        if day > low and following - _SECOND <= high:
            if per_day is None:
                per_day = _matches_in(expression, day - _SECOND, following - _SECOND)
            count += per_day
            cursor = following - _SECOND
        else:  # a day the span covers in part: its matches one by one
            end = min(high, following - _SECOND)
            count += _matches_in(expression, cursor, end)
            cursor = end


def _next_match(expression: str, wall: datetime) -> datetime | None:
    """The first matching wall time strictly after ``wall``; None past the year 9999."""
    try:
        return next(CronSim(expression, wall))
    except (StopIteration, OverflowError):
        return None


def _matches_in(expression: str, after: datetime, until: datetime) -> int:
    """Matching wall times in (after, until], counted one by one (a day's worth at most)."""
    count = 0
    try:
        for match in CronSim(expression, after):
            if match > until:
                break
            count += 1
    except OverflowError:
        pass
    return count
