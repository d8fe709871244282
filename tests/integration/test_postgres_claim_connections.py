"""A store's claims and its pool's connections. Once a store claims, each connection its pool
opens runs the claim's functions before anyone borrows it (so their first call in the session,
which compiles and plans, is not a claim's), and that warm-up changes nothing: no job is taken,
locked or counted, expired leases included. A claim takes the connection of the last claim
when it is free (so a statement planned again after a vacuum is planned on one connection)."""

from __future__ import annotations

import contextlib
from datetime import timedelta

import psycopg
import pytest

from rota.domain.job import JobSpec
from rota.domain.job_state import JobState
from rota.store.postgres.store import PostgresStore, _warm_claims
from rota.store.records import WorkerInfo
from rota.testing import FakeClock

pytestmark = pytest.mark.postgres

LEASE = timedelta(seconds=30)


def snapshot(url: str) -> list[tuple[object, ...]]:
    """Every job row as stored (its xmin too: any write, even one that changes no value,
    shows), and the count deltas not yet folded."""
    with psycopg.connect(url, autocommit=True) as conn:
        jobs = conn.execute(
            "SELECT xmin::text, id, state, attempt, lease_token, lease_until, worker"
            " FROM rota_jobs ORDER BY id"
        ).fetchall()
        deltas = conn.execute(
            "SELECT queue, kind, state, sum(n) FROM rota_count_deltas GROUP BY 1, 2, 3 ORDER BY 1, 2, 3"
        ).fetchall()
    return [*jobs, ("deltas", *deltas)]


async def test_connections_opened_after_the_first_claim_come_with_the_claims_prepared(
    pg_url: str,
) -> None:
    store = PostgresStore.from_url(pg_url)
    try:
        await store.enqueue([JobSpec(kind="hook", queue="mail")])
        async with store._connection() as first:
            cold = await first.run("SELECT name FROM pg_prepared_statements", {})
        assert cold == [] or all("rota_claim" not in str(row) for row in cold)

        [job] = await store.claim("w", queues=["mail"], limit=10, lease=LEASE)
        pool = store._connections._pool
        assert pool is not None
        before = pool.get_stats()["pool_size"]
        async with contextlib.AsyncExitStack() as held:
            # Every connection the pool has, and one more: the pool opens it for the last.
            conns = [await held.enter_async_context(store._connection()) for _ in range(before)]
            opened = await held.enter_async_context(store._connection())
            assert opened.info.backend_pid not in {conn.info.backend_pid for conn in conns}
            rows = await opened.run("SELECT statement FROM pg_prepared_statements", {})
        prepared = " ".join(row[0] for row in rows)
        for function in ("rota_claim_all(", "rota_claim_fresh(", "rota_claim("):
            assert f"FROM {function}" in prepared, prepared
        assert job.state is JobState.RUNNING
    finally:
        await store.close()


async def test_the_warm_up_takes_locks_and_counts_nothing(pg_url: str) -> None:
    clock = FakeClock()
    store = PostgresStore.from_url(pg_url, clock=clock)
    try:
        await store.enqueue([JobSpec(kind="hook", queue=q) for q in ("mail", "mail", "sms")])
        [expiring] = await store.claim("gone", queues=["sms"], limit=1, lease=timedelta(seconds=1))
        clock.advance(timedelta(minutes=5))  # its lease has expired: claimable by takeover
        before = snapshot(pg_url)

        async with store._connection() as conn:
            await _warm_claims(conn)
            await _warm_claims(conn)  # again: the functions now run their kept plans
        assert snapshot(pg_url) == before

        taken = await store.claim("w", queues=["mail", "sms"], limit=10, lease=LEASE)
        assert sorted(job.queue for job in taken) == ["mail", "mail", "sms"]
        assert expiring.id in {job.id for job in taken}
    finally:
        await store.close()


async def test_a_registering_worker_warms_the_connections_its_store_opened_before(
    pg_url: str,
) -> None:
    store = PostgresStore.from_url(pg_url)
    try:
        async with store._connection() as one, store._connection() as two:
            opened = {one.info.backend_pid, two.info.backend_pid}
        await store.register_worker(
            WorkerInfo(name="w", host="h", pid=1, queues=("mail",), concurrency=1)
        )
        pool = store._connections._pool
        assert pool is not None
        async with contextlib.AsyncExitStack() as held:
            conns = [
                await held.enter_async_context(store._connection())
                for _ in range(pool.get_stats()["pool_size"])
            ]
            assert opened <= {conn.info.backend_pid for conn in conns}
            for conn in conns:
                rows = await conn.run("SELECT statement FROM pg_prepared_statements", {})
                assert any("FROM rota_claim_all(" in row[0] for row in rows), rows
    finally:
        await store.close()


async def test_a_claim_takes_the_connection_of_the_last_claim_when_it_is_free(
    pg_url: str,
) -> None:
    store = PostgresStore.from_url(pg_url)
    try:
        await store.enqueue([JobSpec(kind="hook", queue="mail") for _ in range(2)])
        assert len(await store.claim("w", queues=["mail"], limit=1, lease=LEASE)) == 1
        claimer = store._claimer
        assert claimer is not None
        # Other calls take it and another, and give the other back last: the pool would hand
        # that one out next.
        first, second = store._connection(), store._connection()
        one, two = await first.__aenter__(), await second.__aenter__()
        assert one is claimer and two is not claimer
        await first.__aexit__(None, None, None)
        await second.__aexit__(None, None, None)
        async with store._connection() as conn:
            assert conn is two
        assert len(await store.claim("w", queues=["mail"], limit=1, lease=LEASE)) == 1
        assert store._claimer is claimer

        # In use elsewhere, it is not waited for: the claim takes another.
        async with store._connection() as held:
            assert held is claimer
            assert await store.claim("w", queues=["mail"], limit=1, lease=LEASE) == []
            assert store._claimer is not claimer
    finally:
        await store.close()
