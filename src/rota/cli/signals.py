"""`rota signal`: send an event to the durable job waiting for it (``ctx.wait_for``),
recorded in the audit log as the CLI's identity."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import click

from rota.cli.group import Target, cli, json_option, uses_database, with_operator
from rota.cli.terminal import shown
from rota.config import parse_duration, parse_json
from rota.domain.durable import SignalResult, Step, Suspension
from rota.domain.wording import counted


@cli.command()
@click.argument("key")
@uses_database(creates=False)
@click.option(
    "--data",
    envvar="ROTA_SIGNAL_DATA",
    default="null",
    show_default=True,
    help="What the waiting job receives, as JSON (at most 64 KiB).",
)
@click.option(
    "--expire-after",
    envvar="ROTA_EXPIRE_AFTER",
    help="With no job waiting, keep it this long for the next wait (1h, 2d) [default: 1d].",
)
@json_option
def signal(key: str, target: Target, data: str, expire_after: str | None, as_json: bool) -> None:
    """Send an event to KEY: the job whose ctx.wait_for(KEY) began first gets it (once) and is
    due at once; with none waiting, it is kept for the next wait on KEY until it expires."""
    value = parse_json(data)
    keep = parse_duration(expire_after, what="--expire-after") if expire_after else None

    async def go(operator: Any) -> SignalResult:
        result: SignalResult = await operator.signal(key, value, expire_after=keep)
        return result

    result = with_operator(target, go)
    if as_json:
        click.echo(json.dumps(signal_json(result)))
    elif result.delivered_to is not None:
        click.echo(f"delivered to job {result.delivered_to}")
    else:
        expires = result.expires_at.isoformat() if result.expires_at else "?"
        click.echo(f"no job waits for {shown(key)}: kept until {expires}")


def signal_json(result: SignalResult) -> dict[str, Any]:
    return {
        "key": result.key,
        "delivered_to": result.delivered_to,
        "expires_at": _iso(result.expires_at),
    }


def step_json(step: Step) -> dict[str, Any]:
    """A durable job's record as plain JSON values (the HTTP API's shape, with the whole
    result rather than its preview)."""
    duration = step.duration
    return {
        "name": step.name,
        "kind": step.kind.value,
        "state": step.state.value,
        "attempts": step.attempts,
        "started_at": _iso(step.started_at),
        "finished_at": _iso(step.finished_at),
        "duration_seconds": None if duration is None else duration.total_seconds(),
        "wake_at": _iso(step.wake_at),
        "key": step.key,
        "error": step.error,
        "result": step.result,
    }


def suspension_json(found: Suspension | None) -> dict[str, Any] | None:
    if found is None:
        return None
    return {
        "kind": found.kind.value,
        "step": found.step,
        "until": _iso(found.until),
        "key": found.key,
    }


def suspension_line(found: Suspension) -> str:
    until = found.until.isoformat() if found.until else "?"
    if found.key is not None:
        return f"waiting for signal {shown(found.key)} until {until} ({shown(found.step)})"
    return f"sleeping until {until} ({shown(found.step)})"


def step_line(index: int, step: Step) -> str:
    """One record as `rota jobs show` prints it."""
    parts = [f"step {index} {shown(step.name)}: {step.kind.value} {step.state.value}"]
    if step.kind.value == "step":
        parts.append(counted(step.attempts, "attempt"))
    duration = step.duration
    if duration is not None and step.kind.value == "step":
        parts.append(f"took {duration.total_seconds():.3g}s")
    if step.wake_at is not None:
        parts.append(
            f"{'until' if step.kind.value == 'sleep' else 'deadline'} {step.wake_at.isoformat()}"
        )
    if step.key is not None:
        parts.append(f"key {shown(step.key)}")
    line = ", ".join(parts)
    if step.result is not None:
        text = json.dumps(step.result, ensure_ascii=False)
        line += f" -> {shown(text if len(text) <= 120 else text[:117] + '...')}"
    if step.error:
        line += f"\n  error: {shown(step.error)}"
    return line


def _iso(instant: datetime | None) -> str | None:
    return instant.isoformat() if instant is not None else None
