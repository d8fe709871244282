"""One adapter per system: its database, schema, enqueue calls and the cheap questions the
harness polls (how many jobs finished, how many run now), each through the system's own API.

Loading a million background rows is the one place that writes SQL into a peer's tables
directly (one ``INSERT ... SELECT generate_series``); the rows are what the
peer's own enqueue would write.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import time
from typing import Any

import psycopg

from bench.harness import (
    DB_PREFIX,
    PYTHON312,
    ROOT,
    Settings,
    execute,
    recreate_database,
    scalar,
)

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
    #: The command of one worker process (``bench.harness.start_workers``); None: bench.worker.
    worker_argv: list[str] | None = None

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

    async def enqueue_noted(self, kind: str, seq: int) -> float:
        """``enqueue_one``, then the instant its call returned (its commit), by ``time.time()``."""
        await self.enqueue_one(kind, seq)
        return time.time()

    async def timed_singles(self, kind: str, count: int) -> float:
        """Seconds for ``count`` enqueues of one job per call, one after another."""
        started = time.perf_counter()
        for seq in range(count):
            await self.enqueue_one(kind, seq)
        return time.perf_counter() - started

    async def timed_bulk(self, kind: str, count: int) -> float:
        """Seconds for one bulk enqueue of ``count`` jobs."""
        started = time.perf_counter()
        await self.enqueue_bulk(kind, count)
        return time.perf_counter() - started

    async def last_row(self) -> int:
        """A mark past every row of the jobs table now (``clean_after`` removes those after)."""
        return int(await scalar(self.dsn, f"SELECT coalesce(max(id), 0) FROM {self.table}"))

    async def clean_after(self, mark: int) -> None:
        """Remove the rows added after ``last_row`` gave ``mark`` (and their traces)."""
        await execute(self.dsn, f"DELETE FROM {self.table} WHERE id > {mark}", *self._traces)
        await self.vacuum(self.table)

    #: Statements that empty what a system writes beside its jobs table (``clean_after``).
    _traces: tuple[str, ...] = ()

    async def load_future(self, count: int) -> None:
        """``count`` jobs of kind noop due in a day, then VACUUM ANALYZE."""
        raise NotImplementedError

    async def load_finished(self, count: int) -> None:
        """``count`` finished jobs (where the system keeps finished jobs), then VACUUM ANALYZE."""
        raise NotImplementedError

    #: Where the jobs table keeps its rows by a serial id: its sequence, and the conditions of
    #: an unfinished and of a succeeded job (the defaults of the three methods below use them).
    _sequence = ""
    _unfinished = ""
    _succeeded = ""

    async def watermark(self) -> int:
        """A number marking "now" in the job stream, for ``done_sql`` and ``succeeded``."""
        return int(await scalar(self.dsn, _LAST_ID.format(sequence=self._sequence)))

    def done_sql(self, mark: int, count: int) -> str:
        """A cheap query, true once the ``count`` jobs enqueued after ``mark`` have finished."""
        return (
            f"SELECT NOT EXISTS (SELECT 1 FROM {self.table} "
            f"WHERE id > {mark} AND {self._unfinished})"
        )

    async def succeeded(self, mark: int) -> int:
        """How many jobs enqueued after ``mark`` succeeded (exact; run once, after a drain)."""
        return int(
            await scalar(
                self.dsn,
                f"SELECT count(*) FROM {self.table} WHERE id > {mark} AND {self._succeeded}",
            )
        )

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
    #: was faster with two processes and a fifth slower with one (``bench.drain_settings``;
    #: bench/reading.md, "The bench's drain settings", has a run of it).
    drain_env = {"BENCH_CONCURRENCY": "1000", "BENCH_CLAIM_BATCH": "500"}
    running_sql = "SELECT count(*) FROM rota_jobs WHERE state = 'running'"
    table = "rota_jobs"
    last_finished_sql = (
        "SELECT extract(epoch FROM max(finished_at)) FROM rota_jobs WHERE state = 'succeeded'"
    )
    _traces = ("TRUNCATE rota_finished_per_minute",)
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
    _traces = ("DELETE FROM pgqueuer_log WHERE job_id > 0",)
    # A finished job's row is deleted and its outcome logged, stamped when it was logged.
    last_finished_sql = (
        "SELECT extract(epoch FROM max(created)) FROM pgqueuer_log WHERE status = 'successful'"
    )

    _sequence = "pgqueuer_id_seq"

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
    _traces = ("TRUNCATE procrastinate_events",)
    last_finished_sql = (
        "SELECT extract(epoch FROM max(at)) FROM procrastinate_events WHERE type = 'succeeded'"
    )

    _sequence = "procrastinate_jobs_id_seq"
    _unfinished = "status IN ('todo', 'doing')"
    _succeeded = "status = 'succeeded'"

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


class Peer312(System):
    """A peer run in the Python 3.12 venv (``bench.peers312``): its workers are that venv's
    processes, and its schema and enqueues go through a process there that answers one JSON
    request a line. The timed loops run in that process and return their own seconds."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self.worker_argv = [str(PYTHON312), "-m", "bench.peers312", "worker", self.name]
        self._process: asyncio.subprocess.Process | None = None

    async def _call(self, op: str, **args: Any) -> Any:
        if self._process is None:
            self._process = await asyncio.create_subprocess_exec(
                str(PYTHON312),
                "-m",
                "bench.peers312",
                "serve",
                self.name,
                self.dsn,
                cwd=ROOT,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                limit=2**20,
            )
        process = self._process
        assert process.stdin is not None
        assert process.stdout is not None
        process.stdin.write((json.dumps({"op": op, **args}) + "\n").encode())
        await process.stdin.drain()
        line = await asyncio.wait_for(process.stdout.readline(), timeout=1800)
        if not line:
            raise RuntimeError(f"{self.name}: its Python 3.12 process exited")
        answer = json.loads(line)
        if "error" in answer:
            raise RuntimeError(f"{self.name}: {answer['error']}")
        return answer["ok"]

    async def install(self) -> None:
        await self._call("install")

    async def open(self) -> None:
        await self._call("open")

    async def close(self) -> None:
        if self._process is None:
            return
        try:
            await self._call("close")
            await asyncio.wait_for(self._process.wait(), timeout=30)
        finally:
            if self._process.returncode is None:
                self._process.kill()
                await self._process.wait()
            self._process = None

    async def enqueue_one(self, kind: str, seq: int) -> None:
        await self._call("enqueue_one", kind=kind, seq=seq)

    async def enqueue_noted(self, kind: str, seq: int) -> float:
        return float(await self._call("enqueue_one", kind=kind, seq=seq))

    async def enqueue_bulk(self, kind: str, count: int) -> None:
        await self._call("enqueue_bulk", kind=kind, count=count)

    async def timed_singles(self, kind: str, count: int) -> float:
        return float(await self._call("enqueue_singles", kind=kind, count=count))

    async def timed_bulk(self, kind: str, count: int) -> float:
        return float(await self._call("enqueue_bulk", kind=kind, count=count))


class Oban(Peer312):
    name = "oban"
    #: Its queue's limit: the most jobs one worker runs at once, and so the most one fetch takes
    #: (the drain scenario measures a few and takes the best for the run).
    drain_env = {"BENCH_CONCURRENCY": "100"}
    running_sql = "SELECT count(*) FROM oban_jobs WHERE state = 'executing'"
    table = "oban_jobs"
    # Oban keeps a finished job's row (state completed) until its pruner deletes it (a day on).
    last_finished_sql = (
        "SELECT extract(epoch FROM max(completed_at)) FROM oban_jobs WHERE state = 'completed'"
    )
    _columns = "args, meta, tags, queue, worker, priority, max_attempts, inserted_at, scheduled_at"
    _row = (
        "'{\"seq\": 0}', '{}', '{}', 'bench', 'bench.oban_app.Noop', 0, 20, "
        "timezone('UTC', now()), "
    )

    _sequence = "oban_jobs_id_seq"
    _unfinished = "state IN ('available', 'scheduled', 'executing', 'retryable')"
    _succeeded = "state = 'completed'"

    async def reset(self) -> None:
        await execute(self.dsn, "TRUNCATE oban_jobs RESTART IDENTITY")

    async def load_future(self, count: int) -> None:
        await execute(
            self.dsn,
            f"INSERT INTO oban_jobs ({self._columns}, state) SELECT {self._row}"
            "timezone('UTC', now()) + interval '1 day', 'scheduled' "
            f"FROM generate_series(1, {int(count)})",
        )
        await self.vacuum("oban_jobs")

    async def load_finished(self, count: int) -> None:
        await execute(
            self.dsn,
            f"INSERT INTO oban_jobs ({self._columns}, state, attempt, attempted_at, "
            f"attempted_by, completed_at) SELECT {self._row}"
            "timezone('UTC', now()) - interval '1 hour', 'completed', 1, "
            "timezone('UTC', now()) - interval '1 hour', '{loader}', "
            "timezone('UTC', now()) - interval '59 minutes' "
            f"FROM generate_series(1, {int(count)})",
        )
        await self.vacuum("oban_jobs")

    def settings_text(self) -> str:
        tuned = self.settings.tuned.get(self.name, {}).get("BENCH_TUNED_FROM")
        how = f" (the best of {tuned} measured in this run)" if tuned else ""
        return (
            f"`Oban(queues={{'bench': {self.drain_env['BENCH_CONCURRENCY']}}})`{how} started as "
            "`oban start` runs it: uvloop, a psycopg pool of 10 (its default), "
            "LISTEN/NOTIFY on insert, a fetch of as many jobs as the queue's limit leaves free; "
            "its defaults otherwise. Python 3.12, in a venv of its own"
        )


class Dbos(Peer312):
    name = "dbos"
    #: Its queue's polling interval (documented ``polling_interval_sec``; its default is 1 s).
    drain_env = {"BENCH_POLL_S": "0.1"}
    running_sql = "SELECT count(*) FROM dbos.workflow_status WHERE status = 'PENDING'"
    table = "dbos.workflow_status"
    last_finished_sql = (
        "SELECT max(updated_at) / 1000.0 FROM dbos.workflow_status WHERE status = 'SUCCESS'"
    )
    _unfinished = "status IN ('ENQUEUED', 'PENDING', 'DELAYED')"
    _succeeded = "status = 'SUCCESS'"

    # Its workflows carry no serial id: the creation instant (epoch ms) marks the stream.
    async def watermark(self) -> int:
        return await self.last_row()

    def done_sql(self, mark: int, count: int) -> str:
        return (
            "SELECT NOT EXISTS (SELECT 1 FROM dbos.workflow_status "
            f"WHERE created_at > {mark} AND {self._unfinished})"
        )

    async def succeeded(self, mark: int) -> int:
        return int(
            await scalar(
                self.dsn,
                "SELECT count(*) FROM dbos.workflow_status "
                f"WHERE created_at > {mark} AND {self._succeeded}",
            )
        )

    async def last_row(self) -> int:
        return int(
            await scalar(self.dsn, "SELECT coalesce(max(created_at), 0) FROM dbos.workflow_status")
        )

    async def clean_after(self, mark: int) -> None:
        await execute(self.dsn, f"DELETE FROM dbos.workflow_status WHERE created_at > {mark}")
        await self.vacuum(self.table)

    async def reset(self) -> None:
        await execute(self.dsn, "TRUNCATE dbos.workflow_status CASCADE")

    async def _copies(self, count: int, status: str) -> None:
        """``count`` copies of one workflow enqueued through DBOS's API to run in a day (so
        the rows are what its enqueue writes), in ``status``; then VACUUM ANALYZE."""
        await self._call("enqueue_delayed", kind="noop")
        async with await psycopg.AsyncConnection.connect(self.dsn, autocommit=True) as conn:
            row = await (
                await conn.execute(
                    "SELECT workflow_uuid FROM dbos.workflow_status WHERE status = 'DELAYED' "
                    "ORDER BY created_at DESC LIMIT 1"
                )
            ).fetchone()
            assert row is not None, "the delayed workflow was not written"
            template = row[0]
            rows = await (
                await conn.execute(
                    "SELECT column_name FROM information_schema.columns WHERE table_schema = "
                    "'dbos' AND table_name = 'workflow_status' ORDER BY ordinal_position"
                )
            ).fetchall()
            columns = [found[0] for found in rows]
            chosen = {"workflow_uuid": "gen_random_uuid()::text", "status": f"'{status}'"}
            if status == "SUCCESS":
                chosen["delay_until_epoch_ms"] = "NULL"
            names = ", ".join(f'"{column}"' for column in columns)
            values = ", ".join(chosen.get(column, f'"{column}"') for column in columns)
            await conn.execute(
                f"INSERT INTO dbos.workflow_status ({names}) SELECT {values} "  # type: ignore[arg-type]
                f"FROM dbos.workflow_status, generate_series(1, {int(count)}) "
                "WHERE workflow_uuid = %s",
                [template],
            )
            await conn.execute(
                "DELETE FROM dbos.workflow_status WHERE workflow_uuid = %s", [template]
            )
        await self.vacuum("dbos.workflow_status")

    async def load_future(self, count: int) -> None:
        await self._copies(count, "DELAYED")

    async def load_finished(self, count: int) -> None:
        await self._copies(count, "SUCCESS")

    def settings_text(self) -> str:
        return (
            "launched in each worker process with an executor id of its own, its queue with no "
            "concurrency limit (its default) and a `polling_interval_sec` of "
            f"{self.drain_env['BENCH_POLL_S']} s (the default 1 s would add half a second to a "
            "pickup; it lengthens the interval itself under contention); single enqueues through "
            "`DBOSClient.enqueue`, a bulk through its `enqueue_in_transaction` once per workflow "
            "in one transaction (it has no bulk enqueue). Python 3.12, in a venv of its own"
        )


ALL: dict[str, type[System]] = {
    "rota": Rota,
    "pgqueuer": PgQueuer,
    "procrastinate": Procrastinate,
    "oban": Oban,
    "dbos": Dbos,
}


def make(name: str, settings: Settings) -> System:
    return ALL[name](settings)


async def count(dsn: str, statement: str) -> int:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        row: Any = await (await conn.execute(statement)).fetchone()
        return int(row[0])
