"""Worker processes of the chaos tests: ``tests.support.chaosapp`` with per-worker database
URLs (direct, or through a chaos proxy), extra environment (libfaketime) and a command prefix
(``ip netns exec``); plus the checks every chaos test runs at the end.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg

from rota.domain.errors import StoreUnavailable
from rota.domain.job_state import JobState
from rota.store import Store
from tests.support.effects import EFFECTS_ENV, PG_EFFECTS_SCHEMA, SQLITE_EFFECTS_SCHEMA
from tests.support.processes import Fleet, WorkerOptions, WorkerProcess, eventually

CHAOS_APP = "tests.support.chaosapp:app"
PROBES_ENV = "ROTA_CHAOS_PROBES"  # read by chaosapp
#: Seconds between the slots of chaosapp's schedule ``SCHEDULE``; unset, it has none.
SCHEDULE_ENV = "ROTA_CHAOS_SCHEDULE_EVERY"
SCHEDULE = "chaos-tick"
#: Set (to 1), chaosapp's schedule fires every slot: missed ones all, overlapping runs allowed.
SCHEDULE_ALL_ENV = "ROTA_CHAOS_SCHEDULE_ALL"


class ChaosFleet(Fleet):
    """A Fleet of chaosapp workers; ``effects`` is the fenced store (URL or SQLite path)."""

    def __init__(self, *args: Any, effects: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.effects = effects
        self.probes = self.directory / "probes"
        self.probes.mkdir(exist_ok=True)
        if effects.startswith("postgresql://"):
            with psycopg.connect(effects, autocommit=True) as conn:
                conn.execute(PG_EFFECTS_SCHEMA)
        else:
            conn = sqlite3.connect(effects)
            conn.executescript("PRAGMA journal_mode=WAL;" + SQLITE_EFFECTS_SCHEMA)
            conn.close()

    def start(
        self,
        name: str,
        *,
        env: dict[str, str] | None = None,
        app: str = CHAOS_APP,
        **kwargs: Any,
    ) -> WorkerProcess:
        """Fleet.start for a chaosapp worker, told where the fenced store and probes live."""
        chaos_env = {EFFECTS_ENV: self.effects, PROBES_ENV: str(self.probes), **(env or {})}
        return super().start(name, env=chaos_env, app=app, **kwargs)

    def effect_log(self) -> list[tuple[int, str, int, bool]]:
        """(seq, key, fence, accepted) of every write to the fenced store, in order."""
        sql = "SELECT seq, key, fence, accepted FROM chaos_effect_log ORDER BY seq"
        if self.effects.startswith("postgresql://"):
            with psycopg.connect(self.effects, autocommit=True) as conn:
                return [tuple(row) for row in conn.execute(sql).fetchall()]  # type: ignore[misc]
        conn = sqlite3.connect(self.effects)
        try:
            return [(s, k, f, bool(a)) for s, k, f, a in conn.execute(sql).fetchall()]
        finally:
            conn.close()

    def effects_now(self) -> dict[str, int]:
        sql = "SELECT key, fence FROM chaos_effects"
        if self.effects.startswith("postgresql://"):
            with psycopg.connect(self.effects, autocommit=True) as conn:
                return dict(conn.execute(sql).fetchall())  # type: ignore[arg-type]
        conn = sqlite3.connect(self.effects)
        try:
            return dict(conn.execute(sql).fetchall())
        finally:
            conn.close()

    def check_fenced_effects(self, succeeded: dict[int, int]) -> int:
        """Assert the fenced store never accepted a lower token after a higher one, and that
        each succeeded job's effect carries its final token (``succeeded``: id -> token).
        Returns how many stale writes were rejected."""
        highest: dict[str, int] = {}
        rejected = 0
        for seq, key, fence, accepted in self.effect_log():
            if accepted:
                assert fence > highest.get(key, -1), (
                    f"effect {key}: accepted fence {fence} after {highest[key]} (log seq {seq})"
                )
                highest[key] = fence
            else:
                rejected += 1
                assert fence <= highest.get(key, -1), f"effect {key}: fence {fence} rejected"
        stored = self.effects_now()
        wrong = {
            job_id: (token, stored.get(str(job_id)))
            for job_id, token in succeeded.items()
            if stored.get(str(job_id)) != token
        }
        assert not wrong, f"effects not written by the accepted attempt: {list(wrong.items())[:10]}"
        return rejected


@contextlib.contextmanager
def fleet_on(
    url: str, store: Store, directory: Path, options: WorkerOptions, *, tail: int = 25
) -> Iterator[ChaosFleet]:
    """A ChaosFleet on ``url`` whose fenced store is a table in that same database. On exit
    every worker is reaped and the last ``tail`` lines of each one's log printed (pytest shows
    them when the test failed: short, so the failure stays in view)."""
    fleet = ChaosFleet(url, store, directory, options, effects=url)
    try:
        yield fleet
    finally:
        fleet.close()
        print(fleet.logs(tail=tail))
        print(f"every worker's whole log: {directory}/*.stderr")


async def all_terminal(store: Store, expected: int, *, within_s: float) -> float:
    """Wait until ``expected`` jobs are terminal and none pending or running; return how long
    that took."""
    start = asyncio.get_running_loop().time()

    async def done() -> bool:
        try:
            counts = await store.counts()
        except StoreUnavailable:  # the test's own connection may be mid-reconnect
            return False
        active = counts.total(JobState.PENDING) + counts.total(JobState.RUNNING)
        terminal = sum(counts.total(s) for s in (JobState.SUCCEEDED, JobState.DEAD))
        return active == 0 and terminal + counts.total(JobState.CANCELLED) >= expected

    await eventually(done, within_s=within_s, every_s=0.2, what=f"{expected} jobs terminal")
    return asyncio.get_running_loop().time() - start


def sqlite_integrity(path: str | Path) -> str:
    conn = sqlite3.connect(os.fspath(path), timeout=30)
    try:
        return str(conn.execute("PRAGMA integrity_check").fetchone()[0])
    finally:
        conn.close()


LEASE_AUDIT = """
CREATE TABLE IF NOT EXISTS chaos_lease_audit (
    job_id bigint NOT NULL, token bigint NOT NULL, lease_until timestamptz NOT NULL,
    at timestamptz NOT NULL DEFAULT clock_timestamp());
CREATE OR REPLACE FUNCTION chaos_audit_lease() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.state = 'running' AND NEW.lease_until IS DISTINCT FROM OLD.lease_until THEN
        INSERT INTO chaos_lease_audit (job_id, token, lease_until)
        VALUES (NEW.id, NEW.lease_token, NEW.lease_until);
    END IF;
    RETURN NULL;
END $$;
CREATE OR REPLACE TRIGGER chaos_audit_lease AFTER UPDATE ON rota_jobs
    FOR EACH ROW EXECUTE FUNCTION chaos_audit_lease();
"""


def install_lease_audit(url: str) -> None:
    """Record every lease the store grants or extends (claim, heartbeat) with the DB time,
    so a test knows the DB instant from which another worker could take a job over."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(LEASE_AUDIT)


def lease_grants(url: str, job_id: int, token: int) -> list[float]:
    """Every lease_until granted to (job, token), as epoch seconds, in the order granted."""
    sql = (
        "SELECT extract(epoch FROM lease_until) FROM chaos_lease_audit "
        "WHERE job_id = %s AND token = %s ORDER BY at"
    )
    with psycopg.connect(url, autocommit=True) as conn:
        return [float(row[0]) for row in conn.execute(sql, [job_id, token]).fetchall()]


class MostSucceeded:
    """Watches the store in the background, while a nemesis runs, until ``share`` of ``total``
    jobs have succeeded: ``reached()`` says whether they have (the nemesis's stop condition)."""

    def __init__(self, store: Store, total: int, share: float = 0.9) -> None:
        self._store = store
        self._wanted = share * total
        self._reached = False
        self._task: asyncio.Task[None] | None = None

    def reached(self) -> bool:
        return self._reached

    async def _watch(self) -> None:
        while not self._reached:
            counts = await self._store.counts()
            self._reached = counts.total(JobState.SUCCEEDED) >= self._wanted
            await asyncio.sleep(0.2)

    async def __aenter__(self) -> MostSucceeded:
        self._task = asyncio.create_task(self._watch())
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
