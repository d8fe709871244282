"""A worker runs a workflow's next job as soon as its own completion released it, even on a
store that pushes nothing (SQLite) and with a poll an hour away."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path
from typing import Any

import rota
from rota import App, JobContext, WorkerSettings


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
        run = await app.enqueue_workflow(
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
        assert (await app.workflow(run.id)).count(rota.JobState.SUCCEEDED) == 5
