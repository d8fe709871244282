"""A filtered list over several states pages through exactly the matching jobs, newest first,
however the store reads the states (one at a time, merged: postgres/filters.py, sqlite/jobs.py).
"""

from __future__ import annotations

from datetime import timedelta

from rota.domain.job import JobSpec
from rota.domain.job_state import JobState
from rota.store import JobFilter, Store


async def test_filtered_lists_over_states_page_through_every_match_newest_first(
    store: Store,
) -> None:
    specs = [
        JobSpec(kind=f"k{n % 3}", queue=f"q{n % 2}", tenant=f"t{n % 4}", payload={"n": n})
        for n in range(60)
    ]
    await store.enqueue(specs)
    claimed = await store.claim("w", queues=["q0"], limit=12, lease=timedelta(seconds=30))
    assert await store.complete_many([job.lease for job in claimed[:6]]) == []
    for job in claimed[6:9]:
        await store.cancel(job.id)
    every = {job.id: job for job in (await store.list_jobs(JobFilter(), limit=500)).jobs}
    assert len(every) == 60

    filters = [
        JobFilter(tenant="t1"),
        JobFilter(tenant="t0", kind="k1"),
        JobFilter(queue="q0"),
        JobFilter(queue="q1", states=frozenset({JobState.PENDING, JobState.RUNNING})),
        JobFilter(kind="k2", states=frozenset({JobState.SUCCEEDED, JobState.PENDING})),
        JobFilter(tenant="t2", queue="q0", states=frozenset(JobState)),
        JobFilter(kind="nothing"),
        JobFilter(kind="k1"),
        JobFilter(kind="k0", queue="q0", states=frozenset({JobState.SUCCEEDED})),
        JobFilter(queue="q1", states=frozenset({JobState.RUNNING, JobState.DEAD})),
    ]
    for filter in filters:
        expected = sorted(
            (
                job.id
                for job in every.values()
                if (filter.states is None or job.state in filter.states)
                and all(
                    getattr(filter, column) in (None, getattr(job, column))
                    for column in ("kind", "queue", "tenant")
                )
            ),
            reverse=True,
        )
        seen: list[int] = []
        cursor = None
        for _ in range(30):
            page = await store.list_jobs(filter, cursor=cursor, limit=4, previews=True)
            seen += [job.id for job in page.jobs]
            cursor = page.next_cursor
            if cursor is None:
                break
        assert seen == expected, filter
        # Counted alike, from the maintained counts where they hold it (PostgreSQL: kind,
        # queue and states) or from the jobs.
        assert await store.count_jobs(filter) == len(expected), filter
        assert await store.count_jobs(filter, limit=2) == min(2, len(expected)), filter
