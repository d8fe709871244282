"""TESTPLAN T24: rota behind Debian's PgBouncer in transaction pooling mode.

A store notices the pooler by itself (the backend keys PgBouncer hands out) and then prepares
no statement on the server and LISTENs only on a direct connection, if one is configured.
`rota serve` (API, workers, schedule firer) and an enqueuing App run through PgBouncer: every
job finishes, every schedule slot fires, no advisory lock outlives its transaction and no
"prepared statement" error appears; with no direct connection the workers poll instead.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path

import psycopg
import pytest

import rota
from rota.domain.job import JobSpec
from rota.domain.job_state import JobState
from rota.store import JobFilter, Store, open_store
from tests.support.pgbouncer import PgBouncer, advisory_locks
from tests.support.processes import eventually
from tests.support.serve import serving

pytestmark = pytest.mark.postgres

APP = """
import rota

app = rota.App("memory://")
app.schedule("every-1s", kind="tick", every=1, misfire="all", overlap="allow")


@app.job("tick")
async def tick(ctx, payload):
    pass


@app.job("work")
async def work(ctx, payload):
    pass
"""


async def test_a_store_notices_pgbouncer_and_prepares_nothing_there(
    pg_url: str, pgbouncer: PgBouncer
) -> None:
    pooled = open_store(pgbouncer.route(pg_url))
    direct = open_store(pg_url)
    try:
        # More rounds than psycopg needs before it would prepare a statement, on connections
        # that PgBouncer deals out to each other's server sessions.
        for _ in range(12):
            await asyncio.gather(*(_round(store) for store in (pooled, pooled, direct)))
        assert pooled.behind_pooler is True  # type: ignore[attr-defined]
        assert direct.behind_pooler is False  # type: ignore[attr-defined]
        # No LISTEN through the pooler, so no pushed schedule changes: firers poll.
        assert pooled.pushes_schedule_changes is False
        assert direct.pushes_schedule_changes is True
        assert advisory_locks(pg_url) == 0
    finally:
        await pooled.close()
        await direct.close()


async def test_a_store_behind_pgbouncer_leaves_the_server_sessions_settings_alone(
    pg_url: str, pgbouncer: PgBouncer
) -> None:
    # A session setting sent through a transaction pooler would stay on whichever server
    # session ran it, for other clients: rota turns JIT off only on sessions of its own.
    with psycopg.connect(pg_url, autocommit=True) as conn:
        default = conn.execute("SHOW jit").fetchone()
    pooled = open_store(pgbouncer.route(pg_url))
    try:
        for _ in range(4):
            await _round(pooled)
        with psycopg.connect(pgbouncer.route(pg_url), autocommit=True) as conn:
            seen = {conn.execute("SHOW jit").fetchone() for _ in range(10)}
        assert seen == {default}
    finally:
        await pooled.close()


async def _round(store: Store) -> None:
    await store.enqueue([JobSpec(kind="k") for _ in range(3)])
    await store.pending_migrations()
    for job in await store.claim("w", queues=["default"], limit=2, lease=timedelta(seconds=30)):
        await store.complete(job.lease)


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize("listen", ["direct", "none"])
async def test_serve_enqueuers_and_schedules_run_through_pgbouncer(
    pg_url: str, pgbouncer: PgBouncer, tmp_path: Path, listen: str
) -> None:
    (tmp_path / "pooledapp.py").write_text(APP)
    pooled_url = pgbouncer.route(pg_url)
    env = {"ROTA_DATABASE_URL": pooled_url}
    if listen == "direct":
        env["ROTA_LISTEN_DATABASE_URL"] = pg_url
    with serving(tmp_path, "--app", "pooledapp:app", "--workers", "2", env=env) as served:
        for n in range(20):
            await asyncio.to_thread(served.post, "/api/jobs", {"kind": "work", "payload": n})
        async with rota.App(pooled_url) as enqueuer:
            await enqueuer.enqueue_many([JobSpec(kind="work", payload=n) for n in range(50)])
            assert enqueuer.store.behind_pooler is True  # type: ignore[attr-defined]

        direct = open_store(pg_url)
        try:

            async def finished() -> bool:
                work = await direct.list_jobs(JobFilter(kind="work"), limit=500)
                ticks = await direct.list_jobs(JobFilter(kind="tick"), limit=500)
                done = [job for job in ticks.jobs if job.state is JobState.SUCCEEDED]
                return (
                    len(work.jobs) == 70
                    and len(done) >= 3
                    and all(job.state is JobState.SUCCEEDED for job in work.jobs)
                )

            await eventually(finished, within_s=60, what="every job and three slots done")
            assert advisory_locks(pg_url) == 0
        finally:
            await direct.close()
        listening = _listeners(pg_url)
    log = served.log.read_text()
    assert "prepared statement" not in log, log
    assert "internal error" not in log and "Traceback" not in log, log
    if listen == "direct":
        assert listening == 2, "each worker LISTENs on the direct connection"
    else:
        assert listening == 0
        assert "no LISTEN, workers poll for jobs" in log


def _listeners(url: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        # A listener's last statement is its LISTEN or its probe.
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND (query LIKE 'LISTEN %%' OR query = 'SELECT 1')"
        ).fetchone()
        return int(row[0]) if row else 0
