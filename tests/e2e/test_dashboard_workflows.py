"""Workflows in headless Chromium: a waiting job's page says how many parents it waits on and
links to its parents and children; the jobs list filters on the waiting state; a workflow is
cancelled from its page and the audit records it."""

from __future__ import annotations

from datetime import timedelta

import pytest
from playwright.async_api import expect

from rota.domain.job import JobSpec
from rota.domain.workflow import Workflow
from tests.e2e.conftest import AS_ADMIN, HOSTILE, Served, Watched, expect_audit, log_in

pytestmark = pytest.mark.browser

LEASE = timedelta(seconds=30)


async def test_a_waiting_job_shows_what_it_waits_on_and_links_its_workflow(
    page: Watched, served: Served
) -> None:
    graph = Workflow()
    first = graph.add(JobSpec("fetch", payload={"html": HOSTILE}))
    second = graph.add(JobSpec("fetch"))
    middle = graph.add(JobSpec("merge"), after=[first, second])
    graph.add(JobSpec("report"), after=[middle])
    a, b, merge, report = await served.store.enqueue_workflow(graph)

    await page.page.goto(served.url + f"/#/jobs/{merge.id}")
    await expect(page.page.locator("dl.fields").first).to_contain_text("waiting on 2")
    section = page.page.locator("dl.workflow")
    await expect(section).to_contain_text(f"{a.id}: 0 of 4 jobs finished")
    await expect(section.locator(f'a[href="#/jobs/{a.id}"]')).to_have_text(str(a.id))
    await expect(section.locator(f'a[href="#/jobs/{b.id}"]')).to_have_text(str(b.id))
    await section.locator(f'a[href="#/jobs/{report.id}"]').click()
    await expect(page.page.locator("h1")).to_contain_text(str(report.id))

    await page.page.goto(served.url + "/#/jobs?state=waiting")
    await expect(page.page.locator("tr[data-job]")).to_have_count(2)
    assert await page.page.locator("main img, main script, main svg:not(.chart)").count() == 0
    await page.assert_clean()


@pytest.mark.parametrize("served", [AS_ADMIN], indirect=True)
async def test_a_workflow_page_lists_its_jobs_live_and_cancels_what_has_not_finished(
    page: Watched, served: Served
) -> None:
    await log_in(page.page, served)
    graph = Workflow()
    first = graph.add(JobSpec("fetch"))
    graph.add(JobSpec("merge", payload={"note": HOSTILE}), after=[first])
    graph.add(JobSpec("report"), after=[first], on_parent_failure="run")
    a, b, c = await served.store.enqueue_workflow(graph)

    await page.page.goto(served.url + f"/#/jobs/{b.id}")
    await page.page.locator(f'dl.workflow a[href="#/workflows/{a.id}"]').click()
    await expect(page.page.locator("svg.graph g.node.job")).to_have_count(3)
    await page.page.get_by_role("link", name="Table").click()
    table = page.page.locator("table.workflow-jobs")
    await expect(table.locator("tbody tr")).to_have_count(3)
    await expect(table.locator(f'tr[data-job="{b.id}"]')).to_contain_text("waiting")
    await expect(table.locator(f'tr[data-job="{c.id}"]')).to_contain_text("(runs anyway)")

    [held] = await served.store.claim("w", queues=["default"], limit=1, lease=LEASE)
    assert await served.store.complete_many([held.lease]) == []
    await expect(table.locator(f'tr[data-job="{b.id}"] .badge')).to_have_text("pending")  # live

    await page.page.get_by_role("button", name="Cancel workflow…").click()
    await page.page.get_by_role("button", name="Cancel them").click()
    await expect(page.page.locator("dialog .dialog-text")).to_have_text("2 jobs cancelled.")
    assert (await served.store.get(c.id)).state.value == "cancelled"
    await expect_audit(
        page.page, served, [("token:admin", "workflow.cancel", f"workflow:{a.id}", "", "2")]
    )
    await page.assert_clean()
