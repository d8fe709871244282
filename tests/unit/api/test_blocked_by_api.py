"""Why a job is not running, through the API: ``blocked_by`` on GET /api/jobs/{id} and on the
list, from the store's flow-control state and clock; no flow reads for pages without a
waiting or pending job."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import httpx
import pytest

from rota import workflows
from rota.domain.flow import Limit, LimitScope
from rota.domain.job import JobSpec
from rota.store.memory import MemoryStore
from rota.store.records import WorkerInfo
from rota.testing import FakeClock

LEASE = timedelta(seconds=30)


def why(job: dict[str, Any]) -> list[tuple[str, str]]:
    return [(b["reason"], b["message"]) for b in job["blocked_by"]]


async def test_a_job_in_a_paused_queue_under_a_full_kind_limit_says_both(
    api: httpx.AsyncClient, store: MemoryStore
) -> None:
    await store.register_worker(WorkerInfo("w1", "host", 1, ("mail",), 4))
    await store.enqueue([JobSpec(kind="pdf", queue="mail") for _ in range(2)])
    await store.claim("w1", queues=["mail"], limit=1, lease=LEASE)
    await store.set_limit(Limit(LimitScope.KIND, "pdf", concurrency=1))
    await store.pause_queue("mail")

    listed = (await api.get("/api/jobs")).json()["jobs"]
    waiting, running = listed
    assert why(waiting) == [
        ("queue_paused", "queue mail is paused"),
        ("kind_limit", "kind pdf is at its limit: 1 of 1 running"),
    ]
    assert running["state"] == "running" and running["blocked_by"] == []
    detail = (await api.get(f"/api/jobs/{waiting['id']}")).json()
    assert detail["blocked_by"] == waiting["blocked_by"]
    assert all(b["certain"] for b in detail["blocked_by"])

    await store.resume_queue("mail")
    await store.delete_limit(LimitScope.KIND, "pdf")
    assert (await api.get(f"/api/jobs/{waiting['id']}")).json()["blocked_by"] == []


async def test_not_due_follows_the_store_clock_and_no_worker_the_registry(
    api: httpx.AsyncClient, store: MemoryStore, clock: FakeClock
) -> None:
    [result] = await store.enqueue([JobSpec(kind="email", delay=timedelta(minutes=5))])
    path = f"/api/jobs/{result.job.id}"
    assert why((await api.get(path)).json()) == [
        ("not_due", "not due yet"),
        ("no_worker", "no live worker claims from queue default"),
    ]
    await store.register_worker(WorkerInfo("w1", "host", 1, ("default",), 4))
    clock.advance(timedelta(minutes=5))
    await store.beat_worker("w1")
    assert why((await api.get(path)).json()) == []
    clock.advance(timedelta(minutes=5))  # the worker fell silent: no longer alive
    assert why((await api.get(path)).json()) == [
        ("no_worker", "no live worker claims from queue default")
    ]
    # A worker of older code, which lists its kinds and not this one (a rolling deploy).
    await store.register_worker(WorkerInfo("w2", "host", 2, ("default",), 4, kinds=("pdf",)))
    assert why((await api.get(path)).json()) == [
        (
            "no_worker_for_kind",
            "no live worker of queue default runs kind email (a deploy pending?)",
        )
    ]


async def test_a_tenant_at_its_every_tenant_cap_is_named_with_its_own_count(
    api: httpx.AsyncClient, store: MemoryStore
) -> None:
    await store.register_worker(WorkerInfo("w1", "host", 1, ("default",), 4))
    await store.enqueue([JobSpec(kind="email", tenant="acme") for _ in range(2)])
    [result] = await store.enqueue([JobSpec(kind="email", tenant="beta")])
    await store.claim("w1", queues=["default"], limit=1, lease=LEASE)
    await store.set_limit(Limit(LimitScope.TENANT, "*", concurrency=1))

    jobs = {job["id"]: job for job in (await api.get("/api/jobs")).json()["jobs"]}
    assert why(jobs[2]) == [("tenant_limit", "tenant acme is at each tenant's cap: 1 of 1 running")]
    assert jobs[result.job.id]["blocked_by"] == []


async def test_a_page_without_waiting_or_pending_jobs_reads_no_flow_state(
    api: httpx.AsyncClient, store: MemoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    await store.enqueue([JobSpec(kind="email")])
    await store.claim("w1", queues=["default"], limit=1, lease=LEASE)
    reads: list[str] = []
    for name in ("list_queues", "list_limits", "list_workers"):
        original = getattr(store, name)

        async def counted(
            *args: Any, _name: str = name, _original: Any = original, **kw: Any
        ) -> Any:
            reads.append(_name)
            return await _original(*args, **kw)

        monkeypatch.setattr(store, name, counted)
    listed = (await api.get("/api/jobs?state=running")).json()["jobs"]
    assert len(listed) == 1 and reads == []
    await store.enqueue([JobSpec(kind="email")])
    await api.get("/api/jobs")
    assert sorted(reads) == ["list_limits", "list_queues", "list_workers"], "once per page"


async def test_a_workflow_job_waits_on_its_parents_on_the_job_and_the_workflow(
    api: httpx.AsyncClient, store: MemoryStore
) -> None:
    [parent] = await store.enqueue([JobSpec(kind="email")])
    child = await workflows.enqueue_after(store, JobSpec(kind="report"), [parent.job.id])
    waiting = [("waiting_on_parents", "waiting on 1 parent job to finish")]
    assert why((await api.get(f"/api/jobs/{child.job.id}")).json())[:1] == waiting
    shown = (await api.get(f"/api/workflows/{child.job.workflow}")).json()["jobs"]
    assert [why(job)[:1] for job in shown if job["id"] == child.job.id] == [waiting]
