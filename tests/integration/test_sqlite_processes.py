"""Several OS processes on one SQLite file: every job is claimed exactly once, none is lost,
and no caller ever sees "database is locked"."""

from __future__ import annotations

import asyncio
import multiprocessing
import queue
import random
import sqlite3
import traceback
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from rota.domain.job import JobSpec
from rota.domain.job_state import JobState
from rota.store.sqlite import SqliteStore

PROCESSES = 8
JOBS = 5_000
#: Far longer than the test: no lease expires, so a second claim of a job would be a bug.
LEASE = timedelta(minutes=10)


async def _seed(url: str) -> list[int]:
    store = SqliteStore.from_url(url)
    try:
        await store.migrate()
        results = await store.enqueue([JobSpec(kind="noop", payload={"i": i}) for i in range(JOBS)])
        return [result.job.id for result in results]
    finally:
        await store.close()


async def _claim_until_empty(url: str, index: int) -> dict[str, Any]:
    """Claim batches of 1..20 and finish them (complete_many, complete, or heartbeat first)
    until nothing is left; report every (job id, token) taken and the connection's pragmas."""
    rnd = random.Random(index)
    store = SqliteStore.from_url(url)
    taken: list[tuple[int, int]] = []
    lost = 0
    try:
        settings = await store.connection_settings()
        while jobs := await store.claim(
            f"p{index}", queues=["default"], limit=rnd.randint(1, 20), lease=LEASE
        ):
            taken += [(job.id, job.lease.token) for job in jobs]
            leases = [job.lease for job in jobs]
            style = rnd.random()
            if style < 0.2:
                lost += len((await store.heartbeat(leases, lease=LEASE)).lost)
            if style < 0.4:
                for lease in leases:
                    await store.complete(lease)  # raises LeaseLost if fenced out
            else:
                lost += len(await store.complete_many(leases))
            if style > 0.9:
                await store.counts()  # a reader among the writers
    finally:
        await store.close()
    return {"taken": taken, "lost": lost, "settings": settings}


def _process(url: str, index: int, start: Any, results: Any) -> None:
    try:
        start.wait(timeout=60)  # all processes begin claiming together
        results.put(("ok", index, asyncio.run(_claim_until_empty(url, index))))
    except BaseException:  # report everything, "database is locked" included
        results.put(("error", index, traceback.format_exc()))


@pytest.mark.slow
def test_processes_sharing_one_file_claim_every_job_exactly_once(tmp_path: Path) -> None:
    path = tmp_path / "shared" / "rota.db"
    url = f"sqlite:///{path}"
    enqueued = asyncio.run(_seed(url))

    context = multiprocessing.get_context("spawn")
    start = context.Barrier(PROCESSES)
    results = context.Queue()
    processes = [
        context.Process(target=_process, args=(url, index, start, results), daemon=True)
        for index in range(PROCESSES)
    ]
    for process in processes:
        process.start()
    reports = []
    try:
        for _ in processes:
            reports.append(results.get(timeout=100))
    except queue.Empty:
        pytest.fail(f"only {len(reports)} of {PROCESSES} processes reported")
    finally:
        for process in processes:
            process.join(timeout=30)

    errors = [report for report in reports if report[0] == "error"]
    assert errors == [], "\n".join(str(error[2]) for error in errors)
    assert all(process.exitcode == 0 for process in processes)

    taken = [pair for _, _, report in reports for pair in report["taken"]]
    ids = [job_id for job_id, _ in taken]
    tokens = [token for _, token in taken]
    assert len(ids) == JOBS and sorted(ids) == sorted(enqueued), "each job claimed exactly once"
    assert len(set(tokens)) == JOBS, "every claim got its own fencing token"
    for _, index, report in reports:
        mine = [token for _, token in report["taken"]]
        assert mine == sorted(mine), f"process {index}: tokens must increase"
        assert report["lost"] == 0
        assert report["settings"]["journal_mode"] == "wal"
        assert report["settings"]["busy_timeout"] == 10_000
    assert len({index for _, index, report in reports if report["taken"]}) > 1

    with sqlite3.connect(path) as raw:
        states = dict(raw.execute("SELECT state, count(*) FROM rota_jobs GROUP BY state"))
        assert states == {JobState.SUCCEEDED.value: JOBS}
        history = raw.execute(
            "SELECT count(*), count(DISTINCT job_id), min(outcome), max(outcome) FROM rota_attempts"
        ).fetchone()
        assert history == (JOBS, JOBS, "succeeded", "succeeded")
        assert raw.execute("PRAGMA journal_mode").fetchone() == ("wal",)
