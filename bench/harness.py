"""The harness: settings of a run, measurements and their summary, databases, worker processes.

A scenario is an async function ``(Bench) -> None`` that records measurements with
``bench.record(...)``; ``bench.run`` repeats the timed part ``bench.runs`` times itself, so each
measurement carries every run's value and the report shows the median and the spread.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg

from bench.cluster import server_cpu_seconds

ROOT = Path(__file__).resolve().parent.parent
SYSTEMS = ("rota", "pgqueuer", "procrastinate", "oban", "dbos")
#: The peers that run in a Python 3.12 venv of their own (``bench.peers312``; Oban for Python
#: needs 3.12 or later), made by ``make setup-bench312``.
PEERS312 = ("oban", "dbos")
PYTHON312 = ROOT / ".venv-bench312" / "bin" / "python"
#: Every database this suite creates starts with this prefix, and only those are dropped.
DB_PREFIX = "rota_bench_"


class Skip(Exception):
    """A scenario (or one system's part of it) cannot run here; the message says why."""


@dataclass
class Measurement:
    """One figure of one system in one scenario, with the value of every run."""

    scenario: str
    metric: str
    system: str
    unit: str
    values: list[float] = field(default_factory=list)
    #: "higher" (throughput) or "lower" (latency, time, memory) is better.
    better: str = "higher"
    note: str = ""

    @property
    def median(self) -> float:
        return statistics.median(self.values)

    @property
    def low(self) -> float:
        return min(self.values)

    @property
    def high(self) -> float:
        return max(self.values)

    def to_json(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario,
            "metric": self.metric,
            "system": self.system,
            "unit": self.unit,
            "values": self.values,
            "better": self.better,
            "note": self.note,
        }


@dataclass
class Settings:
    """What a run measures and how big each load is (``quick`` shrinks every load)."""

    #: A URL of the server's ``postgres`` database: the run's own cluster, or --database-url.
    server_url: str = ""
    #: True when the server was given (--database-url) rather than started by the run.
    given_server: bool = False
    #: The server's postmaster PID, for its CPU; None when it is not visible from here.
    postmaster: int | None = None
    runs: int = 3
    quick: bool = False
    systems: tuple[str, ...] = SYSTEMS
    #: Worker settings found best in this run (Procrastinate's concurrency), by system.
    tuned: dict[str, dict[str, str]] = field(default_factory=dict)
    #: Where worker logs, records and SQLite files go: a temporary directory made when first
    #: asked for (a report rebuilt from saved results makes none).
    _workdir: Path | None = field(default=None, repr=False)

    @property
    def workdir(self) -> Path:
        if self._workdir is None:
            self._workdir = Path(tempfile.mkdtemp(prefix="rota-bench-"))
        return self._workdir

    def remove_workdir(self) -> None:
        """Remove the work directory (after a run that kept nothing worth reading there)."""
        if self._workdir is not None:
            shutil.rmtree(self._workdir, ignore_errors=True)
            self._workdir = None

    def dsn(self, database: str) -> str:
        return with_database(self.server_url, database)

    def size(self, full: int, quick: int) -> int:
        return quick if self.quick else full

    def server_cpu(self, exclude: tuple[int, ...] = ()) -> float | None:
        """CPU seconds the whole server has used so far (None: not visible from here)."""
        if self.postmaster is None:
            return None
        return server_cpu_seconds(self.postmaster, exclude=exclude)


def with_database(url: str, database: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path="/" + database))


def progress(text: str) -> None:
    """Progress goes to stderr, so stdout can be piped."""
    print(text, file=sys.stderr, flush=True)


class Bench:
    """Shared state of one benchmark run: settings, measurements, skips, notes."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.measurements: list[Measurement] = []
        self.skipped: list[tuple[str, str]] = []
        self.notes: list[tuple[str, str]] = []
        #: What the server reported about itself (``report.read_server``).
        self.server: dict[str, Any] = {}

    @property
    def runs(self) -> int:
        return self.settings.runs

    def wants(self, system: str) -> bool:
        return system in self.settings.systems

    def record(
        self,
        scenario: str,
        metric: str,
        system: str,
        value: float,
        *,
        unit: str,
        better: str = "higher",
        note: str = "",
    ) -> None:
        """Add one run's value to the measurement (created on first use)."""
        for found in self.measurements:
            if (found.scenario, found.metric, found.system) == (scenario, metric, system):
                found.values.append(value)
                if note:
                    found.note = note
                break
        else:
            found = Measurement(scenario, metric, system, unit, [value], better, note)
            self.measurements.append(found)
        progress(f"  {scenario:10} {system:13} {metric:40} {_fmt(value)} {unit}")

    def skip(self, scenario: str, why: str) -> None:
        self.skipped.append((scenario, why))
        progress(f"  {scenario:10} skipped: {why}")

    def note(self, scenario: str, text: str) -> None:
        if (scenario, text) not in self.notes:
            self.notes.append((scenario, text))

    def find(self, scenario: str, metric: str, system: str) -> Measurement | None:
        for found in self.measurements:
            if (found.scenario, found.metric, found.system) == (scenario, metric, system):
                return found
        return None


def _fmt(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:,.2f}"


def summary_line(m: Measurement) -> str:
    return f"{_fmt(m.median)} ({_fmt(m.low)}-{_fmt(m.high)}, n={len(m.values)})"


# ---------------------------------------------------------------------- databases


async def recreate_database(settings: Settings, name: str) -> str:
    """Drop (if present) and create the database ``name``; return its DSN."""
    if not name.startswith(DB_PREFIX):
        raise ValueError(f"benchmark databases start with {DB_PREFIX}")
    async with await psycopg.AsyncConnection.connect(settings.server_url, autocommit=True) as conn:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await conn.execute(f'CREATE DATABASE "{name}"')
    return settings.dsn(name)


async def drop_database(settings: Settings, name: str) -> None:
    if not name.startswith(DB_PREFIX):
        raise ValueError(f"benchmark databases start with {DB_PREFIX}")
    async with await psycopg.AsyncConnection.connect(settings.server_url, autocommit=True) as conn:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


async def execute(dsn: str, *statements: str) -> None:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        for statement in statements:
            await conn.execute(statement)


async def scalar(dsn: str, statement: str) -> Any:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        row = await (await conn.execute(statement)).fetchone()
        return row[0] if row else None


class Poller:
    """One connection that asks one cheap question at a modest rate until the answer is yes."""

    def __init__(self, dsn: str, question: str) -> None:
        self._dsn = dsn
        self._question = question
        self._conn: psycopg.AsyncConnection[Any] | None = None

    async def __aenter__(self) -> Poller:
        self._conn = await psycopg.AsyncConnection.connect(self._dsn, autocommit=True)
        #: This connection's backend, left out of the server's CPU per job.
        self.backend_pid = self._conn.info.backend_pid
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._conn is not None:
            await self._conn.close()

    async def ask(self) -> Any:
        assert self._conn is not None
        row = await (await self._conn.execute(self._question)).fetchone()
        return row[0] if row else None

    async def until(
        self, done: Callable[[Any], bool], *, timeout_s: float, every_s: float = 0.05
    ) -> float:
        """Poll until ``done(answer)``; the wall-clock instant of the first yes. TimeoutError
        after ``timeout_s``: every wait in this suite is bounded."""
        deadline = time.monotonic() + timeout_s
        while True:
            answer = await self.ask()
            if done(answer):
                return time.time()
            if time.monotonic() > deadline:
                raise TimeoutError(f"still waiting after {timeout_s:.0f}s (last answer {answer!r})")
            await asyncio.sleep(every_s)


# ---------------------------------------------------------------------- worker processes


@dataclass
class WorkerGroup:
    """Worker processes started by ``start_workers``; stopped by ``stop``."""

    processes: list[subprocess.Popen[bytes]]
    ready_files: list[Path]
    record_files: list[Path]
    logs: list[Path]

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.processes]

    async def wait_ready(self, timeout_s: float = 30.0) -> None:
        deadline = time.monotonic() + timeout_s
        while not all(path.exists() for path in self.ready_files):
            for process, log in zip(self.processes, self.logs, strict=True):
                if process.poll() is not None:
                    raise RuntimeError(
                        f"worker exited with {process.returncode}: {log.read_text()[-2000:]}"
                    )
            if time.monotonic() > deadline:
                raise TimeoutError("workers did not become ready")
            await asyncio.sleep(0.05)
        # The ready mark is written just before the worker's loop starts claiming.
        await asyncio.sleep(0.5)

    def pause(self) -> None:
        """Hold the workers (SIGSTOP): warm and connected, claiming nothing until ``resume``."""
        self._signal(signal.SIGSTOP)

    def resume(self) -> None:
        self._signal(signal.SIGCONT)

    def _signal(self, sig: signal.Signals) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.send_signal(sig)

    async def stop(self, *, grace_s: float = 15.0) -> None:
        """SIGTERM, wait for a graceful exit (records are written then), then SIGKILL."""
        self.resume()  # a held worker cannot act on SIGTERM
        for process in self.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        for process in self.processes:
            left = max(0.0, deadline - time.monotonic())
            with contextlib.suppress(subprocess.TimeoutExpired):
                await asyncio.to_thread(process.wait, left)
        self.kill()

    def kill(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.kill()
                process.wait()

    def records(self) -> list[Any]:
        found: list[Any] = []
        for path in self.record_files:
            if path.exists():
                found.extend(json.loads(path.read_text()))
        return found


def start_workers(
    settings: Settings,
    system: str,
    dsn: str,
    *,
    processes: int,
    concurrency: int,
    handler: str = "noop",
    extra: dict[str, str] | None = None,
    argv: list[str] | None = None,
) -> WorkerGroup:
    """Start ``processes`` worker processes of ``system``: ``argv``, by default ``python -m
    bench.worker SYSTEM`` in this interpreter."""
    group = WorkerGroup([], [], [], [])
    stamp = f"{system}-{time.monotonic_ns()}"
    for index in range(processes):
        ready = settings.workdir / f"{stamp}-{index}.ready"
        record = settings.workdir / f"{stamp}-{index}.json"
        log = settings.workdir / f"{stamp}-{index}.log"
        env = {
            **os.environ,
            "BENCH_DSN": dsn,
            "BENCH_HANDLER": handler,
            "BENCH_CONCURRENCY": str(concurrency),
            "BENCH_READY": str(ready),
            "BENCH_RECORD": str(record),
            # A PYTHONPATH given to the run (another checkout's src, to compare) reaches its
            # workers too.
            "PYTHONPATH": os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH")))),
            **(extra or {}),
        }
        with log.open("wb") as out:
            process = subprocess.Popen(
                argv or [sys.executable, "-m", "bench.worker", system],
                env=env,
                cwd=ROOT,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        group.processes.append(process)
        group.ready_files.append(ready)
        group.record_files.append(record)
        group.logs.append(log)
    return group


@contextlib.asynccontextmanager
async def workers(settings: Settings, system: str, dsn: str, **options: Any) -> Any:
    """``start_workers`` as a context: ready on entry, stopped (or killed) on exit."""
    group = start_workers(settings, system, dsn, **options)
    try:
        await group.wait_ready()
        yield group
    finally:
        try:
            await group.stop()
        finally:
            group.kill()


def peers312_problem() -> str | None:
    """Why the Python 3.12 peers cannot run here (None: they can)."""
    if not PYTHON312.exists():
        return (
            f"no {PYTHON312.parent.parent.name} venv: `make setup-bench312` makes it "
            "(it needs python3.12 on PATH or under pyenv)"
        )
    found = subprocess.run(
        [str(PYTHON312), "-c", "import oban, dbos, psycopg_pool"],
        capture_output=True,
        text=True,
        check=False,
    )
    if found.returncode != 0:
        last = (found.stderr.strip().splitlines() or ["?"])[-1]
        return f"the {PYTHON312.parent.parent.name} venv cannot import them ({last}): `make setup-bench312`"
    return None


def rss_kib(pid: int) -> tuple[int, int]:
    """(VmRSS, VmHWM) of a process, in KiB."""
    values: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            values[key] = int(rest.split()[0])
    return values["VmRSS"], values["VmHWM"]


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU seconds used so far by ``pids`` (those still alive)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        with contextlib.suppress(FileNotFoundError, ProcessLookupError):
            fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
            total += int(fields[11]) + int(fields[12])
    return total / tick


@contextlib.contextmanager
def timer() -> Iterator[list[float]]:
    """``with timer() as t: ...`` then ``t[0]`` is the elapsed wall time in seconds."""
    holder: list[float] = []
    start = time.perf_counter()
    try:
        yield holder
    finally:
        holder.append(time.perf_counter() - start)


async def bounded(awaitable: Awaitable[Any], timeout_s: float) -> Any:
    return await asyncio.wait_for(awaitable, timeout=timeout_s)


def percentile(values: list[float], fraction: float) -> float:
    """The ``fraction`` quantile (0..1) by nearest rank."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("no values")
    rank = max(0, min(len(ordered) - 1, round(fraction * len(ordered) + 0.5) - 1))
    return ordered[rank]
