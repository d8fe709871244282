"""The shop's jobs, on a module-level App exactly as the README defines one."""

from __future__ import annotations

from typing import Any

import rota

app = rota.App("sqlite:///shop.db")

#: What the email handler "sent", for the tests to read.
OUTBOX: list[str] = []


@app.job("welcome", max_attempts=5)
async def welcome(ctx: rota.JobContext, payload: dict[str, Any]) -> None:
    if "@" not in payload["to"]:
        raise rota.Permanent(f"not an email address: {payload['to']!r}")
    OUTBOX.append(f"welcome {payload['to']}")


@app.job("digest")
def digest(ctx: rota.JobContext, payload: dict[str, Any]) -> None:
    OUTBOX.append("digest")


app.schedule("daily-digest", kind="digest", cron="0 8 * * *", timezone="Europe/Berlin")


async def sign_up(email: str) -> rota.EnqueueResult:
    return await app.enqueue("welcome", {"to": email}, unique_key=f"welcome:{email}")


def sign_up_sync(email: str) -> rota.EnqueueResult:
    """What a Flask or Django view would call."""
    return app.enqueue_sync("welcome", {"to": email}, unique_key=f"welcome:{email}")
