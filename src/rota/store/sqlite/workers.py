"""The workers registry on SQLite: one row per worker, its running count read from the jobs."""

from __future__ import annotations

import json
import sqlite3
from datetime import datetime

from rota.store.records import WorkerInfo
from rota.store.sqlite.rows import WORKER_COLUMNS, to_us, worker_from_row

_REGISTER = f"""
INSERT INTO rota_workers ({WORKER_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (name) DO UPDATE SET
    host = excluded.host, pid = excluded.pid, queues = excluded.queues,
    concurrency = excluded.concurrency, started_at = excluded.started_at,
    beat_at = excluded.beat_at, kinds = excluded.kinds,
    heartbeat_seconds = excluded.heartbeat_seconds
"""


def register(conn: sqlite3.Connection, info: WorkerInfo, at: datetime) -> None:
    at_us = to_us(at)
    conn.execute(
        _REGISTER,
        (
            info.name,
            info.host,
            info.pid,
            json.dumps(list(info.queues)),
            info.concurrency,
            at_us,
            at_us,
            None if info.kinds is None else json.dumps(list(info.kinds)),
            None if info.heartbeat is None else info.heartbeat.total_seconds(),
        ),
    )


def beat(conn: sqlite3.Connection, name: str, at: datetime) -> bool:
    """Refresh the worker's beat; False when it has no row."""
    cursor = conn.execute("UPDATE rota_workers SET beat_at = ? WHERE name = ?", (to_us(at), name))
    return cursor.rowcount > 0


def deregister(conn: sqlite3.Connection, name: str) -> None:
    conn.execute("DELETE FROM rota_workers WHERE name = ?", (name,))


def list_all(conn: sqlite3.Connection) -> list[WorkerInfo]:
    """Every worker by name, with the number of jobs running under its name."""
    # From rota_jobs_running_worker (024), entries only: not a read of every running job.
    running = dict(
        conn.execute(
            "SELECT worker, count(*) FROM rota_jobs INDEXED BY rota_jobs_running_worker"
            " WHERE state = 'running' GROUP BY worker"
        ).fetchall()
    )
    rows = conn.execute(f"SELECT {WORKER_COLUMNS} FROM rota_workers ORDER BY name")
    return [worker_from_row(row, running.get(row[0], 0)) for row in rows]


def prune(conn: sqlite3.Connection, older_than: datetime) -> int:
    cursor = conn.execute("DELETE FROM rota_workers WHERE beat_at < ?", (to_us(older_than),))
    return max(0, cursor.rowcount)
