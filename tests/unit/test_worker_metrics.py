"""/metrics from a worker process: the process metrics under rota serve's names, without the
database gauges a worker never sets (they would read 0: "nothing waiting, nothing dead")."""

from __future__ import annotations

import asyncio
import socket
import urllib.error
import urllib.request
from typing import Any

import pytest

from rota import App, JobContext, Permanent, Worker
from rota.domain.errors import InvalidInput
from rota.observability.metrics import Metrics, serve_metrics


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        body: bytes = response.read()
    return body.decode()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def family_names(metrics: Metrics) -> set[str]:
    return {family.name for family in metrics.registry.collect()}


def test_every_metric_is_either_a_process_metric_or_a_store_gauge() -> None:
    metrics = Metrics()
    process = {family.name for c in metrics.process_metrics for family in c.collect()}
    store = {family.name for c in metrics.store_gauges for family in c.collect()}
    assert not process & store
    assert process | store == family_names(metrics)


async def test_a_worker_serves_its_process_metrics_and_no_store_gauges() -> None:
    app = App("memory://")

    @app.job("hello")
    async def hello(ctx: JobContext, payload: Any) -> None:
        return None

    @app.job("boom")
    async def boom(ctx: JobContext, payload: Any) -> None:
        raise Permanent("no")

    port = free_port()
    started: asyncio.Future[Worker] = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(
        app.run_worker(metrics_port=port, poll=0.05, ready=started.set_result)
    )
    worker = await asyncio.wait_for(started, timeout=30)
    try:
        ok = (await app.enqueue("hello")).job.id
        dead = (await app.enqueue("boom")).job.id
        async with asyncio.timeout(30):
            for job_id in (ok, dead):
                # The worker runs them on this loop: poll the store, bounded by the timeout.
                while not (await app.jobs.get(job_id)).is_terminal:  # noqa: ASYNC110
                    await asyncio.sleep(0.01)
            await worker.wait_for_running()  # counted once its task has ended
        text = await asyncio.to_thread(scrape, port)
    finally:
        worker.request_stop()
        await asyncio.wait_for(task, timeout=30)
        await app.close()

    assert 'rota_jobs_finished_total{kind="hello",outcome="succeeded"} 1.0' in text
    assert 'rota_jobs_finished_total{kind="boom",outcome="failed"} 1.0' in text
    assert 'rota_job_duration_seconds_count{kind="hello",outcome="succeeded"} 1.0' in text
    assert 'rota_job_start_lag_seconds_count{kind="hello"} 1.0' in text
    assert 'rota_claims_total{result="claimed"}' in text
    for gauge in (
        "rota_queue_jobs",
        "rota_dead_jobs",
        "rota_oldest_due_job_age_seconds",
        "rota_workers_alive",
    ):
        assert gauge not in text
    # The server stopped with the worker.
    with pytest.raises(urllib.error.URLError):
        await asyncio.to_thread(scrape, port)


def test_a_port_in_use_is_refused_with_one_clear_error() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(InvalidInput, match=f"could not serve metrics on 127.0.0.1:{port}"):
            serve_metrics(Metrics(), port=port)


def test_port_zero_picks_a_free_port_and_close_frees_it() -> None:
    server = serve_metrics(Metrics(), port=0)
    try:
        assert server.port > 0
        assert "rota_claims_total" in scrape(server.port)
    finally:
        server.close()
