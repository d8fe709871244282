"""Counting a cron rule's slots in a span (Rule.count_slots): the same number as stepping
from slot to slot with next_after, across offset changes in the zones cron libraries get
wrong, and for spans far too long to step through."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rota.domain.schedule import Rule

EXPRESSIONS = ["* * * * *", "*/7 * * * *", "30 2 * * *", "0,30 1-3 * * *", "15 */2 * * 1-5"]
ZONES = ["UTC", "Europe/Berlin", "America/Santiago", "Australia/Lord_Howe", "Pacific/Chatham"]


def stepped(rule: Rule, after: datetime, until: datetime) -> int:
    count, at = 0, after
    while (at := rule.next_after(at)) <= until:
        count += 1
    return count


@pytest.mark.parametrize("zone", ZONES)
@pytest.mark.parametrize("expression", EXPRESSIONS)
def test_the_count_across_a_spring_and_an_autumn_change_matches_stepping(
    expression: str, zone: str
) -> None:
    rule = Rule.cron(expression, zone)
    # Each window holds an offset change of every zone above (northern or southern spring
    # or autumn, by the zone), with days of ordinary time on both sides.
    for start in (datetime(2026, 3, 24, tzinfo=UTC), datetime(2026, 9, 22, tzinfo=UTC)):
        after, until = start + timedelta(minutes=7, seconds=13), start + timedelta(days=14)
        assert rule.count_slots(after, until) == stepped(rule, after, until)


@settings(max_examples=40, deadline=None)
@given(
    expression=st.sampled_from(EXPRESSIONS),
    zone=st.sampled_from(ZONES),
    start_min=st.integers(0, 365 * 24 * 60),
    span_min=st.integers(0, 6 * 24 * 60),
)
def test_the_count_of_any_span_matches_stepping(
    expression: str, zone: str, start_min: int, span_min: int
) -> None:
    rule = Rule.cron(expression, zone)
    after = datetime(2026, 1, 1, tzinfo=UTC) + timedelta(minutes=start_min, seconds=30)
    until = after + timedelta(minutes=span_min)
    assert rule.count_slots(after, until) == stepped(rule, after, until)


def test_a_year_of_slots_is_counted_exactly() -> None:
    after = datetime(2026, 1, 1, tzinfo=UTC)
    until = after + timedelta(days=365)
    # A rule with * in its minute or hour fires on every minute the clock shows, a repeated
    # hour included (Debian cron): every minute of the year.
    assert Rule.cron("* * * * *", "Europe/Berlin").count_slots(after, until) == 365 * 24 * 60
    # One without fires once a day, the day a change skips or repeats 02:30 included.
    assert Rule.cron("30 2 * * *", "Europe/Berlin").count_slots(after, until) == 365


def test_an_interval_rule_counts_its_grid() -> None:
    rule = Rule.every(timedelta(minutes=10), anchor=datetime(2026, 1, 1, tzinfo=UTC))
    after = datetime(2026, 1, 1, 0, 5, tzinfo=UTC)
    assert rule.count_slots(after, after + timedelta(days=1)) == 144
    assert rule.count_slots(after, after) == 0
