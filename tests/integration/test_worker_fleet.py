"""`rota worker --processes N`: a supervisor and its worker processes, for real.

Jobs run in distinct processes; a SIGKILLed child is restarted and its job taken over; SIGTERM
to the supervisor stops every child gracefully (the running job finishes, exit 0); a child is
recycled after --max-jobs-per-child; one /metrics adds up the children's. Workers run with a
1 s lease and fast heartbeats and rescues. Nothing waits a fixed time: each wait polls the
store, the flag folder or the supervisor's log, with a deadline (``eventually``).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from rota.domain.job import JobSpec
from rota.domain.job_state import JobState
from rota.store import Store
from tests.support.processes import REPO_ROOT, eventually

pytestmark = pytest.mark.slow

APP = "tests.support.fleetapp:app"
FLAGS = [
    "--concurrency=1",
    "--lease-seconds=1",
    "--heartbeat-seconds=0.2",
    "--rescue-seconds=0.2",
    "--poll-seconds=0.1",
    "--shutdown-timeout=30",
]


class Supervised:
    """A `rota worker --processes ...` process, its log and its flag folder."""

    def __init__(
        self, database_url: str, directory: Path, *flags: str, command: list[str] | None = None
    ) -> None:
        self.flags = directory / "flags"
        self.flags.mkdir()
        self.log = directory / "supervisor.stderr"
        env = {
            **os.environ,
            "ROTA_DATABASE_URL": database_url,
            "ROTA_TEST_FLAGS": str(self.flags),
            "PYTHONPATH": os.pathsep.join([str(REPO_ROOT / "src"), str(REPO_ROOT)]),
            "PYTHONUNBUFFERED": "1",
        }
        with self.log.open("ab") as stderr:
            self.popen = subprocess.Popen(
                command or [sys.executable, "-m", "rota", "worker", "--app", APP, *FLAGS, *flags],
                cwd=REPO_ROOT,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
            )

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def started(self, job_id: int) -> list[int]:
        """The pids that started ``job_id``."""
        return [int(p.suffix[1:]) for p in self.flags.glob(f"{job_id}.*")]

    def go(self, name: str) -> None:
        (self.flags / name).write_text("go")

    async def exit_code(self) -> int:
        await eventually(lambda: self.popen.poll() is not None, what="the supervisor to exit")
        assert self.popen.returncode is not None
        return self.popen.returncode

    def reap(self) -> None:
        if self.popen.poll() is None:
            self.popen.kill()  # its children die with it (PR_SET_PDEATHSIG)
        self.popen.wait(timeout=10)


@pytest.fixture
def supervised(database_url: str, tmp_path: Path) -> Iterator[list[Supervised]]:
    started: list[Supervised] = []
    yield started
    for each in started:
        each.reap()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        return str(response.read().decode())


def sample(text: str, line: str) -> float | None:
    found = re.search(rf"^{re.escape(line)} (\S+)$", text, re.M)
    return float(found.group(1)) if found else None


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def enqueue(store: Store, kind: str, payload: object = None) -> int:
    [result] = await store.enqueue([JobSpec(kind=kind, payload=payload, max_attempts=5)])
    return result.job.id


async def test_two_processes_a_killed_one_restarted_and_a_graceful_stop(
    store: Store, database_url: str, tmp_path: Path, supervised: list[Supervised]
) -> None:
    port = free_port()
    fleet = Supervised(database_url, tmp_path, "--processes=2", f"--metrics-port={port}")
    supervised.append(fleet)
    first, second = [await enqueue(store, "hold", {"until": "go1"}) for _ in range(2)]

    # Each child runs one job at a time, so the two jobs run in two processes at once.
    await eventually(lambda: fleet.started(first) and fleet.started(second), what="both jobs")
    [killed], [other] = fleet.started(first), fleet.started(second)
    assert killed != other and fleet.popen.pid not in (killed, other)

    def both_running() -> str | None:
        text = scrape(port)
        return text if sample(text, 'rota_jobs_running{kind="hold"}') == 2 else None

    text = await eventually(both_running, what="one /metrics showing both processes' jobs")
    assert sample(text, "rota_worker_processes") == 2

    os.kill(killed, signal.SIGKILL)
    await eventually(
        lambda: f"(pid {killed}) was killed by SIGKILL; restarting" in fleet.text(),
        what="the supervisor to see the child die",
    )
    pids = await eventually(
        lambda: {int(p) for p in re.findall(r"started: pid (\d+)", fleet.text())} - {killed, other},
        what="a restarted child",
    )
    restarted = pids.pop()
    assert alive(restarted)

    fleet.go("go1")

    async def both_done() -> bool:
        return all([(await store.get(j)).state is JobState.SUCCEEDED for j in (first, second)])

    await eventually(both_done, what="both jobs to succeed, the killed one taken over")
    taken_over = await store.get(first)
    assert taken_over.result not in (None, killed)
    assert len(await store.attempts(first)) >= 2
    assert sample(scrape(port), "rota_worker_process_restarts_total") == 1

    # SIGTERM to the supervisor: both children stop claiming, the running job finishes.
    last = await enqueue(store, "hold", {"until": "go2"})
    await eventually(lambda: fleet.started(last), what="the last job to start")
    fleet.popen.send_signal(signal.SIGTERM)
    await eventually(
        lambda: fleet.text().count("stopping: no new claims") >= 2,
        what="both children to stop claiming",
    )
    assert fleet.popen.poll() is None  # still waiting for the running job
    fleet.go("go2")
    assert await fleet.exit_code() == 0
    assert (await store.get(last)).state is JobState.SUCCEEDED
    assert not alive(restarted) and not alive(other)


async def test_a_child_is_recycled_after_max_jobs(
    store: Store, database_url: str, tmp_path: Path, supervised: list[Supervised]
) -> None:
    fleet = Supervised(database_url, tmp_path, "--max-jobs-per-child=2")
    supervised.append(fleet)
    ids = [await enqueue(store, "pid") for _ in range(5)]

    async def results() -> list[int] | None:
        jobs = [await store.get(i) for i in ids]
        done = all(job.state is JobState.SUCCEEDED for job in jobs)
        return [int(job.result) for job in jobs] if done else None  # type: ignore[arg-type]

    ran = collections.Counter(await eventually(results, what="five jobs to succeed"))
    assert len(ran) == 3 and max(ran.values()) == 2, ran
    assert fleet.text().count("recycled: starting a fresh one") >= 2
    for job_id in ids:  # each ran once: a recycle gives back nothing and loses nothing
        assert len(await store.attempts(job_id)) == 1
    fleet.popen.send_signal(signal.SIGINT)
    assert await fleet.exit_code() == 0


async def test_a_child_that_keeps_dying_is_restarted_with_backoff_and_reported(
    caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    from rota.runtime.supervisor import FleetSettings, Supervisor

    caplog.set_level(logging.INFO, "rota.supervisor")
    env = {"ROTA_DATABASE_URL": f"sqlite:///{tmp_path / 'rota.db'}"}
    # The child cannot import its app: it exits 2 as soon as it starts, every time.
    supervisor = Supervisor(
        FleetSettings(app_ref="tests.support.no_such_module:app", processes=1, name="w", env=env)
    )
    running = asyncio.create_task(supervisor.run())

    def deaths() -> list[str]:
        return [r.getMessage() for r in caplog.records if "restarting in" in r.getMessage()]

    await eventually(lambda: len(deaths()) >= 3, what="three deaths")
    first, second, third = deaths()[:3]
    assert "exited with code 2; restarting in 0.5s" in first
    assert "restarting in 1.0s" in second
    assert "keeps dying" in third and "3 times in a row" in third and "in 2.0s" in third
    supervisor.request_stop()
    assert await asyncio.wait_for(running, 30) == 0
    assert supervisor.restarts >= 3


async def test_app_run_worker_with_processes_supervises_the_apps_own_processes(
    store: Store, database_url: str, tmp_path: Path, supervised: list[Supervised]
) -> None:
    """``App.run_worker(processes=2)`` from code finds the App by its module-level name and
    runs it in two worker processes, stopped gracefully by SIGTERM."""
    code = (
        "import asyncio\nfrom tests.support.fleetapp import app\n"
        "asyncio.run(app.run_worker(processes=2, concurrency=1, lease=1, heartbeat=0.2,"
        " rescue=0.2, poll=0.1))\n"
    )
    fleet = Supervised(database_url, tmp_path, command=[sys.executable, "-c", code])
    supervised.append(fleet)
    first, second = [await enqueue(store, "hold", {"until": "go"}) for _ in range(2)]
    await eventually(lambda: fleet.started(first) and fleet.started(second), what="both jobs")
    assert fleet.started(first) != fleet.started(second)
    fleet.popen.send_signal(signal.SIGTERM)
    await eventually(
        lambda: fleet.text().count("stopping: no new claims") >= 2,
        what="both children to stop claiming",
    )
    fleet.go("go")
    assert await fleet.exit_code() == 0
    for job_id in (first, second):
        assert (await store.get(job_id)).state is JobState.SUCCEEDED
