"""Cron across DST and odd zones: Debian cron(8)'s rules, checked against a brute-force oracle.

The oracle below is Debian's own loop, one minute at a time, with its own small cron matcher:
jobs with ``*`` at the start of the minute or hour field run whenever the local clock shows a
matching minute; other jobs run once per wall time, when the highest wall time seen reaches it.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta
from functools import cache
from itertools import pairwise
from zoneinfo import ZoneInfo

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from rota.domain.errors import InvalidSchedule
from rota.domain.schedule import Rule

MINUTE = timedelta(minutes=1)
BERLIN = ZoneInfo("Europe/Berlin")
NEW_YORK = ZoneInfo("America/New_York")
LORD_HOWE = ZoneInfo("Australia/Lord_Howe")


def utc(
    year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0
) -> datetime:
    return datetime(year, month, day, hour, minute, second, tzinfo=UTC)


@cache
def clock_changes(zone_key: str, first_year: int, last_year: int) -> tuple[datetime, ...]:
    """Every instant in [first_year, last_year) at which the zone's UTC offset changes."""
    zone = ZoneInfo(zone_key)
    changes = []
    at = utc(first_year, 1, 1)
    offset = at.astimezone(zone).utcoffset()
    while at < utc(last_year, 1, 1):
        probe = at + timedelta(hours=6)
        if probe.astimezone(zone).utcoffset() != offset:
            low, high = at, probe
            while high - low > timedelta(seconds=1):
                middle = low + (high - low) / 2
                if middle.astimezone(zone).utcoffset() == offset:
                    low = middle
                else:
                    high = middle
            changes.append(high.replace(microsecond=0))
            offset = probe.astimezone(zone).utcoffset()
        at = probe
    return tuple(changes)


def firings(rule: Rule, start: datetime, end: datetime) -> list[datetime]:
    found = []
    at = rule.next_after(start)
    while at <= end:
        found.append(at)
        at = rule.next_after(at)
    return found


# ---------------------------------------------------------------- fixed times: once per wall time


def test_daily_0230_fires_right_after_the_spring_forward_gap_in_berlin() -> None:
    rule = Rule.cron("30 2 * * *", "Europe/Berlin")

    slot = rule.next_after(utc(2024, 3, 30, 12))

    assert slot == utc(2024, 3, 31, 1, 0)
    assert slot.astimezone(BERLIN).time() == time(3, 0)
    assert rule.next_after(slot) == utc(2024, 4, 1, 0, 30)


def test_daily_0230_fires_once_on_the_fall_back_night_in_berlin() -> None:
    rule = Rule.cron("30 2 * * *", "Europe/Berlin")

    slots = firings(rule, utc(2024, 10, 26, 12), utc(2024, 10, 28, 12))

    assert slots == [utc(2024, 10, 27, 0, 30), utc(2024, 10, 28, 1, 30)]


def test_daily_0230_asked_during_the_repeated_hour_waits_for_the_next_day_in_berlin() -> None:
    rule = Rule.cron("30 2 * * *", "Europe/Berlin")
    second_pass = datetime(2024, 10, 27, 2, 10, fold=1, tzinfo=BERLIN)

    assert rule.next_after(second_pass) == utc(2024, 10, 28, 1, 30)


def test_daily_0300_after_the_repeated_hour_fires_at_three_in_winter_time() -> None:
    rule = Rule.cron("0 3 * * *", "Europe/Berlin")
    second_pass = datetime(2024, 10, 27, 2, 59, fold=1, tzinfo=BERLIN)

    assert rule.next_after(second_pass) == utc(2024, 10, 27, 2, 0)


def test_daily_0130_fires_once_on_the_fall_back_night_in_new_york() -> None:
    rule = Rule.cron("30 1 * * *", "America/New_York")

    slots = firings(rule, utc(2024, 11, 2, 12), utc(2024, 11, 4, 12))

    assert slots == [utc(2024, 11, 3, 5, 30), utc(2024, 11, 4, 6, 30)]


def test_daily_0230_fires_at_three_on_the_spring_forward_day_in_new_york() -> None:
    rule = Rule.cron("30 2 * * *", "America/New_York")

    assert rule.next_after(utc(2024, 3, 9, 12)) == utc(2024, 3, 10, 7, 0)


def test_daily_0215_fires_as_lord_howes_half_hour_gap_ends_at_0230() -> None:
    rule = Rule.cron("15 2 * * *", "Australia/Lord_Howe")

    slot = rule.next_after(utc(2024, 10, 5))

    assert slot == utc(2024, 10, 5, 15, 30)
    assert slot.astimezone(LORD_HOWE).time() == time(2, 30)


def test_daily_0145_fires_once_in_lord_howes_repeated_half_hour() -> None:
    rule = Rule.cron("45 1 * * *", "Australia/Lord_Howe")

    slots = firings(rule, utc(2024, 4, 6), utc(2024, 4, 7, 16))

    assert slots == [utc(2024, 4, 6, 14, 45), utc(2024, 4, 7, 15, 15)]


def test_wall_times_skipped_by_a_gap_fire_once_as_it_ends() -> None:
    rule = Rule.cron("0,20,40 2 * * *", "Europe/Berlin")

    slots = firings(rule, utc(2024, 3, 30, 12), utc(2024, 4, 1, 0, 30))

    assert slots == [utc(2024, 3, 31, 1, 0), utc(2024, 4, 1, 0, 0), utc(2024, 4, 1, 0, 20)]


def test_a_wall_time_inside_a_skipped_day_fires_as_the_clock_lands() -> None:
    # Samoa skipped 30 December 2011 to cross the date line; the noon job ran at the next midnight.
    rule = Rule.cron("0 12 * * *", "Pacific/Apia")

    slots = firings(rule, utc(2011, 12, 29), utc(2011, 12, 31, 12))

    assert [slot.astimezone(ZoneInfo("Pacific/Apia")).isoformat() for slot in slots] == [
        "2011-12-29T12:00:00-10:00",
        "2011-12-31T00:00:00+14:00",
        "2011-12-31T12:00:00+14:00",
    ]


@pytest.mark.parametrize("zone_key", ["Europe/Berlin", "America/New_York", "Australia/Lord_Howe"])
@pytest.mark.parametrize("wall", [time(1, 30), time(2, 30), time(2, 15), time(0, 0)])
def test_daily_job_fires_exactly_once_every_local_day_across_dst_changes(
    zone_key: str, wall: time
) -> None:
    zone = ZoneInfo(zone_key)
    rule = Rule.cron(f"{wall.minute} {wall.hour} * * *", zone_key)
    for change in clock_changes(zone_key, 2019, 2028):
        slots = firings(rule, change - timedelta(days=3), change + timedelta(days=3))

        days = [slot.astimezone(zone).date() for slot in slots]
        assert days == [days[0] + timedelta(days=n) for n in range(len(days))]
        assert len(days) >= 5
        for slot, day in zip(slots, days, strict=True):
            assert slot == expected_daily_firing(zone, day, wall, change)


def expected_daily_firing(zone: ZoneInfo, day: date, wall: time, change: datetime) -> datetime:
    naive = datetime.combine(day, wall)
    first_pass = naive.replace(tzinfo=zone, fold=0)
    if first_pass.astimezone(UTC).astimezone(zone).replace(tzinfo=None) != naive:
        return change  # the wall time does not exist that day: right after the gap
    return first_pass.astimezone(UTC)


# ---------------------------------------------------------------- wildcards: the real clock


def test_every_15_minutes_keeps_its_rhythm_through_berlins_repeated_hour() -> None:
    rule = Rule.cron("*/15 * * * *", "Europe/Berlin")

    slots = firings(rule, utc(2024, 10, 26, 23, 50), utc(2024, 10, 27, 2, 0))

    assert slots == [utc(2024, 10, 27, 0, 0) + n * timedelta(minutes=15) for n in range(9)]
    walls = [slot.astimezone(BERLIN).strftime("%H:%M") for slot in slots]
    assert walls == [
        "02:00",
        "02:15",
        "02:30",
        "02:45",
        "02:00",
        "02:15",
        "02:30",
        "02:45",
        "03:00",
    ]


@pytest.mark.parametrize("change", clock_changes("Australia/Lord_Howe", 2023, 2026))
def test_every_15_minutes_keeps_its_rhythm_through_lord_howes_half_hour_changes(
    change: datetime,
) -> None:
    rule = Rule.cron("*/15 * * * *", "Australia/Lord_Howe")
    start = change - timedelta(hours=2)

    slots = firings(rule, start, change + timedelta(hours=2))

    assert slots == [start + n * timedelta(minutes=15) for n in range(1, 17)]


def test_minute_30_job_fires_in_both_passes_of_berlins_repeated_hour() -> None:
    rule = Rule.cron("30 * * * *", "Europe/Berlin")

    slots = firings(rule, utc(2024, 10, 26, 23, 45), utc(2024, 10, 27, 2, 45))

    assert slots == [utc(2024, 10, 27, 0, 30), utc(2024, 10, 27, 1, 30), utc(2024, 10, 27, 2, 30)]


def test_minute_30_job_has_no_run_in_the_hour_a_gap_removes() -> None:
    rule = Rule.cron("30 * * * *", "Europe/Berlin")

    slots = firings(rule, utc(2024, 3, 30, 23, 45), utc(2024, 3, 31, 1, 45))

    assert [slot.astimezone(BERLIN).strftime("%H:%M") for slot in slots] == ["01:30", "03:30"]


def test_minute_30_job_fires_as_lord_howes_clock_jumps_to_0230() -> None:
    rule = Rule.cron("30 * * * *", "Australia/Lord_Howe")

    slots = firings(rule, utc(2024, 10, 5, 14, 45), utc(2024, 10, 5, 16, 45))

    assert slots == [utc(2024, 10, 5, 15, 0), utc(2024, 10, 5, 15, 30), utc(2024, 10, 5, 16, 30)]


def test_hourly_job_follows_lord_howes_clock_back_half_an_hour() -> None:
    rule = Rule.cron("0 * * * *", "Australia/Lord_Howe")

    slots = firings(rule, utc(2024, 4, 6, 12, 30), utc(2024, 4, 6, 16, 30))

    assert slots == [
        utc(2024, 4, 6, 13, 0),
        utc(2024, 4, 6, 14, 0),
        utc(2024, 4, 6, 15, 30),
        utc(2024, 4, 6, 16, 30),
    ]


@pytest.mark.parametrize("zone_key", ["Europe/Berlin", "America/New_York", "Australia/Lord_Howe"])
@pytest.mark.parametrize("expression", ["*/15 * * * *", "30 * * * *", "*/7 */2 * * *"])
def test_wildcard_jobs_move_strictly_forward_across_every_change(
    zone_key: str, expression: str
) -> None:
    rule = Rule.cron(expression, zone_key)
    for change in clock_changes(zone_key, 2020, 2027):
        slots = firings(rule, change - timedelta(hours=5), change + timedelta(hours=5))

        assert slots
        assert all(later > earlier for earlier, later in pairwise(slots))


# ---------------------------------------------------------------- where cron libraries fail

# Each case made cronsim 2.8 (given aware datetimes) hang, answer with an earlier instant, or
# drop a firing; the expected values come from Debian's loop (the oracle below).
CRONSIM_FAILURES = [
    ("America/St_Johns", "51 */29 * * *", utc(1993, 10, 31, 1, 57, 9), utc(1993, 10, 31, 4, 21)),
    ("America/St_Johns", "9 */2 * * *", utc(1996, 10, 27, 1, 40, 50), utc(1996, 10, 27, 3, 39)),
    ("Pacific/Chatham", "53 */3 * * *", utc(1991, 3, 16, 11, 23, 24), utc(1991, 3, 16, 15, 8)),
    ("Pacific/Chatham", "48,49,57 */3 * * *", utc(2015, 4, 4, 11, 45, 48), utc(2015, 4, 4, 15, 3)),
    ("America/New_York", "50 1 * * *", utc(2007, 11, 4, 6, 36, 32), utc(2007, 11, 5, 6, 50)),
    ("America/Santiago", "40 23 * * *", utc(2020, 4, 5, 3, 7, 3), utc(2020, 4, 6, 3, 40)),
    ("Australia/Lord_Howe", "*/20 2 * * *", utc(2012, 3, 30, 23, 28, 21), utc(2012, 3, 31, 15, 30)),
    ("Australia/Lord_Howe", "5 */2 * * *", utc(2035, 3, 31, 14, 34), utc(2035, 3, 31, 15, 35)),
    ("Pacific/Chatham", "5 */2 * * *", utc(2013, 9, 28, 14, 9), utc(2013, 9, 28, 14, 20)),
]


@pytest.mark.parametrize(("zone_key", "expression", "instant", "expected"), CRONSIM_FAILURES)
def test_next_after_is_right_where_cron_libraries_hang_go_back_or_drop_firings(
    zone_key: str, expression: str, instant: datetime, expected: datetime
) -> None:
    rule = Rule.cron(expression, zone_key)

    assert rule.next_after(instant) == expected
    assert DebianCron(expression, zone_key).next_after(instant, timedelta(days=2)) == expected


# ---------------------------------------------------------------- the oracle and the properties


def parse_field(text: str, low: int, high: int) -> set[int]:
    values: set[int] = set()
    for part in text.split(","):
        body, _, step = part.partition("/")
        if body == "*":
            first, last = low, high
        elif "-" in body:
            first, last = (int(value) for value in body.split("-"))
        else:
            first = last = int(body)
        values.update(range(first, last + 1, int(step) if step else 1))
    return values


class DebianCron:
    """Debian cron(8)'s main loop for the expressions the strategies below generate."""

    def __init__(self, expression: str, zone_key: str) -> None:
        minute, hour, day, month, weekday = expression.split()
        self.zone = ZoneInfo(zone_key)
        self.wildcard = minute.startswith("*") or hour.startswith("*")
        self.minutes = parse_field(minute, 0, 59)
        self.hours = parse_field(hour, 0, 23)
        self.days = parse_field(day, 1, 31)
        self.months = parse_field(month, 1, 12)
        self.weekdays = {value % 7 for value in parse_field(weekday, 0, 7)}
        self.days_and = day.startswith("*") or weekday.startswith("*")

    def matches(self, wall: datetime) -> bool:
        if wall.minute not in self.minutes or wall.hour not in self.hours:
            return False
        if wall.month not in self.months:
            return False
        by_day = wall.day in self.days
        by_weekday = wall.isoweekday() % 7 in self.weekdays
        return by_day and by_weekday if self.days_and else by_day or by_weekday

    def wall(self, at: datetime) -> datetime:
        return at.astimezone(self.zone).replace(tzinfo=None)

    def next_after(self, instant: datetime, window: timedelta) -> datetime | None:
        """The first firing after ``instant`` within ``window``, or None."""
        at = instant.astimezone(UTC).replace(second=0, microsecond=0) - timedelta(hours=6)
        seen = self.wall(at)
        while at <= instant + window:
            at += MINUTE
            wall = self.wall(at)
            if self.wildcard:
                fired = self.matches(wall)
            else:
                fired = False
                while seen < wall:  # each wall minute runs once, when the clock first reaches it
                    seen += MINUTE
                    fired = fired or self.matches(seen)
            if fired and at > instant:
                return at
        return None


def cron_field(low: int, high: int) -> st.SearchStrategy[str]:
    number = st.integers(min_value=low, max_value=high)
    pair = st.tuples(number, number).map(sorted)
    return st.one_of(
        st.just("*"),
        st.integers(min_value=1, max_value=high - low + 1).map(lambda step: f"*/{step}"),
        number.map(str),
        pair.map(lambda bounds: f"{bounds[0]}-{bounds[1]}"),
        st.tuples(pair, st.integers(min_value=1, max_value=10)).map(
            lambda spec: f"{spec[0][0]}-{spec[0][1]}/{spec[1]}"
        ),
        st.lists(number, min_size=2, max_size=4, unique=True).map(
            lambda values: ",".join(str(value) for value in sorted(values))
        ),
    )


def day_field(low: int, high: int) -> st.SearchStrategy[str]:
    # Mostly unrestricted, so that firings land near the clock changes being tested.
    return st.one_of(st.just("*"), st.just("*"), cron_field(low, high))


EXPRESSIONS = st.tuples(
    cron_field(0, 59), cron_field(0, 23), day_field(1, 31), day_field(1, 12), day_field(0, 7)
).map(" ".join)
PROPERTY_ZONES = [
    "Europe/Berlin",
    "America/New_York",
    "Australia/Lord_Howe",
    "Pacific/Chatham",
    "America/Santiago",
    "UTC",
]
ODD_ZONES = [
    *PROPERTY_ZONES,
    "America/St_Johns",
    "Antarctica/Casey",
    "Antarctica/Troll",
    "Asia/Tehran",
    "Pacific/Apia",
    "Pacific/Kiritimati",
    "Africa/Casablanca",
]


@st.composite
def instants_near_clock_changes(draw: st.DrawFn) -> tuple[str, datetime]:
    zone_key = draw(st.sampled_from(PROPERTY_ZONES))
    changes = clock_changes(zone_key, 2000, 2040) or (utc(2000, 1, 1) + timedelta(days=3650),)
    change = draw(st.sampled_from(changes))
    shift = timedelta(
        seconds=draw(st.integers(min_value=-12 * 3600, max_value=12 * 3600)),
        microseconds=draw(st.sampled_from([0, 0, 1, 500_000, 999_999])),
    )
    return zone_key, change + shift


def valid_rule(expression: str, zone_key: str) -> Rule:
    try:
        return Rule.cron(expression, zone_key)
    except InvalidSchedule:
        assume(False)  # a day that none of the months has; rare, and rejected on purpose
        raise


@given(expression=EXPRESSIONS, case=instants_near_clock_changes())
@settings(max_examples=200, deadline=None)
def test_next_after_agrees_with_debian_crons_minute_loop_near_clock_changes(
    expression: str, case: tuple[str, datetime]
) -> None:
    zone_key, instant = case
    rule = valid_rule(expression, zone_key)
    window = timedelta(days=2)

    expected = DebianCron(expression, zone_key).next_after(instant, window)
    slot = rule.next_after(instant)

    if expected is None:
        assert slot > instant + window
    else:
        assert slot == expected


@given(
    expression=EXPRESSIONS,
    zone_key=st.sampled_from(ODD_ZONES),
    instant=st.datetimes(
        min_value=datetime(1971, 1, 1),  # noqa: DTZ001 (hypothesis bounds are naive)
        max_value=datetime(2100, 1, 1),  # noqa: DTZ001 (hypothesis bounds are naive)
        timezones=st.sampled_from([ZoneInfo(key) for key in ODD_ZONES]),
    ),
)
@settings(max_examples=200, deadline=None)
def test_next_after_is_always_strictly_later(
    expression: str, zone_key: str, instant: datetime
) -> None:
    rule = valid_rule(expression, zone_key)

    slot = rule.next_after(instant)

    assert slot > instant
    assert slot.tzinfo is UTC
    assert rule.next_after(slot) > slot
