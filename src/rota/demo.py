"""The demo app, ``rota.demo:app``: what `rota serve` runs when no --app is given (the
walkthrough's jobs), on ``rota.db`` in the working directory. Other commands take it as any
app: ``rota enqueue email --app rota.demo:app`` gets the demo kinds' attempts.

``email`` takes 300 ms; ``flaky`` fails 60% of the time; ``slow`` runs 6 s, longer than the
demo's 3 s lease, kept alive by heartbeats, reporting its progress each second and returning
how long it took; ``crash`` abandons its first attempt as if its
worker had died, so the lease runs out and another worker takes over as attempt 2; ``report``
runs every 15 s on a schedule.
"""

from __future__ import annotations

import asyncio
import random
from datetime import timedelta
from typing import Any

from rota.app import App
from rota.config import DEFAULT_DATABASE_URL
from rota.domain.errors import Abandon
from rota.runtime.context import JobContext

#: How --app names the demo app.
DEMO_APP = "rota.demo:app"

#: The demo's worker timing: short enough to watch recovery happen.
DEMO_LEASE = timedelta(seconds=3)
DEMO_HEARTBEAT = timedelta(seconds=1)
DEMO_RESCUE = timedelta(seconds=1)


def add_demo_kinds(app: App) -> App:
    """Register the demo kinds (and the report schedule) on ``app``."""

    @app.job("email", max_attempts=3)
    async def email(ctx: JobContext, payload: Any) -> None:
        await asyncio.sleep(0.3)

    @app.job("flaky", max_attempts=4)
    async def flaky(ctx: JobContext, payload: Any) -> None:
        await asyncio.sleep(0.2)
        if random.random() < 0.6:
            raise RuntimeError("upstream returned 503")

    @app.job("slow", max_attempts=3)
    async def slow(ctx: JobContext, payload: Any) -> dict[str, int]:
        for second in range(6):
            await ctx.progress(second / 6, message=f"second {second + 1} of 6")
            await asyncio.sleep(1)
        return {"seconds": 6}

    @app.job("crash", max_attempts=3)
    async def crash(ctx: JobContext, payload: Any) -> None:
        await asyncio.sleep(0.2)
        if ctx.attempt == 1:
            raise Abandon("simulated worker crash")

    @app.job("report", max_attempts=3)
    async def report(ctx: JobContext, payload: Any) -> None:
        await asyncio.sleep(0.5)

    schedule = getattr(app, "schedule", None)
    if schedule is not None:
        schedule("report", kind="report", every=timedelta(seconds=15))
    return app


#: The demo app (``--app rota.demo:app``); its URL is resolved against the working directory
#: when the module is first imported.
app = add_demo_kinds(App(DEFAULT_DATABASE_URL))
