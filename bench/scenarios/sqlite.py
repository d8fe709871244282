"""SQLite, the embedded default: enqueue (single and bulk) and drain with 1 and 2 processes.

Each run uses a fresh database file in the run's temporary directory. The drain is polled
through rota's own per-state counters (``rota_counts``, kept by triggers), read 20 times a
second on a separate connection (WAL lets it read beside the writers).
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from pathlib import Path

from bench.harness import Bench, workers
from rota import App

NAME = "sqlite"
TITLE = "SQLite (embedded default), rota only"
#: Jobs the workers run before the timed batch.
WARM_UP = 1_000
_DRAIN_ENV = {"BENCH_CONCURRENCY": "500", "BENCH_CLAIM_BATCH": "250"}


def _succeeded(path: Path) -> int:
    with sqlite3.connect(path, timeout=10) as conn:
        row = conn.execute(
            "SELECT coalesce(sum(n), 0) FROM rota_counts WHERE state = 'succeeded'"
        ).fetchone()
    return int(row[0])


async def _fresh(bench: Bench, label: str) -> tuple[str, App]:
    path = bench.settings.workdir / f"{label}-{time.monotonic_ns()}.db"
    app = App(f"sqlite:///{path}")
    await app.open()
    return f"sqlite:///{path}", app


async def run(bench: Bench) -> None:
    single = bench.settings.size(2_000, 300)
    bulk = bench.settings.size(100_000, 10_000)
    count = bench.settings.size(30_000, 3_000)
    for _ in range(bench.runs):
        url, app = await _fresh(bench, "enqueue")
        try:
            # Warm-up, not timed: the first calls open the file and prepare the statements.
            for seq in range(50):
                await app.enqueue("noop", {"seq": seq})
            await app.enqueue_many(app.spec("noop", {"seq": i}) for i in range(2_000))
            started = time.perf_counter()
            for seq in range(single):
                await app.enqueue("noop", {"seq": seq})
            elapsed = time.perf_counter() - started
            bench.record(
                NAME, "single enqueue, 1 job per call", "rota", single / elapsed, unit="jobs/s"
            )
            started = time.perf_counter()
            await app.enqueue_many(app.spec("noop", {"seq": i}) for i in range(bulk))
            elapsed = time.perf_counter() - started
            bench.record(NAME, "bulk enqueue, one call", "rota", bulk / elapsed, unit="jobs/s")
        finally:
            await app.close()
    for processes in (1, 2):
        for _ in range(bench.runs):
            url, app = await _fresh(bench, "drain")
            path = Path(url.removeprefix("sqlite:///"))
            try:
                async with workers(
                    bench.settings,
                    "rota",
                    url,
                    processes=processes,
                    concurrency=int(_DRAIN_ENV["BENCH_CONCURRENCY"]),
                    extra=_DRAIN_ENV,
                ):
                    await app.enqueue_many(app.spec("noop") for _ in range(WARM_UP))
                    await _wait(path, WARM_UP, 60)
                    await app.enqueue_many(app.spec("noop", {"seq": i}) for i in range(count))
                    started = time.time()
                    ended = await _wait(path, WARM_UP + count, max(120.0, count / 100))
            finally:
                await app.close()
            bench.record(
                NAME,
                f"drain, {processes} process{'es' if processes > 1 else ''}",
                "rota",
                count / (ended - started),
                unit="jobs/s",
                note=f"{count:,} jobs",
            )


async def _wait(path: Path, target: int, timeout_s: float) -> float:
    deadline = time.monotonic() + timeout_s
    while True:
        done = await asyncio.to_thread(_succeeded, path)
        if done >= target:
            return time.time()
        if time.monotonic() > deadline:
            raise TimeoutError(f"SQLite drain: {done} of {target} after {timeout_s:.0f} s")
        await asyncio.sleep(0.05)
