"""Dashboard and API reads from a real streaming replica (``pg_basebackup -R`` of a throwaway
primary, over a replication slot): lists, counts and details come from the replica; writes and
the answers about them (a POST's response, a retry's 409) from the primary; /api/stats says how
far the replica trails, and `rota serve --read-database-url` wires it all up (and refuses a read
URL that cannot be a replica, before it listens or touches a database).

To make "from the replica" visible, the tests pause the replica's replay
(``pg_wal_replay_pause()``): whatever the primary commits meanwhile is missing from every read
that really goes to the replica, and present in every answer that must come from the primary.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from rota.api import ApiSettings, create_app
from rota.client import Client
from rota.domain.job import JobSpec
from rota.domain.job_state import JobState
from rota.store import Store, open_store
from rota.store.postgres.replica import open_replica
from tests.support.migrate import migrate_url
from tests.support.postgres import Cluster, pg_bin, with_database
from tests.support.processes import eventually
from tests.support.serve import REPO, serving

DATABASE = "rota_replicated"
#: A PostgreSQL URL nothing listens on: the refusals must come before any connection.
NOWHERE = "postgresql://nobody@127.0.0.1:1/rota"


@pytest.fixture(scope="module")
def pair() -> Iterator[tuple[str, str]]:
    """(primary URL, replica URL) of one migrated database on a throwaway primary and its
    streaming replica."""
    if pg_bin("initdb") is None or pg_bin("pg_basebackup") is None:
        pytest.skip("PostgreSQL server binaries (initdb, pg_basebackup) are not installed")
    primary = Cluster.create()
    try:
        with psycopg.connect(primary.url, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{DATABASE}"')
        migrate_url(with_database(primary.url, DATABASE))
        replica = primary.standby()
        try:
            yield with_database(primary.url, DATABASE), with_database(replica.url, DATABASE)
        finally:
            replica.destroy()
    finally:
        primary.destroy()


@pytest.fixture
async def primary(pair: tuple[str, str]) -> AsyncIterator[Store]:
    store = open_store(pair[0])
    yield store
    await store.close()


@pytest.fixture
async def api(pair: tuple[str, str], primary: Store) -> AsyncIterator[httpx.AsyncClient]:
    replica = open_replica(primary, pair[1])
    app = create_app(Client(primary), settings=ApiSettings(), replica=replica)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        yield client
    await replica.close()


class Replay:
    """Pauses and resumes the replica's WAL replay (always resumed at the end)."""

    def __init__(self, replica_url: str) -> None:
        self.url = replica_url

    async def _run(self, sql: str) -> Any:
        async with await psycopg.AsyncConnection.connect(self.url, autocommit=True) as conn:
            row = await (await conn.execute(sql)).fetchone()
            return row[0] if row else None

    async def pause(self) -> None:
        await self._run("SELECT pg_wal_replay_pause()")
        await eventually(
            lambda: self._state_is("paused"), within_s=30, what="the replica's replay to pause"
        )

    async def resume(self) -> None:
        await self._run("SELECT pg_wal_replay_resume()")

    async def _state_is(self, state: str) -> bool:
        return bool(await self._run("SELECT pg_get_wal_replay_pause_state()") == state)


@pytest.fixture
async def replay(pair: tuple[str, str]) -> AsyncIterator[Replay]:
    control = Replay(pair[1])
    try:
        yield control
    finally:
        await control.resume()


async def dead_job(store: Store) -> int:
    [result] = await store.enqueue([JobSpec(kind="email", priority=100)])
    [claimed] = await store.claim("w1", queues=["default"], limit=1, lease=timedelta(seconds=30))
    assert claimed.id == result.job.id
    await store.fail(claimed.lease, error="boom", retry_in=timedelta(0), permanent=True)
    return claimed.id


async def listed_ids(api: httpx.AsyncClient) -> set[int]:
    return {job["id"] for job in (await api.get("/api/jobs?limit=500")).json()["jobs"]}


async def lag(api: httpx.AsyncClient) -> dict[str, Any]:
    replica: dict[str, Any] = (await api.get("/api/stats")).json()["replica"]
    return replica


@pytest.mark.postgres
async def test_reads_come_from_the_replica_and_writes_and_their_answers_from_the_primary(
    api: httpx.AsyncClient, primary: Store, replay: Replay
) -> None:
    dead = await dead_job(primary)

    async def replicated() -> bool:
        return dead in await listed_ids(api)

    await eventually(replicated, within_s=30, what="the dead job on the replica")
    caught_up = await eventually(
        lambda: _lag_is(api, 0.0), within_s=30, what="the replica to catch up"
    )
    assert caught_up == {"replaying": True, "lag_seconds": 0.0}

    await replay.pause()
    created = await api.post("/api/jobs", json={"kind": "email"})
    assert created.status_code == 201  # written on the primary: a replica refuses writes
    new = created.json()["id"]
    assert new not in await listed_ids(api)  # the list is the replica's
    assert (await api.get(f"/api/jobs/{new}")).json()["state"] == "pending"  # not 404: primary
    assert (await api.post(f"/api/jobs/{dead}/retry")).status_code == 204
    again = await api.post(f"/api/jobs/{dead}/retry")
    assert again.status_code == 409, "the retry's check must read the primary"
    # The documented stale read: the replica still shows the job dead for now.
    assert (await api.get(f"/api/jobs/{dead}")).json()["state"] == "dead"
    stats = (await api.get("/api/stats")).json()
    assert stats["counts"]["by_state"]["pending"] == 0  # the primary has 2 by now
    assert stats["replica"]["replaying"] is True
    assert stats["replica"]["lag_seconds"] > 0
    assert (await primary.get(dead)).state is JobState.PENDING

    await replay.resume()

    async def seen_again() -> bool:
        detail = (await api.get(f"/api/jobs/{dead}")).json()
        return new in await listed_ids(api) and detail["state"] == "pending"

    await eventually(seen_again, within_s=30, what="the replica to replay the writes")
    await eventually(lambda: _lag_is(api, 0.0), within_s=30, what="the lag back to 0")


@pytest.mark.postgres
async def test_an_idle_primary_s_replica_has_no_lag_while_it_has_wal_without_commits_to_replay(
    pair: tuple[str, str], api: httpx.AsyncClient, primary: Store, replay: Replay
) -> None:
    await primary.enqueue([JobSpec(kind="email")])  # a commit for the replica to replay
    await eventually(lambda: _lag_is(api, 0.0), within_s=30, what="the replica to catch up")
    await replay.pause()
    # WAL without a commit, as an idle primary writes (checkpoints, standby snapshots): the
    # replica has less WAL replayed than the primary wrote, but lacks no committed row.
    async with await psycopg.AsyncConnection.connect(pair[0], autocommit=True) as conn:
        await conn.execute("CHECKPOINT")
        row = await (await conn.execute("SELECT pg_current_wal_lsn()::text")).fetchone()
    assert row is not None
    async with await psycopg.AsyncConnection.connect(pair[1], autocommit=True) as conn:
        behind = await conn.execute("SELECT pg_last_wal_replay_lsn() < %s::pg_lsn", (row[0],))
        assert (await behind.fetchone()) == (True,), "the replica has WAL left to replay"
    assert await lag(api) == {"replaying": True, "lag_seconds": 0.0}

    # A commit the replica lacks is lag.
    await primary.enqueue([JobSpec(kind="email")])
    assert (await lag(api))["lag_seconds"] > 0
    await replay.resume()
    await eventually(lambda: _lag_is(api, 0.0), within_s=30, what="the lag back to 0")


async def _lag_is(api: httpx.AsyncClient, seconds: float) -> dict[str, Any] | None:
    found = await lag(api)
    return found if found["lag_seconds"] == seconds else None


@pytest.mark.postgres
async def test_serve_reads_from_the_replica_given_by_its_flag_and_its_workers_use_the_primary(
    pair: tuple[str, str], primary: Store, replay: Replay, tmp_path: Path
) -> None:
    primary_url, replica_url = pair
    env = {"ROTA_DATABASE_URL": primary_url, "ROTA_READ_DATABASE_URL": replica_url}
    with serving(tmp_path, "--workers", "1", env=env) as served:
        stats = await asyncio.to_thread(served.get, "/api/stats")
        assert stats["replica"]["replaying"] is True
        await replay.pause()
        job = await asyncio.to_thread(served.post, "/api/jobs", {"kind": "email"})

        async def done_on_the_primary() -> bool:
            return (await primary.get(job["id"])).state is JobState.SUCCEEDED

        # The worker claimed and completed it: on the primary, since the replica has not
        # even replayed its enqueue.
        await eventually(done_on_the_primary, within_s=60, what="the job to succeed")
        listed = await asyncio.to_thread(served.get, "/api/jobs?limit=500")
        assert job["id"] not in {j["id"] for j in listed["jobs"]}
        assert (await asyncio.to_thread(served.get, "/api/stats"))["replica"]["lag_seconds"] > 0


@pytest.mark.parametrize(
    ("env", "message"),
    [
        (
            {"ROTA_DATABASE_URL": NOWHERE, "ROTA_READ_DATABASE_URL": "sqlite:///replica.db"},
            "must be a PostgreSQL replica",
        ),
        (
            {"ROTA_DATABASE_URL": "sqlite:///rota.db", "ROTA_READ_DATABASE_URL": NOWHERE},
            "needs the database itself on PostgreSQL",
        ),
    ],
)
def test_serve_refuses_a_read_url_that_cannot_be_a_replica(
    tmp_path: Path, env: dict[str, str], message: str
) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "rota", "serve", "--port", "0", "--workers", "0"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO / "src"), **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 2
    assert run.stderr.count("\n") == 1 and message in run.stderr, run.stderr
    assert list(tmp_path.iterdir()) == []  # no database file made, nothing written
