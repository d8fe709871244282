"""On PostgreSQL a firer sleeps until the next slot (up to half a minute) and is woken by a
notification when any process creates, changes or resumes a schedule."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

import rota
from rota.domain.schedule import Rule, ScheduleSpec
from rota.runtime.scheduler import PUSHED_MAX_WAIT
from rota.store import JobFilter, open_store
from tests.support.processes import eventually

pytestmark = pytest.mark.postgres


async def test_a_schedule_created_elsewhere_fires_without_waiting_out_the_sleep(
    pg_url: str,
) -> None:
    app = rota.App(pg_url)

    @app.job("tick")
    async def tick(ctx: rota.JobContext, payload: object) -> None:
        return None

    async with app:
        assert app.store.pushes_schedule_changes
        firer = app.schedules.scheduler()
        await firer.tick()  # no schedule yet: it would now sleep its longest
        assert firer.interval_s() == PUSHED_MAX_WAIT.total_seconds()
        worker = asyncio.create_task(app.run_worker(concurrency=2))
        other = open_store(pg_url)  # another process's store
        try:
            await eventually(lambda: app.store.list_workers(), what="the worker registered")
            now = await other.now()
            # The first slot comes one period after the anchor, long before the firer,
            # asleep since it found no schedule, would look again on its own.
            soon = Rule.every(timedelta(seconds=1), anchor=now)
            await other.create_schedule(ScheduleSpec(name="soon", kind="tick", rule=soon))

            async def fired() -> bool:
                page = await other.list_jobs(JobFilter(schedule="soon"))
                return bool(page.jobs)

            # Far less than the firer's longest sleep: only the notification explains it.
            await eventually(fired, within_s=PUSHED_MAX_WAIT.total_seconds() / 3, what="a run")
        finally:
            await other.close()
            worker.cancel()
            with pytest.raises(asyncio.CancelledError):
                await worker
