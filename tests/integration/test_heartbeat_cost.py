"""What recording heartbeats costs a heartbeat: nothing more to send. On SQLite a heartbeat of
many leases is still one UPDATE (the count and the instant ride in it); on PostgreSQL no index
of rota_jobs or of any of its partitions covers the two columns it now writes, so it writes no
index entry it did not write before (its new lease_until, in rota_jobs_leases, already does)."""

from __future__ import annotations

import sqlite3
from datetime import timedelta
from pathlib import Path

import psycopg
import pytest

from rota.domain.job import JobSpec
from rota.store import open_store
from rota.store.sqlite.claims import heartbeat
from rota.testing import FakeClock

LEASE = timedelta(seconds=30)


async def test_a_sqlite_heartbeat_of_many_leases_is_one_statement(tmp_path: Path) -> None:
    clock = FakeClock()
    store = open_store(f"sqlite:///{tmp_path / 'rota.db'}", clock=clock)
    try:
        await store.migrate()
        await store.enqueue([JobSpec(kind="k") for _ in range(3)])
        held = await store.claim("w", queues=["default"], limit=3, lease=LEASE)
    finally:
        await store.close()
    assert len(held) == 3
    sent: list[str] = []
    conn = sqlite3.connect(tmp_path / "rota.db", isolation_level=None)
    try:
        conn.set_trace_callback(sent.append)
        beat = heartbeat(conn, [job.lease for job in held], LEASE, clock.now())
    finally:
        conn.close()
    assert beat.lost == []
    assert len(sent) == 1, sent
    assert "heartbeats = heartbeats + 1" in sent[0]


@pytest.mark.postgres
async def test_no_postgres_index_covers_the_heartbeat_columns(pg_url: str) -> None:
    store = open_store(pg_url)
    try:
        await store.migrate()
        await store.enqueue([JobSpec(kind="k")])  # makes the day partitions, if not yet made
    finally:
        await store.close()
    with psycopg.connect(pg_url) as conn:
        rows = conn.execute(
            """
            SELECT i.indexrelid::regclass::text, pg_get_indexdef(i.indexrelid)
            FROM pg_index i JOIN pg_class t ON t.oid = i.indrelid
            WHERE t.relname LIKE 'rota_jobs%'
            """
        ).fetchall()
    assert any(name == "rota_jobs_leases" for name, _ in rows)  # the indexes were read
    covering = [name for name, text in rows if "heartbeat" in text]
    assert covering == []
