"""The app the chaos tests' worker processes run (``--app tests.support.chaosapp:app``).

Environment: ``ROTA_DATABASE_URL`` (the store, possibly through a chaos proxy),
``ROTA_TEST_HISTORY`` (the shared history file) and ``ROTA_CHAOS_EFFECTS`` (the fenced
downstream store: a ``postgresql://`` URL reached directly, never through the proxy, or a
SQLite file path). ``ROTA_CHAOS_PROBES`` names a directory where ``probe`` jobs write the
worker's ``sys.modules``; ``ROTA_CHAOS_SCHEDULE_EVERY`` (seconds) defines schedule
``chaos-tick``, a ``work`` job per slot; with ``ROTA_CHAOS_SCHEDULE_ALL=1`` it runs every slot
(missed slots all fired, runs may overlap), so exactly one job per slot is expected.

Kinds:

- ``work`` ``{"s": seconds, "fail": bool}``: sleep, fail attempt 1 if ``fail``, then write the
  job's effect to the fenced store with ``ctx.fencing_token``. The write is accepted only if
  the token is higher than the one stored (insert if absent); every write, accepted or not,
  is logged, so the test can prove a lower token was never accepted after a higher one.
- ``poison``: always fails permanently. ``long`` ``{"s": seconds}``: sleeps past the lease,
  kept alive by heartbeats. ``probe``: records ``sys.modules``.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import rota
from rota import JobContext, Permanent, RetryPolicy
from tests.support.chaosfleet import PROBES_ENV, SCHEDULE, SCHEDULE_ALL_ENV, SCHEDULE_ENV
from tests.support.effects import EFFECTS_ENV, FencedEffects
from tests.support.history import HISTORY_ENV, Recorder

app = rota.App(os.environ["ROTA_DATABASE_URL"])
recorder = Recorder(os.environ[HISTORY_ENV])
FAST_RETRY = RetryPolicy(base=timedelta(milliseconds=100), jitter=0)

effects = FencedEffects(os.environ.get(EFFECTS_ENV, ""))


@app.job("work", retry=FAST_RETRY, max_attempts=10)
async def work(ctx: JobContext, payload: Any) -> None:
    with recorder.execution(ctx):
        await asyncio.sleep(float(payload.get("s", 0)))
        if payload.get("fail") and ctx.attempt == 1:
            raise RuntimeError("attempt 1 fails on purpose")
        await effects.write(str(ctx.job_id), ctx.attempt, ctx.fencing_token)


@app.job("poison", retry=FAST_RETRY, max_attempts=3)
async def poison(ctx: JobContext, payload: Any) -> None:
    with recorder.execution(ctx):
        raise Permanent("poison: this job can never succeed")


@app.job("long", retry=FAST_RETRY, max_attempts=10)
async def long_running(ctx: JobContext, payload: Any) -> None:
    with recorder.execution(ctx):
        await asyncio.sleep(float(payload.get("s", 0)))


@app.job("probe", retry=FAST_RETRY)
async def probe(ctx: JobContext, payload: Any) -> None:
    folder = Path(os.environ[PROBES_ENV])
    (folder / f"{payload['name']}.json").write_text(json.dumps(sorted(sys.modules)))


every = os.environ.get(SCHEDULE_ENV)
if every:
    every_slot = {"misfire": "all", "overlap": "allow"} if os.environ.get(SCHEDULE_ALL_ENV) else {}
    app.schedule(SCHEDULE, kind="work", every=float(every), payload={"s": 0.01}, **every_slot)
