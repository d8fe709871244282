"""Every page of the dashboard, in light and dark mode, in headless Chromium: its text readable
(WCAG 2 contrast), every control named, and every control reachable from the keyboard
(tests/e2e/access.py)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from playwright.async_api import expect

from rota.domain.job import JobSpec
from rota.domain.schedule import Rule, ScheduleSpec
from rota.domain.workflow import Workflow
from rota.store.memory import MemoryStore
from rota.store.records import WorkerInfo
from tests.e2e.access import LOW_CONTRAST, UNNAMED, UNREACHABLE
from tests.e2e.conftest import AS_ADMIN, Watched, dead_job, log_in, serve_store

pytestmark = pytest.mark.browser


async def a_bit_of_everything(store: MemoryStore) -> dict[str, int]:
    """Jobs in every state a page shows, a workflow, a schedule and a live worker."""
    await store.register_worker(WorkerInfo("worker-a", "app-1", 4242, ("default",), 4))
    dead = await dead_job(store, kind="email")
    [done] = await store.enqueue([JobSpec(kind="email")])
    [claimed] = await store.claim(
        "worker-a", queues=["default"], limit=1, lease=timedelta(minutes=5)
    )
    await store.complete_many([claimed.lease])
    [held] = await store.enqueue([JobSpec(kind="email", delay=timedelta(hours=1))])
    await store.hold(held.job.id)
    await store.enqueue([JobSpec(kind="report", delay=timedelta(minutes=5))])
    graph = Workflow()
    root = graph.add(JobSpec("plan"))
    graph.add(JobSpec("fetch"), after=[root])
    [first, *_] = await store.enqueue_workflow(graph)
    await store.upsert_schedule(
        ScheduleSpec(name="nightly", kind="report", rule=Rule.cron("0 2 * * *"))
    )
    return {"dead": dead, "done": done.job.id, "workflow": first.id}


@pytest.mark.parametrize(
    "context_options", [{"color_scheme": "light"}, {"color_scheme": "dark"}], ids=["light", "dark"]
)
async def test_every_page_reads_and_works_from_the_keyboard(
    page: Watched, context_options: dict[str, Any]
) -> None:
    store = MemoryStore()
    ids = await a_bit_of_everything(store)
    pages = {
        "overview": "/#/",
        "jobs": "/#/jobs",
        "held jobs": "/#/jobs?state=held",
        "a dead job": f"/#/jobs/{ids['dead']}",
        "a succeeded job": f"/#/jobs/{ids['done']}",
        "new job": "/#/jobs/new",
        "workflow graph": f"/#/workflows/{ids['workflow']}",
        "workflow table": f"/#/workflows/{ids['workflow']}?view=table",
        "queues": "/#/queues",
        "a queue": "/#/queues/default",
        "a kind": "/#/kinds/email",
        "workers": "/#/workers",
        "schedules": "/#/schedules",
        "audit": "/#/audit",
    }
    with serve_store(store, AS_ADMIN) as served:
        tab = page.page
        await log_in(tab, served)
        for name, path in pages.items():
            await tab.goto(served.url + path)
            await expect(tab.locator("#view h1")).to_be_visible()
            await tab.wait_for_load_state("networkidle")
            low = await tab.evaluate(LOW_CONTRAST)
            assert not low, f"{name}: low contrast: " + "; ".join(low)
            assert await tab.evaluate(UNNAMED) == [], f"{name}: controls without a name"
            assert await tab.evaluate(UNREACHABLE) == [], f"{name}: out of keyboard reach"
    await page.assert_clean()
