"""`rota enqueue`, `rota jobs ...`, `rota workers`: jobs from the command line."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import click

from rota.cli import cli, database_option, json_option, with_client
from rota.config import parse_duration, parse_instant
from rota.domain import blame
from rota.domain.errors import InvalidInput
from rota.domain.job import Attempt, Job, JobState

# ---------------------------------------------------------------------- enqueue and jobs


@cli.command()
@click.argument("kind")
@database_option()
@click.option(
    "--payload",
    envvar="ROTA_PAYLOAD",
    default="{}",
    show_default=True,
    help="The job's payload as JSON.",
)
@click.option("--delay", envvar="ROTA_DELAY", help="Run after a delay: 30s, 5m, 1h30m.")
@click.option("--at", "at", envvar="ROTA_AT", help="Run at an ISO 8601 time with offset.")
@click.option("--queue", envvar="ROTA_QUEUE", help="Queue (default: default).")
@click.option("--priority", envvar="ROTA_PRIORITY", type=int, help="Higher runs first (-100..100).")
@click.option(
    "--unique-key", envvar="ROTA_UNIQUE_KEY", help="At most one active job holds this key."
)
@click.option("--tenant", envvar="ROTA_TENANT", help="Whose work this is (fairness, limits).")
@click.option("--max-attempts", envvar="ROTA_MAX_ATTEMPTS", type=int, help="Attempts before dead.")
@json_option
def enqueue(
    kind: str,
    database_url: str,
    payload: str,
    delay: str | None,
    at: str | None,
    queue: str | None,
    priority: int | None,
    unique_key: str | None,
    tenant: str | None,
    max_attempts: int | None,
    as_json: bool,
) -> None:
    """Enqueue a job of KIND."""
    from rota.client import Client, job_spec

    if delay and at:
        raise InvalidInput("give --delay or --at, not both")
    try:
        data = json.loads(payload, parse_constant=_reject_constant)
    except ValueError as error:
        raise InvalidInput(f"--payload is not valid JSON: {error}") from None
    spec = job_spec(
        kind,
        data,
        delay=parse_duration(delay, what="--delay") if delay else None,
        run_at=parse_instant(at, what="--at") if at else None,
        queue=queue,
        priority=priority,
        unique_key=unique_key,
        tenant=tenant,
        max_attempts=max_attempts,
    )

    async def go(client: Client) -> Any:
        [result] = await client.enqueue_many([spec])
        return result

    result = with_client(database_url, go)
    if as_json:
        click.echo(json.dumps({**job_json(result.job), "duplicate": result.duplicate}))
    else:
        note = (
            " (duplicate: an active job already holds this unique key)" if result.duplicate else ""
        )
        click.echo(
            f"job {result.job.id} {result.job.state} at {result.job.run_at.isoformat()}{note}"
        )


@cli.group()
def jobs() -> None:
    """List, show, retry and cancel jobs."""


@jobs.command("list")
@database_option()
@click.option(
    "--state",
    envvar="ROTA_STATE",
    type=click.Choice([s.value for s in JobState]),
    multiple=True,
    help="Only jobs in this state (repeatable).",
)
@click.option("--kind", envvar="ROTA_KIND", help="Only jobs of this kind.")
@click.option("--queue", envvar="ROTA_QUEUE", help="Only jobs in this queue.")
@click.option("--tenant", envvar="ROTA_TENANT", help="Only this tenant's jobs.")
@click.option(
    "--limit",
    envvar="ROTA_LIMIT",
    type=click.IntRange(1, 500),
    default=50,
    show_default=True,
    help="How many jobs (newest first).",
)
@click.option("--cursor", envvar="ROTA_CURSOR", help="Continue after a previous page.")
@json_option
def jobs_list(
    database_url: str,
    state: tuple[str, ...],
    kind: str | None,
    queue: str | None,
    tenant: str | None,
    limit: int,
    cursor: str | None,
    as_json: bool,
) -> None:
    """List jobs, newest first."""
    from rota.store import JobFilter

    filter = JobFilter(
        states=frozenset(JobState(s) for s in state) if state else None,
        kind=kind,
        queue=queue,
        tenant=tenant,
    )
    page = with_client(database_url, lambda c: c.list_jobs(filter, cursor=cursor, limit=limit))
    if as_json:
        click.echo(
            json.dumps({"jobs": [job_json(j) for j in page.jobs], "next_cursor": page.next_cursor})
        )
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(box=None, header_style="bold")
    for column in ("id", "kind", "queue", "state", "attempt", "run_at", "worker", "last error"):
        table.add_column(column, overflow="fold")
    for job in page.jobs:
        table.add_row(
            str(job.id),
            job.kind,
            job.queue,
            job.state.value,
            f"{job.attempt}/{job.max_attempts}",
            job.run_at.isoformat(timespec="seconds"),
            job.worker or "",
            (job.last_error or "")[:60],
        )
    console = Console(highlight=False)
    console.print(table)
    if page.next_cursor:
        console.print(f"more: --cursor {page.next_cursor}", style="dim")


@jobs.command("show")
@click.argument("job_id", type=int)
@database_option()
@json_option
def jobs_show(job_id: int, database_url: str, as_json: bool) -> None:
    """Show a job with every attempt."""

    async def go(client: Any) -> tuple[Job, list[Attempt]]:
        return await client.get(job_id), await client.attempts(job_id)

    job, attempts = with_client(database_url, go)
    if as_json:
        click.echo(json.dumps({**job_json(job), "attempts": [attempt_json(a) for a in attempts]}))
        return
    for key, value in job_json(job).items():
        if key != "payload":
            click.echo(f"{key:>13}: {'' if value is None else value}")
    click.echo(f"{'payload':>13}: {json.dumps(job.payload, ensure_ascii=False)}")
    for attempt in attempts:
        click.echo(
            f"attempt {attempt.attempt} token {attempt.token} on {attempt.worker}: "
            f"{attempt.outcome.value} ({attempt.started_at.isoformat()} -> "
            f"{attempt.finished_at.isoformat() if attempt.finished_at else '...'})"
        )
        if attempt.error:
            click.echo(f"  error: {attempt.error}")
        if attempt.traceback:
            click.echo("  " + attempt.traceback.rstrip().replace("\n", "\n  "))


@jobs.command("retry")
@click.argument("job_id", type=int)
@database_option()
@click.option("--max-attempts", type=click.IntRange(1, 1000), help="Raise the attempt limit.")
def jobs_retry(job_id: int, database_url: str, max_attempts: int | None) -> None:
    """Run a dead or cancelled job again, with fresh attempts."""
    job = with_client(database_url, lambda c: c.retry(job_id, max_attempts=max_attempts))
    click.echo(f"job {job.id} is pending again")


@jobs.command("cancel")
@click.argument("job_id", type=int)
@database_option()
def jobs_cancel(job_id: int, database_url: str) -> None:
    """Cancel a pending or running job (a running handler is stopped at its next heartbeat)."""
    job = with_client(database_url, lambda c: c.cancel(job_id))
    click.echo(f"job {job.id} cancelled")


@cli.command()
@database_option()
@json_option
def workers(database_url: str, as_json: bool) -> None:
    """List registered workers and their last heartbeat."""
    listed = with_client(database_url, lambda c: c.workers())
    rows = [
        {
            "name": w.name,
            "host": w.host,
            "pid": w.pid,
            "queues": list(w.queues),
            "concurrency": w.concurrency,
            "running": w.running,
            "started_at": _iso(w.started_at),
            "beat_at": _iso(w.beat_at),
        }
        for w in listed
    ]
    if as_json:
        click.echo(json.dumps(rows))
        return
    for row in rows:
        click.echo(
            f"{row['name']}  queues={','.join(row['queues'])}  running={row['running']}/"
            f"{row['concurrency']}  last beat {row['beat_at']}"
        )
    if not rows:
        click.echo("no workers registered", err=True)


def job_json(job: Job) -> dict[str, Any]:
    """A job as plain JSON values (the same shape as the HTTP API's)."""
    return {
        "id": job.id,
        "kind": job.kind,
        "queue": job.queue,
        "state": job.state.value,
        "priority": job.priority,
        "attempt": job.attempt,
        "max_attempts": job.max_attempts,
        "run_at": _iso(job.run_at),
        "created_at": _iso(job.created_at),
        "started_at": _iso(job.started_at),
        "finished_at": _iso(job.finished_at),
        "worker": job.worker,
        "lease_token": job.lease_token,
        "lease_until": _iso(job.lease_until),
        "tenant": job.tenant,
        "unique_key": job.unique_key,
        "schedule": job.schedule,
        "slot_at": _iso(job.slot_at),
        "timeout_seconds": job.timeout.total_seconds() if job.timeout else None,
        "last_error": job.last_error,
        "crashes": job.crashes,
        "quarantine": blame.quarantine(job),
        "payload": job.payload,
    }


def attempt_json(attempt: Attempt) -> dict[str, Any]:
    return {
        "attempt": attempt.attempt,
        "token": attempt.token,
        "worker": attempt.worker,
        "started_at": _iso(attempt.started_at),
        "finished_at": _iso(attempt.finished_at),
        "outcome": attempt.outcome.value,
        "error": attempt.error,
        "traceback": attempt.traceback,
    }


def _iso(instant: datetime | None) -> str | None:
    return instant.isoformat() if instant is not None else None


def _reject_constant(name: str) -> Any:
    raise InvalidInput(f"--payload: {name} is not valid JSON")
