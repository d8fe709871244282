"""`rota enqueue`, `rota jobs ...`, `rota workers`: jobs from the command line."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any, Literal

import click

from rota.cli.group import (
    Target,
    cli,
    heartbeat_option,
    json_option,
    page_options,
    uses_database,
    with_client,
    with_operator,
)
from rota.cli.terminal import console, shown, table
from rota.config import parse_duration, parse_instant, parse_json
from rota.domain import blame
from rota.domain.errors import InvalidInput, InvalidJob
from rota.domain.job import Attempt, Job
from rota.domain.job_state import JobState
from rota.domain.names import validate_name
from rota.domain.payload import payload_text, preview
from rota.store.records import WorkerInfo

# ---------------------------------------------------------------------- enqueue and jobs


@cli.command()
@click.argument("kind")
@uses_database(creates=True)
@click.option(
    "--payload",
    envvar="ROTA_PAYLOAD",
    default="{}",
    show_default=True,
    help="The job's payload as JSON.",
)
@click.option("--delay", envvar="ROTA_DELAY", help="Run after a delay: 30s, 5m, 1h30m.")
@click.option("--at", "at", envvar="ROTA_AT", help="Run at an ISO 8601 time with offset.")
@click.option("--queue", envvar="ROTA_QUEUE", help="Queue (default: the kind's, else default).")
@click.option("--priority", envvar="ROTA_PRIORITY", type=int, help="Higher runs first (-100..100).")
@click.option(
    "--unique-key", envvar="ROTA_UNIQUE_KEY", help="At most one active job holds this key."
)
@click.option("--tenant", envvar="ROTA_TENANT", help="Whose work this is (fairness, limits).")
@click.option(
    "--unique-for",
    envvar="ROTA_UNIQUE_FOR",
    help="Hold --unique-key this long from now, also once succeeded (24h: dedupe for a day).",
)
@click.option(
    "--unique-state",
    "unique_states",
    type=click.Choice([s.value for s in JobState]),
    multiple=True,
    help="A state in which the job holds --unique-key (repeatable; pending, running always).",
)
@click.option(
    "--replace",
    is_flag=True,
    help="If a pending job holds --unique-key, give it this payload and run time instead.",
)
@click.option(
    "--expire-after",
    envvar="ROTA_EXPIRE_AFTER",
    help="Never start it after this long (1h, 30m): still waiting then, it ends cancelled.",
)
@click.option(
    "--max-attempts",
    envvar="ROTA_MAX_ATTEMPTS",
    type=int,
    help="Attempts before dead (default: the kind's, else 3).",
)
@click.option(
    "--after",
    "after",
    type=click.IntRange(1),
    multiple=True,
    metavar="ID",
    help="Run only after job ID succeeded (repeatable): the job waits until then.",
)
@click.option(
    "--on-parent-failure",
    envvar="ROTA_ON_PARENT_FAILURE",
    type=click.Choice(["cancel", "run"]),
    help="With --after: when a parent ends dead or cancelled, cancel this job (default) or "
    "run it anyway.",
)
@json_option
def enqueue(
    kind: str,
    target: Target,
    payload: str,
    delay: str | None,
    at: str | None,
    queue: str | None,
    priority: int | None,
    unique_key: str | None,
    tenant: str | None,
    unique_for: str | None,
    unique_states: tuple[str, ...],
    replace: bool,
    expire_after: str | None,
    max_attempts: int | None,
    after: tuple[int, ...],
    on_parent_failure: str | None,
    as_json: bool,
) -> None:
    """Enqueue a job of KIND.

    With --app, the kind's registration supplies what is not given (queue, priority, attempts,
    timeout) and a kind the app has no handler for is refused. With --after, the job waits for
    its parents; an unknown parent is refused and nothing is written.
    """
    from rota import workflows
    from rota.client import Client, job_spec

    if delay and at:
        raise InvalidInput("give --delay or --at, not both")
    if on_parent_failure and not after:
        raise InvalidInput("--on-parent-failure needs --after")
    options: dict[str, Any] = {
        "delay": parse_duration(delay, what="--delay") if delay else None,
        "run_at": parse_instant(at, what="--at") if at else None,
        "queue": queue,
        "priority": priority,
        "unique_key": unique_key,
        "tenant": tenant,
        "max_attempts": max_attempts,
        "expire_after": parse_duration(expire_after, what="--expire-after")
        if expire_after
        else None,
        "unique_for": parse_duration(unique_for, what="--unique-for") if unique_for else None,
        "unique_states": unique_states or None,
        "on_conflict": "replace" if replace else "skip",
    }
    data = parse_json(payload)
    if target.app is not None:
        spec = target.app.spec(kind, data, **options)
    else:
        spec = job_spec(kind, data, **options)

    async def go(client: Client) -> Any:
        if target.app is not None:  # the App's own path, its enqueue hooks included
            return await target.app.enqueuer.enqueue(
                spec,
                depends_on=after or None,
                on_parent_failure=on_parent_failure or "cancel",
                store=client.store,
            )
        if after:
            return await workflows.enqueue_after(
                client.store, spec, after, on_parent_failure or "cancel"
            )
        [result] = await client.enqueue_many([spec])
        return result

    result = with_client(target, go)
    if as_json:
        shown_job = {**job_json(result.job), "duplicate": result.duplicate}
        click.echo(json.dumps({**shown_job, "replaced": result.replaced}))
    else:
        note = " (duplicate: a job already holds this unique key)" if result.duplicate else ""
        if result.replaced:
            note = " (replaced: the pending job holding this unique key took this payload)"
        click.echo(
            f"job {result.job.id} {result.job.state} in queue {shown(result.job.queue)} at "
            f"{result.job.run_at.isoformat()}{note}"
        )


@cli.group()
def jobs() -> None:
    """List, show, retry, re-run, cancel, hold, release, reschedule, delete and purge jobs."""


def name_filter(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """A --kind, --queue or --tenant filter, checked like the names jobs are given."""
    if value is None:
        return None
    try:
        return validate_name(param.name or "name", value)
    except InvalidJob as error:
        raise InvalidInput(f"--{param.name}: {error.reason}") from None


@jobs.command("list")
@uses_database(creates=False)
@click.option(
    "--state",
    envvar="ROTA_STATE",
    type=click.Choice([s.value for s in JobState]),
    multiple=True,
    help="Only jobs in this state (repeatable).",
)
@click.option("--kind", envvar="ROTA_KIND", callback=name_filter, help="Only jobs of this kind.")
@click.option("--queue", envvar="ROTA_QUEUE", callback=name_filter, help="Only jobs in this queue.")
@click.option(
    "--tenant", envvar="ROTA_TENANT", callback=name_filter, help="Only this tenant's jobs."
)
@page_options("jobs")
@json_option
def jobs_list(
    target: Target,
    state: tuple[str, ...],
    kind: str | None,
    queue: str | None,
    tenant: str | None,
    limit: int,
    cursor: str | None,
    as_json: bool,
) -> None:
    """List jobs, newest first (with --json, each payload, result and last error as its first
    300 bytes and whether it was cut: ``rota jobs show`` has them whole)."""
    from rota.store import JobFilter

    filter = JobFilter(
        states=frozenset(JobState(s) for s in state) if state else None,
        kind=kind,
        queue=queue,
        tenant=tenant,
    )
    # Previews cut as the store reads them: a page never reads whole payloads or results.
    page = with_client(
        target, lambda c: c.list_jobs(filter, cursor=cursor, limit=limit, previews=True)
    )
    if as_json:
        click.echo(
            json.dumps(
                {"jobs": [listed_json(j) for j in page.jobs], "next_cursor": page.next_cursor}
            )
        )
        return
    out = console()
    out.print(
        table(
            ("id", "kind", "queue", "state", "attempt", "run_at", "worker", "last error"),
            (
                (
                    job.id,
                    job.kind,
                    job.queue,
                    job.state.value,
                    f"{job.attempt}/{job.max_attempts}",
                    job.run_at.isoformat(timespec="seconds"),
                    job.worker,
                    (job.last_error or "")[:60],
                )
                for job in page.jobs
            ),
        )
    )
    if page.next_cursor:
        out.print(f"more: --cursor {shown(page.next_cursor)}", style="dim")


@jobs.command("show")
@click.argument("job_id", type=int)
@uses_database(creates=False)
@json_option
def jobs_show(job_id: int, target: Target, as_json: bool) -> None:
    """Show a job with every attempt, and a durable job's steps, sleeps and waits."""
    from rota.cli.signals import step_json, step_line, suspension_json, suspension_line
    from rota.domain.durable import Step, suspension

    async def go(client: Any) -> tuple[Job, list[Attempt], list[Step]]:
        job = await client.get(job_id)
        return job, await client.attempts(job_id), await client.steps(job_id)

    job, attempts, steps = with_client(target, go)
    suspended = suspension(job, steps)
    if as_json:
        click.echo(
            json.dumps(
                {
                    **job_json(job),
                    "attempts": [attempt_json(a) for a in attempts],
                    "steps": [step_json(step) for step in steps],
                    "suspended": suspension_json(suspended),
                }
            )
        )
        return
    for key, value in job_json(job).items():
        if key not in ("payload", "result", "progress", "progress_message"):
            click.echo(f"{key:>13}: {shown(value)}")
    if suspended is not None:
        click.echo(f"{'suspended':>13}: {suspension_line(suspended)}")
    if job.progress is not None:
        message = f" {job.progress_message}" if job.progress_message else ""
        click.echo(f"{'progress':>13}: {shown(f'{job.progress:.0%}{message}')}")
    click.echo(f"{'payload':>13}: {shown(json.dumps(job.payload, ensure_ascii=False))}")
    if job.result is not None:
        click.echo(f"{'result':>13}: {shown(json.dumps(job.result, ensure_ascii=False))}")
    for attempt in attempts:
        click.echo(
            f"attempt {attempt.attempt} token {attempt.token} on {shown(attempt.worker)}: "
            f"{attempt.outcome.value} ({attempt.started_at.isoformat()} -> "
            f"{attempt.finished_at.isoformat() if attempt.finished_at else '...'})"
        )
        if attempt.error:
            click.echo(f"  error: {shown(attempt.error)}")
        if attempt.traceback:
            lines = shown(attempt.traceback.rstrip(), keep="\n").splitlines()
            click.echo("\n".join(f"  {line}" for line in lines))
    for index, step in enumerate(steps, 1):
        click.echo(step_line(index, step))


@jobs.command("retry")
@click.argument("job_id", type=int)
@uses_database(creates=False)
@click.option("--max-attempts", type=click.IntRange(1, 1000), help="Raise the attempt limit.")
def jobs_retry(job_id: int, target: Target, max_attempts: int | None) -> None:
    """Run a dead or cancelled job again, with fresh attempts."""
    job = with_operator(target, lambda op: op.retry(job_id, max_attempts=max_attempts))
    click.echo(f"job {job.id} is {job.state} again")


@jobs.command("cancel")
@click.argument("job_id", type=int)
@uses_database(creates=False)
def jobs_cancel(job_id: int, target: Target) -> None:
    """Cancel a waiting, pending or running job (a running handler is stopped at its next
    heartbeat); the jobs waiting on it are cancelled too."""
    job = with_operator(target, lambda op: op.cancel(job_id))
    click.echo(f"job {job.id} cancelled")


@jobs.command("delete")
@click.argument("job_id", type=int)
@uses_database(creates=False)
def jobs_delete(job_id: int, target: Target) -> None:
    """Delete a pending or finished job and its history (a running job: cancel it first)."""
    job = with_operator(target, lambda op: op.delete(job_id))
    click.echo(f"job {job.id} deleted (it was {job.state})")


@jobs.command("rerun")
@click.argument("job_id", type=int)
@uses_database(creates=False)
def jobs_rerun(job_id: int, target: Target) -> None:
    """Run a succeeded job again: a new attempt series, its earlier attempts kept."""
    job = with_operator(target, lambda op: op.rerun(job_id))
    click.echo(f"job {job.id} is pending again (a new attempt series)")


@jobs.command("reschedule")
@click.argument("job_id", type=int)
@uses_database(creates=False)
@click.option("--at", "at", help='Run at an ISO 8601 time with offset, or "now".')
@click.option("--priority", type=int, help="Higher runs first (-100..100).")
@click.option("--queue", callback=name_filter, help="Move the job to this queue.")
@json_option
def jobs_reschedule(
    job_id: int,
    target: Target,
    at: str | None,
    priority: int | None,
    queue: str | None,
    as_json: bool,
) -> None:
    """Change a pending job's run time, priority or queue (a job a worker claimed meanwhile
    is reported, not changed)."""
    run_at: datetime | Literal["now"] | None = None
    if at is not None:
        run_at = "now" if at.strip() == "now" else parse_instant(at, what="--at")
    job = with_operator(
        target, lambda op: op.reschedule(job_id, run_at=run_at, priority=priority, queue=queue)
    )
    if as_json:
        click.echo(json.dumps(job_json(job)))
        return
    click.echo(
        f"job {job.id} pending in queue {shown(job.queue)} at {job.run_at.isoformat()} "
        f"(priority {job.priority})"
    )


@cli.command()
@uses_database(creates=False)
@heartbeat_option(
    "The heartbeat interval of workers that did not record their own (older versions); "
    "each other worker is alive while it beat within 3 of its own intervals."
)
@json_option
def workers(target: Target, heartbeat_seconds: float, as_json: bool) -> None:
    """List registered workers: alive or not, by the store's clock, and their last heartbeat."""
    from rota.client import Client

    async def go(client: Client) -> tuple[datetime, list[WorkerInfo]]:
        return await client.store.now(), await client.workers()

    now, listed = with_client(target, go)
    heartbeat = timedelta(seconds=heartbeat_seconds)
    if as_json:
        rows = [worker_json(w, now, heartbeat) for w in listed]
        click.echo(json.dumps({"now": now.isoformat(), "workers": rows}))
        return
    if not listed:
        click.echo("no workers registered", err=True)
        return
    console().print(
        table(
            ("name", "state", "host", "pid", "queues", "running", "last beat"),
            (
                (
                    w.name,
                    "alive" if w.is_alive(now, heartbeat) else "silent",
                    w.host,
                    w.pid,
                    ",".join(w.queues),
                    f"{w.running}/{w.concurrency}",
                    _ago(w.heartbeat_age(now)),
                )
                for w in listed
            ),
        )
    )


def worker_json(worker: WorkerInfo, now: datetime, heartbeat: timedelta) -> dict[str, Any]:
    """A worker as plain JSON values (the same fields as the HTTP API's)."""
    age = worker.heartbeat_age(now)
    return {
        "name": worker.name,
        "host": worker.host,
        "pid": worker.pid,
        "queues": list(worker.queues),
        "concurrency": worker.concurrency,
        "running": worker.running,
        "started_at": _iso(worker.started_at),
        "beat_at": _iso(worker.beat_at),
        "heartbeat_age_seconds": age.total_seconds() if age is not None else None,
        "heartbeat_seconds": worker.heartbeat.total_seconds() if worker.heartbeat else None,
        "alive": worker.is_alive(now, heartbeat),
    }


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
        "expires_at": _iso(job.expires_at),
        "last_error": job.last_error,
        "crashes": job.crashes,
        "quarantine": blame.quarantine(job),
        "progress": job.progress,
        "progress_message": job.progress_message,
        "workflow": job.workflow,
        "waiting_on": job.waiting_on,
        "payload": job.payload,
        "result": job.result,
    }


def listed_json(job: Job) -> dict[str, Any]:
    """A listed job (its payload and result Previews) as the HTTP API's lists give it: the
    first PREVIEW_BYTES of the payload, result and last error, each with whether it was cut."""
    fields = job_json(job)
    for name in ("payload", "result", "last_error"):
        value = fields.pop(name)
        text = value if name == "last_error" or value is None else payload_text(value)
        fields[f"{name}_preview"], fields[f"{name}_truncated"] = preview(text)
    return fields


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


def _ago(age: timedelta | None) -> str:
    if age is None:
        return "never"
    seconds = age.total_seconds()
    if seconds < 0:  # the beat was stamped by a clock ahead of the store's
        return "just now"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit} ago"
    return f"{int(seconds)}s ago"
