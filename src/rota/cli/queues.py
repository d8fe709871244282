"""`rota queues list|pause|resume` and `rota limits list|set|remove`: flow control from the
command line."""

from __future__ import annotations

import json
import re
from typing import Any

import click

from rota.cli.group import Target, cli, json_option, uses_database, with_client, with_operator
from rota.cli.terminal import console, shown, table
from rota.client import QueueStatus, limit_selected, limit_spec
from rota.config import parse_duration
from rota.domain.errors import InvalidInput, NotFound
from rota.domain.flow import Limit
from rota.domain.job_state import JobState
from rota.operator import Operator
from rota.store.records import LimitInfo

# ---------------------------------------------------------------------- queues


@cli.group()
def queues() -> None:
    """List queues; pause and resume them cluster-wide."""


@queues.command("list")
@uses_database(creates=False)
@json_option
def queues_list(target: Target, as_json: bool) -> None:
    """List queues: paused or not, jobs pending and running, and each one's concurrency limit."""
    listed: list[QueueStatus] = with_client(target, lambda c: c.queues())
    if as_json:
        click.echo(json.dumps({"queues": [queue_json(q) for q in listed]}))
        return
    if not listed:
        click.echo("no queues", err=True)
        return
    exact = all(queue.exact for queue in listed)
    out = console()
    out.print(
        table(
            ("queue", "state", "pending", "running", "limit"),
            (
                (
                    queue.name,
                    "paused" if queue.paused else "active",
                    _count(queue.count(JobState.PENDING), exact),
                    _count(queue.count(JobState.RUNNING), exact),
                    _queue_limit(queue),
                )
                for queue in listed
            ),
            justify={"state": "right", "pending": "right", "running": "right", "limit": "right"},
        )
    )
    if not exact:
        out.print("~ counts are estimates", style="dim")


@queues.command("pause")
@click.argument("name")
@uses_database(creates=True)
def queues_pause(name: str, target: Target) -> None:
    """Stop every worker claiming from queue NAME until it is resumed; running jobs finish.

    A queue may be paused before it has jobs; the pause survives restarts and deploys.
    """
    with_operator(target, lambda op: op.pause_queue(name))
    click.echo(f"queue {shown(name)} paused")


@queues.command("resume")
@click.argument("name")
@uses_database(creates=False)
def queues_resume(name: str, target: Target) -> None:
    """Let workers claim from queue NAME again."""
    with_operator(target, lambda op: op.resume_queue(name))
    click.echo(f"queue {shown(name)} resumed")


# ---------------------------------------------------------------------- limits


@cli.group()
def limits() -> None:
    """List, set and remove cluster-wide concurrency and rate limits."""


def _target_options(func: Any) -> Any:
    """--kind / --queue / --tenant: what a limit applies to (exactly one of them)."""
    for option in reversed(
        [
            click.option("--kind", envvar="ROTA_LIMIT_KIND", help="Limit the jobs of this kind."),
            click.option(
                "--queue", envvar="ROTA_LIMIT_QUEUE", help="Limit the jobs in this queue."
            ),
            click.option(
                "--tenant",
                envvar="ROTA_LIMIT_TENANT",
                help="Limit this tenant's jobs; * limits each tenant separately.",
            ),
        ]
    ):
        func = option(func)
    return func


@limits.command("list")
@uses_database(creates=False)
@json_option
def limits_list(target: Target, as_json: bool) -> None:
    """List every limit with the jobs running against it and its starts in the current period."""
    listed: list[LimitInfo] = with_client(target, lambda c: c.limits())
    if as_json:
        click.echo(json.dumps({"limits": [limit_json(info) for info in listed]}))
        return
    if not listed:
        click.echo("no limits", err=True)
        return
    console().print(
        table(
            ("scope", "key", "concurrency", "rate", "running", "recent starts"),
            (
                (
                    info.limit.scope.value,
                    info.limit.key,
                    info.limit.concurrency,
                    _rate(info.limit),
                    info.running,
                    info.recent_starts if info.limit.rate is not None else None,
                )
                for info in listed
            ),
        )
    )


@limits.command("set")
@uses_database(creates=True)
@_target_options
@click.option(
    "--concurrency",
    envvar="ROTA_LIMIT_CONCURRENCY",
    metavar="N",
    help="At most N jobs running at once, across every worker (0 holds them all).",
)
@click.option(
    "--rate",
    envvar="ROTA_LIMIT_RATE",
    metavar="N",
    help="At most N jobs started per --per period (kinds and tenants).",
)
@click.option(
    "--per", envvar="ROTA_LIMIT_PER", metavar="PERIOD", help="The rate's period: 1s, 1m, 1h."
)
@json_option
def limits_set(
    target: Target,
    kind: str | None,
    queue: str | None,
    tenant: str | None,
    concurrency: str | None,
    rate: str | None,
    per: str | None,
    as_json: bool,
) -> None:
    """Limit one --kind, --queue or --tenant, replacing its previous limit.

    \b
    rota limits set --kind pdf --concurrency 3
    rota limits set --tenant '*' --concurrency 2
    rota limits set --kind api --rate 100 --per 1m
    """
    if sum(value is not None for value in (kind, queue, tenant)) != 1:
        raise InvalidInput("give one of --kind, --queue or --tenant")
    if concurrency is None and rate is None:
        raise InvalidInput("give --concurrency, --rate with --per, or both")
    if rate is not None and per is None:
        raise InvalidInput("--rate needs --per, the period: 1s, 1m, 1h")
    if per is not None and rate is None:
        raise InvalidInput("--per needs --rate, the starts allowed per period")
    limit = limit_spec(
        kind=kind,
        queue=queue,
        tenant=tenant,
        concurrency=_whole(concurrency, "--concurrency"),
        rate=_whole(rate, "--rate"),
        per=parse_duration(per, what="--per") if per is not None else None,
    )

    async def go(operator: Operator) -> LimitInfo:
        await operator.set_limit(limit)
        listed = await operator.client.limits()
        return next((info for info in listed if info.limit.ident == limit.ident), LimitInfo(limit))

    info = with_operator(target, go)
    if as_json:
        click.echo(json.dumps(limit_json(info)))
        return
    click.echo(f"limit {limit.scope.value} {shown(limit.key)}: {describe(limit)}")


@limits.command("remove")
@uses_database(creates=False)
@_target_options
def limits_remove(target: Target, kind: str | None, queue: str | None, tenant: str | None) -> None:
    """Remove the limit on one --kind, --queue or --tenant."""
    if sum(value is not None for value in (kind, queue, tenant)) != 1:
        raise InvalidInput("give one of --kind, --queue or --tenant")
    scope, key = limit_selected(kind=kind, queue=queue, tenant=tenant)
    removed: bool = with_operator(target, lambda op: op.delete_limit(scope, key))
    if not removed:
        raise NotFound(f"no limit on {scope.value} {key!r}")
    click.echo(f"limit {scope.value} {shown(key)} removed")


# ---------------------------------------------------------------------- rendering


def queue_json(queue: QueueStatus) -> dict[str, Any]:
    """A queue as plain JSON values (the same fields as the HTTP API's)."""
    return {
        "name": queue.name,
        "paused": queue.paused,
        "updated_at": queue.updated_at.isoformat() if queue.updated_at else None,
        "counts": {state.value: queue.count(state) for state in JobState},
        "exact": queue.exact,
        "concurrency": queue.limit.limit.concurrency if queue.limit else None,
        "limit_running": queue.limit.running if queue.limit else None,
    }


def limit_json(info: LimitInfo) -> dict[str, Any]:
    """A limit and its use as plain JSON values (the same fields as the HTTP API's)."""
    limit = info.limit
    return {
        "scope": limit.scope.value,
        "key": limit.key,
        "concurrency": limit.concurrency,
        "rate": limit.rate,
        "period_seconds": limit.period.total_seconds() if limit.period is not None else None,
        "running": info.running,
        "recent_starts": info.recent_starts,
    }


def describe(limit: Limit) -> str:
    """``at most 3 running, 100 starts per 1m``."""
    parts = []
    if limit.concurrency is not None:
        parts.append(f"at most {limit.concurrency} running")
    if limit.rate is not None:
        assert limit.period is not None
        parts.append(f"{limit.rate} starts per {_period(limit.period.total_seconds())}")
    text = ", ".join(parts)
    if limit.key == "*":
        text += ", for each tenant"
    return text


def _rate(limit: Limit) -> str:
    if limit.rate is None or limit.period is None:
        return ""
    return f"{limit.rate} / {_period(limit.period.total_seconds())}"


def _period(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"


def _queue_limit(queue: QueueStatus) -> str:
    if queue.limit is None or queue.limit.limit.concurrency is None:
        return ""
    return f"{queue.limit.running} of {queue.limit.limit.concurrency} running"


def _count(n: int, exact: bool) -> str:
    return f"{'' if exact else '~'}{n:,}"


def _whole(text: str | None, what: str) -> int | None:
    """A whole number from the command line; InvalidInput naming the flag otherwise."""
    if text is None:
        return None
    value = text.strip()
    if not _WHOLE.fullmatch(value):
        raise InvalidInput(f"{what}: {text!r} is not a whole number")
    return int(value)


_WHOLE = re.compile(r"-?[0-9]{1,12}")
