"""What workflows cost at the store: a fan-in of many parents into one callback, and a long
chain, each beside the same number of plain jobs claimed and completed the same way.

The parents are claimed and completed in batches, as workers do; each completion settles
only the completing jobs' direct children (one counter update in the same statement), so a
fan-in's cost per parent should stay flat however many parents there are, and a chain step
should cost about what a plain job's claim and completion cost::

    python -m bench.workflows [--runs 3] [--parents 10000] [--chain 1000] [--batch 500]
    python -m bench.workflows --database-url postgresql://postgres@127.0.0.1/bench

By default each run gets a fresh database on a throwaway cluster configured as production
(``bench/cluster.py``); a given database should be empty and is migrated first
(sqlite:///path and memory:// work too). Prints a Markdown table (median and min-max of the
runs); writes nothing else.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from datetime import timedelta

import psycopg

from bench.cluster import Cluster
from bench.harness import with_database
from rota.domain.job import JobSpec
from rota.domain.job_state import JobState
from rota.domain.workflow import chain, chord
from rota.store import Store, open_store

LEASE = timedelta(minutes=5)


async def _drain(store: Store, *, batch: int) -> int:
    """Claim and complete until nothing is claimable; how many jobs that was."""
    done = 0
    while True:
        jobs = await store.claim("bench", queues=["bench"], limit=batch, lease=LEASE)
        if not jobs:
            return done
        lost = await store.complete_many([job.lease for job in jobs])
        assert not lost
        done += len(jobs)


async def fan_in(store: Store, parents: int, batch: int) -> dict[str, float]:
    header = [JobSpec("part", queue="bench", payload={"i": i}) for i in range(parents)]
    started = time.perf_counter()
    jobs = await store.enqueue_workflow(chord(header, JobSpec("sum", queue="bench")))
    written = time.perf_counter() - started
    callback = jobs[-1]
    started = time.perf_counter()
    drained = await _drain(store, batch=batch)
    took = time.perf_counter() - started
    assert drained == parents + 1, drained
    assert (await store.get(callback.id)).state is JobState.SUCCEEDED
    results = await store.parent_results(callback.id)
    assert len(results) == parents

    plain = [JobSpec("part", queue="bench", payload={"i": i}) for i in range(parents + 1)]
    await store.enqueue(plain)
    started = time.perf_counter()
    assert await _drain(store, batch=batch) == parents + 1
    baseline = time.perf_counter() - started
    return {"write_s": written, "drain_s": took, "plain_drain_s": baseline}


async def long_chain(store: Store, length: int) -> dict[str, float]:
    specs = [JobSpec("step", queue="bench", payload={"i": i}) for i in range(length)]
    started = time.perf_counter()
    jobs = await store.enqueue_workflow(chain(*specs))
    written = time.perf_counter() - started
    started = time.perf_counter()
    assert await _drain(store, batch=1) == length  # each step is released by the one before
    took = time.perf_counter() - started
    assert (await store.get(jobs[-1].id)).state is JobState.SUCCEEDED

    await store.enqueue(specs)
    started = time.perf_counter()
    assert await _drain(store, batch=1) == length
    baseline = time.perf_counter() - started
    return {"write_s": written, "drain_s": took, "plain_drain_s": baseline}


def _cell(values: list[float]) -> str:
    return f"{statistics.median(values):,.1f} ({min(values):,.1f}-{max(values):,.1f})"


async def measure(url: str, parents: int, length: int, batch: int) -> dict[str, float]:
    store = open_store(url)
    await store.migrate()
    try:
        fan = await fan_in(store, parents, batch)
        steps = await long_chain(store, length)
    finally:
        await store.close()
    return {
        "fan_write_ms": fan["write_s"] * 1e3,
        "fan_us": fan["drain_s"] / (parents + 1) * 1e6,
        "fan_plain_us": fan["plain_drain_s"] / (parents + 1) * 1e6,
        "chain_write_ms": steps["write_s"] * 1e3,
        "chain_us": steps["drain_s"] / length * 1e6,
        "chain_plain_us": steps["plain_drain_s"] / length * 1e6,
    }


def report(runs: list[dict[str, float]], parents: int, length: int, batch: int) -> str:
    def cells(key: str) -> str:
        return _cell([run[key] for run in runs])

    return "\n".join(
        [
            f"| measure ({len(runs)} runs: median, min-max) | workflow | plain jobs |",
            "|---|---|---|",
            f"| fan-in of {parents:,} parents into one callback: written in one "
            f"transaction, ms | {cells('fan_write_ms')} | |",
            f"| fan-in: claim {batch} + complete {batch} per batch, per job, µs "
            f"| {cells('fan_us')} | {cells('fan_plain_us')} |",
            f"| chain of {length:,}: written in one transaction, ms | {cells('chain_write_ms')} | |",
            f"| chain: one claim and one completion per step, per step, µs "
            f"| {cells('chain_us')} | {cells('chain_plain_us')} |",
        ]
    )


async def main(args: argparse.Namespace) -> None:
    runs = []
    cluster = None if args.database_url else Cluster.start()
    try:
        for run in range(args.runs):
            if cluster is not None:
                url = with_database(cluster.url, f"rota_workflows_{run}")
                with psycopg.connect(cluster.url, autocommit=True) as conn:
                    conn.execute(f"CREATE DATABASE rota_workflows_{run}")
            else:
                url = args.database_url
            runs.append(await measure(url, args.parents, args.chain, args.batch))
            print(f"run {run + 1}: {runs[-1]}", file=sys.stderr)
    finally:
        if cluster is not None:
            cluster.stop()
    print(report(runs, args.parents, args.chain, args.batch))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--database-url",
        help="measure here (an empty database; sqlite:///path and memory:// work too) instead "
        "of on a throwaway cluster configured as production",
    )
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--parents", type=int, default=10_000)
    parser.add_argument("--chain", type=int, default=1_000)
    parser.add_argument("--batch", type=int, default=500)
    asyncio.run(main(parser.parse_args()))
