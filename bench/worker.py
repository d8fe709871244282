"""One worker process of one system, as ``python -m bench.worker rota|pgqueuer|procrastinate|dbos``.

Started and stopped (SIGTERM) by the harness. Settings come from the environment:
``BENCH_DSN``, ``BENCH_CONCURRENCY``, ``BENCH_CLAIM_BATCH`` (rota), ``BENCH_BATCH_SIZE``
(PgQueuer), ``BENCH_POOL_SIZE`` (Procrastinate); ``BENCH_TRACE``, a file for the timing
points of ``bench.pickup_trace`` (rota and PgQueuer). Each system runs its own worker the way its
documentation says to run it in production: rota's ``App.run_worker`` on the loop ``rota worker``
picks (uvloop with ``rota[speed]``), PgQueuer's supervisor on uvloop as ``pgq run`` does,
Procrastinate's ``App.run_worker_async``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
from pathlib import Path

from bench import apps
from rota.runtime import loops


def _env_int(name: str, default: int) -> int:
    return int(os.environ.get(name, default))


async def run_rota() -> None:
    app = apps.rota_app
    concurrency = _env_int("BENCH_CONCURRENCY", 100)
    extra: dict[str, object] = {}
    fair = os.environ.get("BENCH_FAIR")
    if fair is not None:
        from bench.scenarios.fairness import fairness_setting

        setting = fairness_setting()
        if setting is not None:
            extra[setting] = fair == "1"
    try:
        await app.run_worker(
            handle_signals=True,
            **extra,
            ready=lambda worker: apps.mark_ready(),
            concurrency=concurrency,
            claim_batch=_env_int("BENCH_CLAIM_BATCH", min(concurrency, 1000)),
            shutdown_timeout=float(os.environ.get("BENCH_SHUTDOWN_S", "5")),
        )
    finally:
        await app.close()


def run_pgqueuer() -> None:
    from datetime import timedelta

    import pgqueuer
    from pgqueuer.adapters.cli.cli import asyncio_run

    concurrency = os.environ.get("BENCH_MAX_TASKS")
    asyncio_run(
        pgqueuer.run(
            apps.pgqueuer_factory,
            batch_size=_env_int("BENCH_BATCH_SIZE", 100),
            max_concurrent_tasks=int(concurrency) if concurrency else None,
            dequeue_timeout=timedelta(seconds=30),
        )
    )


async def run_procrastinate() -> None:
    concurrency = _env_int("BENCH_CONCURRENCY", 20)
    app = apps.procrastinate_app(apps.DSN, _env_int("BENCH_POOL_SIZE", concurrency + 2))
    async with app.open_async():
        apps.mark_ready()
        await app.run_worker_async(concurrency=concurrency, install_signal_handlers=True)


def run_dbos() -> None:
    """DBOS launched in this process, dequeuing its queue until SIGTERM (bench.durable)."""
    import signal
    import threading

    from bench import dbos_app

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    dbos_app.launch(apps.DSN)
    apps.mark_ready()
    stop.wait()
    from dbos import DBOS

    DBOS.destroy(workflow_completion_timeout_sec=5)


def main() -> None:
    system = sys.argv[1]
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    trace = os.environ.get("BENCH_TRACE")
    if trace:
        from bench import pickup_trace

        pickup_trace.install(system)
    if system == "rota":
        # The loop `rota worker` runs on: uvloop when installed (`rota[speed]`; the bench's
        # extras install it, as PgQueuer's `pgq run` picks it too), asyncio's otherwise.
        loops.run(run_rota())
    elif system == "pgqueuer":
        run_pgqueuer()
    elif system == "procrastinate":
        asyncio.run(run_procrastinate())
    elif system == "dbos":
        run_dbos()
    else:
        raise SystemExit(f"unknown system {system!r}")
    record = os.environ.get("BENCH_RECORD")
    if record and apps.RECORDS:
        Path(record).write_text(json.dumps(apps.RECORDS))
    if trace:
        pickup_trace.write(trace)


if __name__ == "__main__":
    main()
