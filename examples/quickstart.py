"""A small rota app: run it with `rota worker --app examples.quickstart:app`.

Enqueue from another shell with
`rota enqueue email --app examples.quickstart:app --payload '{"to": "ada@example.com"}'`,
or from Python with `app.enqueue_sync("email", {...})`.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any

import rota

app = rota.App(os.environ.get("ROTA_DATABASE_URL", "sqlite:///rota.db"))
log = logging.getLogger("examples.quickstart")


@app.job("email", max_attempts=5, timeout=30)
async def send_email(ctx: rota.JobContext, payload: dict[str, Any]) -> None:
    """Pretend to send an email; fail for good on an obviously bad address."""
    to = payload.get("to", "")
    if "@" not in to:
        raise rota.Permanent(f"not an email address: {to!r}")
    await asyncio.sleep(0.1)
    log.info("sent to %s (fencing token %d)", to, ctx.fencing_token)


@app.job("report", queue="reports")
def build_report(ctx: rota.JobContext, payload: dict[str, Any]) -> None:
    """A plain function runs in a thread; it checks for cancellation between steps."""
    for step in range(3):
        if ctx.is_cancelled:
            return
        log.info("report step %d", step)
