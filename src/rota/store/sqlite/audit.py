"""The audit log on SQLite: append, list newest first by keyset, prune by age."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from rota.domain.audit import AuditEntry, AuditFilter, AuditRecord, from_json_text, json_text
from rota.store.records import AuditPage, encode_cursor
from rota.store.sqlite.rows import from_us, to_us

_COLUMNS = "id, at, identity, action, target, job_filter, detail, touched"

#: Every filter is a parameter; a NULL parameter leaves its column unfiltered.
_LIST = f"""
SELECT {_COLUMNS} FROM rota_audit
WHERE (:after IS NULL OR id < :after)
  AND (:action IS NULL OR action = :action)
  AND (:identity IS NULL OR identity = :identity)
  AND (:target IS NULL OR target = :target)
  AND (:since IS NULL OR at >= :since)
  AND (:until IS NULL OR at < :until)
ORDER BY id DESC
LIMIT :limit
"""


def record(conn: sqlite3.Connection, entry: AuditRecord, at: datetime) -> AuditEntry:
    row = conn.execute(
        f"INSERT INTO rota_audit (at, identity, action, target, job_filter, detail, touched) "
        f"VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING {_COLUMNS}",
        (
            to_us(at),
            entry.identity,
            entry.action.value,
            entry.target,
            json_text(entry.filter),
            json_text(entry.detail),
            entry.count,
        ),
    ).fetchone()
    return _entry(row)


def list_page(
    conn: sqlite3.Connection, filter: AuditFilter, after: int | None, limit: int
) -> AuditPage:
    params: dict[str, Any] = {
        "after": after,
        "action": filter.action,
        "identity": filter.identity,
        "target": filter.target,
        "since": None if filter.since is None else to_us(filter.since),
        "until": None if filter.until is None else to_us(filter.until),
        "limit": limit + 1,
    }
    rows = conn.execute(_LIST, params).fetchall()
    entries = [_entry(row) for row in rows[:limit]]
    more = len(rows) > limit
    return AuditPage(entries, encode_cursor(entries[-1].id) if more else None)


def prune(conn: sqlite3.Connection, older_than: datetime, limit: int) -> int:
    cursor = conn.execute(
        "DELETE FROM rota_audit WHERE id IN "
        "(SELECT id FROM rota_audit WHERE at < ? ORDER BY at, id LIMIT ?)",
        (to_us(older_than), max(0, limit)),
    )
    return max(0, cursor.rowcount)


def _entry(row: Sequence[Any]) -> AuditEntry:
    entry_id, at, identity, action, target, job_filter, detail, touched = row
    return AuditEntry(
        id=entry_id,
        at=from_us(at),
        identity=identity,
        action=action,
        target=target,
        filter=from_json_text(job_filter),
        detail=from_json_text(detail),
        count=touched,
    )
