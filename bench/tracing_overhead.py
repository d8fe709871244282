"""What rota's tracing hooks cost a job when the application does not trace.

Times each hook alone (``created`` per enqueued spec, ``execution`` per run, over the run of
an empty handler, ``claimed`` per claim) in three states: OpenTelemetry never imported (rota's workers by default), imported
with no tracer provider, and an SDK provider recording spans into a no-op processor (what
tracing costs, for scale). Then drains no-op jobs on the memory store with the hooks as
shipped and with them replaced by functions that do nothing, alternating rounds, and reports
the median time per job of each::

    python -m bench.tracing_overhead [--jobs 20000] [--rounds 7]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import statistics
import sys
import time
import timeit
from collections.abc import Callable
from typing import Any

import rota
from rota.domain.job import JobSpec
from rota.observability import tracing

CALLS = 200_000


def hook_costs() -> dict[str, float]:
    """Nanoseconds each hook adds per call, in the current tracing state."""
    spec = JobSpec(kind="bench")
    now = tracing._clock.now()
    job = rota.Job(
        id=1,
        kind="bench",
        queue="default",
        payload={},
        state=rota.JobState.RUNNING,
        priority=0,
        run_at=now,
        attempt=1,
        max_attempts=3,
        created_at=now,
    )
    # Each hook against a call of a function that does nothing with the same arguments.
    pairs: dict[str, tuple[Callable[[], Any], Callable[[], Any]]] = {
        "created": (lambda: tracing.created(spec), lambda: _same(spec)),
        "claimed": (
            lambda: tracing.claimed([job], worker="w", queues=["default"], took_s=0.0),
            lambda: _nothing([job], worker="w", queues=["default"], took_s=0.0),
        ),
    }
    costs = {
        name: (_best_ns(hook) - _best_ns(baseline)) for name, (hook, baseline) in pairs.items()
    }

    async def handler() -> None:
        return None

    async def runs(traced: bool) -> float:
        best = float("inf")
        for _ in range(5):
            started = time.perf_counter()
            for _ in range(CALLS // 10):
                await (tracing.execution(handler(), job, "w") if traced else handler())
            best = min(best, time.perf_counter() - started)
        return best / (CALLS // 10) * 1e9

    costs["execution"] = asyncio.run(runs(True)) - asyncio.run(runs(False))
    return costs


async def drain_once(jobs: int) -> float:
    """Seconds per job to enqueue and drain ``jobs`` no-op jobs on a fresh memory store."""
    app = rota.App("memory://")

    @app.job("noop")
    async def noop(ctx: rota.JobContext, payload: Any) -> None:
        return None

    async with app:
        worker = app.worker(concurrency=100, claim_batch=100, retention="off")
        started = time.perf_counter()
        await app.enqueue_many([app.spec("noop") for _ in range(jobs)])
        assert await worker.run_until_idle() == jobs
        return (time.perf_counter() - started) / jobs


def calls_per_job(jobs: int) -> tuple[float, float, int]:
    """Python calls per job in a drain: all of them, those into rota's tracing module, and
    how many calls reached OpenTelemetry at all. Counts, unlike times, are exact under load."""
    counts: collections.Counter[str] = collections.Counter()
    tracing_file = tracing.__file__

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "call":
            filename = frame.f_code.co_filename
            counts["all"] += 1
            if filename == tracing_file:
                counts["tracing"] += 1
            elif "opentelemetry" in filename:
                counts["opentelemetry"] += 1

    sys.setprofile(profile)
    try:
        asyncio.run(drain_once(jobs))
    finally:
        sys.setprofile(None)
    return counts["all"] / jobs, counts["tracing"] / jobs, counts["opentelemetry"]


def drains(jobs: int, rounds: int) -> tuple[list[float], list[float]]:
    shipped = (tracing.created, tracing.execution, tracing.claimed)
    stubbed = (_same, lambda awaitable, job, worker: awaitable, _nothing)
    with_hooks: list[float] = []
    without: list[float] = []
    for round_ in range(rounds):
        for hooks, into in ((shipped, with_hooks), (stubbed, without))[:: 1 if round_ % 2 else -1]:
            tracing.created, tracing.execution, tracing.claimed = hooks  # type: ignore[assignment]
            into.append(asyncio.run(drain_once(jobs)))
    tracing.created, tracing.execution, tracing.claimed = shipped  # type: ignore[assignment]
    return with_hooks, without


def _nothing(*args: Any, **kwargs: Any) -> None:
    return None


def _same(spec: JobSpec) -> JobSpec:
    return spec


def _best_ns(call: Callable[[], Any]) -> float:
    return min(timeit.repeat(call, number=CALLS, repeat=7)) / CALLS * 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    if "opentelemetry.trace" in sys.modules:
        raise SystemExit("OpenTelemetry is already imported: run this in a process of its own")

    print("| state | created (ns/spec) | execution (ns/run) | claimed (ns/claim) |")
    print("|---|---|---|---|")
    rows = [("OpenTelemetry not imported", hook_costs())]
    counted = [("OpenTelemetry not imported", calls_per_job(2_000))]
    with_hooks, without = drains(args.jobs, args.rounds)
    import opentelemetry.trace  # noqa: F401  # imported, no provider set

    rows.append(("imported, no tracer provider", hook_costs()))
    counted.append(("imported, no tracer provider", calls_per_job(2_000)))
    from opentelemetry.sdk.trace import TracerProvider

    tracing.use_tracer_provider(TracerProvider())  # recording, exporting nowhere
    rows.append(("SDK provider, recording", hook_costs()))
    tracing.use_tracer_provider(None)
    for state, costs in rows:
        cells = " | ".join(f"{costs[name]:,.0f}" for name in ("created", "execution", "claimed"))
        print(f"| {state} | {cells} |")

    print()
    print("| state | Python calls per job | of them in rota's tracing | calls into OpenTelemetry |")
    print("|---|---|---|---|")
    for state, (every, traced, otel) in counted:
        print(f"| {state} | {every:,.1f} | {traced:.2f} | {otel} |")

    print()
    print(f"Drain of {args.jobs:,} no-op jobs on memory://, {args.rounds} rounds alternating:")
    a, b = statistics.median(with_hooks), statistics.median(without)
    spread = (max(without) - min(without)) / b * 100
    print(f"- hooks as shipped: {a * 1e6:.2f} µs/job (median)")
    print(f"- hooks removed:    {b * 1e6:.2f} µs/job (median; rounds spread {spread:.1f}%)")
    print(f"- difference:       {(a - b) * 1e6:+.2f} µs/job ({(a - b) / b * 100:+.1f}%)")


if __name__ == "__main__":
    main()
