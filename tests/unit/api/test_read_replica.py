"""Reads from a replica: every GET route's lists, counts and details come from the replica's
store; writes, the answers about them (a POST's response, a retry's 409) and the workers come
from the primary; a job or schedule the replica does not have yet is looked up on the primary
before a 404; /api/stats says how far the replica trails.

Two MemoryStores stand in for the primary and a replica that has diverged from it (as a
lagging one does), so each answer shows which of the two it came from. The real thing, a
streaming replica made by pg_basebackup, is tested in integration/test_read_replica.py.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta

import httpx
import pytest

from rota.api import ApiSettings, create_app
from rota.client import Client
from rota.domain.flow import Limit, LimitScope
from rota.domain.job import JobSpec
from rota.domain.job_state import JobState
from rota.domain.schedule import Rule, ScheduleSpec
from rota.store import WorkerInfo
from rota.store.memory import MemoryStore
from rota.testing import FakeClock
from tests.support.replica import StaleCopy
from tests.unit.api.conftest import MakeApp, asgi_client, dead_job, total_jobs


@pytest.fixture
def copy(clock: FakeClock) -> MemoryStore:
    return MemoryStore(clock=clock)


@pytest.fixture
async def split(store: MemoryStore, copy: MemoryStore) -> AsyncIterator[httpx.AsyncClient]:
    """The API over ``store`` (the primary) reading from ``copy``, which trails by 2.5 s.

    copy: job 1 pending ``from-replica``, job 2 dead; schedule ``copy-tick``; a limit on kind
    pdf; queue mail paused. primary: jobs 1 and 2 pending ``from-primary``; schedule
    ``primary-tick``; one registered worker.
    """
    await copy.enqueue([JobSpec(kind="from-replica", queue="mail")])
    await dead_job(copy)
    await copy.create_schedule(ScheduleSpec("copy-tick", "tick", Rule.every(timedelta(hours=1))))
    await copy.set_limit(Limit(LimitScope.KIND, "pdf", concurrency=3))
    await copy.pause_queue("mail")
    await store.enqueue([JobSpec(kind="from-primary"), JobSpec(kind="from-primary")])
    await store.create_schedule(
        ScheduleSpec("primary-tick", "tick", Rule.every(timedelta(hours=1)))
    )
    await store.register_worker(WorkerInfo("w1", "host", 1, ("default",), 4))
    replica = StaleCopy(copy, timedelta(seconds=2.5))
    app = create_app(Client(store), settings=ApiSettings(), replica=replica)
    async with asgi_client(app) as api:
        yield api


async def test_lists_counts_and_details_come_from_the_replica(
    split: httpx.AsyncClient,
) -> None:
    listed = (await split.get("/api/jobs")).json()["jobs"]
    assert [(job["id"], job["kind"]) for job in listed] == [(2, "email"), (1, "from-replica")]
    assert (await split.get("/api/jobs/count")).json()["count"] == 2
    detail = (await split.get("/api/jobs/2")).json()
    assert (detail["kind"], detail["state"]) == ("email", "dead")
    assert [a["outcome"] for a in detail["attempts"]] == ["failed"]
    schedules = (await split.get("/api/schedules")).json()["schedules"]
    assert [schedule["name"] for schedule in schedules] == ["copy-tick"]
    queues = {q["name"]: q for q in (await split.get("/api/queues")).json()["queues"]}
    assert queues["mail"]["paused"] is True
    limits = (await split.get("/api/limits")).json()["limits"]
    assert [(limit["scope"], limit["key"]) for limit in limits] == [("kind", "pdf")]


async def test_stats_count_on_the_replica_and_say_how_far_it_trails(
    split: httpx.AsyncClient,
) -> None:
    stats = (await split.get("/api/stats")).json()
    assert stats["counts"]["by_state"]["pending"] == 1  # the primary has 2
    assert stats["counts"]["by_state"]["dead"] == 1  # the primary has none
    assert stats["workers_total"] == 1  # the registry is the primary's: the copy has none
    assert stats["replica"] == {"replaying": True, "lag_seconds": 2.5}
    metrics = (await split.get("/metrics")).text
    assert "rota_dead_jobs 1.0" in metrics


async def test_a_job_or_schedule_the_replica_lacks_is_read_from_the_primary(
    split: httpx.AsyncClient,
) -> None:
    # Job 3 exists only on the primary (just created, not replayed yet): no 404 for it.
    created = await split.post("/api/jobs", json={"kind": "new"})
    assert created.status_code == 201
    assert created.json()["id"] == 3
    fetched = await split.get("/api/jobs/3")
    assert fetched.status_code == 200
    assert fetched.json()["kind"] == "new"
    assert (await split.get("/api/jobs/4")).status_code == 404
    schedule = await split.get("/api/schedules/primary-tick")
    assert schedule.status_code == 200
    assert (await split.get("/api/schedules/nope")).status_code == 404


async def test_writes_and_their_answers_stay_on_the_primary(
    split: httpx.AsyncClient, store: MemoryStore, copy: MemoryStore
) -> None:
    before = await total_jobs(copy)
    created = (await split.post("/api/jobs", json={"kind": "new"})).json()
    assert (await store.get(created["id"])).kind == "new"
    assert await total_jobs(copy) == before
    # Job 2 is dead on the replica but pending on the primary: the retry is refused with the
    # primary's truth, not accepted on the replica's stale picture.
    refused = await split.post("/api/jobs/2/retry")
    assert refused.status_code == 409
    assert "pending" in refused.json()["error"]
    cancelled = await split.post("/api/jobs/2/cancel")
    assert cancelled.json()["state"] == "cancelled"
    assert (await store.get(2)).state is JobState.CANCELLED
    assert (await copy.get(2)).state is JobState.DEAD
    limit = await split.post(
        "/api/limits", json={"scope": "kind", "key": "pdf", "rate": 5, "period_seconds": 60}
    )
    assert limit.status_code == 201, limit.text
    assert [info.limit.rate for info in await store.list_limits()] == [5]
    assert [info.limit.rate for info in await copy.list_limits()] == [None]


async def test_stats_carry_no_replica_without_one(make_app: MakeApp) -> None:
    async with asgi_client(make_app()) as api:
        assert (await api.get("/api/stats")).json()["replica"] is None
