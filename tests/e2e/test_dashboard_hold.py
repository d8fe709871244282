"""Hold and release in headless Chromium: a job held from its page is not claimed until it is
released from the list, each action leaving its audit entry. Holding and releasing by filter
are among the bulk actions of test_dashboard.py, which check the counts the dialogs say."""

from __future__ import annotations

from datetime import timedelta

import pytest
from playwright.async_api import expect

from rota.domain.job import JobSpec
from rota.domain.job_state import JobState
from tests.e2e.conftest import AS_ADMIN, Served, Watched, expect_audit, log_in, screenshot

pytestmark = pytest.mark.browser

LEASE = timedelta(seconds=30)


@pytest.mark.parametrize("served", [AS_ADMIN], indirect=True)
async def test_a_job_held_from_its_page_is_not_claimed_until_released(
    page: Watched, served: Served
) -> None:
    await log_in(page.page, served)
    [result] = await served.store.enqueue([JobSpec(kind="report")])
    job_id = result.job.id
    await page.page.goto(served.url + f"/#/jobs/{job_id}")
    await expect(page.page.locator("h1 .badge")).to_have_text("pending")
    await page.page.click("button[data-action=hold]")
    await expect(page.page.locator("h1 .badge")).to_have_text("held")
    await expect(page.page.locator('ul.why li[data-blocker="held"]')).to_contain_text(
        "held by an operator"
    )
    await expect(page.page.locator("button[data-action=hold]")).to_have_count(0)
    assert await served.store.claim("worker-1", queues=["default"], limit=5, lease=LEASE) == []
    assert (await served.store.get(job_id)).state is JobState.HELD

    await page.page.goto(served.url + "/#/jobs?state=held")
    row = page.page.locator(f'tr[data-job="{job_id}"]')
    await expect(row.locator(".badge")).to_have_text("held")
    await expect(page.page.locator('a[data-tab="held"] .tab-count')).to_have_text("1")
    await screenshot(page.page, "jobs-held")
    await row.locator("button[data-action=release]").click()
    await expect(page.page.locator("table.jobs tbody tr")).to_have_count(0)
    [claimed] = await served.store.claim("worker-1", queues=["default"], limit=5, lease=LEASE)
    assert claimed.id == job_id
    await expect_audit(
        page.page,
        served,
        [
            ("token:admin", "job.release", f"job:{job_id}", "", "1"),
            ("token:admin", "job.hold", f"job:{job_id}", "", "1"),
        ],
    )
    await page.assert_clean()
