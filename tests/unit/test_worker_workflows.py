"""A worker runs a workflow's next job as soon as its own completion released it, even on a
store that pushes nothing (SQLite) and with a poll an hour away."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import rota
from rota import App, JobContext, WorkerSettings
from rota.testing import drain_sync


async def test_a_chain_runs_through_without_waiting_for_a_poll(tmp_path: Path) -> None:
    app = App(f"sqlite:///{tmp_path / 'chain.db'}")
    ran: list[int] = []
    done = asyncio.Event()

    @app.job("step")
    async def step(ctx: JobContext, payload: Any) -> int:
        ran.append(payload["n"])
        if payload["n"] == 4:
            done.set()
        return payload["n"]

    async with app:
        await app.store.migrate()
        run = await app.workflows.enqueue(
            rota.chain(*(app.spec("step", {"n": n}) for n in range(5)))
        )
        worker = app.worker(WorkerSettings(name="w", poll=timedelta(hours=1)))
        running = asyncio.create_task(worker.run())
        try:
            await asyncio.wait_for(done.wait(), timeout=30)  # a hang guard, not a timing
        finally:
            worker.request_stop()
            await running
        assert ran == [0, 1, 2, 3, 4]
        assert (await app.workflows.get(run.id)).count(rota.JobState.SUCCEEDED) == 5


def test_sync_code_enqueues_after_parents_and_whole_workflows(tmp_path: Path) -> None:
    """What a Django or Flask view does without a loop: ``enqueue_sync(depends_on=...)`` and
    ``enqueue_workflow_sync`` write the same waiting jobs the async calls do."""
    app = App(f"sqlite:///{tmp_path / 'sync.db'}")

    @app.job("step")
    async def step(ctx: JobContext, payload: Any) -> Any:
        return payload

    try:
        run = app.workflows.enqueue_sync(
            rota.chord([app.spec("step", {"n": 1}), app.spec("step", {"n": 2})], app.spec("step"))
        )
        assert [job.state for job in run.jobs] == [
            rota.JobState.PENDING,
            rota.JobState.PENDING,
            rota.JobState.WAITING,
        ]
        assert sorted(run.edges) == [
            (run.job_ids[0], run.job_ids[2], "cancel"),
            (run.job_ids[1], run.job_ids[2], "cancel"),
        ]
        after = app.enqueue_sync(
            "step", {"n": 3}, depends_on=[run.job_ids[2]], on_parent_failure="run"
        )
        assert (after.job.state, after.job.waiting_on, after.job.workflow) == (
            rota.JobState.WAITING,
            1,
            run.id,
        )
        with pytest.raises(rota.InvalidJob, match="unknown parent job 999999"):
            app.enqueue_sync("step", depends_on=[999999])
        with pytest.raises(rota.InvalidJob, match="depends_on"):
            app.enqueue_sync("step", depends_on=[])
        with pytest.raises(rota.InvalidInput, match="unknown kind"):
            app.workflows.enqueue_sync(rota.chain(rota.JobSpec("nope")))
        assert drain_sync(app) == 4
        assert app.results.get_sync(after.job.id, timeout=5) == {"n": 3}
    finally:
        asyncio.run(app.close())
