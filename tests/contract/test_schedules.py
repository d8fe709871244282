"""The schedule verbs of the Store contract (DESIGN C5, C6; TESTPLAN T27-T29), on every backend:
definitions, pause and resume, run now, and fire_due turning each due slot into exactly one job."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from rota.domain.errors import InvalidInput, InvalidSchedule, ScheduleNotFound, StateConflict
from rota.domain.job_state import JobState
from rota.domain.schedule import Misfire, Overlap, Rule, ScheduleSpec, jitter_offset
from rota.domain.schedule_state import Firing
from rota.store import JobFilter, Store
from rota.testing import FakeClock
from tests.contract.helpers import claim_one

MINUTE = timedelta(minutes=1)
START = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)  # FakeClock's default start


def every_minute(name: str = "tick", **fields: Any) -> ScheduleSpec:
    return ScheduleSpec(name=name, kind="report", rule=Rule.every(MINUTE), **fields)


async def fired_slots(store: Store, name: str) -> list[datetime]:
    page = await store.list_jobs(JobFilter(schedule=name), limit=500)
    return sorted(job.slot_at for job in page.jobs if job.slot_at is not None)


def slots_of(firings: list[Firing]) -> list[datetime]:
    return [
        result.job.slot_at for firing in firings for result in firing.jobs if result.job.slot_at
    ]


async def finish(store: Store, name: str) -> None:
    """Claim and complete every pending job of ``name`` (its runs end)."""
    while (job := await claim_one(store)) is not None:
        assert job.schedule == name
        await store.complete(job.lease)


# ---------------------------------------------------------------------- definitions


async def test_upsert_creates_a_schedule_whose_first_slot_is_its_creation_instant(
    store: Store,
) -> None:
    created = await store.upsert_schedule(every_minute(payload={"to": "ops"}, queue="reports"))

    assert created.next_run_at == START
    assert created.rule.anchor == START, "an interval without an anchor is anchored on creation"
    assert (created.paused, created.last_run_at, created.last_job_id) == (False, None, None)
    assert created.created_at == created.updated_at == START
    fetched = await store.get_schedule("tick")
    assert fetched == created
    assert fetched.spec.payload == {"to": "ops"} and fetched.spec.queue == "reports"


async def test_a_cron_schedule_keeps_its_rule_and_policies_through_the_store(
    store: Store,
) -> None:
    spec = ScheduleSpec(
        name="nightly",
        kind="backup",
        rule=Rule.cron("@daily", "Europe/Berlin"),
        priority=7,
        tenant="acme",
        max_attempts=9,
        jitter=timedelta(minutes=5),
        misfire=Misfire.ALL,
        misfire_limit=12,
        grace=timedelta(seconds=90),
        overlap=Overlap.ALLOW,
    )
    created = await store.upsert_schedule(spec)

    assert created.spec == spec
    assert (await store.get_schedule("nightly")).spec == spec
    # Midnight in Berlin (UTC+1 in January) is 23:00 UTC.
    assert created.next_run_at == datetime(2026, 1, 1, 23, 0, tzinfo=UTC)
    assert created.due_at == created.next_run_at + jitter_offset("nightly", timedelta(minutes=5))


async def test_list_returns_every_schedule_by_name(store: Store) -> None:
    for name in ("b", "c", "a"):
        await store.upsert_schedule(every_minute(name))

    assert [schedule.name for schedule in await store.list_schedules()] == ["a", "b", "c"]


async def test_list_pages_by_name_with_a_stable_keyset(store: Store) -> None:
    # Code-point order on every backend: upper case sorts before lower case, "-" before "0".
    names = ["b", "B", "a-1", "a0", "a", "Z9", "c.d", "c:d", "c_d"]
    for name in names:
        await store.upsert_schedule(every_minute(name))
    expected = sorted(names)

    first = await store.list_schedules(limit=4)
    assert [s.name for s in first] == expected[:4]
    await store.upsert_schedule(every_minute("A"))  # sorts before the cursor: not seen
    await store.delete_schedule(expected[5])
    rest = await store.list_schedules(after=first[-1].name, limit=100)
    assert [s.name for s in rest] == [n for n in expected[4:] if n != expected[5]]
    assert await store.list_schedules(after="zzz") == []


async def test_list_due_first_gives_unpaused_schedules_soonest_due(
    store: Store, clock: FakeClock
) -> None:
    for name, cron in [("late", "0 18 * * *"), ("soon", "*/5 * * * *"), ("mid", "0 15 * * *")]:
        await store.upsert_schedule(ScheduleSpec(name=name, kind="k", rule=Rule.cron(cron)))
    await store.upsert_schedule(every_minute("paused"))
    await store.pause_schedule("paused")

    listed = await store.list_schedules(due_first=True, limit=2)
    assert [s.name for s in listed] == ["soon", "mid"]
    everything = await store.list_schedules(due_first=True)
    assert [s.name for s in everything] == ["soon", "mid", "late"]
    assert [s.due_at for s in everything] == sorted(s.due_at for s in everything)


@pytest.mark.parametrize(
    "options", [{"limit": 0}, {"limit": -1}, {"due_first": True, "after": "a"}]
)
async def test_list_refuses_pages_it_cannot_give(store: Store, options: dict[str, Any]) -> None:
    with pytest.raises(InvalidInput):
        await store.list_schedules(**options)


async def test_upsert_from_code_wins_on_definition_and_keeps_paused_and_next_slot(
    store: Store, clock: FakeClock
) -> None:
    await store.upsert_schedule(every_minute())
    await store.fire_due()
    await store.pause_schedule("tick")
    clock.advance(timedelta(seconds=10))

    updated = await store.upsert_schedule(every_minute(payload={"v": 2}, priority=3))

    assert updated.spec.payload == {"v": 2} and updated.spec.priority == 3
    assert updated.paused is True, "a pause set at run time survives a deploy"
    assert updated.next_run_at == START + MINUTE, "same rule: the schedule keeps its place"
    assert updated.rule.anchor == START
    assert updated.last_run_at == START and updated.last_job_id is not None
    assert updated.created_at == START and updated.updated_at == START + timedelta(seconds=10)
    assert await store.get_schedule("tick") == updated


async def test_a_batch_upsert_writes_each_as_upsert_does_in_the_specs_order(
    store: Store, clock: FakeClock
) -> None:
    await store.upsert_schedule(every_minute("b"))
    await store.fire_due()
    await store.pause_schedule("b")
    clock.advance(timedelta(seconds=10))
    specs = [
        every_minute("c", payload={"v": 1}),
        every_minute("b", payload={"v": 2}, priority=3),
        ScheduleSpec(name="a", kind="report", rule=Rule.cron("*/5 * * * *")),
    ]

    written = await store.upsert_schedules(specs)

    assert [schedule.name for schedule in written] == ["c", "b", "a"]
    assert [await store.get_schedule(name) for name in ("c", "b", "a")] == written
    new, kept, cron = written
    assert new.next_run_at == new.created_at == START + timedelta(seconds=10)
    assert new.spec.payload == {"v": 1} and new.rule.anchor == new.created_at
    assert kept.spec.payload == {"v": 2} and kept.spec.priority == 3
    assert kept.paused is True and kept.next_run_at == START + MINUTE
    assert kept.last_run_at == START and kept.created_at == START
    assert cron.next_run_at == START + timedelta(minutes=5)
    assert await store.upsert_schedules([]) == []


async def test_a_batch_upsert_of_many_creates_the_new_and_updates_the_stored(store: Store) -> None:
    specs = [every_minute(f"s{n:04}", payload={"n": n}) for n in range(1_500)]
    await store.upsert_schedules(specs[:700])

    again = await store.upsert_schedules([replace(spec, priority=9) for spec in specs])

    assert [schedule.spec.priority for schedule in again] == [9] * 1_500
    listed = await store.list_schedules()
    assert [schedule.name for schedule in listed] == [spec.name for spec in specs]
    assert {schedule.spec.priority for schedule in listed} == {9}
    fired = await store.fire_due(limit=2_000)
    assert sorted(firing.schedule for firing in fired) == [spec.name for spec in specs]


async def test_a_batch_upsert_refuses_a_name_given_twice_and_changes_nothing(
    store: Store,
) -> None:
    await store.upsert_schedule(every_minute("a"))

    with pytest.raises(InvalidSchedule, match="'a' is given twice"):
        await store.upsert_schedules(
            [every_minute("b"), every_minute("a", priority=4), every_minute("a")]
        )

    assert [schedule.name for schedule in await store.list_schedules()] == ["a"]
    assert (await store.get_schedule("a")).spec.priority == every_minute("a").priority


async def test_a_batch_with_a_rule_without_slots_changes_nothing(
    store: Store, clock: FakeClock
) -> None:
    clock.set(datetime(9998, 6, 1, tzinfo=UTC))
    await store.upsert_schedule(every_minute("a"))
    never = ScheduleSpec(name="z", kind="report", rule=Rule.cron("0 0 1 1 *"))

    with pytest.raises(InvalidSchedule, match="9999"):
        await store.upsert_schedules([every_minute("a", priority=4), never])

    assert [schedule.name for schedule in await store.list_schedules()] == ["a"]
    assert (await store.get_schedule("a")).spec.priority == every_minute("a").priority


async def test_batch_upserts_racing_from_two_stores_each_define_every_schedule(
    store: Store, second_store: Store | None
) -> None:
    if second_store is None:
        pytest.skip("the memory store lives in one process: there is no other store to share")
    specs = [every_minute(f"s{n:03}") for n in range(300)]
    await store.upsert_schedules(specs[::3])

    first, second = await asyncio.gather(
        store.upsert_schedules(specs), second_store.upsert_schedules(specs[::-1])
    )

    assert [s.name for s in first] == [s.name for s in second[::-1]] == [s.name for s in specs]
    listed = await store.list_schedules()
    assert [schedule.name for schedule in listed] == [spec.name for spec in specs]
    assert {schedule.next_run_at for schedule in listed} == {START}


async def test_a_changed_rule_starts_again_from_now(store: Store, clock: FakeClock) -> None:
    await store.upsert_schedule(every_minute())
    await store.fire_due()
    clock.advance(timedelta(seconds=90))

    changed = await store.upsert_schedule(
        ScheduleSpec(name="tick", kind="report", rule=Rule.cron("*/5 * * * *"))
    )

    assert changed.next_run_at == START + timedelta(minutes=5)
    assert changed.last_run_at == START


async def test_a_changed_jitter_keeps_the_next_slot_and_moves_when_it_is_due(
    store: Store,
) -> None:
    await store.upsert_schedule(every_minute())

    jittered = await store.upsert_schedule(every_minute(jitter=timedelta(seconds=30)))

    assert jittered.next_run_at == START
    assert jittered.due_at == START + jitter_offset("tick", timedelta(seconds=30))
    assert await store.next_fire_at() == jittered.due_at


async def test_create_refuses_an_existing_name_and_changes_nothing(store: Store) -> None:
    original = await store.create_schedule(every_minute())

    with pytest.raises(StateConflict, match="already exists"):
        await store.create_schedule(every_minute(priority=50))

    assert await store.get_schedule("tick") == original


async def test_replace_changes_an_existing_schedule_and_never_creates_one(store: Store) -> None:
    with pytest.raises(ScheduleNotFound, match="tick"):
        await store.replace_schedule(every_minute())
    assert await store.list_schedules() == []

    await store.create_schedule(every_minute())
    replaced = await store.replace_schedule(every_minute(priority=50))
    assert replaced.spec.priority == 50
    assert await store.get_schedule("tick") == replaced

    await store.delete_schedule("tick")
    with pytest.raises(ScheduleNotFound, match="tick"):
        await store.replace_schedule(every_minute(priority=7))
    assert await store.list_schedules() == []


async def test_a_rule_with_no_slot_left_is_refused(store: Store, clock: FakeClock) -> None:
    clock.set(datetime(9998, 6, 1, tzinfo=UTC))

    with pytest.raises(InvalidSchedule, match="9999"):
        await store.upsert_schedule(
            ScheduleSpec(name="y10k", kind="k", rule=Rule.cron("0 0 1 1 *"))
        )

    assert await store.list_schedules() == []


@pytest.mark.parametrize(
    "verb",
    ["get_schedule", "pause_schedule", "resume_schedule", "delete_schedule", "trigger_schedule"],
)
async def test_verbs_on_an_unknown_schedule_raise_schedule_not_found(
    store: Store, verb: str
) -> None:
    with pytest.raises(ScheduleNotFound, match="nope"):
        await getattr(store, verb)("nope")


async def test_delete_removes_the_schedule_and_keeps_its_jobs(store: Store) -> None:
    await store.upsert_schedule(every_minute())
    [firing] = await store.fire_due()

    await store.delete_schedule("tick")

    with pytest.raises(ScheduleNotFound):
        await store.get_schedule("tick")
    assert await store.list_schedules() == []
    assert await store.next_fire_at() is None
    assert await fired_slots(store, "tick") == [START]
    assert (await store.get(firing.jobs[0].job.id)).state is JobState.PENDING


# ---------------------------------------------------------------------- firing


async def test_the_seed_scenario_one_run_after_downtime_and_no_drift(
    store: Store, clock: FakeClock
) -> None:
    await store.upsert_schedule(every_minute())

    [first] = await store.fire_due()
    assert slots_of([first]) == [START]
    assert first.next_run_at == START + MINUTE, "the next slot follows the previous slot"
    await finish(store, "tick")

    clock.advance(timedelta(seconds=2.5))
    assert await store.fire_due() == [], "nothing is due between slots"
    clock.advance(timedelta(minutes=3.5) - timedelta(seconds=2.5))

    [after_downtime] = await store.fire_due()
    assert slots_of([after_downtime]) == [START + 3 * MINUTE], "one run, for the latest slot"
    assert after_downtime.missed == 2
    assert after_downtime.next_run_at == START + 4 * MINUTE
    schedule = await store.get_schedule("tick")
    assert schedule.next_run_at == START + 4 * MINUTE
    assert schedule.last_run_at == START + 3 * MINUTE
    assert await fired_slots(store, "tick") == [START, START + 3 * MINUTE]


async def test_misfire_latest_runs_once_for_the_most_recent_missed_slot(
    store: Store, clock: FakeClock
) -> None:
    await store.upsert_schedule(every_minute(overlap=Overlap.ALLOW))
    await store.fire_due()
    clock.advance(10 * MINUTE + timedelta(seconds=5))

    [firing] = await store.fire_due()

    assert slots_of([firing]) == [START + 10 * MINUTE]
    assert firing.missed == 9


async def test_misfire_skip_runs_only_slots_within_grace(store: Store, clock: FakeClock) -> None:
    await store.upsert_schedule(
        every_minute(misfire=Misfire.SKIP, grace=timedelta(seconds=30), overlap=Overlap.ALLOW)
    )
    await store.fire_due()
    clock.advance(5 * MINUTE + timedelta(seconds=40))

    [late] = await store.fire_due()
    assert slots_of([late]) == [], "every missed slot is more than 30 s late"
    assert late.missed == 5
    assert late.next_run_at == START + 6 * MINUTE

    clock.advance(MINUTE - timedelta(seconds=40) + timedelta(seconds=20))
    [on_time] = await store.fire_due()
    assert slots_of([on_time]) == [START + 6 * MINUTE]


@pytest.mark.parametrize(("limit", "missed"), [(1000, 440), (500, 940)])
async def test_misfire_all_counts_every_missed_cron_slot_past_a_thousand(
    store: Store, clock: FakeClock, limit: int, missed: int
) -> None:
    # A day of minute slots comes due at once: 1,440 of them, the latest ``limit`` fire.
    spec = ScheduleSpec(
        name="minutely",
        kind="k",
        rule=Rule.cron("* * * * *"),
        misfire=Misfire.ALL,
        misfire_limit=limit,
        overlap=Overlap.ALLOW,
    )
    created = await store.upsert_schedule(spec)
    assert created.next_run_at == START
    clock.advance(timedelta(days=1) - MINUTE)

    [firing] = await store.fire_due()

    assert len(firing.jobs) == limit
    assert firing.missed == missed
    assert slots_of([firing])[-1] == START + timedelta(days=1) - MINUTE


async def test_misfire_all_backfills_up_to_the_limit_most_recent_first(
    store: Store, clock: FakeClock
) -> None:
    await store.upsert_schedule(
        every_minute(misfire=Misfire.ALL, misfire_limit=4, overlap=Overlap.ALLOW)
    )
    await store.fire_due()
    clock.advance(10 * MINUTE)

    [firing] = await store.fire_due()

    expected = [START + n * MINUTE for n in (7, 8, 9, 10)]
    assert slots_of([firing]) == expected, "the 4 latest slots, with their nominal times"
    assert firing.missed == 6
    assert await fired_slots(store, "tick") == [START, *expected]
    assert (await store.get_schedule("tick")).last_run_at == START + 10 * MINUTE


async def test_overlap_skip_fires_nothing_while_the_previous_run_is_active(
    store: Store, clock: FakeClock
) -> None:
    await store.upsert_schedule(every_minute())
    await store.fire_due()
    running = await claim_one(store)
    assert running is not None and running.slot_at == START

    clock.advance(MINUTE)
    [skipped] = await store.fire_due()
    assert skipped.jobs == () and skipped.skipped_overlap == (START + MINUTE,)
    assert skipped.next_run_at == START + 2 * MINUTE, "the schedule moves on all the same"
    assert (await store.get_schedule("tick")).last_job_state is JobState.RUNNING

    await store.complete(running.lease)
    clock.advance(MINUTE)
    [resumed] = await store.fire_due()
    assert slots_of([resumed]) == [START + 2 * MINUTE]
    assert await fired_slots(store, "tick") == [START, START + 2 * MINUTE]


async def test_overlap_skip_also_waits_for_a_pending_previous_run(
    store: Store, clock: FakeClock
) -> None:
    await store.upsert_schedule(every_minute())
    await store.fire_due()
    clock.advance(MINUTE)

    [firing] = await store.fire_due()

    assert firing.skipped_overlap == (START + MINUTE,)
    assert await fired_slots(store, "tick") == [START]


async def test_overlap_allow_fires_while_the_previous_run_is_active(
    store: Store, clock: FakeClock
) -> None:
    await store.upsert_schedule(every_minute(overlap=Overlap.ALLOW))
    await store.fire_due()
    assert await claim_one(store) is not None

    clock.advance(MINUTE)
    [firing] = await store.fire_due()

    assert slots_of([firing]) == [START + MINUTE] and firing.skipped_overlap == ()


async def test_a_clock_moving_backwards_never_fires_a_slot_twice(
    store: Store, clock: FakeClock
) -> None:
    hourly = ScheduleSpec(
        name="hourly", kind="report", rule=Rule.cron("0 * * * *"), overlap=Overlap.ALLOW
    )
    clock.set(datetime(2026, 1, 1, 2, 30, tzinfo=UTC))
    await store.upsert_schedule(hourly)
    clock.set(datetime(2026, 1, 1, 3, 0, 1, tzinfo=UTC))
    await store.fire_due()
    clock.set(datetime(2026, 1, 1, 4, 0, 1, tzinfo=UTC))
    await store.fire_due()

    clock.set(datetime(2026, 1, 1, 3, 0, 1, tzinfo=UTC))
    assert await store.fire_due() == []
    for second in range(0, 3601, 300):
        clock.set(datetime(2026, 1, 1, 3, 0, 1, tzinfo=UTC) + timedelta(seconds=second))
        assert await store.fire_due() == []
    clock.set(datetime(2026, 1, 1, 5, 0, 1, tzinfo=UTC))
    await store.fire_due()

    assert await fired_slots(store, "hourly") == [
        datetime(2026, 1, 1, hour, 0, tzinfo=UTC) for hour in (3, 4, 5)
    ]


async def test_a_clock_jittering_around_a_slot_boundary_fires_it_once(
    store: Store, clock: FakeClock
) -> None:
    await store.upsert_schedule(every_minute(overlap=Overlap.ALLOW))
    await store.fire_due()
    boundary = START + MINUTE
    for offset_ms in (-1, 1, -500, 2, -1, 3, -2, 4, -3, 5):
        clock.set(boundary + timedelta(milliseconds=offset_ms))
        await store.fire_due()

    assert await fired_slots(store, "tick") == [START, boundary]


async def test_a_slot_is_due_only_after_its_jitter_offset_and_keeps_its_nominal_time(
    store: Store, clock: FakeClock
) -> None:
    jitter = timedelta(minutes=10)
    offset = jitter_offset("spread", jitter)
    await store.upsert_schedule(
        ScheduleSpec(name="spread", kind="report", rule=Rule.cron("0 13 * * *"), jitter=jitter)
    )
    slot = datetime(2026, 1, 1, 13, 0, tzinfo=UTC)
    assert await store.next_fire_at() == slot + offset

    clock.set(slot + offset - timedelta(microseconds=1))
    assert await store.fire_due() == []
    clock.set(slot + offset)
    [firing] = await store.fire_due()

    assert slots_of([firing]) == [slot]
    assert firing.jobs[0].job.run_at == slot + offset, "the job is due when it fired"


async def test_fire_due_takes_at_most_limit_schedules_earliest_first(
    store: Store, clock: FakeClock
) -> None:
    for name in ("c", "a", "b"):
        await store.upsert_schedule(every_minute(name))
        clock.advance(timedelta(seconds=1))

    first = await store.fire_due(limit=2)
    second = await store.fire_due(limit=2)

    assert [firing.schedule for firing in first] == ["c", "a"]
    assert [firing.schedule for firing in second] == ["b"]


async def test_next_fire_at_is_the_earliest_due_unpaused_schedule(
    store: Store, clock: FakeClock
) -> None:
    assert await store.next_fire_at() is None
    await store.upsert_schedule(ScheduleSpec(name="a", kind="k", rule=Rule.cron("30 12 * * *")))
    await store.upsert_schedule(ScheduleSpec(name="b", kind="k", rule=Rule.cron("15 12 * * *")))
    assert await store.next_fire_at() == START + timedelta(minutes=15)

    await store.pause_schedule("b")
    assert await store.next_fire_at() == START + timedelta(minutes=30)
    await store.pause_schedule("a")
    assert await store.next_fire_at() is None


# ---------------------------------------------------------------------- pause, resume, run now


async def test_a_paused_schedule_fires_nothing_and_stays_paused_across_an_upsert(
    store: Store, clock: FakeClock
) -> None:
    await store.upsert_schedule(every_minute(overlap=Overlap.ALLOW))
    await store.fire_due()
    paused = await store.pause_schedule("tick")
    assert paused.paused is True

    clock.advance(5 * MINUTE)
    assert await store.fire_due() == []
    assert (await store.upsert_schedule(every_minute(overlap=Overlap.ALLOW))).paused is True
    assert await store.fire_due() == []
    assert await fired_slots(store, "tick") == [START]


async def test_resume_does_not_replay_the_paused_slots_beyond_the_misfire_policy(
    store: Store, clock: FakeClock
) -> None:
    await store.upsert_schedule(every_minute(overlap=Overlap.ALLOW))
    await store.fire_due()
    await store.pause_schedule("tick")
    clock.advance(30 * MINUTE + timedelta(seconds=1))

    resumed = await store.resume_schedule("tick")
    [firing] = await store.fire_due()

    assert resumed.paused is False
    assert slots_of([firing]) == [START + 30 * MINUTE], "misfire=latest: one run"
    assert await fired_slots(store, "tick") == [START, START + 30 * MINUTE]


async def test_run_now_enqueues_off_the_grid_and_leaves_the_next_slot(
    store: Store, clock: FakeClock
) -> None:
    await store.upsert_schedule(every_minute())
    await store.fire_due()
    await finish(store, "tick")
    await store.pause_schedule("tick")
    clock.advance(timedelta(seconds=20))

    result = await store.trigger_schedule("tick")

    assert not result.duplicate
    job = result.job
    assert (job.schedule, job.slot_at, job.kind) == (
        "tick",
        START + timedelta(seconds=20),
        "report",
    )
    assert job.is_due(START + timedelta(seconds=20))
    schedule = await store.get_schedule("tick")
    assert schedule.next_run_at == START + MINUTE and schedule.paused
    assert schedule.last_job_id == job.id and schedule.last_job_state is JobState.PENDING
    assert schedule.last_run_at == START, "a run-now is not a slot of the grid"


async def test_a_run_now_counts_as_the_previous_run_for_overlap(
    store: Store, clock: FakeClock
) -> None:
    await store.upsert_schedule(every_minute())
    await store.fire_due()
    await finish(store, "tick")
    clock.advance(timedelta(seconds=1))
    assert not (await store.trigger_schedule("tick")).duplicate
    clock.advance(MINUTE - timedelta(seconds=1))

    [firing] = await store.fire_due()

    assert firing.skipped_overlap == (START + MINUTE,)


async def test_a_slot_already_taken_by_a_run_now_is_a_duplicate_not_an_error(
    store: Store, clock: FakeClock
) -> None:
    await store.upsert_schedule(every_minute(overlap=Overlap.ALLOW))
    await store.fire_due()
    clock.set(START + MINUTE)
    run_now = await store.trigger_schedule("tick")

    [firing] = await store.fire_due()

    assert [(r.job.id, r.duplicate) for r in firing.jobs] == [(run_now.job.id, True)]
    assert firing.inserted == ()
    assert (await store.get_schedule("tick")).next_run_at == START + 2 * MINUTE
    assert await fired_slots(store, "tick") == [START, START + MINUTE]


# ---------------------------------------------------------------------- every run is a job


async def test_every_run_is_a_job_linked_to_its_schedule_and_slot_with_its_own_attempts(
    store: Store, clock: FakeClock
) -> None:
    await store.upsert_schedule(every_minute(max_attempts=2))
    await store.upsert_schedule(every_minute("other", queue="elsewhere"))
    await store.fire_due()

    first = await claim_one(store)
    assert first is not None and (first.schedule, first.slot_at) == ("tick", START)
    await store.fail(first.lease, error="boom", retry_in=timedelta(0))
    again = await claim_one(store)
    assert again is not None and (again.id, again.attempt) == (first.id, 2)
    await store.complete(again.lease)
    clock.advance(MINUTE)
    await store.fire_due()

    jobs = (await store.list_jobs(JobFilter(schedule="tick"))).jobs
    assert [(job.slot_at, job.kind, job.max_attempts) for job in jobs] == [
        (START + MINUTE, "report", 2),
        (START, "report", 2),
    ]
    history = await store.attempts(first.id)
    assert [attempt.outcome.value for attempt in history] == ["failed", "succeeded"]
    assert await store.attempts(jobs[0].id) == []


async def test_the_last_outcome_follows_the_last_job(store: Store) -> None:
    await store.upsert_schedule(every_minute())
    await store.fire_due()
    assert (await store.get_schedule("tick")).last_job_state is JobState.PENDING

    await finish(store, "tick")

    assert (await store.get_schedule("tick")).last_job_state is JobState.SUCCEEDED
    [listed] = await store.list_schedules()
    assert listed.last_job_state is JobState.SUCCEEDED


# ---------------------------------------------------------------------- concurrency


async def test_concurrent_firers_produce_exactly_one_job_per_slot(
    store: Store, second_store: Store | None, clock: FakeClock
) -> None:
    firers = [store, store] if second_store is None else [store, store, second_store, second_store]
    for name in ("s1", "s2", "s3"):
        await store.upsert_schedule(
            ScheduleSpec(
                name=name,
                kind="k",
                rule=Rule.every(timedelta(seconds=1)),
                misfire=Misfire.ALL,
                overlap=Overlap.ALLOW,
            )
        )

    fired: list[Firing] = []
    for _ in range(20):
        rounds = await asyncio.gather(*(firer.fire_due(limit=2) for firer in firers))
        fired += [firing for batch in rounds for firing in batch]
        clock.advance(timedelta(milliseconds=700))

    for name in ("s1", "s2", "s3"):
        slots = await fired_slots(store, name)
        assert len(slots) == len(set(slots)), f"{name}: a slot fired twice"
        expected = [START + timedelta(seconds=n) for n in range(len(slots))]
        assert slots == expected, f"{name}: a slot is missing"
        assert slots[-1] >= START + timedelta(seconds=13)
        inserted = [r.job.slot_at for f in fired if f.schedule == name for r in f.inserted]
        assert sorted(inserted) == slots, "each slot was inserted by exactly one firer"


async def test_a_schedule_edited_by_another_store_is_seen_at_once(
    store: Store, second_store: Store | None
) -> None:
    if second_store is None:
        pytest.skip("the memory store lives in one process: there is no other store to share")
    await store.upsert_schedule(every_minute())
    await second_store.pause_schedule("tick")

    assert (await store.get_schedule("tick")).paused is True
    assert await store.fire_due() == []
