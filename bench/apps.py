"""The jobs every system runs in the benchmarks, defined once per system with its own API.

Kinds (rota) / entrypoints (PgQueuer) / tasks (Procrastinate), the same four everywhere:

- ``noop``: returns at once (drain, backlog);
- ``record``: notes ``time.time()`` at its start with the payload's ``seq`` (pickup latency);
- ``sleep``: sleeps ``BENCH_SLEEP_S`` seconds asynchronously (worker memory);
- ``ten_ms``: notes its start and tenant, then sleeps 10 ms (fairness).

Recorded starts live in ``RECORDS`` and are written to ``BENCH_RECORD`` by ``bench.worker``
when the worker stops. The handler start and the enqueuer's commit are read from the same
host clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from rota import App

#: Starts noted by the handlers of this process: [tag, time.time()] or richer rows.
RECORDS: list[list[Any]] = []

DSN = os.environ.get("BENCH_DSN", "memory://")


def sleep_s() -> float:
    return float(os.environ.get("BENCH_SLEEP_S", "30"))


def mark_ready() -> None:
    ready = os.environ.get("BENCH_READY")
    if ready:
        Path(ready).write_text(str(os.getpid()))


# ---------------------------------------------------------------------- rota

rota_app = App(DSN)


@rota_app.job("noop")
async def rota_noop(ctx: Any, payload: Any) -> None:
    return None


@rota_app.job("record")
async def rota_record(ctx: Any, payload: Any) -> None:
    RECORDS.append([payload["seq"], time.time()])


@rota_app.job("sleep")
async def rota_sleep(ctx: Any, payload: Any) -> None:
    await asyncio.sleep(sleep_s())


@rota_app.job("ten_ms")
async def rota_ten_ms(ctx: Any, payload: Any) -> None:
    RECORDS.append([ctx.job.tenant, time.time()])
    await asyncio.sleep(0.01)


@rota_app.job("tick")
async def rota_tick(ctx: Any, payload: Any) -> None:
    """A schedule's run: notes the lag from its slot to this start."""
    started = time.time()
    slot = ctx.job.slot_at
    RECORDS.append([ctx.job.schedule, slot.timestamp() if slot else None, started])


def define_schedules(app: App, count: int) -> None:
    """``count`` schedules firing the ``tick`` kind every second (``App.schedule``), or every
    ``BENCH_SCHEDULE_EVERY_S`` with a jitter below ``BENCH_SCHEDULE_JITTER_S``, at the priority
    ``BENCH_SCHEDULE_PRIORITY`` when it is set (the kind's otherwise)."""
    from datetime import timedelta

    every = float(os.environ.get("BENCH_SCHEDULE_EVERY_S", "1"))
    jitter = float(os.environ.get("BENCH_SCHEDULE_JITTER_S", "0"))
    priority = os.environ.get("BENCH_SCHEDULE_PRIORITY")
    for index in range(count):
        app.schedule(
            f"tick-{index:03d}",
            kind="tick",
            every=timedelta(seconds=every),
            jitter=jitter,
            priority=int(priority) if priority else None,
        )


if os.environ.get("BENCH_SCHEDULES") and hasattr(rota_app, "schedule"):
    define_schedules(rota_app, int(os.environ["BENCH_SCHEDULES"]))


# ---------------------------------------------------------------------- PgQueuer


@contextlib.asynccontextmanager
async def pgqueuer_factory() -> AsyncIterator[Any]:
    """What ``pgq run bench.apps:pgqueuer_factory`` would load: a QueueManager on its
    preferred driver (asyncpg; psycopg when asyncpg is not installed)."""
    from pgqueuer import Queries, QueueManager

    driver, close = await pgqueuer_driver(DSN)
    manager = QueueManager(Queries(driver))

    @manager.entrypoint("noop")
    async def noop(job: Any) -> None:
        return None

    @manager.entrypoint("record")
    async def record(job: Any) -> None:
        RECORDS.append([int(job.payload), time.time()])

    @manager.entrypoint("sleep")
    async def sleep(job: Any) -> None:
        await asyncio.sleep(sleep_s())

    mark_ready()
    try:
        yield manager
    finally:
        await close()


async def pgqueuer_driver(dsn: str) -> tuple[Any, Any]:
    """(driver, async close) on one connection, asyncpg if present (PgQueuer's default)."""
    try:
        import asyncpg
        from pgqueuer import AsyncpgDriver

        conn = await asyncpg.connect(dsn)
        return AsyncpgDriver(conn), conn.close
    except ImportError:
        import psycopg
        from pgqueuer import PsycopgDriver

        pconn = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
        return PsycopgDriver(pconn), pconn.close


def pgqueuer_driver_name() -> str:
    try:
        import asyncpg  # noqa: F401 (probing only)

        return "asyncpg"
    except ImportError:
        return "psycopg"


def pgqueuer_loop_name() -> str:
    """The loop ``pgq run`` picks: uvloop when installed (the bench extra installs it)."""
    from pgqueuer.adapters.cli import cli

    return "uvloop" if getattr(cli, "HAS_UVLOOP", False) else "the stock asyncio loop"


# ---------------------------------------------------------------------- Procrastinate


def procrastinate_app(dsn: str, pool_size: int) -> Any:
    import procrastinate

    app = procrastinate.App(
        connector=procrastinate.PsycopgConnector(conninfo=dsn, min_size=1, max_size=pool_size)
    )

    @app.task(name="noop")
    async def noop(**_: Any) -> None:
        return None

    @app.task(name="record")
    async def record(seq: int) -> None:
        RECORDS.append([seq, time.time()])

    @app.task(name="sleep")
    async def sleep(**_: Any) -> None:
        await asyncio.sleep(sleep_s())

    return app


# ---------------------------------------------------------------------- durable jobs


async def _step(number: int) -> int:
    return number


@rota_app.job("ten_steps")
async def rota_ten_steps(ctx: Any, payload: Any) -> int:
    """A durable job of ten no-op steps: one checkpoint each (``bench.durable``)."""
    total = 0
    for number in range(10):
        total += int(await ctx.step(f"s{number}", _step, number))
    return total
