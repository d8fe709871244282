"""The app of the durable jobs' worker processes (``--app tests.support.durableapp:app``).

Environment: ``ROTA_DATABASE_URL`` (the store), ``ROTA_TEST_HISTORY`` (the shared history file
of executions, ``tests.support.history``) and ``ROTA_DURABLE_RECORD``: the external record every
step's execution is written to, with its own connection outside rota's tables (a
``postgresql://`` URL, or a SQLite file path), before the step returns.

Kinds:

- ``steps`` ``{"steps": n, "s": seconds, "kill_at": k}``: n steps named ``step-1``...; each
  sleeps ``s`` seconds, then records (job, step, token, pid) externally and returns its number.
  With ``kill_at``, step k SIGKILLs its worker the first time it runs for the job (when the
  record holds no execution of it yet), after recording. Step 2 of every job (when there are
  two or more) writes its effect through ``ctx.transaction()`` into ``durable_tx`` in rota's
  own database, committed with its checkpoint.
- ``tx_pause``: one step whose ``ctx.transaction()`` inserts (job, token) into ``durable_tx``
  and, on attempt 1, blocks its worker's loop for ``payload`` seconds before the step returns
  (a process paused inside the transaction, with its write not yet committed).
- ``sleep_then`` ``{"s": seconds}``: a durable sleep, then success.
- ``wait_then`` ``{"key": k, "timeout": seconds}``: returns the signal's data.
- ``wait_or_not`` ``{"key": k, "timeout": seconds}``: returns the signal's data, or
  ``"timed out"`` when the wait's deadline came first (the documented ``WaitTimeout``, caught).
"""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import rota
from rota import JobContext, RetryPolicy, WaitTimeout
from tests.support.durablerecord import RECORD_ENV, read_record
from tests.support.history import HISTORY_ENV, Recorder

app = rota.App(os.environ["ROTA_DATABASE_URL"])
recorder = Recorder(os.environ[HISTORY_ENV])
FAST_RETRY = RetryPolicy(base=timedelta(milliseconds=100), jitter=0)
TARGET = os.environ.get(RECORD_ENV, "")


class _Record:
    """The external record, written on a connection of this process's own."""

    def __init__(self, target: str) -> None:
        self.target = target
        self._pg: Any = None
        self._lock = asyncio.Lock()

    async def write(self, job: int, step: str, token: int) -> None:
        if self.target.startswith("postgresql://"):
            import psycopg

            async with self._lock:
                if self._pg is None or self._pg.closed:
                    self._pg = await psycopg.AsyncConnection.connect(
                        self.target, autocommit=True, connect_timeout=5
                    )
                await self._pg.execute(
                    "INSERT INTO durable_record (job, step, token, pid) VALUES (%s, %s, %s, %s)",
                    [job, step, token, os.getpid()],
                )
            return
        await asyncio.to_thread(self._write_sqlite, job, step, token)

    def _write_sqlite(self, job: int, step: str, token: int) -> None:
        conn = sqlite3.connect(self.target, timeout=30)
        try:
            with conn:
                conn.execute(
                    "INSERT INTO durable_record (job, step, token, pid) VALUES (?, ?, ?, ?)",
                    (job, step, token, os.getpid()),
                )
        finally:
            conn.close()

    def ran(self, job: int, step: str) -> bool:
        """Whether an execution of ``step`` of ``job`` is recorded (from any process)."""
        return any(j == job and s == step for j, s, _, _ in read_record(self.target))


record = _Record(TARGET)


def _insert_tx() -> str:
    if app.database_url.startswith("sqlite"):
        return "INSERT INTO durable_tx (job, token) VALUES (?, ?)"
    return "INSERT INTO durable_tx (job, token) VALUES (%s, %s)"


@app.job("steps", retry=FAST_RETRY, max_attempts=20)
async def steps(ctx: JobContext, payload: Any) -> int:
    with recorder.execution(ctx):
        total = 0
        for number in range(1, int(payload["steps"]) + 1):
            total += int(await ctx.step(f"step-{number}", _step, ctx, number, payload))
        return total


async def _step(ctx: JobContext, number: int, payload: Any) -> int:
    name = f"step-{number}"
    await asyncio.sleep(float(payload.get("s", 0)))
    kill = payload.get("kill_at") == number and not await asyncio.to_thread(
        record.ran, ctx.job_id, name
    )
    await record.write(ctx.job_id, name, ctx.fencing_token)
    if kill:
        os.kill(os.getpid(), signal.SIGKILL)
    if number == 2:
        async with ctx.transaction() as conn:
            await conn.execute(_insert_tx(), (ctx.job_id, ctx.fencing_token))
    return number


@app.job("tx_pause", retry=FAST_RETRY, max_attempts=5)
async def tx_pause(ctx: JobContext, payload: Any) -> str:
    with recorder.execution(ctx):

        async def book() -> str:
            async with ctx.transaction() as conn:
                await conn.execute(_insert_tx(), (ctx.job_id, ctx.fencing_token))
            Path(os.environ[HISTORY_ENV] + f".inside-{ctx.attempt}").write_text("")  # noqa: ASYNC240 (a marker for the test, once)
            if ctx.attempt == 1:
                # Paused inside the transaction: its insert is written, not committed.
                time.sleep(float(payload))  # noqa: ASYNC251 (a stalled process is the point)
            return "booked"

        return str(await ctx.step("book", book))


@app.job("sleep_then", retry=FAST_RETRY)
async def sleep_then(ctx: JobContext, payload: Any) -> str:
    with recorder.execution(ctx):
        await ctx.sleep(timedelta(seconds=float(payload["s"])))
        return "woke"


@app.job("wait_then", retry=FAST_RETRY)
async def wait_then(ctx: JobContext, payload: Any) -> Any:
    with recorder.execution(ctx):
        return await ctx.wait_for(payload["key"], timeout=timedelta(seconds=payload["timeout"]))


@app.job("wait_or_not", retry=FAST_RETRY, max_attempts=20)
async def wait_or_not(ctx: JobContext, payload: Any) -> Any:
    with recorder.execution(ctx):
        try:
            return await ctx.wait_for(payload["key"], timeout=timedelta(seconds=payload["timeout"]))
        except WaitTimeout:
            return "timed out"


@app.job("quick", retry=FAST_RETRY)
async def quick(ctx: JobContext, payload: Any) -> str:
    with recorder.execution(ctx):
        return "done"
