"""Flow control on SQLite: paused queues, limits, and the counts a claim's budget starts from.

Each function is the body of one transaction run by ``Database`` (or part of a claim's).
Claims run one at a time, each inside ``BEGIN IMMEDIATE``, so a budget built from the running
counts and recent starts a claim reads is exact for the whole claim, in every process: limits
need no lock of their own here.
"""

from __future__ import annotations

import sqlite3
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from rota.domain.flow import (
    EVERY_TENANT,
    MAX_PERIOD,
    Budget,
    Key,
    Limit,
    LimitScope,
    counted_keys,
    limit_for,
    validate_queue,
)
from rota.domain.job import Job
from rota.domain.job_state import JobState
from rota.store.records import LimitInfo, QueueInfo
from rota.store.sqlite.rows import EPOCH, duration_us, from_us, to_us

# ---------------------------------------------------------------------- queues

_PAUSE = """
INSERT INTO rota_queues (name, paused, updated_at) VALUES (?, ?, ?)
ON CONFLICT (name) DO UPDATE SET paused = excluded.paused, updated_at = excluded.updated_at
RETURNING name, paused, updated_at
"""


def paused_queues(conn: sqlite3.Connection) -> set[str]:
    return {name for (name,) in conn.execute("SELECT name FROM rota_queues WHERE paused = 1")}


def set_paused(conn: sqlite3.Connection, queue: str, paused: bool, at: datetime) -> QueueInfo:
    name, is_paused, updated_at = conn.execute(
        _PAUSE, (validate_queue(queue), int(paused), to_us(at))
    ).fetchone()
    return QueueInfo(name=name, paused=bool(is_paused), updated_at=from_us(updated_at))


def list_queues(conn: sqlite3.Connection) -> list[QueueInfo]:
    rows = conn.execute("SELECT name, paused, updated_at FROM rota_queues ORDER BY name")
    return [QueueInfo(name=n, paused=bool(p), updated_at=from_us(u)) for n, p, u in rows]


# ---------------------------------------------------------------------- limits

_SET_LIMIT = """
INSERT INTO rota_limits (scope, key, concurrency, rate, period_us, updated_at)
VALUES (?, ?, ?, ?, ?, ?)
ON CONFLICT (scope, key) DO UPDATE SET concurrency = excluded.concurrency,
    rate = excluded.rate, period_us = excluded.period_us, updated_at = excluded.updated_at
"""


def limits(conn: sqlite3.Connection) -> dict[Key, Limit]:
    """Every limit by (scope, key), in that order."""
    rows = conn.execute(
        "SELECT scope, key, concurrency, rate, period_us FROM rota_limits ORDER BY scope, key"
    )
    found: dict[Key, Limit] = {}
    for scope, key, concurrency, rate, period_us in rows:
        period = None if period_us is None else timedelta(microseconds=period_us)
        limit = Limit(LimitScope(scope), key, concurrency, rate, period)
        found[limit.ident] = limit
    return found


def set_limit(conn: sqlite3.Connection, limit: Limit, at: datetime) -> None:
    period_us = None if limit.period is None else duration_us(limit.period)
    conn.execute(
        _SET_LIMIT,
        (limit.scope.value, limit.key, limit.concurrency, limit.rate, period_us, to_us(at)),
    )


def delete_limit(conn: sqlite3.Connection, scope: LimitScope, key: str) -> bool:
    cursor = conn.execute("DELETE FROM rota_limits WHERE scope = ? AND key = ?", (scope.value, key))
    return cursor.rowcount > 0


# ---------------------------------------------------------------------- what limits count

# INDEXED BY: the expiry index holds exactly the running jobs, and the live ones are a range.
_RUNNING = """
SELECT queue, kind, tenant, count(*) FROM rota_jobs INDEXED BY rota_jobs_leases
WHERE state = 'running' AND lease_until >= ?
GROUP BY queue, kind, tenant
"""
_STARTS_SINCE = "SELECT scope, key, sum(n) FROM rota_limit_starts WHERE at > ? GROUP BY scope, key"
_SCOPES = {scope.value: scope for scope in LimitScope}


@dataclass(frozen=True, slots=True)
class Usage:
    """What the limits count at ``at``: running jobs with a live lease and recent starts, per
    key. Budgets are spent as a claim chooses, so each choice gets a fresh one from here."""

    limits: dict[Key, Limit]
    running: dict[Key, int]
    starts: dict[Key, list[datetime]]
    at: datetime

    def budget(self) -> Budget:
        return Budget(self.limits, self.running, self.starts, self.at)


def usage(conn: sqlite3.Connection, found: dict[Key, Limit], at: datetime) -> Usage:
    """The counts every limit in ``found`` needs at ``at``."""
    running: dict[Key, int] = {}
    for queue, kind, tenant, count in conn.execute(_RUNNING, (to_us(at),)):
        for key in counted_keys(_counted(queue, kind, tenant)):
            running[key] = running.get(key, 0) + count
    # Starts are counted here, within the period of the limit each key falls under; Budget
    # takes instants, and ``at`` lies within every period.
    starts: dict[Key, list[datetime]] = {}
    for period, counts in _starts_by_period(conn, found, at).items():
        for key, count in counts.items():
            limit = limit_for(found, *key)
            if limit is not None and limit.period == period:
                starts[key] = [at] * count
    return Usage(found, running, starts, at)


def _counted(queue: str, kind: str, tenant: str | None) -> Job:
    """A stand-in job with just what ``counted_keys`` looks at."""
    return Job(
        id=0,
        kind=kind,
        queue=queue,
        payload=None,
        state=JobState.RUNNING,
        priority=0,
        run_at=EPOCH,
        attempt=0,
        max_attempts=1,
        created_at=EPOCH,
        tenant=tenant,
    )


def _starts_by_period(
    conn: sqlite3.Connection, found: dict[Key, Limit], at: datetime
) -> dict[timedelta, dict[Key, int]]:
    """For each rate period in ``found``, the starts per key within it (up to ``at``)."""
    periods = {limit.period for limit in found.values() if limit.period is not None}
    counted: dict[timedelta, dict[Key, int]] = {}
    for period in periods:
        rows = conn.execute(_STARTS_SINCE, (to_us(at - period),))
        counted[period] = {(_SCOPES[scope], key): total for scope, key, total in rows}
    return counted


_ADD_STARTS = """
INSERT INTO rota_limit_starts (scope, key, at, n) VALUES (?, ?, ?, ?)
ON CONFLICT (scope, key, at) DO UPDATE SET n = n + excluded.n
"""
_LATEST_STARTS = "SELECT at, n FROM rota_limit_starts WHERE scope = ? AND key = ? ORDER BY at DESC"


def record_starts(
    conn: sqlite3.Connection, found: dict[Key, Limit], started: Sequence[Key], at: datetime
) -> None:
    """Add a claim's starts (one key per job and rate-limited key, as ``Budget.started``).

    Only the latest ``rate`` starts of a key can ever fill its window, so no more are kept;
    and none older than the longest period any limit may have, which no window reaches.
    """
    at_us = to_us(at)
    for (scope, key), count in Counter(started).items():
        limit = limit_for(found, scope, key)
        if limit is None or limit.rate is None:
            continue
        conn.execute(_ADD_STARTS, (scope.value, key, at_us, count))
        _keep_latest(conn, scope, key, limit.rate)
    conn.execute("DELETE FROM rota_limit_starts WHERE at <= ?", (to_us(at - MAX_PERIOD),))


def _keep_latest(conn: sqlite3.Connection, scope: LimitScope, key: str, rate: int) -> None:
    """Forget all but the latest ``rate`` starts of (scope, key)."""
    kept = 0
    cut: tuple[int, int] | None = None
    cursor = conn.execute(_LATEST_STARTS, (scope.value, key))
    for start_us, n in cursor:
        if kept + n >= rate:
            cut = (start_us, kept + n - rate)
            break
        kept += n
    cursor.close()
    if cut is None:
        return
    start_us, excess = cut
    if excess:
        conn.execute(
            "UPDATE rota_limit_starts SET n = n - ? WHERE scope = ? AND key = ? AND at = ?",
            (excess, scope.value, key, start_us),
        )
    conn.execute(
        "DELETE FROM rota_limit_starts WHERE scope = ? AND key = ? AND at < ?",
        (scope.value, key, start_us),
    )


# ---------------------------------------------------------------------- reads for operators


def list_limits(conn: sqlite3.Connection, at: datetime) -> list[LimitInfo]:
    """Every limit with its running jobs and its starts within its period; a ``*`` tenant
    limit counts those of every tenant."""
    found = limits(conn)
    running: dict[Key, int] = {}
    if not found:
        # Nothing to count for: without this, every list page with a pending job on it read
        # every running job (10,000 of them took 50 ms beside a million jobs).
        return []
    for queue, kind, tenant, count in conn.execute(_RUNNING, (to_us(at),)):
        for scope, name in counted_keys(_counted(queue, kind, tenant)):
            for key in ((scope, name), (scope, EVERY_TENANT)):
                running[key] = running.get(key, 0) + count
    counted = _starts_by_period(conn, found, at)
    infos: list[LimitInfo] = []
    for ident, limit in found.items():
        recent = 0
        if limit.period is not None:
            recent = sum(
                count
                for (scope, key), count in counted[limit.period].items()
                if scope is limit.scope and (key == limit.key or limit.key == EVERY_TENANT)
            )
        infos.append(LimitInfo(limit, running.get(ident, 0), recent))
    return infos


def running_by_tenant(conn: sqlite3.Connection, at: datetime) -> dict[str, int]:
    rows = conn.execute(
        "SELECT tenant, count(*) FROM rota_jobs INDEXED BY rota_jobs_leases "
        "WHERE state = 'running' AND lease_until >= ? AND tenant IS NOT NULL "
        "GROUP BY tenant ORDER BY tenant",
        (to_us(at),),
    )
    return dict(rows.fetchall())
