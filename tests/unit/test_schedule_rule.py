"""Schedule rules: interval grids, the cron calendar, validation, descriptions, plain fields."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rota.domain.errors import InvalidInput, InvalidSchedule
from rota.domain.job import DEFAULT_MAX_ATTEMPTS, DEFAULT_QUEUE, JobSpec
from rota.domain.schedule import Misfire, Overlap, Rule, ScheduleSpec, first_slot
from rota.domain.schedule_cron import MAX_CRON_LENGTH

BERLIN = ZoneInfo("Europe/Berlin")


def utc(
    year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0
) -> datetime:
    return datetime(year, month, day, hour, minute, second, tzinfo=UTC)


# ---------------------------------------------------------------- intervals


def test_interval_slots_fall_on_the_epoch_grid_by_default() -> None:
    rule = Rule.every(timedelta(minutes=15))

    assert rule.next_after(utc(2024, 5, 1, 10, 7, 12)) == utc(2024, 5, 1, 10, 15)


def test_interval_next_after_a_slot_is_the_following_slot() -> None:
    rule = Rule.every(timedelta(minutes=15))

    assert rule.next_after(utc(2024, 5, 1, 10, 15)) == utc(2024, 5, 1, 10, 30)
    assert rule.next_after(utc(2024, 5, 1, 10, 15) - timedelta(microseconds=1)) == utc(
        2024, 5, 1, 10, 15
    )


def test_interval_slots_follow_the_anchor_whatever_instant_is_asked() -> None:
    rule = Rule.every(timedelta(hours=1), anchor=utc(2024, 5, 1, 10, 7, 30))

    slots = [rule.next_after(utc(2024, 5, 3, 8, minute)) for minute in (0, 7, 8, 59)]

    assert slots == [
        utc(2024, 5, 3, 8, 7, 30),
        utc(2024, 5, 3, 8, 7, 30),
        utc(2024, 5, 3, 9, 7, 30),
        utc(2024, 5, 3, 9, 7, 30),
    ]


def test_interval_slots_before_the_anchor_continue_its_grid() -> None:
    rule = Rule.every(timedelta(hours=1), anchor=utc(2024, 5, 1, 10, 30))

    assert rule.next_after(utc(2024, 4, 30, 23, 0)) == utc(2024, 4, 30, 23, 30)


def test_interval_is_absolute_time_so_a_day_is_24_hours_across_dst() -> None:
    rule = Rule.every(timedelta(days=1), anchor=datetime(2024, 3, 30, 9, 0, tzinfo=BERLIN))

    after_change = rule.next_after(datetime(2024, 3, 30, 10, 0, tzinfo=BERLIN))

    assert after_change == utc(2024, 3, 31, 8, 0)
    assert after_change.astimezone(BERLIN).hour == 10


def test_interval_with_sub_second_precision_is_exact() -> None:
    rule = Rule.every(timedelta(seconds=1.5))

    assert rule.preview(utc(2024, 1, 1), 3) == [
        utc(2024, 1, 1) + timedelta(seconds=1.5),
        utc(2024, 1, 1) + timedelta(seconds=3),
        utc(2024, 1, 1) + timedelta(seconds=4.5),
    ]


def test_next_after_answers_in_utc_for_an_instant_in_any_zone() -> None:
    rule = Rule.every(timedelta(hours=1))

    slot = rule.next_after(datetime(2024, 7, 1, 12, 30, tzinfo=BERLIN))

    assert slot == utc(2024, 7, 1, 11, 0)
    assert slot.tzinfo is UTC


@pytest.mark.parametrize("rule", [Rule.every(timedelta(hours=1)), Rule.cron("0 * * * *")])
def test_next_after_rejects_a_naive_instant(rule: Rule) -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        rule.next_after(datetime(2024, 1, 1))  # noqa: DTZ001 (the naive input under test)


def test_next_after_refuses_to_answer_beyond_the_year_9999() -> None:
    with pytest.raises(ValueError, match="9999"):
        Rule.cron("0 0 1 1 *").next_after(utc(9998, 6, 1))


def test_preview_lists_consecutive_slots() -> None:
    rule = Rule.cron("0 12 * * *")

    assert rule.preview(utc(2024, 1, 1, 12), 3) == [
        utc(2024, 1, 2, 12),
        utc(2024, 1, 3, 12),
        utc(2024, 1, 4, 12),
    ]


@pytest.mark.parametrize("count", [0, -1, 1001, True])
def test_preview_count_is_bounded(count: int) -> None:
    with pytest.raises(ValueError, match="count"):
        Rule.every(timedelta(minutes=1)).preview(utc(2024, 1, 1), count)


# ---------------------------------------------------------------- the cron calendar


def test_day_31_job_skips_months_without_a_31st() -> None:
    slots = Rule.cron("0 0 31 * *").preview(utc(2024, 1, 1), 7)

    assert [slot.month for slot in slots] == [1, 3, 5, 7, 8, 10, 12]
    assert all(slot.day == 31 for slot in slots)


def test_leap_day_job_fires_only_in_leap_years() -> None:
    rule = Rule.cron("0 0 29 2 *")

    assert rule.preview(utc(2023, 1, 1), 3) == [
        utc(2024, 2, 29),
        utc(2028, 2, 29),
        utc(2032, 2, 29),
    ]


def test_leap_day_job_skips_2100_which_is_not_a_leap_year() -> None:
    assert Rule.cron("0 0 29 2 *").next_after(utc(2097, 1, 1)) == utc(2104, 2, 29)


def test_last_day_of_month_job_follows_month_lengths() -> None:
    slots = Rule.cron("0 0 L * *").preview(utc(2024, 1, 1), 3)

    assert slots == [utc(2024, 1, 31), utc(2024, 2, 29), utc(2024, 3, 31)]


def test_month_end_job_fires_on_the_first_at_midnight_in_its_zone() -> None:
    slot = Rule.cron("0 0 1 * *", "Europe/Berlin").next_after(utc(2024, 1, 15))

    assert slot == utc(2024, 1, 31, 23, 0)


@pytest.mark.parametrize("expression", ["0 0 30 2 *", "0 0 31 2 *", "0 0 31 4,6,9,11 *"])
def test_a_day_no_listed_month_has_is_rejected_as_never_firing(expression: str) -> None:
    with pytest.raises(InvalidSchedule, match="never fires") as raised:
        Rule.cron(expression)

    assert raised.value.field == "cron"


def test_restricted_day_of_month_and_day_of_week_match_either() -> None:
    slots = Rule.cron("0 0 13 * 5").preview(utc(2024, 9, 1), 5)

    assert slots == [
        utc(2024, 9, 6),
        utc(2024, 9, 13),
        utc(2024, 9, 20),
        utc(2024, 9, 27),
        utc(2024, 10, 4),
    ]


def test_weekday_names_and_sunday_as_7_are_understood() -> None:
    by_name = Rule.cron("0 9 * * mon-fri").preview(utc(2024, 9, 6, 10), 2)
    sunday = Rule.cron("0 9 * * 7").next_after(utc(2024, 9, 6))

    assert by_name == [utc(2024, 9, 9, 9), utc(2024, 9, 10, 9)]
    assert sunday == utc(2024, 9, 8, 9)


@pytest.mark.parametrize(
    ("nickname", "expression"),
    [
        ("@yearly", "0 0 1 1 *"),
        ("@annually", "0 0 1 1 *"),
        ("@monthly", "0 0 1 * *"),
        ("@weekly", "0 0 * * 0"),
        ("@daily", "0 0 * * *"),
        ("@midnight", "0 0 * * *"),
        ("@hourly", "0 * * * *"),
        ("@Daily", "0 0 * * *"),
        ("  @hourly ", "0 * * * *"),
    ],
)
def test_nicknames_are_stored_as_five_fields(nickname: str, expression: str) -> None:
    assert Rule.cron(nickname).expression == expression


def test_a_one_value_range_with_a_step_is_that_value_as_in_debian() -> None:
    # cronsim alone would read "0-0/8" as 0, 8 and 16.
    rule = Rule.cron("0-0/1 0-0/8 * * mon-MON/2")

    assert rule.expression == "0 0 * * mon"
    assert rule.next_after(utc(2024, 9, 2, 0, 0)) == utc(2024, 9, 9, 0, 0)


def test_a_start_with_a_step_runs_from_the_start_to_the_end_of_the_field() -> None:
    slots = Rule.cron("5/20 * * * *").preview(utc(2024, 1, 1), 4)

    assert [slot.minute for slot in slots] == [5, 25, 45, 5]


def test_whitespace_between_fields_is_normalised() -> None:
    assert Rule.cron(" */5\t*  * * *\n").expression == "*/5 * * * *"


# ---------------------------------------------------------------- validation


@pytest.mark.parametrize(
    ("build", "field"),
    [
        (lambda: Rule.every(timedelta(0)), "every"),
        (lambda: Rule.every(timedelta(seconds=-5)), "every"),
        (lambda: Rule.every(timedelta(milliseconds=999)), "every"),
        (lambda: Rule.every(timedelta(days=367)), "every"),
        (lambda: Rule.every(60), "every"),  # type: ignore[arg-type]
        (lambda: Rule(interval=timedelta(hours=1), expression="0 * * * *"), "rule"),
        (lambda: Rule(), "rule"),
        (lambda: Rule.cron(""), "cron"),
        (lambda: Rule.cron("   "), "cron"),
        (lambda: Rule.cron("* * * *"), "cron"),
        (lambda: Rule.cron("0 * * * * *"), "cron"),
        (lambda: Rule.cron("61 * * * *"), "cron"),
        (lambda: Rule.cron("0 24 * * *"), "cron"),
        (lambda: Rule.cron("*/0 * * * *"), "cron"),
        (lambda: Rule.cron("5-1 * * * *"), "cron"),
        (lambda: Rule.cron("0 0 ? * *"), "cron"),
        (lambda: Rule.cron("0 0 * 13 *"), "cron"),
        (lambda: Rule.cron("0 0 * * 8"), "cron"),
        (lambda: Rule.cron("0 0 * * *\x00"), "cron"),
        (lambda: Rule.cron("@reboot"), "cron"),
        (lambda: Rule.cron("@every 5m"), "cron"),
        (lambda: Rule.cron("0 " * 101), "cron"),
        (lambda: Rule.cron("0,0" * (MAX_CRON_LENGTH // 3 + 1) + " * * * *"), "cron"),
        (lambda: Rule.cron(5), "cron"),  # type: ignore[arg-type]
        (lambda: Rule.cron("0 0 * * *", ""), "timezone"),
        (lambda: Rule.cron("0 0 * * *", "Nowhere/Atlantis"), "timezone"),
        (lambda: Rule.cron("0 0 * * *", "../etc"), "timezone"),
        (lambda: Rule.cron("0 0 * * *", "../../etc/passwd"), "timezone"),
        (lambda: Rule.cron("0 0 * * *", "/etc/localtime"), "timezone"),
        (lambda: Rule.cron("0 0 * * *", "Europe/"), "timezone"),
        (lambda: Rule.cron("0 0 * * *", "Europe"), "timezone"),
        (lambda: Rule.cron("0 0 * * *", "\x00"), "timezone"),
        (lambda: Rule.cron("0 0 * * *", "Europe/Berlin\x00"), "timezone"),
        (lambda: Rule.cron("0 0 * * *", "Europe/Berlin "), "timezone"),
        (lambda: Rule.cron("0 0 * * *", "\ud800"), "timezone"),
        (lambda: Rule.cron("0 0 * * *", "localtime"), "timezone"),
        (lambda: Rule.cron("0 0 * * *", "A" * 65), "timezone"),
        (lambda: Rule.cron("0 0 * * *", None), "timezone"),  # type: ignore[arg-type]
        (lambda: Rule(interval=timedelta(hours=1), timezone="Europe/Berlin"), "timezone"),
        (lambda: Rule.every(timedelta(hours=1), anchor=datetime(2024, 1, 1)), "anchor"),  # noqa: DTZ001 (the naive input under test)
        (lambda: Rule.every(timedelta(hours=1), anchor=utc(1969, 12, 31)), "anchor"),
        (lambda: Rule.every(timedelta(hours=1), anchor="2024-01-01"), "anchor"),  # type: ignore[arg-type]
        (lambda: Rule(expression="0 * * * *", anchor=utc(2024, 1, 1)), "anchor"),
    ],
)
def test_invalid_rule_raises_invalid_schedule_naming_the_field(
    build: Callable[[], Rule], field: str
) -> None:
    with pytest.raises(InvalidSchedule) as raised:
        build()

    assert raised.value.field == field
    assert raised.value.reason


def test_invalid_schedule_is_bad_input_and_a_value_error() -> None:
    with pytest.raises(InvalidSchedule) as raised:
        Rule.cron("not a cron")

    assert isinstance(raised.value, InvalidInput)
    assert isinstance(raised.value, ValueError)


def test_a_bad_cron_field_is_named_in_the_message() -> None:
    with pytest.raises(InvalidSchedule, match="minute"):
        Rule.cron("61 * * * *")


def test_a_remembered_expression_is_still_checked_and_a_refused_one_refused_again() -> None:
    # Expressions' normal forms are remembered; a refusal must not be, nor leak into a rule.
    for _ in range(3):
        assert Rule.cron("  0   0 29 2 *", "Europe/Berlin").expression == "0 0 29 2 *"
        with pytest.raises(InvalidSchedule, match="minute"):
            Rule.cron("61 * * * *")


def test_rules_are_values() -> None:
    assert Rule.cron("@daily", "Europe/Berlin") == Rule.cron("0 0 * * *", "Europe/Berlin")
    assert Rule.cron("@daily") != Rule.cron("@daily", "Europe/Berlin")
    assert len({Rule.every(timedelta(hours=1)), Rule.every(timedelta(minutes=60))}) == 1


# ---------------------------------------------------------------- descriptions


@pytest.mark.parametrize(
    ("rule", "text"),
    [
        (Rule.every(timedelta(minutes=15)), "every 15 minutes"),
        (Rule.every(timedelta(hours=1)), "every hour"),
        (Rule.every(timedelta(days=1)), "every day"),
        (Rule.every(timedelta(days=14)), "every 2 weeks"),
        (Rule.every(timedelta(seconds=90)), "every 90 seconds"),
        (Rule.every(timedelta(seconds=1.5)), "every 1.5 seconds"),
        (Rule.cron("* * * * *"), "every minute"),
        (Rule.cron("*/15 * * * *"), "every 15 minutes"),
        (Rule.cron("5 * * * *"), "at minute 5 of every hour"),
        (Rule.cron("@hourly"), "every hour"),
        (Rule.cron("5 */2 * * *"), "at minute 5 of every 2nd hour"),
        (Rule.cron("30 1 * * *", "Europe/Berlin"), "every day at 01:30 (Europe/Berlin)"),
        (Rule.cron("0 9 * * 1-5"), "at 09:00 on Monday\u2013Friday"),
        (Rule.cron("0 9 * * MON-FRI"), "at 09:00 on Monday\u2013Friday"),
        (Rule.cron("0 9,17 * * 1,3,5"), "at 09:00 and 17:00 on Monday, Wednesday and Friday"),
        (Rule.cron("@weekly"), "at 00:00 on Sunday"),
        (Rule.cron("0 0 1 1 *"), "at 00:00 on 1 January"),
        (Rule.cron("0 0 L * *"), "at 00:00 on the last day of the month"),
        (Rule.cron("0 6 1,15 * *"), "at 06:00 on days 1 and 15 of the month"),
    ],
)
def test_describe_reads_as_english(rule: Rule, text: str) -> None:
    assert rule.describe() == text


@pytest.mark.parametrize(
    "expression",
    [
        "0 12 * * MON#2",
        "0 0 LW * *",
        "0 0 13 * 5",
        "0-30/7 8-18/2 */3 JAN-JUN/2 SUN,SAT",
        "59 23 L * 5L",
        "0 0 1-7 * 1",
    ],
)
def test_describe_of_an_unusual_expression_still_says_something(expression: str) -> None:
    text = Rule.cron(expression, "America/New_York").describe()

    assert text
    assert text.endswith("(America/New_York)")


# ---------------------------------------------------------------- plain fields


def test_interval_rule_round_trips_through_plain_fields() -> None:
    rule = Rule.every(timedelta(minutes=90), anchor=utc(2024, 1, 1, 0, 15))

    fields = rule.to_dict()

    assert fields == {
        "every_seconds": 5400.0,
        "cron": None,
        "timezone": "UTC",
        "anchor": utc(2024, 1, 1, 0, 15),
    }
    assert Rule.from_dict(fields) == rule


def test_cron_rule_round_trips_through_plain_fields() -> None:
    rule = Rule.cron("@daily", "Australia/Lord_Howe")

    assert rule.to_dict() == {
        "every_seconds": None,
        "cron": "0 0 * * *",
        "timezone": "Australia/Lord_Howe",
        "anchor": None,
    }
    assert Rule.from_dict(rule.to_dict()) == rule


def test_from_dict_accepts_an_iso_anchor_and_a_missing_timezone() -> None:
    rule = Rule.from_dict({"every_seconds": 60, "anchor": "2024-01-01T00:00:30+02:00"})

    assert rule == Rule.every(timedelta(minutes=1), anchor=utc(2023, 12, 31, 22, 0, 30))


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"every_seconds": float("nan")}, "every"),
        ({"every_seconds": float("inf")}, "every"),
        ({"every_seconds": 1e20}, "every"),
        ({"every_seconds": True}, "every"),
        ({"every_seconds": "60"}, "every"),
        ({"every_seconds": 60, "anchor": "yesterday"}, "anchor"),
        ({"every_seconds": 60, "cron": "* * * * *"}, "rule"),
        ({"cron": "* * * * *", "owner": "me"}, "owner"),
        ({}, "rule"),
    ],
)
def test_from_dict_rejects_bad_fields(fields: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidSchedule) as raised:
        Rule.from_dict(fields)

    assert raised.value.field == field


@given(micros=st.integers(min_value=1_000_000, max_value=366 * 86_400 * 1_000_000))
@settings(max_examples=200, deadline=None)
def test_any_valid_interval_survives_every_seconds_as_a_float(micros: int) -> None:
    rule = Rule.every(timedelta(microseconds=micros))

    assert Rule.from_dict(rule.to_dict()) == rule


# ---------------------------------------------------------------- the first slot


def test_first_slot_of_an_interval_is_its_creation_instant() -> None:
    created_at = utc(2024, 5, 1, 10, 17, 3)
    rule = Rule.every(timedelta(hours=1)).anchored(created_at)

    assert first_slot(rule, created_at) == created_at
    assert rule.next_after(created_at) == utc(2024, 5, 1, 11, 17, 3)


def test_first_slot_of_an_unanchored_interval_is_also_its_creation_instant() -> None:
    created_at = utc(2024, 5, 1, 10, 17, 3)

    assert first_slot(Rule.every(timedelta(hours=1)), created_at) == created_at


def test_first_slot_of_an_anchored_interval_is_its_grid_slot_at_or_after_creation() -> None:
    rule = Rule.every(timedelta(hours=1), anchor=utc(2024, 1, 1, 0, 30))

    assert first_slot(rule, utc(2024, 5, 1, 10, 17)) == utc(2024, 5, 1, 10, 30)
    assert first_slot(rule, utc(2024, 5, 1, 10, 30)) == utc(2024, 5, 1, 10, 30)


def test_anchoring_keeps_an_existing_anchor_and_leaves_cron_alone() -> None:
    anchored = Rule.every(timedelta(hours=1), anchor=utc(2024, 1, 1))
    cron = Rule.cron("0 * * * *")

    assert anchored.anchored(utc(2024, 6, 1)) is anchored
    assert cron.anchored(utc(2024, 6, 1)) is cron


def test_first_slot_of_cron_is_its_first_firing_at_or_after_creation() -> None:
    rule = Rule.cron("0 * * * *")

    assert first_slot(rule, utc(2024, 5, 1, 10, 17)) == utc(2024, 5, 1, 11)
    assert first_slot(rule, utc(2024, 5, 1, 11)) == utc(2024, 5, 1, 11)


# ---------------------------------------------------------------- schedule definitions


def make_spec(**overrides: Any) -> ScheduleSpec:
    fields: dict[str, Any] = {
        "name": "nightly-report",
        "kind": "reports.build",
        "rule": Rule.cron("30 1 * * *", "Europe/Berlin"),
    }
    fields.update(overrides)
    return ScheduleSpec(**fields)


def test_schedule_spec_defaults_follow_jobs_and_the_design() -> None:
    spec = make_spec()

    assert spec.payload == {}
    assert spec.payload_json == "{}"
    assert spec.queue == DEFAULT_QUEUE
    assert spec.priority == 0
    assert spec.tenant is None
    assert spec.max_attempts == DEFAULT_MAX_ATTEMPTS
    assert spec.jitter == timedelta(0)
    assert spec.misfire is Misfire.LATEST
    assert spec.misfire_limit == 100
    assert spec.grace == timedelta(minutes=1)
    assert spec.overlap is Overlap.SKIP


def test_schedule_spec_accepts_policy_names_as_strings() -> None:
    spec = make_spec(misfire="all", overlap="allow")

    assert spec.misfire is Misfire.ALL
    assert spec.overlap is Overlap.ALLOW


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"name": ""}, "name"),
        ({"name": "has space"}, "name"),
        ({"name": None}, "name"),
        ({"name": "x" * 129}, "name"),
        ({"kind": "-leading-dash"}, "kind"),
        ({"queue": "a/b"}, "queue"),
        ({"tenant": ""}, "tenant"),
        ({"payload": {1, 2}}, "payload"),
        ({"payload": {"x": float("nan")}}, "payload"),
        ({"rule": "@daily"}, "rule"),
        ({"priority": 101}, "priority"),
        ({"priority": 1.5}, "priority"),
        ({"max_attempts": 0}, "max_attempts"),
        ({"jitter": timedelta(seconds=-1)}, "jitter"),
        ({"jitter": timedelta(days=2)}, "jitter"),
        ({"jitter": 30}, "jitter"),
        ({"grace": timedelta(seconds=-1)}, "grace"),
        ({"misfire": "sometimes"}, "misfire"),
        ({"misfire": None}, "misfire"),
        ({"misfire_limit": 0}, "misfire_limit"),
        ({"misfire_limit": 1001}, "misfire_limit"),
        ({"misfire_limit": True}, "misfire_limit"),
        ({"overlap": "queue"}, "overlap"),
    ],
)
def test_invalid_schedule_spec_raises_invalid_schedule_naming_the_field(
    overrides: dict[str, Any], field: str
) -> None:
    with pytest.raises(InvalidSchedule) as raised:
        make_spec(**overrides)

    assert raised.value.field == field


def test_job_spec_for_a_slot_carries_the_schedule_and_its_nominal_slot() -> None:
    spec = make_spec(payload={"format": "pdf"}, queue="reports", priority=5, tenant="acme")
    slot = utc(2024, 5, 1, 23, 30)

    job = spec.job_spec(slot)

    assert job == JobSpec(
        kind="reports.build",
        payload={"format": "pdf"},
        queue="reports",
        priority=5,
        tenant="acme",
        max_attempts=DEFAULT_MAX_ATTEMPTS,
        schedule="nightly-report",
        slot_at=slot,
    )


def test_schedule_spec_jitter_offset_is_fixed_per_name() -> None:
    spec = make_spec(jitter=timedelta(minutes=10))

    assert spec.jitter_offset == make_spec(jitter=timedelta(minutes=10)).jitter_offset
    assert timedelta(0) <= spec.jitter_offset < timedelta(minutes=10)
    assert make_spec().jitter_offset == timedelta(0)
