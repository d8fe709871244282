"""`rota schedules list|show|add|pause|resume|remove|run-now`: schedules from the command line."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar
from zoneinfo import ZoneInfo

import click

from rota.cli.group import Target, cli, json_option, uses_database, with_client, with_operator
from rota.cli.terminal import console, shown, table
from rota.config import parse_duration, parse_json
from rota.domain.errors import InvalidInput
from rota.domain.job import DEFAULT_MAX_ATTEMPTS, DEFAULT_QUEUE, EnqueueResult
from rota.domain.names import check_known_kind
from rota.domain.schedule import Misfire, Overlap, Rule, ScheduleSpec
from rota.domain.schedule_state import Schedule, schedule_fields
from rota.store.records import MAX_PAGE_SIZE, SchedulePage, WorkerInfo, kinds_by_queue

if TYPE_CHECKING:
    from rota.operator import Operator

T = TypeVar("T")

#: A worker counts as live for the unknown-kind warning of `schedules add` when it beat within
#: three of these (`rota workers`'s default judgement).
LIVE_HEARTBEAT = timedelta(seconds=10)

#: How many upcoming runs `list --json` and `show` include unless told otherwise.
PREVIEW = 5


@cli.group()
def schedules() -> None:
    """List, show, add, pause, resume, remove and run recurring schedules."""


@schedules.command("list")
@uses_database(creates=False)
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
def schedules_list(target: Target, limit: int, cursor: str | None, as_json: bool) -> None:
    """List schedules by name, a page at a time, with their next run and last outcome."""

    async def go(client: Any) -> tuple[datetime, SchedulePage]:
        page = await client.list_schedules(cursor=cursor, limit=limit)
        return await client.store.now(), page

    now, page = with_client(target, go)
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
    console().print(
        table(
            ("name", "kind", "rule", "next run (UTC)", "last run (UTC)", "outcome", "state"),
            (
                (
                    schedule.name,
                    schedule.kind,
                    schedule.rule.describe(),
                    _utc(schedule.next_run_at),
                    _utc(schedule.last_run_at),
                    schedule.last_job_state.value if schedule.last_job_state else "",
                    "paused" if schedule.paused else "active",
                )
                for schedule in listed
            ),
        )
    )
    if page.next_cursor:
        console().print(f"more: --cursor {page.next_cursor}", style="dim")


@schedules.command("show")
@click.argument("name")
@uses_database(creates=False)
@click.option(
    "--count",
    envvar="ROTA_PREVIEW_COUNT",
    type=click.IntRange(1, 100),
    default=PREVIEW,
    show_default=True,
    help="How many upcoming runs to show.",
)
@json_option
def schedules_show(name: str, target: Target, count: int, as_json: bool) -> None:
    """Show a schedule: its definition, its next runs and its last run."""
    schedule = with_client(target, lambda c: c.store.get_schedule(name))
    if as_json:
        click.echo(json.dumps(schedule_json(schedule, upcoming=count)))
        return
    _print_schedule(schedule, count)


@schedules.command("add")
@click.argument("name")
@uses_database(creates=True)
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
@click.option("--queue", envvar="ROTA_QUEUE", help="Queue (default: the kind's, else default).")
@click.option(
    "--priority",
    envvar="ROTA_PRIORITY",
    type=int,
    help="Higher runs first, -100..100 (default: the kind's, else 0).",
)
@click.option("--tenant", envvar="ROTA_TENANT", help="Whose work this is (fairness, limits).")
@click.option(
    "--max-attempts",
    envvar="ROTA_MAX_ATTEMPTS",
    type=int,
    help="Attempts per run (default: the kind's, else 3).",
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
    target: Target,
    kind: str,
    cron: str | None,
    timezone: str | None,
    every: str | None,
    payload: str,
    queue: str | None,
    priority: int | None,
    tenant: str | None,
    max_attempts: int | None,
    jitter: str | None,
    misfire: str,
    misfire_limit: int,
    grace: str,
    overlap: str,
    replace: bool,
    as_json: bool,
) -> None:
    """Add a schedule NAME that enqueues a --kind job on every --cron or --every slot.

    With --app, the kind's registration supplies the queue, priority and attempts not given,
    and a kind the app has no handler for is refused. Without it, a kind that no live worker
    runs on the schedule's queue is accepted with a warning on stderr.
    """
    check_known_kind(kind, target.accepted_kinds)
    registered = target.app.registry.get(kind) if target.app is not None else None
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
        payload=parse_json(payload),
        queue=_given(queue, registered.queue if registered else DEFAULT_QUEUE),
        priority=_given(priority, registered.priority if registered else 0),
        tenant=tenant,
        max_attempts=_given(
            max_attempts, registered.max_attempts if registered else DEFAULT_MAX_ATTEMPTS
        ),
        jitter=_duration(jitter, "--jitter") if jitter else timedelta(0),
        misfire=Misfire(misfire),
        misfire_limit=misfire_limit,
        grace=_duration(grace, "--grace"),
        overlap=Overlap(overlap),
    )

    async def add(op: Operator) -> tuple[Schedule, str | None]:
        schedule = await (op.upsert_schedule(spec) if replace else op.create_schedule(spec))
        if target.app is not None:  # the app's kinds were checked before anything was written
            return schedule, None
        workers = await op.store.list_workers()
        return schedule, unknown_kind_warning(spec.kind, spec.queue, workers, await op.store.now())

    schedule, warning = with_operator(target, add)
    if warning is not None:
        click.echo(f"warning: {warning}", err=True)
    if as_json:
        click.echo(json.dumps(schedule_json(schedule)))
        return
    click.echo(f"schedule {shown(schedule.name)}: {shown(schedule.rule.describe())}")
    _print_runs(schedule, PREVIEW)


@schedules.command("pause")
@click.argument("name")
@uses_database(creates=False)
@click.option(
    "--missed",
    type=click.Choice(["queue", "drop"]),
    default="queue",
    show_default=True,
    help="What the resume does with the runs that fall due while paused: queue them (as the "
    "--misfire policy allows, at most --misfire-limit) or drop them (the first run after the "
    "resume runs next).",
)
def schedules_pause(name: str, target: Target, missed: str) -> None:
    """Stop firing a schedule until it is resumed (a pause survives deploys)."""
    with_operator(target, lambda op: op.pause_schedule(name, missed=missed))
    click.echo(
        f"schedule {shown(name)} paused; the runs it misses will be "
        f"{'queued' if missed == 'queue' else 'dropped'} on resume"
    )


@schedules.command("resume")
@click.argument("name")
@uses_database(creates=False)
def schedules_resume(name: str, target: Target) -> None:
    """Fire a paused schedule again: the runs it missed are queued (as its --misfire policy
    allows) or dropped, as its pause said."""
    schedule = with_operator(target, lambda op: op.resume_schedule(name))
    click.echo(
        f"schedule {shown(name)} resumed; next run "
        f"{_when(schedule.next_run_at, schedule.rule.timezone)}"
    )


@schedules.command("remove")
@click.argument("name")
@uses_database(creates=False)
def schedules_remove(name: str, target: Target) -> None:
    """Delete a schedule; the jobs it already enqueued stay."""
    with_operator(target, lambda op: op.delete_schedule(name))
    click.echo(f"schedule {shown(name)} removed")


@schedules.command("run-now")
@click.argument("name")
@uses_database(creates=False)
@json_option
def schedules_run_now(name: str, target: Target, as_json: bool) -> None:
    """Enqueue a run of a schedule now, outside its slots (its next run does not move)."""
    from rota.cli.jobs import job_json

    result: EnqueueResult = with_operator(target, lambda op: op.trigger_schedule(name))
    if as_json:
        click.echo(json.dumps({**job_json(result.job), "duplicate": result.duplicate}))
        return
    click.echo(f"job {result.job.id} {result.job.state} for schedule {shown(name)}")


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
    fields_shown = {
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
    for key, value in fields_shown.items():
        click.echo(f"{key:>13}: {shown(value)}")
    _print_runs(schedule, count)


def _print_runs(schedule: Schedule, count: int) -> None:
    runs = schedule.upcoming(count)
    click.echo("    next runs:" if not schedule.paused else "    next runs (paused):")
    for run in runs:
        click.echo(f"  {shown(_when(run, schedule.rule.timezone))}")


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


def _given(value: T | None, default: T) -> T:
    return default if value is None else value


def unknown_kind_warning(
    kind: str, queue: str, workers: list[WorkerInfo], now: datetime
) -> str | None:
    """Why jobs of ``kind`` on ``queue`` would wait for ever, by the live workers seen (their
    queues and the kinds they said they run); None when one of them may run it."""
    live = [w for w in workers if w.is_alive(now, LIVE_HEARTBEAT)]
    runs = kinds_by_queue((w.queues, w.kinds) for w in live).get(queue, set())
    if runs is None or kind in runs:
        return None
    listed = ", ".join(repr(name) for name in sorted(runs)[:10]) or "none"
    return (
        f"no live worker runs kind {kind!r} on queue {queue!r} (kinds run there: {listed}); "
        "its jobs will wait until a worker that runs it starts (--app checks the kind "
        "against your app)"
    )
