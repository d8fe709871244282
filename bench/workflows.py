"""What workflows cost at the store: a fan-in of many parents into one callback, and a long
chain, each beside the same number of plain jobs claimed and completed the same way.

The parents are claimed and completed in batches, as workers do; each completion settles
only the completing jobs' direct children (one counter update in the same statement), so a
fan-in's cost per parent should stay flat however many parents there are, and a chain step
should cost about what a plain job's claim and completion cost::

    python -m bench.workflows --database-url postgresql://postgres@127.0.0.1/bench \
        [--parents 10000] [--chain 1000] [--batch 500]

The database should be empty and is migrated first (sqlite:///path and memory:// work too).
Prints figures; writes nothing else.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from datetime import timedelta

from rota.domain.job import JobSpec, JobState
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


async def main(url: str, parents: int, length: int, batch: int) -> None:
    store = open_store(url)
    await store.migrate()
    try:
        fan = await fan_in(store, parents, batch)
        print(f"fan-in of {parents} parents into one callback (batches of {batch}):")
        print(f"  written in one transaction: {fan['write_s'] * 1000:9.1f} ms")
        print(
            f"  drained: {fan['drain_s'] * 1000:9.1f} ms "
            f"({fan['drain_s'] / (parents + 1) * 1e6:7.1f} us/job); the same number of plain "
            f"jobs: {fan['plain_drain_s'] * 1000:9.1f} ms "
            f"({fan['plain_drain_s'] / (parents + 1) * 1e6:7.1f} us/job)"
        )
        steps = await long_chain(store, length)
        print(f"chain of {length} jobs (one claim and one completion per step):")
        print(f"  written in one transaction: {steps['write_s'] * 1000:9.1f} ms")
        print(
            f"  drained: {steps['drain_s'] * 1000:9.1f} ms "
            f"({steps['drain_s'] / length * 1e6:7.1f} us/step); the same number of plain "
            f"jobs: {steps['plain_drain_s'] * 1000:9.1f} ms "
            f"({steps['plain_drain_s'] / length * 1e6:7.1f} us/job)"
        )
    finally:
        await store.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database-url", default="memory://")
    parser.add_argument("--parents", type=int, default=10_000)
    parser.add_argument("--chain", type=int, default=1_000)
    parser.add_argument("--batch", type=int, default=500)
    args = parser.parse_args()
    asyncio.run(main(args.database_url, args.parents, args.chain, args.batch))
