"""Schedules fired by several worker processes at once (TESTPLAN T27), on SQLite and PostgreSQL:
exactly one job per slot and no slot missing, though a firer is SIGKILLed half way; and
``overlap=skip`` keeps a slow job's runs from ever overlapping.

Every worker runs the schedule firer; nothing coordinates them but the store. Waiting is a
deadline loop that reads the store, never a fixed sleep followed by an assertion; the 60-second
window itself is what the test is about.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from datetime import datetime, timedelta
from itertools import pairwise
from pathlib import Path
from typing import TypeVar

import pytest

from rota.domain.job import Job
from rota.domain.job_state import JobState
from rota.store import JobFilter, Store
from tests.support.scheduleapp import SLOW_SECONDS

pytestmark = pytest.mark.slow

T = TypeVar("T")
REPO_ROOT = Path(__file__).resolve().parents[2]
PROCESSES = 4
WINDOW_S = 60.0
OVERLAP_WINDOW_S = 10.0
#: Short lease and heartbeat, so the job a killed worker held is rescued within seconds.
WORKER_FLAGS = [
    "--concurrency=4",
    "--lease-seconds=2",
    "--heartbeat-seconds=0.5",
    "--rescue-seconds=0.5",
    "--poll-seconds=0.1",
    "--shutdown-timeout=5",
]


class Workers:
    """`rota worker` processes of one test, each known by the Popen that started it."""

    def __init__(self, database_url: str, directory: Path) -> None:
        self.database_url = database_url
        self.directory = directory
        self.processes: list[subprocess.Popen[bytes]] = []

    def start(self, app_ref: str, name: str) -> subprocess.Popen[bytes]:
        env = {
            **os.environ,
            "ROTA_DATABASE_URL": self.database_url,
            "PYTHONPATH": os.pathsep.join([str(REPO_ROOT / "src"), str(REPO_ROOT)]),
            "PYTHONUNBUFFERED": "1",
        }
        with (self.directory / f"{name}.stderr").open("wb") as stderr:
            process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "rota",
                    "worker",
                    "--app",
                    app_ref,
                    "--name",
                    name,
                    *WORKER_FLAGS,
                ],
                cwd=REPO_ROOT,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
            )
        self.processes.append(process)
        return process

    def stderr(self, index: int) -> str:
        return (self.directory / f"w{index}.stderr").read_text(errors="replace")

    async def stop(self) -> list[int | None]:
        """SIGTERM every live worker and wait for it to exit; the exit codes."""
        for process in self.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        await eventually(
            lambda: all(process.poll() is not None for process in self.processes),
            within_s=30,
            what="the workers to exit after SIGTERM",
        )
        return [process.returncode for process in self.processes]

    def reap(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=10)


@pytest.fixture
def workers(database_url: str, tmp_path: Path) -> Iterator[Workers]:
    fleet = Workers(database_url, tmp_path)
    try:
        yield fleet
    finally:
        fleet.reap()


async def eventually(condition: Callable[[], T | Awaitable[T]], *, within_s: float, what: str) -> T:
    """The first truthy ``condition()``, re-checked every 0.1 s; fails after ``within_s``."""
    deadline = time.monotonic() + within_s
    while True:
        value = condition()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return value  # type: ignore[return-value]
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {within_s:g} s waiting for {what}")
        await asyncio.sleep(0.1)


async def jobs_of(store: Store, schedule: str) -> list[Job]:
    jobs: list[Job] = []
    cursor: str | None = None
    while True:
        page = await store.list_jobs(JobFilter(schedule=schedule), cursor=cursor, limit=500)
        jobs += page.jobs
        if page.next_cursor is None:
            return sorted(jobs, key=lambda job: job.slot_at or job.created_at)
        cursor = page.next_cursor


async def slot_grid(store: Store, schedule: str, first: datetime, last: datetime) -> list[datetime]:
    """Every slot of the schedule's stored rule from ``first`` to ``last``."""
    rule = (await store.get_schedule(schedule)).rule
    grid = [first]
    while grid[-1] < last:
        grid.append(rule.next_after(grid[-1]))
    return grid


@pytest.mark.timeout(180)
async def test_four_firing_workers_one_killed_enqueue_every_slot_exactly_once(
    store: Store, workers: Workers
) -> None:
    for index in range(PROCESSES):
        workers.start("tests.support.scheduleapp:app", f"w{index}")
    await eventually(
        lambda: jobs_of(store, "every-1s"), within_s=60, what="the first run of every-1s"
    )

    started = time.monotonic()
    killed = False
    while (elapsed := time.monotonic() - started) < WINDOW_S:
        if not killed and elapsed >= WINDOW_S / 2:
            workers.processes[0].kill()  # SIGKILL: no cleanup, whatever it was doing
            killed = True
        assert all(p.poll() is None for p in workers.processes[1:]), "a worker died on its own"
        await asyncio.sleep(0.5)
    assert workers.processes[0].wait(timeout=10) == -signal.SIGKILL
    codes = await workers.stop()
    assert codes[1:] == [0] * (PROCESSES - 1)

    for name, every, at_least in (("every-1s", 1, 50), ("every-7s", 7, 7)):
        jobs = await jobs_of(store, name)
        slots = [job.slot_at for job in jobs if job.slot_at is not None]
        assert len(slots) == len(jobs) == len(set(slots)), f"{name}: a slot has two jobs"
        assert slots == await slot_grid(store, name, slots[0], slots[-1]), f"{name}: gap"
        assert all(b - a == timedelta(seconds=every) for a, b in pairwise(slots))
        assert len(slots) >= at_least, f"{name}: only {len(slots)} slots in {WINDOW_S:g} s"
        # Runs that came due well before the end all finished, the killed worker's included.
        settled = [
            job
            for job in jobs
            if job.slot_at and job.slot_at < slots[-1] - 5 * timedelta(seconds=every)
        ]
        assert {job.state for job in settled} <= {JobState.SUCCEEDED}, name
    runners = {job.worker for job in await jobs_of(store, "every-1s")}
    assert len(runners) > 1, "the runs were spread over several workers"
    for index in range(PROCESSES):
        log = workers.stderr(index)
        for sign in ("Traceback", "UniqueViolation", "IntegrityError", "ERROR", "locked"):
            assert sign not in log, f"w{index}: {sign} in its log"


@pytest.mark.timeout(120)
async def test_a_slow_job_on_a_faster_schedule_never_runs_twice_at_once(
    store: Store, workers: Workers
) -> None:
    for index in range(3):
        workers.start("tests.support.scheduleapp:overlap_app", f"w{index}")
    await eventually(
        lambda: jobs_of(store, "slow-every-1s"), within_s=60, what="the first slow run"
    )
    started = time.monotonic()
    while time.monotonic() - started < OVERLAP_WINDOW_S:
        assert all(p.poll() is None for p in workers.processes), "a worker died"
        await asyncio.sleep(0.5)
    assert await workers.stop() == [0, 0, 0]

    jobs = await jobs_of(store, "slow-every-1s")
    runs = sorted(
        (job.started_at, job.finished_at)
        for job in jobs
        if job.started_at is not None and job.finished_at is not None
    )
    assert len(runs) >= 2, runs
    for (_, finished), (next_started, _) in pairwise(runs):
        assert next_started >= finished, f"two runs overlapped: {runs}"
    for started_at, finished_at in runs:
        assert finished_at - started_at >= timedelta(seconds=SLOW_SECONDS * 0.9)
    # A slot fires only once the previous run is over: the 1-second slots in between skipped.
    slots = [job.slot_at for job in jobs if job.slot_at is not None]
    assert all(b - a >= timedelta(seconds=SLOW_SECONDS) for a, b in pairwise(slots))
