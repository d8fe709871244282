"""The decisions every store makes the same way (domain/schedule_state.py): what an upsert keeps,
what a firing enqueues, and how a definition survives a round trip through storage columns."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rota.domain.errors import InvalidSchedule
from rota.domain.job_state import JobState
from rota.domain.schedule import Misfire, Overlap, Rule, ScheduleSpec
from rota.domain.schedule_state import (
    Schedule,
    decide,
    schedule_fields,
    spec_columns,
    spec_from_columns,
    upserted,
)

START = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
MINUTE = timedelta(minutes=1)


def every_minute(**fields: Any) -> ScheduleSpec:
    fields.setdefault("rule", Rule.every(MINUTE))
    return ScheduleSpec(name="tick", kind="report", **fields)


# ---------------------------------------------------------------------- upserted


def test_a_new_interval_schedule_is_anchored_and_due_at_creation() -> None:
    created = upserted(None, every_minute(), START)

    assert (created.next_run_at, created.rule.anchor) == (START, START)
    assert created.created_at == created.updated_at == START and not created.paused


def test_the_same_rule_keeps_the_stored_anchor_and_next_slot() -> None:
    stored = replace(
        upserted(None, every_minute(), START),
        paused=True,
        next_run_at=START + 5 * MINUTE,
        last_run_at=START + 4 * MINUTE,
        last_job_id=7,
    )

    later = START + timedelta(hours=1)
    updated = upserted(stored, every_minute(priority=4), later)

    assert updated.rule.anchor == START and updated.next_run_at == START + 5 * MINUTE
    assert (updated.paused, updated.last_run_at, updated.last_job_id) == (
        True,
        START + 4 * MINUTE,
        7,
    )
    assert updated.spec.priority == 4 and updated.updated_at == later
    assert updated.created_at == START


def test_an_explicit_new_anchor_is_a_new_rule() -> None:
    stored = upserted(None, every_minute(), START)
    anchor = START + timedelta(seconds=30)

    updated = upserted(stored, every_minute(rule=Rule.every(MINUTE, anchor=anchor)), START)

    assert updated.rule.anchor == anchor and updated.next_run_at == anchor


def test_a_new_rule_never_reaches_back_to_a_fired_slot_when_the_clock_went_back() -> None:
    stored = replace(upserted(None, every_minute(), START), last_run_at=START + 10 * MINUTE)
    cron = ScheduleSpec(name="tick", kind="report", rule=Rule.cron("*/5 * * * *"))

    updated = upserted(stored, cron, START)  # the clock is 10 minutes behind the last slot

    assert updated.next_run_at == START + 15 * MINUTE


def test_a_rule_without_a_slot_before_the_year_9999_is_refused() -> None:
    spec = ScheduleSpec(name="y", kind="k", rule=Rule.cron("0 0 1 1 *"))

    with pytest.raises(InvalidSchedule) as raised:
        upserted(None, spec, datetime(9998, 6, 1, tzinfo=UTC))

    assert raised.value.field == "rule"


# ---------------------------------------------------------------------- decide


def stored(spec: ScheduleSpec, next_run_at: datetime, **state: Any) -> Schedule:
    return Schedule(spec=spec, next_run_at=next_run_at, created_at=START, updated_at=START, **state)


def test_nothing_is_decided_before_the_slot_is_due() -> None:
    decision = decide(stored(every_minute(), START), START - timedelta(microseconds=1))

    assert (decision.enqueue, decision.skipped_overlap, decision.missed) == ((), (), 0)
    assert decision.next_run_at == START


@pytest.mark.parametrize("state", [JobState.PENDING, JobState.RUNNING])
def test_overlap_skip_skips_while_the_last_job_is_active(state: JobState) -> None:
    schedule = stored(every_minute(), START, last_job_id=1, last_job_state=state)

    decision = decide(schedule, START + timedelta(seconds=1))

    assert decision.enqueue == () and decision.skipped_overlap == (START,)
    assert decision.next_run_at == START + MINUTE


@pytest.mark.parametrize("state", [JobState.SUCCEEDED, JobState.DEAD, JobState.CANCELLED, None])
def test_overlap_skip_fires_once_the_last_job_is_over(state: JobState | None) -> None:
    schedule = stored(every_minute(), START, last_job_id=1, last_job_state=state)

    assert decide(schedule, START).enqueue == (START,)


def test_overlap_allow_fires_regardless() -> None:
    schedule = stored(
        every_minute(overlap=Overlap.ALLOW), START, last_job_id=1, last_job_state=JobState.RUNNING
    )

    assert decide(schedule, START).enqueue == (START,)


def test_missed_slots_are_counted_exactly_for_intervals() -> None:
    spec = every_minute(misfire=Misfire.ALL, misfire_limit=10)

    decision = decide(stored(spec, START), START + timedelta(days=30))

    assert len(decision.enqueue) == 10
    assert decision.missed == 30 * 24 * 60 + 1 - 10


def test_missed_cron_slots_are_counted_exactly_however_many() -> None:
    spec = ScheduleSpec(name="c", kind="k", rule=Rule.cron("* * * * *"))

    decision = decide(stored(spec, START), START + timedelta(days=30))

    assert decision.enqueue == (START + timedelta(days=30),)
    assert decision.missed == 30 * 24 * 60
    assert decision.next_run_at == START + timedelta(days=30, minutes=1)


def test_jitter_delays_when_a_slot_is_due_but_not_the_slot() -> None:
    spec = every_minute(jitter=timedelta(minutes=10))
    schedule = stored(spec, START)

    assert decide(schedule, schedule.due_at - timedelta(microseconds=1)).enqueue == ()
    assert decide(schedule, schedule.due_at).enqueue == (START,)
    assert schedule.is_due(schedule.due_at) and not replace(schedule, paused=True).is_due(
        schedule.due_at
    )


# ---------------------------------------------------------------------- storage columns


@given(
    every_us=st.integers(min_value=1_000_000, max_value=366 * 86_400 * 1_000_000),
    jitter_us=st.integers(min_value=0, max_value=86_400 * 1_000_000),
    anchor_us=st.integers(min_value=0, max_value=4_000_000_000 * 1_000_000),
)
def test_interval_specs_survive_storage_columns_to_the_microsecond(
    every_us: int, jitter_us: int, anchor_us: int
) -> None:
    anchor = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=anchor_us)
    spec = ScheduleSpec(
        name="s",
        kind="k",
        rule=Rule.every(timedelta(microseconds=every_us), anchor=anchor),
        jitter=timedelta(microseconds=jitter_us),
        grace=timedelta(microseconds=jitter_us),
    )
    columns = spec_columns(spec)

    assert columns["every_us"] == every_us and columns["jitter_us"] == jitter_us
    assert spec_from_columns({**columns, "payload": spec.payload}) == spec


def test_cron_specs_survive_storage_columns() -> None:
    spec = ScheduleSpec(
        name="nightly",
        kind="backup",
        rule=Rule.cron("@weekly", "Australia/Lord_Howe"),
        payload={"a": [1, "b"]},
        queue="q",
        priority=-3,
        tenant="t",
        max_attempts=9,
        misfire=Misfire.SKIP,
        misfire_limit=5,
        overlap=Overlap.ALLOW,
    )
    columns = spec_columns(spec)

    assert (columns["cron"], columns["every_us"], columns["payload"]) == (
        "0 0 * * 0",
        None,
        '{"a":[1,"b"]}',
    )
    assert spec_from_columns({**columns, "payload": {"a": [1, "b"]}}) == spec


# ---------------------------------------------------------------------- the record


def test_a_schedule_record_is_frozen_and_previews_its_next_slots() -> None:
    schedule = stored(every_minute(), START)

    with pytest.raises(AttributeError):
        schedule.paused = True  # type: ignore[misc]
    assert schedule.upcoming(3) == [START, START + MINUTE, START + 2 * MINUTE]
    assert schedule.upcoming(0) == []


def test_the_preview_stops_at_the_end_of_time() -> None:
    spec = ScheduleSpec(name="y", kind="k", rule=Rule.cron("0 0 1 1 *"))
    schedule = stored(spec, datetime(9998, 1, 1, tzinfo=UTC))

    assert schedule.upcoming(5) == [datetime(9998, 1, 1, tzinfo=UTC)]


def test_schedule_fields_describe_the_rule_and_the_last_outcome() -> None:
    spec = ScheduleSpec(name="n", kind="k", rule=Rule.cron("0 9 * * 1-5", "Europe/Berlin"))
    schedule = stored(spec, START, last_job_id=3, last_job_state=JobState.DEAD)

    fields = schedule_fields(schedule, upcoming=2)

    assert fields["description"] == "at 09:00 on Monday\u2013Friday (Europe/Berlin)"
    assert (fields["last_job_id"], fields["last_outcome"]) == (3, "dead")
    assert fields["next_runs"] == [START, spec.rule.next_after(START)]
    assert (fields["every_seconds"], fields["cron"]) == (None, "0 9 * * 1-5")
