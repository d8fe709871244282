"""An edit of a schedule racing its deletion on a real PostgreSQL: the replace reads the row
under its lock, so a delete that commits first leaves it nothing to replace, and it
resurrects nothing."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import psycopg
import pytest

from rota.domain.errors import ScheduleNotFound
from rota.domain.schedule import Rule, ScheduleSpec
from rota.store.postgres.store import PostgresStore
from tests.support.processes import eventually

pytestmark = pytest.mark.postgres


def _spec(priority: int = 0) -> ScheduleSpec:
    return ScheduleSpec(
        name="nightly", kind="report", rule=Rule.every(timedelta(minutes=1)), priority=priority
    )


async def _one_waiting(conn: psycopg.AsyncConnection[tuple[int]]) -> bool:
    cursor = await conn.execute(
        "SELECT count(*) FROM pg_stat_activity "
        "WHERE datname = current_database() AND wait_event_type = 'Lock'"
    )
    return await cursor.fetchone() == (1,)


async def test_a_replace_waiting_behind_a_delete_finds_nothing_and_creates_nothing(
    pg_url: str,
) -> None:
    store = PostgresStore.from_url(pg_url)
    deleter = await psycopg.AsyncConnection.connect(pg_url)
    watcher = await psycopg.AsyncConnection.connect(pg_url, autocommit=True)
    try:
        await store.create_schedule(_spec())
        await deleter.execute("DELETE FROM rota_schedules WHERE name = 'nightly'")
        replacing = asyncio.create_task(store.replace_schedule(_spec(priority=9)))
        await eventually(lambda: _one_waiting(watcher), what="the replace waiting on the row")
        assert not replacing.done()
        await deleter.commit()

        with pytest.raises(ScheduleNotFound, match="nightly"):
            await replacing
        assert await store.list_schedules() == []
    finally:
        await deleter.close()
        await watcher.close()
        await store.close()
