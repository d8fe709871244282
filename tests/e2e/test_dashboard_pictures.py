"""The pictures of the docs page "The dashboard" and of the README, taken from a dashboard
serving a small busy system, after checking each page shows what its picture is meant to."""

from __future__ import annotations

from datetime import timedelta

import pytest
from playwright.async_api import expect

from rota.domain.audit import AuditAction, AuditRecord
from rota.domain.job import JobSpec
from rota.domain.schedule import Rule, ScheduleSpec
from rota.domain.workflow import Workflow
from rota.store.memory import MemoryStore
from rota.store.records import WorkerInfo
from tests.e2e.conftest import AS_ADMIN, Served, Watched, log_in, screenshot

pytestmark = pytest.mark.browser

LEASE = timedelta(minutes=5)


async def busy(store: MemoryStore) -> int:
    """Jobs in every state, two schedules and a workflow; returns the workflow's id."""
    for name in ("worker-a", "worker-b"):
        await store.register_worker(
            WorkerInfo(name=name, host="app-1", pid=4242, queues=("default",), concurrency=8)
        )
    kinds = ["email", "report", "resize", "email", "email", "sync", "resize", "email"]
    await store.enqueue([JobSpec(kind=kind, queue="default") for kind in kinds])
    claimed = await store.claim("worker-a", queues=["default"], limit=len(kinds), lease=LEASE)
    for job in claimed[:5]:
        await store.complete(job.lease)
    await store.fail(
        claimed[5].lease, error="ValueError: bad row 17", retry_in=timedelta(0), permanent=True
    )
    await store.enqueue(
        [
            JobSpec(kind="report", queue="reports", delay=timedelta(minutes=10)),
            JobSpec(kind="email", priority=5),
        ]
    )
    await store.upsert_schedule(
        ScheduleSpec(name="nightly-report", kind="report", rule=Rule.cron("30 2 * * *"))
    )
    await store.upsert_schedule(
        ScheduleSpec(name="sync-every-minute", kind="sync", rule=Rule.cron("* * * * *"))
    )
    graph = Workflow()
    fetch = graph.add(JobSpec("fetch"))
    parse = graph.add(JobSpec("parse"), after=[fetch])
    graph.add(JobSpec("report"), after=[parse])
    first, *_ = await store.enqueue_workflow(graph)
    assert first.workflow is not None
    return first.workflow


@pytest.mark.parametrize("served", [AS_ADMIN], indirect=True)
async def test_every_page_is_pictured_for_the_docs(page: Watched, served: Served) -> None:
    workflow = await busy(served.store)
    tab = page.page
    await log_in(tab, served)

    await tab.goto(served.url + "/#/")
    await expect(tab.locator("tr[data-upcoming]")).to_have_count(2)
    await expect(tab.locator("svg.chart")).to_be_visible()
    await screenshot(tab, "overview", full_page=True)

    await tab.goto(served.url + "/#/jobs")
    await expect(tab.locator("table.jobs tbody tr")).to_have_count(13)
    await screenshot(tab, "jobs")

    await tab.goto(served.url + "/#/schedules")
    await expect(tab.locator("tr[data-schedule]")).to_have_count(2)
    await screenshot(tab, "schedules")

    await tab.goto(served.url + f"/#/workflows/{workflow}?view=table")
    await expect(tab.locator("table.workflow-jobs tbody tr")).to_have_count(3)
    await screenshot(tab, "workflow")

    await tab.goto(served.url + "/#/queues")
    await expect(tab.get_by_role("heading", name="Queues").first).to_be_visible()
    await screenshot(tab, "queues")

    await tab.goto(served.url + "/#/workers")
    await expect(tab.locator("main tbody tr")).to_have_count(2)
    await screenshot(tab, "workers")

    await served.store.record_audit(
        AuditRecord(identity="token:admin", action=AuditAction.QUEUE_PAUSE, target="queue:reports")
    )
    await served.store.record_audit(
        AuditRecord(identity="basic:alice", action=AuditAction.JOB_RETRY, target="job:6", count=1)
    )
    await tab.goto(served.url + "/#/audit")
    await expect(tab.locator("table.audit tbody tr")).to_have_count(2)
    await screenshot(tab, "audit")
    await page.assert_clean()
