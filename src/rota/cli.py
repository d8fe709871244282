"""The `rota` command line: parse flags (each with a ``ROTA_*`` twin), build, delegate.

Data goes to stdout, logs and progress to stderr. Bad input prints one line and exits 2; an
unreachable store exits 1; no traceback reaches the user unless ROTA_DEBUG is set.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Awaitable, Callable, Coroutine
from datetime import datetime
from typing import Any, TypeVar

import click

from rota.config import DEFAULT_DATABASE_URL, load_app, parse_duration, parse_instant
from rota.domain.errors import (
    InvalidInput,
    MigrationsPending,
    NotFound,
    RotaError,
    StateConflict,
    StoreUnavailable,
)
from rota.domain.job import Attempt, Job, JobState
from rota.observability.logging import configure_logging

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])

LOG_LEVELS = click.Choice(["debug", "info", "warning", "error"], case_sensitive=False)


def database_option(default: str | None = DEFAULT_DATABASE_URL) -> Callable[[F], F]:
    return click.option(
        "--database-url",
        envvar="ROTA_DATABASE_URL",
        default=default,
        show_default=default is not None,
        help="memory://, sqlite:///path.db or postgresql://... (prefer the environment "
        "variable for URLs with a password: command lines are visible to other users).",
    )


def json_option(func: F) -> F:
    return click.option(
        "--json", "as_json", is_flag=True, envvar="ROTA_JSON", help="Print JSON instead of a table."
    )(func)


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option(
    "--log-level",
    envvar="ROTA_LOG_LEVEL",
    type=LOG_LEVELS,
    default="info",
    show_default=True,
    help="Log level for rota and your handlers.",
)
@click.option(
    "--log-format",
    envvar="ROTA_LOG_FORMAT",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="Logs as text lines or JSON objects.",
)
@click.version_option(package_name="rota", prog_name="rota")
def cli(log_level: str, log_format: str) -> None:
    """rota: a distributed job scheduler.

    Jobs run now, at a time, or on a schedule; workers claim them with leases, heartbeats and
    fencing tokens. SQLite by default, PostgreSQL for a fleet.
    """
    configure_logging(log_level, log_format)


# ---------------------------------------------------------------------- worker


@cli.command()
@click.option(
    "--app",
    "app_ref",
    envvar="ROTA_APP",
    required=True,
    metavar="MODULE:ATTR",
    help="Your rota.App, e.g. myproject.jobs:app.",
)
@database_option(default=None)
@click.option(
    "--concurrency",
    envvar="ROTA_CONCURRENCY",
    type=click.IntRange(1, 10_000),
    default=10,
    show_default=True,
    help="Jobs run at once by this worker.",
)
@click.option(
    "--queues",
    envvar="ROTA_QUEUES",
    metavar="A,B",
    help="Queues to claim from (default: the queues of the app's kinds).",
)
@click.option("--name", envvar="ROTA_WORKER_NAME", help="Worker name (default host:pid:random).")
@click.option(
    "--lease-seconds",
    envvar="ROTA_LEASE_SECONDS",
    type=click.FloatRange(0.1),
    default=30.0,
    show_default=True,
    help="How long a claim lasts without a heartbeat.",
)
@click.option(
    "--heartbeat-seconds",
    envvar="ROTA_HEARTBEAT_SECONDS",
    type=click.FloatRange(0.05),
    default=10.0,
    show_default=True,
    help="Seconds between heartbeats.",
)
@click.option(
    "--poll-seconds",
    envvar="ROTA_POLL_SECONDS",
    type=click.FloatRange(0.01),
    help="Longest sleep between claims (default by backend).",
)
@click.option(
    "--rescue-seconds",
    envvar="ROTA_RESCUE_SECONDS",
    type=click.FloatRange(0.05),
    default=5.0,
    show_default=True,
    help="Seconds between rescues of expired leases.",
)
@click.option(
    "--shutdown-timeout",
    envvar="ROTA_SHUTDOWN_TIMEOUT",
    type=click.FloatRange(0),
    default=30.0,
    show_default=True,
    help="Seconds running jobs get to finish after SIGTERM before being released.",
)
def worker(
    app_ref: str,
    database_url: str | None,
    concurrency: int,
    queues: str | None,
    name: str | None,
    lease_seconds: float,
    heartbeat_seconds: float,
    poll_seconds: float | None,
    rescue_seconds: float,
    shutdown_timeout: float,
) -> None:
    """Run a worker for your app's kinds until SIGTERM or SIGINT.

    The first signal stops claiming, lets running jobs finish within --shutdown-timeout and
    hands the rest back (the attempt is not counted); a second signal exits at once.
    """
    app = load_app(app_ref)
    if database_url:
        app.with_database(database_url)
    options: dict[str, Any] = {
        "name": name,
        "queues": _split(queues),
        "concurrency": concurrency,
        "lease": lease_seconds,
        "heartbeat": heartbeat_seconds,
        "poll": poll_seconds,
        "rescue": rescue_seconds,
        "shutdown_timeout": shutdown_timeout,
    }

    async def run() -> bool:
        stopped: list[Any] = []
        try:
            await app.run_worker(handle_signals=True, ready=stopped.append, **options)
        finally:
            await app.close()
        return bool(stopped and stopped[0].aborted)

    aborted = _run(run())
    # Sync handlers still running in threads cannot be interrupted; do not wait for them.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(1 if aborted else 0)


# ---------------------------------------------------------------------- migrate / check


@cli.command()
@database_option()
@click.option("--check", is_flag=True, help="Only report; exit 1 if migrations are pending.")
def migrate(database_url: str, check: bool) -> None:
    """Apply the database migrations (safe to run from several places at once)."""
    from rota.store import open_store, redact_url

    async def run() -> list[str]:
        store = open_store(database_url)
        try:
            return await (store.pending_migrations() if check else store.migrate())
        finally:
            await store.close()

    names = _run(run())
    where = redact_url(database_url)
    if check:
        if names:
            click.echo(f"pending migrations on {where}: {', '.join(names)}", err=True)
            sys.exit(1)
        click.echo(f"{where} is up to date", err=True)
    else:
        click.echo(f"applied {', '.join(names)}" if names else f"{where} is up to date", err=True)


@cli.command()
@database_option()
@click.option(
    "--app",
    "app_ref",
    envvar="ROTA_APP",
    metavar="MODULE:ATTR",
    help="Also check that your app loads.",
)
def check(database_url: str, app_ref: str | None) -> None:
    """Check the database is reachable and migrated (and the app loads)."""
    from rota.store import open_store, redact_url

    if app_ref:
        app = load_app(app_ref)
        click.echo(f"app {app_ref}: kinds {', '.join(app.registry.kinds()) or '(none)'}")

    async def run() -> tuple[datetime, list[str]]:
        store = open_store(database_url)
        try:
            return await store.now(), await store.pending_migrations()
        finally:
            await store.close()

    now, pending = _run(run())
    click.echo(f"database {redact_url(database_url)}: reachable, clock {now.isoformat()}")
    if pending:
        raise MigrationsPending(f"migrations pending: {', '.join(pending)} (run `rota migrate`)")
    click.echo("schema: up to date")


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

    async def run(client: Client) -> Any:
        [result] = await client.enqueue_many([spec])
        return result

    result = _with_client(database_url, run)
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
    page = _with_client(database_url, lambda c: c.list_jobs(filter, cursor=cursor, limit=limit))
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

    async def run(client: Any) -> tuple[Job, list[Attempt]]:
        return await client.get(job_id), await client.attempts(job_id)

    job, attempts = _with_client(database_url, run)
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
    job = _with_client(database_url, lambda c: c.retry(job_id, max_attempts=max_attempts))
    click.echo(f"job {job.id} is pending again")


@jobs.command("cancel")
@click.argument("job_id", type=int)
@database_option()
def jobs_cancel(job_id: int, database_url: str) -> None:
    """Cancel a pending or running job (a running handler is stopped at its next heartbeat)."""
    job = _with_client(database_url, lambda c: c.cancel(job_id))
    click.echo(f"job {job.id} cancelled")


@cli.command()
@database_option()
@json_option
def workers(database_url: str, as_json: bool) -> None:
    """List registered workers and their last heartbeat."""
    listed = _with_client(database_url, lambda c: c.workers())
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


# ---------------------------------------------------------------------- plumbing


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


def _split(text: str | None) -> list[str] | None:
    if not text:
        return None
    return [part.strip() for part in text.split(",") if part.strip()]


def _reject_constant(name: str) -> Any:
    raise InvalidInput(f"--payload: {name} is not valid JSON")


def _run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


def _with_client(database_url: str, use: Callable[[Any], Awaitable[T]]) -> T:
    from rota.client import Client
    from rota.store import open_store

    async def run() -> T:
        store = open_store(database_url)
        try:
            if await store.pending_migrations():
                await _migrate_if_embedded(store, database_url)
            return await use(Client(store))
        finally:
            await store.close()

    return _run(run())


async def _migrate_if_embedded(store: Any, database_url: str) -> None:
    if database_url.startswith(("sqlite:", "memory:")):
        await store.migrate()
    else:
        raise MigrationsPending("the database needs migrations: run `rota migrate`")


def main() -> None:
    """Entry point: run the CLI and turn every error into one line and an exit code."""
    try:
        cli.main(prog_name="rota", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except click.ClickException as error:
        error.show()
        sys.exit(error.exit_code)
    except (InvalidInput, NotFound, StateConflict) as error:
        click.echo(f"error: {error}", err=True)
        sys.exit(2)
    except (StoreUnavailable, MigrationsPending, RotaError) as error:
        click.echo(f"error: {error}", err=True)
        sys.exit(1)
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception as error:  # the last line of defence: one line, no traceback
        if os.environ.get("ROTA_DEBUG"):
            raise
        click.echo(
            f"internal error: {type(error).__name__}: {error} (set ROTA_DEBUG=1 for details)",
            err=True,
        )
        sys.exit(1)
