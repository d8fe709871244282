"""The apps that worker processes of the schedule integration tests run.

Started as ``python -m rota worker --app tests.support.scheduleapp:<app>`` from the repository
root with ``ROTA_DATABASE_URL`` naming the store. Every worker upserts these schedules at start
and fires them; the tests then read the store.

- ``app``: schedules every 1 s and every 7 s with ``misfire=all`` (a firer delayed past a slot
  still enqueues it, so "no slot missing" holds whatever the machine's load) and
  ``overlap=allow`` (a run held by a killed worker must not make later slots skip).
- ``overlap_app``: a 3-second job on a 1-second schedule with ``overlap=skip``.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import rota

DATABASE_URL = os.environ.get("ROTA_DATABASE_URL", "memory://")
SLOW_SECONDS = 3.0

app = rota.App(DATABASE_URL)
app.schedule("every-1s", kind="tick", every=1, misfire="all", overlap="allow")
app.schedule("every-7s", kind="tick", every=7, misfire="all", overlap="allow")


@app.job("tick")
async def tick(ctx: rota.JobContext, payload: Any) -> None:
    return None


overlap_app = rota.App(DATABASE_URL)
overlap_app.schedule("slow-every-1s", kind="slow", every=1)


@overlap_app.job("slow")
async def slow(ctx: rota.JobContext, payload: Any) -> None:
    await asyncio.sleep(SLOW_SECONDS)
