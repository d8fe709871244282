"""Durable jobs in headless Chromium: a job's page lists its steps (hostile results and
errors as text) and says what it waits for."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from playwright.async_api import expect

from rota.domain.job import JobSpec
from tests.e2e.conftest import HOSTILE, Served, Watched

pytestmark = pytest.mark.browser

LEASE = timedelta(seconds=30)


async def test_a_durable_job_s_page_lists_its_steps_and_what_it_waits_for(
    page: Watched, served: Served
) -> None:
    [result] = await served.store.enqueue([JobSpec(kind="checkout")])
    [job] = await served.store.claim("worker-1", queues=["default"], limit=1, lease=LEASE)
    store = served.store
    await store.checkpoint(job.lease, "charge", result=json.dumps({"id": HOSTILE}))
    await store.fail_step(job.lease, "email", error=f"SMTPError: {HOSTILE}")
    await store.checkpoint(job.lease, "email", result=None)
    await store.wait_for(job.lease, "wait-1", "shipped:o-42", timeout=timedelta(days=2))
    await page.page.goto(served.url + f"/#/jobs/{result.job.id}")
    await expect(page.page.locator("h1 .badge")).to_have_text("pending")
    await expect(page.page.locator("h1 .state-note")).to_contain_text(
        "waiting for signal shipped:o-42"
    )
    await expect(page.page.locator("dl.fields")).to_contain_text("waiting for signal shipped:o-42")
    rows = page.page.locator("table.steps tbody tr")
    await expect(rows).to_have_count(3)
    charge = page.page.locator('tr[data-step="charge"]')
    await expect(charge.locator(".badge")).to_have_text("succeeded")
    await expect(charge.locator("pre.result")).to_contain_text("<script>window.__x=1</script>")
    email = page.page.locator('tr[data-step="email"]')
    await expect(email).to_contain_text("2")  # one failure, then the success
    await expect(email.locator("pre.error-text")).to_contain_text(f"SMTPError: {HOSTILE}")
    await expect(page.page.locator('tr[data-step="wait-1"]')).to_contain_text("shipped:o-42")
    assert await page.page.locator("main img, main script, main svg:not(.chart)").count() == 0
    await page.assert_clean()
