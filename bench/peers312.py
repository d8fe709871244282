"""The peers that run in the Python 3.12 venv (``make setup-bench312``): Oban for Python (which
needs Python 3.12 or later) and DBOS, beside it so that both peers of this side run alike.

Two entries, both started by the harness with the venv's python, from the repository's root:

- ``python -m bench.peers312 worker oban|dbos``: one worker process, as ``bench.worker`` is for
  the others (the same ``BENCH_*`` environment: ``BENCH_DSN``, ``BENCH_CONCURRENCY``,
  ``BENCH_READY``, ``BENCH_RECORD``, ``BENCH_SLEEP_S``; ``BENCH_POLL_S`` for DBOS's queue).
  Oban runs as ``oban start`` runs it (uvloop when installed, a psycopg pool of 10), its queue
  limit ``BENCH_CONCURRENCY``; DBOS is launched with its queue's ``worker_concurrency`` unset
  (no limit, its default) and ``polling_interval_sec`` ``BENCH_POLL_S``. SIGTERM stops it.
- ``python -m bench.peers312 serve oban|dbos DSN``: the harness's side of the peer (schema,
  enqueues), answering one JSON request a line on stdin with one JSON line on stdout. The
  timed loops (single enqueues, the bulk call) run here and return their own seconds, so no
  round trip between the two processes is in a figure; an enqueue for pickup latency returns
  the instant its call returned (its commit).

Nothing here imports rota: the venv holds the peers and what they need.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

SYSTEMS = ("oban", "dbos")


def _mark_ready() -> None:
    ready = os.environ.get("BENCH_READY")
    if ready:
        Path(ready).write_text(str(os.getpid()))


def _write_records(records: list[Any]) -> None:
    target = os.environ.get("BENCH_RECORD")
    if target and records:
        Path(target).write_text(json.dumps(records))


# ---------------------------------------------------------------------- workers


async def _oban_worker(dsn: str, limit: int) -> None:
    from oban import Oban

    from bench import oban_app

    pool = await Oban.create_pool(dsn)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    oban = Oban(pool=pool, queues={oban_app.QUEUE: limit}, shutdown_grace_period=5.0)
    try:
        await oban.start()
        _mark_ready()
        await stop.wait()
        await oban.stop()
    finally:
        await pool.close()
    _write_records(oban_app.RECORDS)


def _run_oban_worker(dsn: str, limit: int) -> None:
    """On the loop ``oban start`` picks: uvloop when installed."""
    try:
        from uvloop import run
    except ImportError:
        from asyncio import run
    run(_oban_worker(dsn, limit))


def _run_dbos_worker(dsn: str, poll_s: float) -> None:
    from dbos import DBOS

    from bench import dbos_app

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    dbos_app.launch_jobs(dsn, None, poll_s)
    _mark_ready()
    stop.wait()
    DBOS.destroy(workflow_completion_timeout_sec=5)
    _write_records(dbos_app.RECORDS)


# ---------------------------------------------------------------------- the harness's side


class ObanSide:
    """Schema and enqueues through Oban's own API, on a pool of its own (client mode)."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.oban: Any = None
        self.pool: Any = None

    async def install(self) -> None:
        from oban import Oban
        from oban.schema import install

        pool = await Oban.create_pool(self.dsn, min_size=1, max_size=1)
        try:
            await install(pool)
        finally:
            await pool.close()

    async def open(self) -> None:
        from oban import Oban

        self.pool = await Oban.create_pool(self.dsn, min_size=1, max_size=2)
        self.oban = Oban(pool=self.pool)

    async def close(self) -> None:
        if self.pool is not None:
            await self.pool.close()

    async def enqueue_one(self, kind: str, seq: int) -> None:
        from bench import oban_app

        await self.oban.enqueue(oban_app.job(kind, seq))

    async def enqueue_many(self, kind: str, count: int) -> None:
        from bench import oban_app

        await self.oban.enqueue_many(oban_app.job(kind, seq) for seq in range(count))


class DbosSide:
    """Schema and enqueues through ``DBOSClient``, DBOS's API for enqueuing from outside the
    application. It has no bulk enqueue: a bulk is its ``enqueue_in_transaction``, once per
    workflow, in one transaction of a SQLAlchemy engine of our own, so that every workflow of
    the batch becomes visible at one commit as a bulk insert's rows do."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.client: Any = None
        self.engine: Any = None

    async def install(self) -> None:
        def launched_once() -> None:
            from dbos import DBOS

            from bench import dbos_app

            dbos_app.launch_jobs(self.dsn, None, None)
            DBOS.destroy()

        await asyncio.to_thread(launched_once)

    async def open(self) -> None:
        import sqlalchemy
        from dbos import DBOSClient

        self.client = await asyncio.to_thread(DBOSClient, system_database_url=self.dsn)
        rest = self.dsn.partition("://")[2]
        self.engine = sqlalchemy.create_engine(f"postgresql+psycopg://{rest}", pool_size=1)

    async def close(self) -> None:
        if self.engine is not None:
            self.engine.dispose()
        if self.client is not None:
            await asyncio.to_thread(self.client.destroy)

    def _enqueue(self, kind: str, seq: int, delay_s: float | None = None) -> None:
        from bench.dbos_app import JOBS_QUEUE

        options: dict[str, Any] = {"workflow_name": kind, "queue_name": JOBS_QUEUE}
        if delay_s is not None:
            options["delay_seconds"] = delay_s
        self.client.enqueue(options, seq)

    async def enqueue_one(self, kind: str, seq: int) -> None:
        self._enqueue(kind, seq)

    async def enqueue_many(self, kind: str, count: int) -> None:
        from bench.dbos_app import JOBS_QUEUE

        options: dict[str, Any] = {"workflow_name": kind, "queue_name": JOBS_QUEUE}
        with self.engine.begin() as conn:
            for seq in range(count):
                self.client.enqueue_in_transaction(conn, options, seq)

    async def enqueue_delayed(self, kind: str) -> None:
        """One workflow due in a day: the row ``Dbos.load_future`` copies."""
        self._enqueue(kind, 0, delay_s=86_400.0)


async def _serve(system: str, dsn: str) -> None:
    side: Any = ObanSide(dsn) if system == "oban" else DbosSide(dsn)
    loop = asyncio.get_running_loop()
    out = sys.stdout
    while True:
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if not line:
            break
        request = json.loads(line)
        op = request.pop("op")
        try:
            answer = await _answer(side, op, request)
        except Exception as error:  # the harness reports it as the scenario's failure
            out.write(json.dumps({"error": f"{type(error).__name__}: {error}"}) + "\n")
        else:
            out.write(json.dumps({"ok": answer}) + "\n")
        out.flush()
        if op == "close":
            break


async def _answer(side: Any, op: str, args: dict[str, Any]) -> Any:
    if op == "install":
        await side.install()
    elif op == "open":
        await side.open()
    elif op == "close":
        await side.close()
    elif op == "enqueue_one":
        await side.enqueue_one(args["kind"], args["seq"])
        return time.time()
    elif op == "enqueue_bulk":
        started = time.perf_counter()
        await side.enqueue_many(args["kind"], args["count"])
        return time.perf_counter() - started
    elif op == "enqueue_singles":
        started = time.perf_counter()
        for seq in range(args["count"]):
            await side.enqueue_one(args["kind"], seq)
        return time.perf_counter() - started
    elif op == "enqueue_delayed":
        await side.enqueue_delayed(args["kind"])
    elif op == "versions":
        from importlib import metadata

        return {name: metadata.version(name) for name in ("oban", "dbos")} | {
            "python": sys.version.split()[0]
        }
    else:
        raise ValueError(f"unknown request {op!r}")
    return None


def main() -> None:
    if len(sys.argv) < 3 or sys.argv[1] not in ("worker", "serve") or sys.argv[2] not in SYSTEMS:
        raise SystemExit("usage: python -m bench.peers312 worker|serve oban|dbos [DSN]")
    role, system = sys.argv[1], sys.argv[2]
    if role == "serve":
        # The client's start-up lines would go to the harness's progress: warnings only.
        logging.getLogger("dbos").setLevel(logging.WARNING)
        asyncio.run(_serve(system, sys.argv[3]))
        return
    dsn = os.environ["BENCH_DSN"]
    if system == "oban":
        _run_oban_worker(dsn, int(os.environ.get("BENCH_CONCURRENCY", "100")))
    else:
        _run_dbos_worker(dsn, float(os.environ.get("BENCH_POLL_S", "0.1")))


if __name__ == "__main__":
    main()
