"""A schedule's jobs carry the schedule's own options, priority among them, and a schedule given
a priority of its own is claimed ahead of a backlog of plain jobs that were due before it
(DESIGN C5), on every backend, with fair claims and without."""

from __future__ import annotations

from datetime import timedelta

import pytest

from rota.domain.job import JobSpec
from rota.domain.schedule import Rule, ScheduleSpec
from rota.store import JobFilter, Store
from rota.testing import FakeClock
from tests.contract.helpers import LEASE

MINUTE = timedelta(minutes=1)


async def test_a_fired_job_takes_the_schedules_priority_queue_tenant_and_payload(
    store: Store,
) -> None:
    await store.upsert_schedule(
        ScheduleSpec(
            name="report",
            kind="build",
            rule=Rule.every(MINUTE),
            payload={"format": "pdf"},
            queue="reports",
            priority=7,
            tenant="acme",
            max_attempts=4,
        )
    )
    await store.fire_due()

    [job] = (await store.list_jobs(JobFilter(schedule="report"))).jobs
    assert (job.kind, job.queue, job.priority, job.tenant, job.max_attempts, job.payload) == (
        "build",
        "reports",
        7,
        "acme",
        4,
        {"format": "pdf"},
    )


@pytest.mark.parametrize("fair", [True, False])
async def test_a_schedules_priority_claims_its_job_ahead_of_an_older_backlog(
    store: Store, clock: FakeClock, fair: bool
) -> None:
    # Steady jobs due a minute ago wait in the same queue, of the same tenant (none).
    backlog = await store.enqueue(
        [JobSpec(kind="noop", run_at=clock.now() - MINUTE) for _ in range(20)]
    )
    await store.upsert_schedule(
        ScheduleSpec(name="hourly", kind="tick", rule=Rule.every(MINUTE), priority=5)
    )
    [firing] = await store.fire_due()
    [fired] = firing.jobs

    [first] = await store.claim("w", queues=["default"], limit=1, lease=LEASE, fair=fair)

    assert first.id == fired.job.id, "the schedule's job goes first: priority before run_at"
    assert first.id not in {result.job.id for result in backlog}


@pytest.mark.parametrize("fair", [True, False])
async def test_without_a_priority_a_schedules_job_waits_behind_the_older_backlog(
    store: Store, clock: FakeClock, fair: bool
) -> None:
    backlog = await store.enqueue(
        [JobSpec(kind="noop", run_at=clock.now() - MINUTE) for _ in range(3)]
    )
    await store.upsert_schedule(ScheduleSpec(name="hourly", kind="tick", rule=Rule.every(MINUTE)))
    [firing] = await store.fire_due()
    [fired] = firing.jobs

    jobs = await store.claim("w", queues=["default"], limit=4, lease=LEASE, fair=fair)

    assert [job.id for job in jobs] == [*(result.job.id for result in backlog), fired.job.id]
