"""The app that worker processes of the integration tests run.

Started as ``python -m rota worker --app tests.support.workerapp:app`` from the repository
root, with ``ROTA_DATABASE_URL`` naming the store and ``ROTA_TEST_HISTORY`` the history file
every handler records its executions to (see ``tests.support.history``). Only worker
subprocesses import this module: it reads its environment at import time.

Payloads that are durations are seconds. ``pill`` SIGKILLs its own worker. ``sleep`` also takes ``{"s": first, "then": later}``:
``first`` seconds the first time the job is claimed, ``then`` seconds every later time (a job
that is slow only until its worker dies under it).
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from datetime import timedelta
from typing import Any

import rota
from rota import JobContext, Permanent, RetryPolicy, Snooze
from rota.domain.job_state import Outcome
from tests.support.history import HISTORY_ENV, START, Recorder, Stopped

app = rota.App(os.environ["ROTA_DATABASE_URL"])
recorder = Recorder(os.environ[HISTORY_ENV])

#: Failed attempts come back after 0.1 s, so retries do not dominate a test's duration.
FAST_RETRY = RetryPolicy(base=timedelta(milliseconds=100), jitter=0)


async def seconds(ctx: JobContext, payload: Any) -> float:
    if not isinstance(payload, dict):
        return float(payload or 0)
    first = float(payload.get("s", 0))
    # The first claim of the job is the only attempt on record (an attempt given back by a
    # release or snooze keeps its number, so ctx.attempt cannot tell).
    if len(await app.store.attempts(ctx.job_id)) <= 1:
        return first
    return float(payload.get("then", first))


@app.job("sleep", retry=FAST_RETRY)
async def sleep(ctx: JobContext, payload: Any) -> None:
    with recorder.execution(ctx):
        await asyncio.sleep(await seconds(ctx, payload))


@app.job("block_loop", retry=FAST_RETRY)
async def block_loop(ctx: JobContext, payload: Any) -> None:
    """On attempt 1, blocks the worker's event loop for ``payload`` seconds without awaiting
    first (time.sleep in an async def): a stand-in for a process pause or a long stall, during
    which the worker can neither heartbeat nor start the jobs it has just claimed."""
    with recorder.execution(ctx):
        if ctx.attempt == 1:
            time.sleep(float(payload))  # noqa: ASYNC251 (blocking the loop is the point)


@app.job("sync_sleep", retry=FAST_RETRY)
def sync_sleep(ctx: JobContext, payload: Any) -> None:
    """A plain def, run in the worker's thread pool; stops when the context is cancelled."""
    with recorder.execution(ctx):
        if ctx.cancelled.wait(float(payload)):
            raise Stopped("cancelled while sleeping")


@app.job("sync_sleep_ignoring_cancel", retry=FAST_RETRY)
def sync_sleep_ignoring_cancel(ctx: JobContext, payload: Any) -> None:
    """A plain def that never looks at ``ctx.cancelled``, like most blocking library code."""
    with recorder.execution(ctx):
        time.sleep(float(payload))


@app.job("fail_once", retry=FAST_RETRY)
async def fail_once(ctx: JobContext, payload: Any) -> None:
    with recorder.execution(ctx):
        await asyncio.sleep(float(payload or 0))
        if ctx.attempt == 1:
            raise RuntimeError("attempt 1 fails on purpose")


@app.job("hang_until_cancelled", retry=FAST_RETRY)
async def hang_until_cancelled(ctx: JobContext, payload: Any) -> None:
    with recorder.execution(ctx):
        await asyncio.Event().wait()


@app.job("permanent", retry=FAST_RETRY)
async def permanent(ctx: JobContext, payload: Any) -> None:
    with recorder.execution(ctx):
        raise Permanent(str(payload or "this job can never succeed"))


@app.job("snooze_once", retry=FAST_RETRY)
async def snooze_once(ctx: JobContext, payload: Any) -> None:
    """Snoozes for ``payload`` seconds the first time it runs, then succeeds."""
    with recorder.execution(ctx):
        history = await app.store.attempts(ctx.job_id)
        if not any(attempt.outcome is Outcome.SNOOZED for attempt in history):
            raise Snooze(float(payload))


@app.job("huge_result", retry=FAST_RETRY)
async def huge_result(ctx: JobContext, payload: Any) -> int:
    """Returns an integer of 5,001 digits: more than Python turns into text (4,300)."""
    with recorder.execution(ctx):
        return 10**5000


@app.job("pill", retry=FAST_RETRY)
async def pill(ctx: JobContext, payload: Any) -> None:
    """A poison pill: kills its own worker process (SIGKILL) as soon as it starts."""
    recorder.record(ctx, START)
    os.kill(os.getpid(), signal.SIGKILL)
