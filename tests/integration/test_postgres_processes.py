"""Eight OS processes claiming and completing 5,000 jobs on one PostgreSQL database."""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import random
from datetime import timedelta
from pathlib import Path

import pytest

from rota.domain.job import JobSpec
from rota.domain.job_state import JobState
from rota.store import JobFilter, open_store

JOBS = 5_000
PROCESSES = 8


def claimer(url: str, name: str, out: str, seed: int) -> None:
    """Claim in random batch sizes and complete until nothing is left; log (id, token)."""

    async def run() -> None:
        rng = random.Random(seed)
        store = open_store(url)
        taken: list[tuple[int, int]] = []
        errors: list[str] = []
        empty = 0
        try:
            while empty < 3:
                try:
                    jobs = await store.claim(
                        name,
                        queues=["default"],
                        limit=rng.randint(1, 20),
                        lease=timedelta(minutes=5),
                    )
                    if not jobs:
                        empty += 1
                        continue
                    empty = 0
                    lost = await store.complete_many([job.lease for job in jobs])
                    if lost:
                        errors.append(f"lost {len(lost)} leases")
                    taken += [(job.id, job.lease_token or 0) for job in jobs]
                except Exception as error:  # recorded, then asserted empty by the test
                    errors.append(repr(error))
        finally:
            await store.close()
        result["taken"], result["errors"] = taken, errors

    result: dict[str, list[object]] = {}
    asyncio.run(run())
    Path(out).write_text(json.dumps(result))


@pytest.mark.postgres
@pytest.mark.slow
async def test_eight_processes_claim_every_job_exactly_once(pg_url: str, tmp_path: Path) -> None:
    store = open_store(pg_url)
    try:
        await store.enqueue([JobSpec(kind="k", payload={"i": i}) for i in range(JOBS)])
        context = multiprocessing.get_context("spawn")
        outputs = [tmp_path / f"p{i}.json" for i in range(PROCESSES)]
        processes = [
            context.Process(target=claimer, args=(pg_url, f"p{i}", str(outputs[i]), i))
            for i in range(PROCESSES)
        ]
        for process in processes:
            process.start()
        await asyncio.to_thread(lambda: [p.join(timeout=100) for p in processes])
        assert [p.exitcode for p in processes] == [0] * PROCESSES
        results = [json.loads(path.read_text()) for path in outputs]
        assert [r["errors"] for r in results] == [[]] * PROCESSES
        taken = [tuple(pair) for r in results for pair in r["taken"]]
        ids = [job_id for job_id, _ in taken]
        tokens = [token for _, token in taken]
        assert len(ids) == JOBS
        assert len(set(ids)) == JOBS, "a job was claimed twice"
        assert len(set(tokens)) == JOBS, "a token was issued twice"
        counts = await store.counts()
        assert counts.by_state[JobState.SUCCEEDED] == JOBS
        page = await store.list_jobs(JobFilter(states=frozenset({JobState.PENDING})))
        assert page.jobs == []
    finally:
        await store.close()
