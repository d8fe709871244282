"""Firing plans: missed-run policies, clocks that go backwards, jitter, bounded work."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rota.domain.schedule import Misfire, Plan, Rule, jitter_offset, plan

MINUTE = timedelta(minutes=1)
START = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
EVERY_MINUTE = Rule.every(MINUTE)


# ---------------------------------------------------------------- the seed scenario


def test_after_a_run_the_next_slot_is_one_minute_after_the_previous_slot() -> None:
    result = plan(EVERY_MINUTE, START, START + timedelta(seconds=2.5))

    assert result == Plan(slots=[START], next_slot=START + MINUTE)


def test_after_three_and_a_half_minutes_down_one_run_fires_for_the_latest_missed_slot() -> None:
    after_first_run = plan(EVERY_MINUTE, START, START).next_slot

    result = plan(EVERY_MINUTE, after_first_run, START + timedelta(minutes=3.5))

    assert result == Plan(slots=[START + 3 * MINUTE], next_slot=START + 4 * MINUTE)


def test_cron_every_minute_behaves_like_the_interval_after_downtime() -> None:
    rule = Rule.cron("* * * * *", "Europe/Berlin")

    result = plan(rule, START + MINUTE, START + timedelta(minutes=3.5))

    assert result == Plan(slots=[START + 3 * MINUTE], next_slot=START + 4 * MINUTE)


# ---------------------------------------------------------------- nothing due, clocks going back


def test_nothing_fires_before_the_next_slot() -> None:
    result = plan(EVERY_MINUTE, START, START - timedelta(microseconds=1))

    assert result == Plan(slots=[], next_slot=START)


def test_a_clock_that_went_backwards_fires_nothing_and_keeps_the_next_slot() -> None:
    fired = plan(EVERY_MINUTE, START, START + timedelta(seconds=1))

    rewound = plan(EVERY_MINUTE, fired.next_slot, START - timedelta(hours=1))

    assert rewound == Plan(slots=[], next_slot=fired.next_slot)


def test_a_clock_jittering_around_a_slot_boundary_fires_the_slot_once() -> None:
    next_slot = START
    fired: list[datetime] = []
    for step in range(20):
        wobble = timedelta(milliseconds=300 if step % 2 else -300)
        result = plan(EVERY_MINUTE, next_slot, START + wobble)
        fired.extend(result.slots)
        next_slot = result.next_slot

    assert fired == [START]
    assert next_slot == START + MINUTE


@given(moves=st.lists(st.integers(min_value=-600, max_value=900), min_size=1, max_size=40))
@settings(max_examples=200, deadline=None)
def test_slots_never_fire_twice_however_the_clock_moves(moves: list[int]) -> None:
    rule = Rule.every(timedelta(seconds=30))
    now, next_slot = START, START
    fired: list[datetime] = []
    for seconds in moves:
        now += timedelta(seconds=seconds)
        result = plan(rule, next_slot, now, misfire=Misfire.ALL)
        fired.extend(result.slots)
        assert result.next_slot >= next_slot
        next_slot = result.next_slot

    assert fired == sorted(set(fired))


# ---------------------------------------------------------------- missed-run policies


def test_latest_fires_one_run_with_the_nominal_time_of_the_latest_slot() -> None:
    result = plan(EVERY_MINUTE, START, START + timedelta(minutes=10, seconds=20))

    assert result.slots == [START + 10 * MINUTE]
    assert result.next_slot == START + 11 * MINUTE


def test_all_fires_every_missed_slot_in_order_with_nominal_times() -> None:
    result = plan(
        EVERY_MINUTE, START, START + timedelta(minutes=4, seconds=20), misfire=Misfire.ALL
    )

    assert result.slots == [START + n * MINUTE for n in range(5)]
    assert result.next_slot == START + 5 * MINUTE


def test_all_is_bounded_by_the_misfire_limit_keeping_the_most_recent_slots() -> None:
    result = plan(
        EVERY_MINUTE,
        START,
        START + timedelta(minutes=9, seconds=1),
        misfire=Misfire.ALL,
        misfire_limit=3,
    )

    assert result.slots == [START + 7 * MINUTE, START + 8 * MINUTE, START + 9 * MINUTE]
    assert result.next_slot == START + 10 * MINUTE


def test_all_on_cron_is_bounded_by_the_misfire_limit_too() -> None:
    rule = Rule.cron("*/10 * * * *", "America/New_York")

    result = plan(
        rule, START, START + timedelta(hours=5, minutes=3), misfire=Misfire.ALL, misfire_limit=4
    )

    assert result.slots == [START + timedelta(hours=4, minutes=m) for m in (30, 40, 50, 60)]
    assert result.next_slot == START + timedelta(hours=5, minutes=10)


def test_skip_fires_a_slot_that_is_on_time() -> None:
    result = plan(EVERY_MINUTE, START, START + timedelta(seconds=59), misfire=Misfire.SKIP)

    assert result == Plan(slots=[START], next_slot=START + MINUTE)


def test_skip_drops_a_slot_later_than_the_grace_but_still_moves_on() -> None:
    rule = Rule.every(timedelta(hours=1))

    result = plan(rule, START, START + timedelta(minutes=5), misfire=Misfire.SKIP)

    assert result == Plan(slots=[], next_slot=START + timedelta(hours=1))


def test_skip_grace_is_inclusive() -> None:
    rule = Rule.every(timedelta(hours=1))
    grace = timedelta(minutes=5)

    on_time = plan(rule, START, START + grace, misfire=Misfire.SKIP, grace=grace)
    late = plan(
        rule, START, START + grace + timedelta(microseconds=1), misfire=Misfire.SKIP, grace=grace
    )

    assert on_time.slots == [START]
    assert late.slots == []


def test_skip_after_downtime_fires_only_the_slots_within_the_grace() -> None:
    rule = Rule.every(timedelta(seconds=10))

    result = plan(rule, START, START + timedelta(minutes=5), misfire=Misfire.SKIP)

    assert result.slots == [START + timedelta(seconds=s) for s in range(240, 301, 10)]
    assert result.next_slot == START + timedelta(seconds=310)


def test_skip_is_bounded_by_the_misfire_limit() -> None:
    rule = Rule.every(timedelta(seconds=10))

    result = plan(rule, START, START + timedelta(minutes=5), misfire=Misfire.SKIP, misfire_limit=2)

    assert result.slots == [START + timedelta(seconds=290), START + timedelta(seconds=300)]


def test_misfire_policy_may_be_given_by_name() -> None:
    result = plan(EVERY_MINUTE, START, START + 2 * MINUTE, misfire="all")  # type: ignore[arg-type]

    assert len(result.slots) == 3


def test_a_next_slot_off_the_grid_fires_and_the_grid_resumes() -> None:
    # The rule was edited while the schedule waited for a slot of the old rule.
    result = plan(EVERY_MINUTE, START + timedelta(seconds=30), START + timedelta(seconds=30))

    assert result == Plan(slots=[START + timedelta(seconds=30)], next_slot=START + MINUTE)


def test_an_off_grid_next_slot_is_kept_among_all_missed_slots() -> None:
    first = START + timedelta(seconds=30)

    result = plan(EVERY_MINUTE, first, START + 2 * MINUTE, misfire=Misfire.ALL)

    assert result.slots == [first, START + MINUTE, START + 2 * MINUTE]


# ---------------------------------------------------------------- bounded work


def test_a_year_of_one_second_slots_is_planned_arithmetically() -> None:
    rule = Rule.every(timedelta(seconds=1))
    now = START + timedelta(days=365, microseconds=500_000)

    latest = plan(rule, START, now)
    everything = plan(rule, START, now, misfire=Misfire.ALL, misfire_limit=100)

    last = START + timedelta(days=365)
    assert latest == Plan(slots=[last], next_slot=last + timedelta(seconds=1))
    assert everything.slots == [last - timedelta(seconds=99 - n) for n in range(100)]


def test_a_year_of_every_minute_cron_keeps_only_the_latest_slots() -> None:
    rule = Rule.cron("* * * * *", "Europe/Berlin")
    now = START + timedelta(days=365, seconds=30)
    last = START + timedelta(days=365)

    latest = plan(rule, START, now)
    everything = plan(rule, START, now, misfire=Misfire.ALL, misfire_limit=1000)

    assert latest == Plan(slots=[last], next_slot=last + MINUTE)
    assert everything.slots == [last - (999 - n) * MINUTE for n in range(1000)]
    assert everything.next_slot == last + MINUTE


def test_uneven_cron_backlog_keeps_exactly_the_latest_slots() -> None:
    # Dense in office hours, empty at night and at weekends: the window search has to adapt.
    rule = Rule.cron("* 9-17 * * 1-5", "Europe/Berlin")
    now = datetime(2025, 4, 30, 7, 10, 30, tzinfo=UTC)  # a Wednesday, 09:10 in Berlin

    result = plan(rule, START, now, misfire=Misfire.ALL, misfire_limit=30)

    today = [datetime(2025, 4, 30, 7, m, tzinfo=UTC) for m in range(11)]
    yesterday = [datetime(2025, 4, 29, 15, m, tzinfo=UTC) for m in range(40, 60)]
    assert result.slots == yesterday[1:] + today
    assert result.next_slot == datetime(2025, 4, 30, 7, 11, tzinfo=UTC)


def test_a_sparse_cron_backlog_of_decades_is_found_quickly() -> None:
    rule = Rule.cron("* * 1 1 *")
    now = datetime(2031, 6, 1, tzinfo=UTC)

    result = plan(rule, datetime(2001, 1, 1, tzinfo=UTC), now, misfire=Misfire.ALL, misfire_limit=5)

    assert result.slots == [datetime(2031, 1, 1, 23, m, tzinfo=UTC) for m in range(55, 60)]
    assert result.next_slot == datetime(2032, 1, 1, tzinfo=UTC)


# ---------------------------------------------------------------- jitter


def test_a_slot_with_jitter_is_due_only_once_its_offset_has_passed() -> None:
    offset = timedelta(seconds=17)

    early = plan(
        EVERY_MINUTE, START, START + offset - timedelta(microseconds=1), jitter_offset=offset
    )
    due = plan(EVERY_MINUTE, START, START + offset, jitter_offset=offset)

    assert early == Plan(slots=[], next_slot=START)
    assert due == Plan(slots=[START], next_slot=START + MINUTE)


def test_jitter_delays_firing_but_not_the_nominal_slots() -> None:
    offset = timedelta(seconds=40)

    result = plan(
        EVERY_MINUTE,
        START,
        START + 3 * MINUTE + timedelta(seconds=50),
        misfire=Misfire.ALL,
        jitter_offset=offset,
    )

    assert result.slots == [START, START + MINUTE, START + 2 * MINUTE, START + 3 * MINUTE]
    assert result.next_slot == START + 4 * MINUTE


def test_skip_measures_lateness_from_the_jittered_firing_time() -> None:
    offset = timedelta(minutes=30)
    rule = Rule.every(timedelta(hours=1))

    result = plan(
        rule,
        START,
        START + offset + timedelta(seconds=30),
        misfire=Misfire.SKIP,
        jitter_offset=offset,
    )

    assert result.slots == [START]


def test_jitter_offset_is_pinned_for_a_name_so_it_survives_restarts_and_upgrades() -> None:
    assert jitter_offset("nightly-report", timedelta(hours=1)) == timedelta(
        seconds=63, microseconds=85964
    )
    assert jitter_offset("hourly-sync", timedelta(minutes=5)) == timedelta(
        seconds=48, microseconds=594368
    )


@given(
    name=st.text(min_size=1, max_size=64),
    jitter_us=st.integers(min_value=1, max_value=86_400 * 10**6),
)
@settings(max_examples=200, deadline=None)
def test_jitter_offset_is_within_zero_and_the_jitter(name: str, jitter_us: int) -> None:
    jitter = timedelta(microseconds=jitter_us)

    offset = jitter_offset(name, jitter)

    assert timedelta(0) <= offset < jitter
    assert jitter_offset(name, jitter) == offset


def test_no_jitter_means_no_offset() -> None:
    assert jitter_offset("anything", timedelta(0)) == timedelta(0)


def test_jitter_spreads_hourly_schedules_over_the_window() -> None:
    offsets = [jitter_offset(f"tenant-{n}.sync", timedelta(hours=1)) for n in range(200)]

    quarters = {offset // timedelta(minutes=15) for offset in offsets}
    minutes = {offset // timedelta(minutes=1) for offset in offsets}
    assert quarters == {0, 1, 2, 3}
    assert len(minutes) > 40


# ---------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "kwargs",
    [
        {"misfire_limit": 0},
        {"misfire_limit": 1001},
        {"misfire_limit": True},
        {"grace": timedelta(seconds=-1)},
        {"jitter_offset": timedelta(seconds=-1)},
        {"misfire": "sometimes"},
    ],
)
def test_plan_rejects_out_of_range_policy_values(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        plan(EVERY_MINUTE, START, START, **kwargs)  # type: ignore[arg-type]


def test_plan_rejects_naive_instants() -> None:
    naive = datetime(2024, 5, 1, 12, 0)  # noqa: DTZ001 (the naive input under test)

    with pytest.raises(ValueError, match="now"):
        plan(EVERY_MINUTE, START, naive)
    with pytest.raises(ValueError, match="next_slot"):
        plan(EVERY_MINUTE, naive, START)


@given(
    every_s=st.integers(min_value=1, max_value=7200),
    down_s=st.integers(min_value=0, max_value=10 * 86_400),
    policy=st.sampled_from(Misfire),
    limit=st.integers(min_value=1, max_value=50),
    jitter_s=st.integers(min_value=0, max_value=600),
)
@settings(max_examples=200, deadline=None)
def test_a_plan_fires_due_slots_in_order_and_waits_for_the_first_slot_not_yet_due(
    every_s: int, down_s: int, policy: Misfire, limit: int, jitter_s: int
) -> None:
    interval = timedelta(seconds=every_s)
    rule = Rule.every(interval, anchor=START)
    offset = timedelta(seconds=jitter_s)
    now = START + timedelta(seconds=down_s)

    result = plan(rule, START, now, misfire=policy, misfire_limit=limit, jitter_offset=offset)

    horizon = now - offset
    assert result.slots == sorted(set(result.slots))
    assert all(START <= slot <= horizon for slot in result.slots)
    assert len(result.slots) <= (1 if policy is Misfire.LATEST else limit)
    assert result.next_slot > horizon
    assert result.next_slot - interval <= max(horizon, START)
    if policy is Misfire.LATEST and horizon >= START:
        assert result.slots == [result.next_slot - interval]
