"""`rota worker --metrics-port`: each worker process of a fleet serves what it did, so the
fleet's counters add up to the jobs it ran (rota serve's /metrics only sees its own workers)."""

from __future__ import annotations

import asyncio
import http.client
import re
import socket
import urllib.request
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from rota.domain.job import JobSpec
from rota.domain.job_state import JobState
from rota.store import Store, open_store
from tests.support.processes import Fleet, eventually

pytestmark = pytest.mark.slow

FINISHED = re.compile(r'^rota_jobs_finished_total\{kind="sleep",outcome="succeeded"\} (\S+)$', re.M)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        body: bytes = response.read()
    return body.decode()


def finished(text: str) -> float:
    match = FINISHED.search(text)
    return float(match.group(1)) if match else 0.0


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    store = open_store(f"sqlite:///{tmp_path / 'rota.db'}")
    await store.migrate()
    yield store
    await store.close()


@pytest.fixture
def fleet(store: Store, tmp_path: Path) -> Iterator[Fleet]:
    fleet = Fleet(f"sqlite:///{tmp_path / 'rota.db'}", store, tmp_path)
    try:
        yield fleet
    finally:
        fleet.close()
        print(fleet.logs(tail=50))  # shown by pytest when the test failed


async def test_each_worker_serves_its_own_counters_and_they_add_up(
    fleet: Fleet, store: Store
) -> None:
    ports = {name: free_port() for name in ("a", "b")}
    await fleet.start_ready(
        "a",
        env={
            "ROTA_METRICS_PORT": str(ports["a"]),
            "ROTA_METRICS_ALLOWED_HOSTS": "worker-a.internal",
        },
    )
    await fleet.start_ready("b", env={"ROTA_METRICS_PORT": str(ports["b"])})
    results = await store.enqueue([JobSpec(kind="sleep", payload=0.05) for _ in range(12)])

    async def all_succeeded() -> bool:
        jobs = [await store.get(result.job.id) for result in results]
        return all(job.state is JobState.SUCCEEDED for job in jobs)

    await eventually(all_succeeded, what="the 12 jobs to succeed")

    async def counted() -> bool:
        texts = [await asyncio.to_thread(scrape, port) for port in ports.values()]
        return sum(finished(text) for text in texts) == 12

    # Each process counts a job just after its completion is written.
    await eventually(counted, what="the workers' counters to add up to 12")
    for port in ports.values():
        text = await asyncio.to_thread(scrape, port)
        assert "rota_job_duration_seconds_bucket" in text
        assert "rota_queue_jobs" not in text
    # Scraped by a configured name, an address or localhost; any other name is refused.
    for host, status in (("worker-a.internal", 200), ("localhost", 200), ("evil.example", 421)):
        assert await asyncio.to_thread(status_for, ports["a"], host) == status, host
    assert await asyncio.to_thread(status_for, ports["b"], "worker-a.internal") == 421


async def test_a_metrics_port_that_cannot_be_bound_is_one_line_and_exit_code_2(
    fleet: Fleet,
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        worker = fleet.start("taken", env={"ROTA_METRICS_PORT": str(port)})
        assert await worker.wait_exit() == 2
    assert worker.stderr().strip().splitlines()[-1] == (
        f"error: could not serve metrics on 127.0.0.1:{port} (Address already in use)"
    )
    out_of_range = fleet.start("range", env={"ROTA_METRICS_PORT": "70000"})
    assert await out_of_range.wait_exit() == 2
    assert "70000 is not in the range" in out_of_range.stderr()


def status_for(port: int, host: str) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", "/metrics", headers={"Host": f"{host}:{port}"})
        return conn.getresponse().status
    finally:
        conn.close()
