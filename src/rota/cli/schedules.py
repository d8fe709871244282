"""`rota schedules list|show|add|pause|resume|remove|run-now`: schedules from the command line."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import click

from rota.cli import cli, database_option, json_option, with_client
from rota.config import parse_duration
from rota.domain.errors import InvalidInput
from rota.domain.job import EnqueueResult
from rota.domain.schedule import Misfire, Overlap, Rule, ScheduleSpec
from rota.domain.schedule_state import Schedule, schedule_fields
from rota.store.base import MAX_PAGE_SIZE, SchedulePage

#: How many upcoming runs `list --json` and `show` include unless told otherwise.
PREVIEW = 5


@cli.group()
def schedules() -> None:
    """List, show, add, pause, resume, remove and run recurring schedules."""


@schedules.command("list")
@database_option()
@click.option(
    "--limit",
    envvar="ROTA_LIMIT",
    type=click.IntRange(1, MAX_PAGE_SIZE),
    default=50,
    show_default=True,
    help="How many schedules (by name).",
)
@click.option("--cursor", envvar="ROTA_CURSOR", help="Continue after a previous page.")
@json_option
def schedules_list(database_url: str, limit: int, cursor: str | None, as_json: bool) -> None:
    """List schedules by name, a page at a time, with their next run and last outcome."""

    async def go(client: Any) -> tuple[datetime, SchedulePage]:
        page = await client.list_schedules(cursor=cursor, limit=limit)
        return await client.store.now(), page

    now, page = with_client(database_url, go)
    listed = page.schedules
    if as_json:
        click.echo(
            json.dumps(
                {
                    "now": now.isoformat(),
                    "schedules": [schedule_json(s) for s in listed],
                    "next_cursor": page.next_cursor,
                }
            )
        )
        return
    if not listed:
        click.echo("no schedules", err=True)
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(box=None, header_style="bold")
    for column in ("name", "kind", "rule", "next run (UTC)", "last run (UTC)", "outcome", "state"):
        table.add_column(column, overflow="fold")
    for schedule in listed:
        table.add_row(
            schedule.name,
            schedule.kind,
            schedule.rule.describe(),
            _utc(schedule.next_run_at),
            _utc(schedule.last_run_at),
            schedule.last_job_state.value if schedule.last_job_state else "",
            "paused" if schedule.paused else "active",
        )
    console = Console(highlight=False)
    console.print(table)
    if page.next_cursor:
        console.print(f"more: --cursor {page.next_cursor}", style="dim")


@schedules.command("show")
@click.argument("name")
@database_option()
@click.option(
    "--count",
    envvar="ROTA_PREVIEW_COUNT",
    type=click.IntRange(1, 100),
    default=PREVIEW,
    show_default=True,
    help="How many upcoming runs to show.",
)
@json_option
def schedules_show(name: str, database_url: str, count: int, as_json: bool) -> None:
    """Show a schedule: its definition, its next runs and its last run."""
    schedule = with_client(database_url, lambda c: c.store.get_schedule(name))
    if as_json:
        click.echo(json.dumps(schedule_json(schedule, upcoming=count)))
        return
    _print_schedule(schedule, count)


@schedules.command("add")
@click.argument("name")
@database_option()
@click.option("--kind", envvar="ROTA_KIND", required=True, help="The kind of job to enqueue.")
@click.option(
    "--cron", envvar="ROTA_CRON", help="5-field cron expression or @hourly/@daily/@weekly/..."
)
@click.option(
    "--timezone", envvar="ROTA_TIMEZONE", help="IANA zone the cron expression reads (default UTC)."
)
@click.option("--every", envvar="ROTA_EVERY", help="An interval instead of cron: 30s, 5m, 1h.")
@click.option(
    "--payload",
    envvar="ROTA_PAYLOAD",
    default="{}",
    show_default=True,
    help="Every run's payload as JSON.",
)
@click.option("--queue", envvar="ROTA_QUEUE", default="default", show_default=True, help="Queue.")
@click.option(
    "--priority", envvar="ROTA_PRIORITY", type=int, default=0, help="Higher runs first (-100..100)."
)
@click.option("--tenant", envvar="ROTA_TENANT", help="Whose work this is (fairness, limits).")
@click.option(
    "--max-attempts", envvar="ROTA_MAX_ATTEMPTS", type=int, default=3, help="Attempts per run."
)
@click.option(
    "--jitter", envvar="ROTA_JITTER", help="Spread runs by a fixed offset below this: 5m."
)
@click.option(
    "--misfire",
    envvar="ROTA_MISFIRE",
    type=click.Choice([m.value for m in Misfire]),
    default=Misfire.LATEST.value,
    show_default=True,
    help="Missed runs: the latest only, skip runs later than --grace, or all (up to the limit).",
)
@click.option(
    "--misfire-limit",
    envvar="ROTA_MISFIRE_LIMIT",
    type=int,
    default=100,
    show_default=True,
    help="At most this many missed runs catch up at once (--misfire all).",
)
@click.option(
    "--grace",
    envvar="ROTA_GRACE",
    default="1m",
    show_default=True,
    help="Lateness --misfire skip allows.",
)
@click.option(
    "--overlap",
    envvar="ROTA_OVERLAP",
    type=click.Choice([o.value for o in Overlap]),
    default=Overlap.SKIP.value,
    show_default=True,
    help="While the previous run is pending or running: skip the slot, or allow a new run.",
)
@click.option(
    "--replace",
    envvar="ROTA_REPLACE",
    is_flag=True,
    help="Replace a schedule of that name (its pause and next run are kept if the rule is the same).",
)
@json_option
def schedules_add(
    name: str,
    database_url: str,
    kind: str,
    cron: str | None,
    timezone: str | None,
    every: str | None,
    payload: str,
    queue: str,
    priority: int,
    tenant: str | None,
    max_attempts: int,
    jitter: str | None,
    misfire: str,
    misfire_limit: int,
    grace: str,
    overlap: str,
    replace: bool,
    as_json: bool,
) -> None:
    """Add a schedule NAME that enqueues a --kind job on every --cron or --every slot."""
    if (cron is None) == (every is None):
        raise InvalidInput("give --cron or --every (one of them)")
    if every is not None:
        if timezone is not None:
            raise InvalidInput("--timezone applies only to --cron schedules")
        rule = Rule.every(_duration(every, "--every"))
    else:
        assert cron is not None
        rule = Rule.cron(cron, timezone or "UTC")
    spec = ScheduleSpec(
        name=name,
        kind=kind,
        rule=rule,
        payload=_json(payload),
        queue=queue,
        priority=priority,
        tenant=tenant,
        max_attempts=max_attempts,
        jitter=_duration(jitter, "--jitter") if jitter else timedelta(0),
        misfire=Misfire(misfire),
        misfire_limit=misfire_limit,
        grace=_duration(grace, "--grace"),
        overlap=Overlap(overlap),
    )
    schedule = with_client(
        database_url,
        lambda c: c.store.upsert_schedule(spec) if replace else c.store.create_schedule(spec),
    )
    if as_json:
        click.echo(json.dumps(schedule_json(schedule)))
        return
    click.echo(f"schedule {schedule.name}: {schedule.rule.describe()}")
    _print_runs(schedule, PREVIEW)


@schedules.command("pause")
@click.argument("name")
@database_option()
def schedules_pause(name: str, database_url: str) -> None:
    """Stop firing a schedule until it is resumed (a pause survives deploys)."""
    with_client(database_url, lambda c: c.store.pause_schedule(name))
    click.echo(f"schedule {name} paused")


@schedules.command("resume")
@click.argument("name")
@database_option()
def schedules_resume(name: str, database_url: str) -> None:
    """Fire a paused schedule again; missed runs follow its --misfire policy."""
    schedule = with_client(database_url, lambda c: c.store.resume_schedule(name))
    click.echo(
        f"schedule {name} resumed; next run {_when(schedule.next_run_at, schedule.rule.timezone)}"
    )


@schedules.command("remove")
@click.argument("name")
@database_option()
def schedules_remove(name: str, database_url: str) -> None:
    """Delete a schedule; the jobs it already enqueued stay."""
    with_client(database_url, lambda c: c.store.delete_schedule(name))
    click.echo(f"schedule {name} removed")


@schedules.command("run-now")
@click.argument("name")
@database_option()
@json_option
def schedules_run_now(name: str, database_url: str, as_json: bool) -> None:
    """Enqueue a run of a schedule now, outside its slots (its next run does not move)."""
    from rota.cli.jobs import job_json

    result: EnqueueResult = with_client(database_url, lambda c: c.store.trigger_schedule(name))
    if as_json:
        click.echo(json.dumps({**job_json(result.job), "duplicate": result.duplicate}))
        return
    click.echo(f"job {result.job.id} {result.job.state} for schedule {name}")


# ---------------------------------------------------------------------- rendering


def schedule_json(schedule: Schedule, *, upcoming: int = PREVIEW) -> dict[str, Any]:
    """A schedule as plain JSON values (the same shape as the HTTP API's)."""
    return {
        key: _plain(value) for key, value in schedule_fields(schedule, upcoming=upcoming).items()
    }


def _plain(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, list):
        return [_plain(item) for item in value]
    return value


def _print_schedule(schedule: Schedule, count: int) -> None:
    fields = schedule_fields(schedule, upcoming=0)
    shown = {
        "name": fields["name"],
        "rule": fields["description"],
        "kind": fields["kind"],
        "queue": fields["queue"],
        "priority": fields["priority"],
        "tenant": fields["tenant"],
        "max_attempts": fields["max_attempts"],
        "misfire": f"{fields['misfire']} (limit {fields['misfire_limit']}, grace "
        f"{fields['grace_seconds']:g}s)",
        "overlap": fields["overlap"],
        "jitter": f"{fields['jitter_seconds']:g}s",
        "state": "paused" if schedule.paused else "active",
        "last run": _when(schedule.last_run_at, schedule.rule.timezone),
        "last job": "" if schedule.last_job_id is None else str(schedule.last_job_id),
        "last outcome": fields["last_outcome"] or "",
        "payload": json.dumps(schedule.spec.payload, ensure_ascii=False),
    }
    for key, value in shown.items():
        click.echo(f"{key:>13}: {'' if value is None else value}")
    _print_runs(schedule, count)


def _print_runs(schedule: Schedule, count: int) -> None:
    runs = schedule.upcoming(count)
    click.echo("    next runs:" if not schedule.paused else "    next runs (paused):")
    for run in runs:
        click.echo(f"  {_when(run, schedule.rule.timezone)}")


def _utc(instant: datetime | None) -> str:
    return "" if instant is None else instant.strftime("%Y-%m-%d %H:%M:%S")


def _when(instant: datetime | None, timezone: str) -> str:
    """An instant in UTC, and on the schedule's own clock when that is not UTC."""
    if instant is None:
        return ""
    text = instant.isoformat(timespec="seconds")
    if timezone == "UTC":
        return text
    local = instant.astimezone(ZoneInfo(timezone))
    return f"{text} ({local.strftime('%Y-%m-%d %H:%M')} {timezone})"


def _duration(text: str, what: str) -> timedelta:
    return parse_duration(text, what=what)


def _json(text: str) -> Any:
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except ValueError as error:
        if isinstance(error, InvalidInput):
            raise
        raise InvalidInput(f"--payload is not valid JSON: {error}") from None


def _reject_constant(name: str) -> Any:
    raise InvalidInput(f"--payload: {name} is not valid JSON")
