"""`rota audit`: the audit log of operator actions, newest first, filtered."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import click

from rota.cli.group import Target, cli, json_option, page_options, uses_database, with_client
from rota.cli.terminal import console, shown, table
from rota.config import parse_duration, parse_instant
from rota.domain.audit import AuditAction, AuditEntry, AuditFilter
from rota.domain.errors import InvalidInput
from rota.store.records import AuditPage


def _instant(text: str | None, what: str, now: datetime) -> datetime | None:
    """An ISO 8601 instant, or a duration meaning that long before the store's now."""
    if text is None or not text.strip():
        return None
    if "-" not in text:  # no date in it: a duration
        return now - parse_duration(text, what=what)
    return parse_instant(text, what=what)


@cli.command()
@uses_database(creates=False)
@click.option(
    "--action",
    envvar="ROTA_AUDIT_ACTION",
    type=click.Choice([action.value for action in AuditAction]),
    help="Only this action.",
)
@click.option(
    "--identity",
    envvar="ROTA_AUDIT_IDENTITY",
    help="Only actions by this identity (token:admin, basic:alice, cli:deploy...).",
)
@click.option("--target", "target_name", help="Only actions on this target (job:42, queue:emails).")
@click.option(
    "--since",
    help="Only actions at or after this ISO 8601 time with offset, or this long ago (24h, 7d).",
)
@click.option("--until", help="Only actions before this time (same forms as --since).")
@page_options("entries")
@json_option
def audit(
    target: Target,
    action: str | None,
    identity: str | None,
    target_name: str | None,
    since: str | None,
    until: str | None,
    limit: int,
    cursor: str | None,
    as_json: bool,
) -> None:
    """List operator actions (from the API, the dashboard and the CLI), newest first: who,
    when, what, the job filter and how many jobs each touched."""

    async def go(client: Any) -> AuditPage:
        now = await client.store.now()
        audit_filter = AuditFilter(
            action=action,
            identity=_text(identity, "--identity"),
            target=_text(target_name, "--target"),
            since=_instant(since, "--since", now),
            until=_instant(until, "--until", now),
        )
        page: AuditPage = await client.store.list_audit(audit_filter, cursor=cursor, limit=limit)
        return page

    page = with_client(target, go)
    if as_json:
        click.echo(
            json.dumps(
                {
                    "entries": [audit_json(entry) for entry in page.entries],
                    "next_cursor": page.next_cursor,
                }
            )
        )
        return
    out = console()
    out.print(
        table(
            ("id", "at", "identity", "action", "target", "filter", "jobs"),
            (
                (
                    entry.id,
                    entry.at.isoformat(timespec="seconds"),
                    entry.identity,
                    entry.action,
                    entry.target,
                    _fields(entry.filter),
                    "" if entry.count is None else entry.count,
                )
                for entry in page.entries
            ),
            justify={"id": "right", "jobs": "right"},
        )
    )
    if not page.entries:
        click.echo("no audit entries match", err=True)
    if page.next_cursor:
        out.print(f"more: --cursor {shown(page.next_cursor)}", style="dim")


def audit_json(entry: AuditEntry) -> dict[str, Any]:
    return {
        "id": entry.id,
        "at": entry.at.isoformat(),
        "identity": entry.identity,
        "action": entry.action,
        "target": entry.target,
        "filter": entry.filter,
        "detail": entry.detail,
        "count": entry.count,
    }


def _fields(fields: dict[str, Any] | None) -> str:
    if not fields:
        return ""
    return ", ".join(
        f"{key} {','.join(map(str, value)) if isinstance(value, list) else value}"
        for key, value in fields.items()
    )


def _text(value: str | None, what: str) -> str | None:
    if value is None or value == "":
        return None
    if len(value) > 300 or not value.isprintable():
        raise InvalidInput(f"{what}: at most 300 printable characters")
    return value
