"""Schedules that start workflows: each slot writes a whole graph, built by code
registered under the schedule's name, in the transaction that claims the slot, so a slot gets
one graph however many firers run; overlap and the last outcome follow the whole workflow."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from rota.domain.errors import InvalidJob, StateConflict
from rota.domain.job import JobSpec
from rota.domain.job_state import JobState
from rota.domain.schedule import Misfire, Overlap, Rule, ScheduleSpec
from rota.domain.schedule_state import Firing
from rota.domain.workflow import ScheduledRun, Workflow, chord
from rota.store import JobFilter, Store
from rota.testing import FakeClock
from tests.contract.helpers import LEASE, claim_one

MINUTE = timedelta(minutes=1)
START = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)  # FakeClock's default start


def nightly(**fields: Any) -> ScheduleSpec:
    fields.setdefault("rule", Rule.every(MINUTE))
    return ScheduleSpec(name="nightly", kind="nightly", workflow=True, **fields)


def report(run: ScheduledRun) -> Workflow:
    """Two parts and a total; the slot and the payload reach every job."""
    stamp = {"slot": run.slot_at.isoformat(), **run.payload}
    return chord([JobSpec("part", payload={"n": 1, **stamp}), JobSpec("part")], JobSpec("total"))


BUILDERS = {"nightly": report}


async def graphs(store: Store) -> dict[int, list[Any]]:
    """Every workflow in the store: its jobs' (kind, state), by workflow id."""
    page = await store.list_jobs(JobFilter(), limit=500)
    found: dict[int, list[Any]] = {}
    for job in sorted(page.jobs, key=lambda j: j.id):
        if job.workflow is not None:
            found.setdefault(job.workflow, []).append((job.kind, job.state))
    return found


async def finish_all(store: Store) -> None:
    while (job := await claim_one(store)) is not None:
        await store.complete(job.lease)


async def test_each_slot_writes_the_whole_graph_its_first_job_holding_the_slot(
    store: Store, clock: FakeClock
) -> None:
    await store.upsert_schedule(nightly(payload={"to": "ops"}))
    [firing] = await store.fire_due(workflows=BUILDERS)
    [result] = firing.inserted
    head = result.job
    assert (head.schedule, head.slot_at, head.kind) == ("nightly", START, "part")
    assert head.payload == {"n": 1, "slot": START.isoformat(), "to": "ops"}
    assert head.workflow == head.id
    jobs, edges = await store.workflow(head.id)
    assert [(job.kind, job.state) for job in jobs] == [
        ("part", JobState.PENDING),
        ("part", JobState.PENDING),
        ("total", JobState.WAITING),
    ]
    assert [job.schedule for job in jobs] == ["nightly", None, None]
    assert len(edges) == 2
    stored = await store.get_schedule("nightly")
    assert (stored.last_job_id, stored.last_run_at) == (head.id, START)
    assert stored.next_run_at == START + MINUTE
    assert stored.last_job_state is JobState.RUNNING  # the workflow is unfinished
    assert stored.spec.workflow is True


async def test_overlap_skip_waits_for_the_whole_workflow_not_its_first_job(
    store: Store, clock: FakeClock
) -> None:
    await store.upsert_schedule(nightly())
    [first] = await store.fire_due(workflows=BUILDERS)
    parts = await store.claim("w", queues=["default"], limit=2, lease=LEASE)
    assert await store.complete_many([job.lease for job in parts]) == []
    clock.advance(MINUTE)
    [skipped] = await store.fire_due(workflows=BUILDERS)
    assert (skipped.jobs, skipped.skipped_overlap) == ((), (START + MINUTE,))
    await finish_all(store)  # the total: the workflow is done
    assert (await store.get_schedule("nightly")).last_job_state is JobState.SUCCEEDED
    clock.advance(MINUTE)
    [fired] = await store.fire_due(workflows=BUILDERS)
    assert [r.job.slot_at for r in fired.inserted] == [START + 2 * MINUTE]
    assert len(await graphs(store)) == 2
    assert first.inserted[0].job.id != fired.inserted[0].job.id


async def test_a_firer_without_the_builder_passes_the_schedule_over(
    store: Store, clock: FakeClock
) -> None:
    await store.upsert_schedule(nightly())
    await store.upsert_schedule(ScheduleSpec(name="plain", kind="ping", rule=Rule.every(MINUTE)))
    firings = await store.fire_due()
    assert [f.schedule for f in firings] == ["plain"]
    assert (await store.get_schedule("nightly")).next_run_at == START
    # It does not keep a firer without the builder busy either.
    assert await store.next_fire_at() == START + MINUTE
    assert await store.next_fire_at(workflows=["nightly"]) == START
    [fired] = await store.fire_due(workflows=BUILDERS)
    assert fired.schedule == "nightly" and len(fired.inserted) == 1


async def test_a_failing_builder_skips_its_slot_and_the_others_still_fire(
    store: Store, clock: FakeClock
) -> None:
    def broken(run: ScheduledRun) -> Workflow:
        raise RuntimeError("no data yet")

    await store.upsert_schedule(nightly())
    await store.upsert_schedule(ScheduleSpec(name="plain", kind="ping", rule=Rule.every(MINUTE)))
    firings = {f.schedule: f for f in await store.fire_due(workflows={"nightly": broken})}
    assert firings["nightly"].jobs == ()
    assert firings["nightly"].failed == (
        (START, "schedule 'nightly': its builder raised RuntimeError: no data yet"),
    )
    assert len(firings["plain"].inserted) == 1
    assert (await store.get_schedule("nightly")).next_run_at == START + MINUTE
    assert await graphs(store) == {}

    def not_a_graph(run: ScheduledRun) -> Any:
        return [JobSpec("part")]

    clock.advance(MINUTE)
    firings = {f.schedule: f for f in await store.fire_due(workflows={"nightly": not_a_graph})}
    [(slot, why)] = firings["nightly"].failed
    assert (slot, why) == (
        START + MINUTE,
        "schedule 'nightly': workflow: the builder must return a rota.Workflow",
    )


async def test_run_now_writes_a_graph_off_the_grid_and_needs_the_builder(
    store: Store, clock: FakeClock
) -> None:
    await store.upsert_schedule(nightly(rule=Rule.every(timedelta(hours=1))))
    await store.fire_due(workflows=BUILDERS)
    clock.advance(MINUTE)
    with pytest.raises(StateConflict, match="builder this process does not define"):
        await store.trigger_schedule("nightly")
    with pytest.raises(InvalidJob, match="has no jobs"):
        await store.trigger_schedule("nightly", workflows={"nightly": lambda run: Workflow()})
    assert len(await graphs(store)) == 1, "nothing written by the refused runs"
    result = await store.trigger_schedule("nightly", workflows=BUILDERS)
    assert (result.job.slot_at, result.job.kind) == (START + MINUTE, "part")
    assert len((await store.workflow(result.job.id))[0]) == 3
    stored = await store.get_schedule("nightly")
    assert stored.last_job_id == result.job.id
    assert stored.next_run_at == START + timedelta(hours=1)


async def test_a_slot_taken_by_a_run_now_gets_no_second_graph(
    store: Store, clock: FakeClock
) -> None:
    await store.upsert_schedule(nightly(overlap=Overlap.ALLOW))
    taken = await store.trigger_schedule("nightly", workflows=BUILDERS)  # at START: the slot
    [firing] = await store.fire_due(workflows=BUILDERS)
    [result] = firing.jobs
    assert (result.duplicate, result.job.id) == (True, taken.job.id)
    assert len(await graphs(store)) == 1


async def test_catching_up_writes_one_graph_per_missed_slot(store: Store, clock: FakeClock) -> None:
    await store.upsert_schedule(nightly(misfire=Misfire.ALL, overlap=Overlap.ALLOW))
    clock.advance(3 * MINUTE)
    [firing] = await store.fire_due(workflows=BUILDERS)
    assert [r.job.slot_at for r in firing.inserted] == [START + n * MINUTE for n in range(4)]
    found = await graphs(store)
    assert len(found) == 4
    assert all([kind for kind, _ in jobs] == ["part", "part", "total"] for jobs in found.values())


async def test_concurrent_firers_write_exactly_one_graph_per_slot(
    store: Store, second_store: Store | None, clock: FakeClock
) -> None:
    firers = [store, store] if second_store is None else [store, store, second_store, second_store]
    await store.upsert_schedule(
        nightly(rule=Rule.every(timedelta(seconds=1)), misfire=Misfire.ALL, overlap=Overlap.ALLOW)
    )
    fired: list[Firing] = []
    for _ in range(10):
        rounds = await asyncio.gather(*(f.fire_due(workflows=BUILDERS) for f in firers))
        fired += [firing for batch in rounds for firing in batch]
        clock.advance(timedelta(milliseconds=700))
    page = await store.list_jobs(JobFilter(schedule="nightly"), limit=500)
    slots = sorted(job.slot_at for job in page.jobs if job.slot_at is not None)
    assert slots == [START + timedelta(seconds=n) for n in range(len(slots))]
    assert len(slots) >= 6
    found = await graphs(store)
    assert len(found) == len(slots), "one graph per slot, none without its slot"
    assert all(len(jobs) == 3 for jobs in found.values()), "every graph written whole"
    inserted = sorted(r.job.slot_at for f in fired for r in f.inserted if r.job.slot_at)
    assert inserted == slots, "each slot was inserted by exactly one firer"
