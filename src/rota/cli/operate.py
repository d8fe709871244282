"""`rota worker`, `rota migrate`, `rota check`."""

from __future__ import annotations

import dataclasses
import os
import sys
from datetime import datetime
from typing import Any

import click

from rota.cli.group import (
    Target,
    announce_new_database_url,
    audit_retention_option,
    cli,
    database_option,
    heartbeat_option,
    listen_option,
    open_target,
    run,
    run_workers,
    shutdown_option,
    split,
    uses_database,
)
from rota.cli.terminal import progress
from rota.config import load_app, parse_grace, parse_retention
from rota.domain.errors import MigrationsPending
from rota.domain.wording import counted
from rota.observability.logging import printable

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
@database_option
@listen_option
@click.option(
    "--concurrency",
    envvar="ROTA_CONCURRENCY",
    type=click.IntRange(1, 10_000),
    default=10,
    show_default=True,
    help="Jobs run at once by this worker.",
)
@click.option(
    "--claim-batch",
    envvar="ROTA_CLAIM_BATCH",
    type=click.IntRange(1, 10_000),
    default=100,
    show_default=True,
    help="Most jobs one claim takes (never more than the free slots): larger batches cost the "
    "database less per job when jobs are many and short.",
)
@click.option(
    "--queues",
    envvar="ROTA_QUEUES",
    metavar="A,B",
    help="Queues to claim from (default: the queues of the app's kinds).",
)
@click.option(
    "--name",
    envvar="ROTA_WORKER_NAME",
    help="Worker name: letters, digits and _ . : - (default host:pid:random).",
)
@click.option(
    "--lease-seconds",
    envvar="ROTA_LEASE_SECONDS",
    type=click.FloatRange(0.1),
    default=30.0,
    show_default=True,
    help="How long a claim lasts without a heartbeat.",
)
@heartbeat_option("Seconds between heartbeats.")
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
@shutdown_option(30.0)
@click.option(
    "--retention",
    envvar="ROTA_RETENTION",
    default="7d",
    show_default=True,
    help="Delete finished jobs older than this (e.g. 24h, 30d), or 'off' to keep them.",
)
@click.option(
    "--unrunnable-grace",
    envvar="ROTA_UNRUNNABLE_GRACE",
    default="10m",
    show_default=True,
    help="End a due job of a kind no live worker runs after it waited this long (e.g. 30m), "
    "or 'off' to let it wait for ever.",
)
@audit_retention_option
@click.option(
    "--metrics-port",
    envvar="ROTA_METRICS_PORT",
    type=click.IntRange(0, 65535),
    help="Serve this process's metrics for Prometheus on this port (at /metrics).",
)
@click.option(
    "--metrics-host",
    envvar="ROTA_METRICS_HOST",
    default="127.0.0.1",
    show_default=True,
    help="Address the metrics port listens on (no auth: keep it on a private network).",
)
@click.option(
    "--metrics-allowed-host",
    "metrics_allowed_hosts",
    envvar="ROTA_METRICS_ALLOWED_HOSTS",
    multiple=True,
    metavar="NAME",
    help="A host name Prometheus scrapes the metrics port by (repeatable; the variable takes "
    "names separated by spaces). IP addresses and localhost are always answered; any other "
    "Host gets 421, so a web page cannot read the metrics by DNS rebinding.",
)
@click.option(
    "--processes",
    envvar="ROTA_PROCESSES",
    type=click.IntRange(1, 256),
    help="Run this many worker processes under a supervisor that restarts any that dies "
    "and passes signals on (each runs --concurrency jobs; --metrics-port serves them all).",
)
@click.option(
    "--max-jobs-per-child",
    envvar="ROTA_MAX_JOBS_PER_CHILD",
    type=click.IntRange(1),
    help="Replace a worker process once it has run this many jobs (between jobs, "
    "gracefully); implies --processes 1 when not given.",
)
@click.option(
    "--max-memory-per-child",
    envvar="ROTA_MAX_MEMORY_PER_CHILD",
    type=click.IntRange(1),
    metavar="MIB",
    help="Replace a worker process whose resident memory passed this many MiB after a job "
    "(gracefully); implies --processes 1 when not given.",
)
@click.option("--supervised-fd", type=int, hidden=True)
def worker(
    app_ref: str,
    database_url: str | None,
    listen_database_url: str | None,
    concurrency: int,
    claim_batch: int,
    queues: str | None,
    name: str | None,
    lease_seconds: float,
    heartbeat_seconds: float,
    poll_seconds: float | None,
    rescue_seconds: float,
    shutdown_timeout: float,
    retention: str,
    unrunnable_grace: str,
    audit_retention: str,
    metrics_port: int | None,
    metrics_host: str,
    metrics_allowed_hosts: tuple[str, ...],
    processes: int | None,
    max_jobs_per_child: int | None,
    max_memory_per_child: int | None,
    supervised_fd: int | None,
) -> None:
    """Run a worker for your app's kinds until SIGTERM, SIGINT or SIGHUP.

    The first signal stops claiming, lets running jobs finish within --shutdown-timeout and
    hands the rest back (the attempt is not counted); a second signal exits at once.

    With --metrics-port, http://HOST:PORT/metrics serves what this process did (jobs run,
    durations, lag, claims, leases lost) under the same names as `rota serve`'s /metrics.
    """
    from rota.runtime.worker_settings import validate_worker_name

    if name is not None:
        validate_worker_name(name)
    app = load_app(app_ref)
    if database_url:
        app.with_database(database_url)
    if listen_database_url:
        app.database.listen_database_url = listen_database_url
    announce_new_database_url(app.database_url)
    options: dict[str, Any] = {
        "name": name,
        "queues": split(queues),
        "concurrency": concurrency,
        "claim_batch": claim_batch,
        "lease": lease_seconds,
        "heartbeat": heartbeat_seconds,
        "poll": poll_seconds,
        "rescue": rescue_seconds,
        "shutdown_timeout": shutdown_timeout,
        "retention": parse_retention(retention),
        "unrunnable_grace": parse_grace(unrunnable_grace),
        "audit_retention": parse_retention(audit_retention, what="--audit-retention"),
    }

    if supervised_fd is None and (processes or max_jobs_per_child or max_memory_per_child):
        parent = click.get_current_context().find_root().params
        code = run(
            app.workers.run_fleet(
                app_ref,
                processes=processes or 1,
                max_jobs_per_child=max_jobs_per_child,
                max_memory_per_child_mb=max_memory_per_child,
                metrics_port=metrics_port,
                metrics_host=metrics_host,
                metrics_allowed_hosts=metrics_allowed_hosts,
                cli_args=("--log-level", parent["log_level"], "--log-format", parent["log_format"]),
                **options,
            )
        )
        sys.exit(code)
    if supervised_fd is not None:  # a child of a supervisor (rota.runtime.supervised)
        from rota.runtime.supervised import Link

        options["link"] = Link(
            supervised_fd, max_jobs=max_jobs_per_child, max_memory_mb=max_memory_per_child
        )

    async def go() -> bool:
        stopped: list[Any] = []

        def ready(worker: Any) -> None:
            worker.threads_end_with_process = True  # os._exit below ends the handlers' threads
            stopped.append(worker)

        try:
            await app.run_worker(
                handle_signals=True,
                ready=ready,
                metrics_port=metrics_port,
                metrics_host=metrics_host,
                metrics_allowed_hosts=metrics_allowed_hosts,
                **options,
            )
        finally:
            await app.close()
        return bool(stopped and stopped[0].aborted)

    aborted = run_workers(go())
    # Sync handlers still running in threads cannot be interrupted; do not wait for them.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(1 if aborted else 0)


# ---------------------------------------------------------------------- migrate / check


@cli.command()
@uses_database(creates=True)
@click.option("--check", is_flag=True, help="Only report; exit 1 if migrations are pending.")
def migrate(target: Target, check: bool) -> None:
    """Apply the database migrations (safe to run from several places at once)."""
    from rota.store import redact_url

    # Checking is a read: it opens an existing database only.
    target = dataclasses.replace(target, creates=not check)

    async def go() -> list[str]:
        store = open_target(target)
        try:
            pending = await store.pending_migrations()
            if check or not pending:
                return pending
            with progress(
                f"applying {counted(len(pending), 'migration')}", len(pending)
            ) as advance:
                applied = await store.migrate()
                advance(len(applied))
            return applied
        finally:
            await store.close()

    names = run(go())
    where = printable(redact_url(target.database_url))
    if check:
        if names:
            click.echo(f"pending migrations on {where}: {', '.join(names)}", err=True)
            sys.exit(1)
        click.echo(f"{where} is up to date", err=True)
    else:
        click.echo(f"applied {', '.join(names)}" if names else f"{where} is up to date", err=True)


@cli.command()
@uses_database(creates=False)
def check(target: Target) -> None:
    """Check the database is reachable and migrated (with --app: that the app loads, and its
    database)."""
    from rota.store import redact_url

    if target.app is not None:
        kinds = target.app.registry.kinds()
        listed = f" ({printable(', '.join(kinds))})" if kinds else ""
        click.echo(f"app: {counted(len(kinds), 'kind')}{listed}")

    async def go() -> tuple[datetime, list[str], bool | None]:
        store = open_target(target)
        try:
            now, pending = await store.now(), await store.pending_migrations()
            return now, pending, getattr(store, "behind_pooler", None)
        finally:
            await store.close()

    now, pending, pooled = run(go())
    click.echo(
        f"database {printable(redact_url(target.database_url))}: reachable, clock {now.isoformat()}"
    )
    if pooled is not None:
        click.echo(
            "connection: through a transaction pooler (no prepared statements; LISTEN only "
            "with --listen-database-url)"
            if pooled
            else "connection: direct (or session pooling)"
        )
    if pending:
        raise MigrationsPending(f"migrations pending: {', '.join(pending)} (run `rota migrate`)")
    click.echo("schema: up to date")
