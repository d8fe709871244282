"""One adapter per system: its database, schema, enqueue calls and the cheap questions the
harness polls (how many jobs finished, how many run now), each through the system's own API.

Loading a million background rows is the one place that writes SQL into a peer's tables
directly (one ``INSERT ... SELECT generate_series``); the rows are what the
peer's own enqueue would write.
"""

from __future__ import annotations

import importlib.util
from typing import Any

import psycopg

from bench.harness import DB_PREFIX, Settings, execute, recreate_database, scalar

#: The last id a sequence handed out (0 before the first): rows may have been deleted since.
_LAST_ID = "SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM {sequence}"


class System:
    """The adapter interface; see the module docstring."""

    name = ""
    #: Worker processes' environment for the drain-type scenarios: the best settings found.
    drain_env: dict[str, str] = {}
    running_sql = ""
    #: The table the system keeps its queued jobs in.
    table = ""
    #: The store's instant (epoch seconds) of the last successful completion.
    last_finished_sql = ""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.database = f"{DB_PREFIX}{self.name}"
        self.dsn = settings.dsn(self.database)
        self.drain_env = {**type(self).drain_env, **settings.tuned.get(self.name, {})}

    async def setup(self) -> None:
        await recreate_database(self.settings, self.database)
        await self.install()
        await self.open()

    async def install(self) -> None:
        raise NotImplementedError

    async def open(self) -> None:
        raise NotImplementedError

    async def close(self) -> None:
        raise NotImplementedError

    async def reset(self) -> None:
        raise NotImplementedError

    async def enqueue_one(self, kind: str, seq: int) -> None:
        raise NotImplementedError

    async def enqueue_bulk(self, kind: str, count: int) -> None:
        raise NotImplementedError

    async def load_future(self, count: int) -> None:
        """``count`` jobs of kind noop due in a day, then VACUUM ANALYZE."""
        raise NotImplementedError

    async def load_finished(self, count: int) -> None:
        """``count`` finished jobs (where the system keeps finished jobs), then VACUUM ANALYZE."""
        raise NotImplementedError

    async def watermark(self) -> int:
        """A number marking "now" in the job stream, for ``done_sql`` and ``succeeded``."""
        raise NotImplementedError

    def done_sql(self, mark: int, count: int) -> str:
        """A cheap query, true once the ``count`` jobs enqueued after ``mark`` have finished."""
        raise NotImplementedError

    async def succeeded(self, mark: int) -> int:
        """How many jobs enqueued after ``mark`` succeeded (exact; run once, after a drain)."""
        raise NotImplementedError

    async def vacuum(self, *tables: str) -> None:
        await execute(self.dsn, *(f"VACUUM ANALYZE {table}" for table in tables))

    async def analyze(self) -> None:
        await execute(self.dsn, f"ANALYZE {self.table}")

    async def last_finished(self) -> float | None:
        """When the last job succeeded, by the store's clock (the host's clock: same machine)."""
        value = await scalar(self.dsn, self.last_finished_sql)
        return float(value) if value is not None else None

    def settings_text(self) -> str:
        return ""


class Rota(System):
    name = "rota"
    #: The worker settings of every drain (``bench.drains``), the scale and day benches too: a
    #: claim of 500 into 1,000 slots. Against 250 into 500 (the settings until 2026-12-06), in
    #: alternated 100,000-job bursts on the bench's cluster, it cut PostgreSQL's CPU per job by
    #: a tenth and drained about 5% faster with two processes, as fast with one. 500 into 500
    #: was faster with two processes and a fifth slower with one (``bench.drain_settings``).
    drain_env = {"BENCH_CONCURRENCY": "1000", "BENCH_CLAIM_BATCH": "500"}
    running_sql = "SELECT count(*) FROM rota_jobs WHERE state = 'running'"
    table = "rota_jobs"
    last_finished_sql = (
        "SELECT extract(epoch FROM max(finished_at)) FROM rota_jobs WHERE state = 'succeeded'"
    )
    # The per-minute tally is kept by the completing statement itself: a tiny table.
    _tally = "SELECT coalesce(sum(n), 0) FROM rota_finished_per_minute WHERE state = 'succeeded'"

    async def watermark(self) -> int:
        return int(await scalar(self.dsn, self._tally))

    def done_sql(self, mark: int, count: int) -> str:
        return f"SELECT coalesce(sum(n), 0) >= {mark + count} FROM rota_finished_per_minute WHERE state = 'succeeded'"

    async def succeeded(self, mark: int) -> int:
        return int(await scalar(self.dsn, self._tally)) - mark

    async def install(self) -> None:
        from rota import App

        async with App(self.dsn, auto_migrate=True):
            pass

    async def open(self) -> None:
        from rota import App

        self.app = App(self.dsn)
        await self.app.open()

    async def close(self) -> None:
        await self.app.close()

    async def reset(self) -> None:
        await execute(
            self.dsn,
            "TRUNCATE rota_jobs, rota_job_deps, rota_finished_per_minute, rota_workers RESTART IDENTITY",
        )

    async def enqueue_one(self, kind: str, seq: int) -> None:
        await self.app.enqueue(kind, {"seq": seq})

    async def enqueue_bulk(self, kind: str, count: int, tenant: str | None = None) -> None:
        spec = self.app.spec
        await self.app.enqueue_many(spec(kind, {"seq": i}, tenant=tenant) for i in range(count))

    async def load_future(self, count: int) -> None:
        await execute(
            self.dsn,
            "INSERT INTO rota_jobs (kind, queue, payload, run_at, max_attempts, created_at) "
            "SELECT 'noop', 'default', '{}', now() + interval '1 day', 3, now() "
            f"FROM generate_series(1, {int(count)})",
        )
        await self.vacuum("rota_jobs")

    async def load_finished(self, count: int) -> None:
        await execute(
            self.dsn,
            "INSERT INTO rota_jobs (kind, queue, payload, state, run_at, attempt, max_attempts, "
            "lease_token, worker, created_at, started_at, finished_at) "
            "SELECT 'noop', 'default', '{}', 'succeeded', now() - interval '1 hour', 1, 3, "
            "nextval('rota_lease_token_seq'), 'loader', now() - interval '1 hour', "
            "now() - interval '1 hour', now() - interval '59 minutes' "
            f"FROM generate_series(1, {int(count)})",
        )
        await self.vacuum("rota_jobs")

    @classmethod
    def drain_settings(cls) -> str:
        """The drain's worker settings, as the reports name them."""
        env = cls.drain_env
        return f"concurrency {env['BENCH_CONCURRENCY']}, claim_batch {env['BENCH_CLAIM_BATCH']}"

    def settings_text(self) -> str:
        return (
            f"`App.run_worker`, {self.drain_settings()}, fair claims on (the default), "
            f"{_rota_loop()}, psycopg 3 with its pool"
        )


def _rota_loop() -> str:
    """The loop bench/worker.py runs rota on: the one `rota worker` picks."""
    if importlib.util.find_spec("uvloop") is None:
        return "asyncio's loop (uvloop is not installed)"
    return "on uvloop, as `rota worker` runs with `rota[speed]` installed"


class PgQueuer(System):
    name = "pgqueuer"
    drain_env = {"BENCH_BATCH_SIZE": "100"}
    running_sql = "SELECT count(*) FROM pgqueuer WHERE status = 'picked'"
    table = "pgqueuer"
    # A finished job's row is deleted and its outcome logged, stamped when it was logged.
    last_finished_sql = (
        "SELECT extract(epoch FROM max(created)) FROM pgqueuer_log WHERE status = 'successful'"
    )

    async def watermark(self) -> int:
        return int(await scalar(self.dsn, _LAST_ID.format(sequence="pgqueuer_id_seq")))

    def done_sql(self, mark: int, count: int) -> str:
        # A finished job's row is deleted (and logged in pgqueuer_log).
        return f"SELECT NOT EXISTS (SELECT 1 FROM pgqueuer WHERE id > {mark})"

    async def succeeded(self, mark: int) -> int:
        return int(
            await scalar(
                self.dsn,
                f"SELECT count(*) FROM pgqueuer_log WHERE job_id > {mark} AND status = 'successful'",
            )
        )

    async def install(self) -> None:
        from pgqueuer import Queries

        from bench.apps import pgqueuer_driver

        driver, close = await pgqueuer_driver(self.dsn)
        try:
            await Queries(driver).install()
        finally:
            await close()

    async def open(self) -> None:
        from pgqueuer import Queries

        from bench.apps import pgqueuer_driver

        driver, self._close = await pgqueuer_driver(self.dsn)
        self.queries = Queries(driver)

    async def close(self) -> None:
        await self._close()

    async def reset(self) -> None:
        await execute(
            self.dsn,
            "TRUNCATE pgqueuer, pgqueuer_log, pgqueuer_statistics RESTART IDENTITY",
        )

    async def enqueue_one(self, kind: str, seq: int) -> None:
        await self.queries.enqueue(kind, str(seq).encode())

    async def enqueue_bulk(self, kind: str, count: int) -> None:
        await self.queries.enqueue(
            [kind] * count, [str(i).encode() for i in range(count)], [0] * count
        )

    async def load_future(self, count: int) -> None:
        await execute(
            self.dsn,
            "INSERT INTO pgqueuer (priority, status, entrypoint, payload, execute_after) "
            "SELECT 0, 'queued', 'noop', NULL, now() + interval '1 day' "
            f"FROM generate_series(1, {int(count)})",
        )
        await self.vacuum("pgqueuer")

    async def load_finished(self, count: int) -> None:
        # PgQueuer deletes a finished job from its queue table; its history is pgqueuer_log.
        await execute(
            self.dsn,
            "INSERT INTO pgqueuer_log (job_id, status, priority, entrypoint, created) "
            # Negative ids: no clash with the jobs a later drain counts by id.
            "SELECT -g, 'successful', 0, 'noop', now() - interval '1 hour' "
            f"FROM generate_series(1, {int(count)}) AS g",
        )
        await self.vacuum("pgqueuer_log")

    def settings_text(self) -> str:
        from bench.apps import pgqueuer_driver_name, pgqueuer_loop_name

        return (
            f"`pgqueuer.run` (what `pgq run` runs) on {pgqueuer_loop_name()}, "
            f"{pgqueuer_driver_name()} driver, batch size {self.drain_env['BENCH_BATCH_SIZE']}, "
            "no concurrency cap (its defaults otherwise)"
        )


class Procrastinate(System):
    name = "procrastinate"
    drain_env = {"BENCH_CONCURRENCY": "10"}
    running_sql = "SELECT count(*) FROM procrastinate_jobs WHERE status = 'doing'"
    table = "procrastinate_jobs"
    last_finished_sql = (
        "SELECT extract(epoch FROM max(at)) FROM procrastinate_events WHERE type = 'succeeded'"
    )

    async def watermark(self) -> int:
        return int(await scalar(self.dsn, _LAST_ID.format(sequence="procrastinate_jobs_id_seq")))

    def done_sql(self, mark: int, count: int) -> str:
        return (
            "SELECT NOT EXISTS (SELECT 1 FROM procrastinate_jobs "
            f"WHERE id > {mark} AND status IN ('todo', 'doing'))"
        )

    async def succeeded(self, mark: int) -> int:
        return int(
            await scalar(
                self.dsn,
                f"SELECT count(*) FROM procrastinate_jobs WHERE id > {mark} AND status = 'succeeded'",
            )
        )

    async def install(self) -> None:
        from bench.apps import procrastinate_app

        app = procrastinate_app(self.dsn, 2)
        async with app.open_async():
            await app.schema_manager.apply_schema_async()

    async def open(self) -> None:
        from bench.apps import procrastinate_app

        self.app = procrastinate_app(self.dsn, 4)
        await self.app.open_async()

    async def close(self) -> None:
        await self.app.close_async()

    async def reset(self) -> None:
        await execute(
            self.dsn,
            "TRUNCATE procrastinate_jobs, procrastinate_events, procrastinate_periodic_defers, "
            "procrastinate_workers RESTART IDENTITY CASCADE",
        )

    async def enqueue_one(self, kind: str, seq: int) -> None:
        await self.app.tasks[kind].defer_async(seq=seq)

    async def enqueue_bulk(self, kind: str, count: int) -> None:
        await self.app.tasks[kind].batch_defer_async(*({"seq": i} for i in range(count)))

    async def load_future(self, count: int) -> None:
        await execute(
            self.dsn,
            "INSERT INTO procrastinate_jobs (queue_name, task_name, args, status, scheduled_at) "
            "SELECT 'default', 'noop', '{}', 'todo', now() + interval '1 day' "
            f"FROM generate_series(1, {int(count)})",
        )
        await self.vacuum("procrastinate_jobs")

    async def load_finished(self, count: int) -> None:
        await execute(
            self.dsn,
            "INSERT INTO procrastinate_jobs (queue_name, task_name, args, status, attempts) "
            "SELECT 'default', 'noop', '{}', 'succeeded', 1 "
            f"FROM generate_series(1, {int(count)})",
        )
        await self.vacuum("procrastinate_jobs")

    def settings_text(self) -> str:
        tuned = self.settings.tuned.get(self.name, {}).get("BENCH_TUNED_FROM")
        how = f", the best of {tuned} measured in this run" if tuned else ""
        return (
            f"`App.run_worker_async`, concurrency {self.drain_env['BENCH_CONCURRENCY']}{how}, "
            "PsycopgConnector pool of concurrency + 2, LISTEN/NOTIFY on (defaults otherwise)"
        )


ALL: dict[str, type[System]] = {
    "rota": Rota,
    "pgqueuer": PgQueuer,
    "procrastinate": Procrastinate,
}


def make(name: str, settings: Settings) -> System:
    return ALL[name](settings)


async def count(dsn: str, statement: str) -> int:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        row: Any = await (await conn.execute(statement)).fetchone()
        return int(row[0])
