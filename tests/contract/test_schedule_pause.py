"""A paused schedule's missed slots on every store: queued (fired on resume as the misfire
policy allows, at most misfire_limit) or dropped (none fires; the first slot after the resume
does), each slot at most once either way."""

from __future__ import annotations

from datetime import timedelta

import pytest

from rota.domain.schedule import Misfire, Overlap
from rota.domain.schedule_state import Missed
from rota.store import Store
from rota.testing import FakeClock
from tests.contract.test_schedules import MINUTE, START, every_minute, fired_slots, slots_of

ALL = {"misfire": Misfire.ALL, "misfire_limit": 10, "overlap": Overlap.ALLOW}


async def test_a_pause_that_queues_fires_the_missed_slots_on_resume_up_to_the_limit(
    store: Store, clock: FakeClock
) -> None:
    await store.upsert_schedule(every_minute(**ALL))
    await store.fire_due()
    paused = await store.pause_schedule("tick", missed=Missed.QUEUE)
    assert (paused.paused, paused.missed) == (True, Missed.QUEUE)
    clock.advance(30 * MINUTE + timedelta(seconds=1))
    assert await store.fire_due() == []

    resumed = await store.resume_schedule("tick")
    assert resumed.paused is False and resumed.next_run_at == START + MINUTE
    [firing] = await store.fire_due()
    # misfire=all, misfire_limit=10: the ten most recent of the thirty missed slots.
    assert slots_of([firing]) == [START + k * MINUTE for k in range(21, 31)]
    assert firing.missed == 20
    assert await store.fire_due() == []
    assert len(await fired_slots(store, "tick")) == 11


async def test_a_pause_that_drops_fires_none_of_the_missed_slots_and_then_the_next(
    store: Store, clock: FakeClock
) -> None:
    await store.upsert_schedule(every_minute(**ALL))
    await store.fire_due()
    paused = await store.pause_schedule("tick", missed=Missed.DROP)
    assert (await store.get_schedule("tick")).missed is Missed.DROP
    assert paused.missed is Missed.DROP
    clock.advance(30 * MINUTE + timedelta(seconds=1))

    resumed = await store.resume_schedule("tick")
    assert resumed.next_run_at == START + 31 * MINUTE
    assert await store.fire_due() == []
    assert await fired_slots(store, "tick") == [START]
    clock.advance(MINUTE)
    [firing] = await store.fire_due()
    assert slots_of([firing]) == [START + 31 * MINUTE]
    assert await fired_slots(store, "tick") == [START, START + 31 * MINUTE]


async def test_a_drop_resume_before_any_slot_fell_due_keeps_the_next_slot(
    store: Store, clock: FakeClock
) -> None:
    await store.upsert_schedule(every_minute(**ALL))
    await store.fire_due()
    await store.pause_schedule("tick", missed=Missed.DROP)
    clock.advance(timedelta(seconds=30))
    resumed = await store.resume_schedule("tick")
    assert resumed.next_run_at == START + MINUTE
    clock.advance(timedelta(seconds=30))
    [firing] = await store.fire_due()
    assert slots_of([firing]) == [START + MINUTE]


@pytest.mark.parametrize("missed", [Missed.QUEUE, Missed.DROP])
async def test_pausing_and_resuming_again_never_fires_a_slot_twice(
    store: Store, clock: FakeClock, missed: Missed
) -> None:
    await store.upsert_schedule(every_minute(**ALL))
    await store.fire_due()
    for _ in range(3):
        await store.pause_schedule("tick", missed=missed)
        clock.advance(3 * MINUTE)
        await store.resume_schedule("tick")
        await store.resume_schedule("tick")  # a second resume changes nothing
        clock.advance(MINUTE)
        await store.fire_due()
        await store.fire_due()
    slots = await fired_slots(store, "tick")
    if missed is Missed.QUEUE:  # every slot, once
        assert slots == [START + k * MINUTE for k in range(13)]
    else:  # each pause lost the slots that fell due during it, up to its resume
        assert slots == [START + k * MINUTE for k in (0, 4, 8, 12)]
