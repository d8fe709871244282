"""Results and progress in headless Chromium: a job's page shows its result as text (hostile
data included), and running jobs show a progress bar with its message on their page and in
the jobs list; a job that succeeded shows 100% on its page."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from playwright.async_api import expect

from rota.domain.job import JobSpec
from rota.domain.payload import Progress
from tests.e2e.conftest import HOSTILE, Served, Watched

pytestmark = pytest.mark.browser

LEASE = timedelta(seconds=30)


async def test_a_job_s_result_renders_as_text(page: Watched, served: Served) -> None:
    [result] = await served.store.enqueue([JobSpec(kind="report")])
    [job] = await served.store.claim("worker-1", queues=["default"], limit=1, lease=LEASE)
    text = json.dumps({"html": HOSTILE, HOSTILE: [1, 2]})
    assert await served.store.complete_many([job.lease], results=[text]) == []
    await page.page.goto(served.url + f"/#/jobs/{result.job.id}")
    shown = page.page.locator("pre.result")
    await expect(shown).to_contain_text("<script>window.__x=1</script>")
    await expect(shown).to_contain_text('"html"')
    await page.page.hover("pre.result")
    assert await page.page.locator("main img, main script, main svg:not(.chart)").count() == 0
    await page.assert_clean()


async def test_running_jobs_show_their_progress_on_the_list_and_their_page(
    page: Watched, served: Served
) -> None:
    [result] = await served.store.enqueue([JobSpec(kind="crawl")])
    [job] = await served.store.claim("worker-1", queues=["default"], limit=1, lease=LEASE)
    message = f"page 42 of 100 {HOSTILE}"[:200]
    await served.store.heartbeat(
        [job.lease], lease=LEASE, progress={job.id: Progress(0.42, message)}
    )
    await page.page.goto(served.url + "/#/jobs")
    row = page.page.locator(f'tr[data-job="{result.job.id}"]')
    await expect(row.locator(".progress-text")).to_have_text(f"42% {message}")
    assert await row.locator("progress").get_attribute("value") == "0.42"
    await page.page.goto(served.url + f"/#/jobs/{result.job.id}")
    await expect(page.page.locator("dl.fields .progress-text")).to_have_text(f"42% {message}")
    assert await page.page.locator("pre.result").count() == 0
    await page.assert_clean()


async def test_a_large_payload_shows_its_first_part_and_a_link_to_all_of_it(
    page: Watched, served: Served
) -> None:
    blob = "x" * 300_000
    [result] = await served.store.enqueue([JobSpec(kind="import", payload={"rows": blob})])
    await page.page.goto(served.url + f"/#/jobs/{result.job.id}")
    shown = page.page.locator("pre.payload.cut")
    await expect(shown).to_contain_text('{"rows":"xxx')
    text = await shown.text_content()
    assert text is not None and len(text) <= 64 * 1024 + 10
    link = page.page.get_by_role("link", name="Open the whole payload")
    href = await link.get_attribute("href")
    assert href == f"/api/jobs/{result.job.id}/payload"
    whole = await page.page.request.get(served.url + href)
    assert whole.ok and await whole.json() == {"rows": blob}


async def test_a_succeeded_job_shows_its_progress_as_complete_on_its_page(
    page: Watched, served: Served
) -> None:
    [result] = await served.store.enqueue([JobSpec(kind="crawl")])
    [job] = await served.store.claim("worker-1", queues=["default"], limit=1, lease=LEASE)
    await served.store.heartbeat(
        [job.lease], lease=LEASE, progress={job.id: Progress(0.92, "almost")}
    )
    assert await served.store.complete_many([job.lease]) == []
    await page.page.goto(served.url + f"/#/jobs/{result.job.id}")
    await expect(page.page.locator("dl.fields .progress-text")).to_have_text("100% almost")
    assert await page.page.locator("dl.fields progress").get_attribute("value") == "1"
    await page.assert_clean()
