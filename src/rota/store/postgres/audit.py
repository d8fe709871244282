"""The audit log on PostgreSQL: append, list newest first by keyset, prune by age."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from rota.domain.audit import AuditEntry, AuditFilter, AuditRecord, json_text
from rota.store.postgres.queries import query
from rota.store.records import AuditPage, encode_cursor


async def record(conn: Any, entry: AuditRecord, now: datetime | None) -> AuditEntry:
    cursor = await conn.execute(
        query("record_audit"),
        {
            "now": now,
            "identity": entry.identity,
            "action": entry.action.value,
            "target": entry.target,
            "filter": json_text(entry.filter),
            "detail": json_text(entry.detail),
            "count": entry.count,
        },
    )
    return _entry(await cursor.fetchone())


async def list_page(conn: Any, filter: AuditFilter, after: int | None, limit: int) -> AuditPage:
    cursor = await conn.execute(
        query("list_audit"),
        {
            "after": after,
            "action": filter.action,
            "identity": filter.identity,
            "target": filter.target,
            "since": filter.since,
            "until": filter.until,
            "limit": limit + 1,
        },
    )
    rows = await cursor.fetchall()
    entries = [_entry(row) for row in rows[:limit]]
    more = len(rows) > limit
    return AuditPage(entries, encode_cursor(entries[-1].id) if more else None)


async def prune(conn: Any, older_than: datetime, limit: int) -> int:
    cursor = await conn.execute(
        query("prune_audit"), {"older_than": older_than, "limit": max(0, limit)}
    )
    return max(0, int(cursor.rowcount))


def _entry(row: Sequence[Any]) -> AuditEntry:
    entry_id, at, identity, action, target, job_filter, detail, touched = row
    return AuditEntry(
        id=int(entry_id),
        at=at,
        identity=identity,
        action=action,
        target=target,
        filter=job_filter if isinstance(job_filter, dict) else None,
        detail=detail if isinstance(detail, dict) else None,
        count=None if touched is None else int(touched),
    )
