"""The kind and queue pages in headless Chromium: after an hour of jobs that ran and failed
(driven on a fake clock), each page draws its charts with the counts the store tallied, groups
the errors by message, says what holds the queue back, changes its window from the keyboard,
and is reached from the queues list and from a job; the pictures go to docs/dashboard.md."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest
from playwright.async_api import Browser, expect

from rota.api import ApiSettings
from rota.domain.job import JobSpec
from rota.store.memory import MemoryStore
from rota.store.records import WorkerInfo
from rota.testing import FakeClock
from tests.e2e.access import LOW_CONTRAST
from tests.e2e.conftest import (
    HOSTILE,
    Watched,
    assert_same_document,
    dead_job,
    same_document,
    screenshot,
    serve_store,
)

pytestmark = pytest.mark.browser

LEASE = timedelta(minutes=5)
START = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
MINUTES = 55


@dataclass
class Ran:
    succeeded: int = 0
    failed: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    failing_minutes: int = 0
    dead_job: int = 0


async def an_hour_of_jobs(store: MemoryStore, clock: FakeClock) -> Ran:
    """Each minute a few resize jobs in queue "images" wait a second or two, run, and most
    succeed; every third minute one times out and every tenth one finds no user: both dead."""
    await store.register_worker(
        WorkerInfo("worker-a", "app-1", 4242, ("images",), 8, kinds=("resize",))
    )
    ran = Ran()
    for minute in range(MINUTES):
        clock.set(START + timedelta(minutes=minute))
        n = 4 + minute % 5
        await store.enqueue([JobSpec(kind="resize", queue="images", max_attempts=1)] * n)
        clock.advance(timedelta(seconds=1 + minute % 3))
        jobs = await store.claim("worker-a", queues=["images"], limit=n, lease=LEASE)
        assert len(jobs) == n
        clock.advance(timedelta(milliseconds=150 + 40 * (minute % 7)))
        errors = []
        if minute % 3 == 0:
            errors.append(f"timeout after 30 s on order {1000 + minute}")
        if minute % 10 == 0:
            errors.append(f"no user 'u{minute}' in tenant 'acme'")
        for job, error in zip(jobs, errors, strict=False):
            await store.fail(job.lease, error=error, retry_in=timedelta(0))
            ran.dead_job = job.id
        assert await store.complete_many([job.lease for job in jobs[len(errors) :]]) == []
        ran.succeeded += n - len(errors)
        ran.failed += len(errors)
        ran.failing_minutes += bool(errors)
        ran.errors.update(error.split(" ")[0] for error in errors)
        await store.beat_worker("worker-a")
    clock.advance(timedelta(seconds=20))
    await store.pause_queue("images")
    return ran


async def test_kind_and_queue_pages_chart_what_ran_and_group_its_errors(page: Watched) -> None:
    clock = FakeClock(START)
    store = MemoryStore(clock=clock)
    ran = await an_hour_of_jobs(store, clock)
    assert ran.errors == {"timeout": 19, "no": 6}
    tab = page.page
    with serve_store(store, ApiSettings()) as served:
        await tab.goto(served.url + "/#/queues")
        await same_document(tab)
        await tab.locator('tr[data-queue="images"] a[href="#/queues/images"]').click()
        await expect(tab.locator("h1")).to_contain_text("Queue images")
        await expect(tab.locator("#nav a.active")).to_have_text("Queues")

        throughput = tab.locator('svg[aria-label^="Throughput"]')
        await expect(throughput).to_have_attribute("data-total", str(ran.succeeded))
        await expect(throughput).to_have_attribute(
            "aria-label", f"Throughput: {ran.succeeded} succeeded in the last hour"
        )
        failures = tab.locator('svg[aria-label^="Failures"]')
        await expect(failures).to_have_attribute("data-total", str(ran.failed))
        await expect(failures.locator('rect[data-series="dead"]')).to_have_count(
            ran.failing_minutes
        )
        # One point a minute on each run-time line, one on the wait line.
        await expect(tab.locator('svg[aria-label^="Run time"]')).to_have_attribute(
            "data-points", str(2 * MINUTES)
        )
        await expect(tab.locator('svg[aria-label^="Wait"]')).to_have_attribute(
            "data-points", str(MINUTES)
        )
        await expect(tab.locator(".activity-summary")).to_contain_text(
            f"{ran.succeeded} succeeded, {ran.failed} failed, {ran.failed} dead"
        )
        rows = tab.locator("table.errors tbody tr")
        await expect(rows).to_have_count(2)
        await expect(rows.nth(0)).to_have_attribute("data-error", "timeout after N s on order N")
        await expect(rows.nth(0).locator("td").first).to_have_text("19")
        await expect(rows.nth(1)).to_have_attribute("data-error", "no user '…' in tenant '…'")
        await expect(rows.nth(1).locator("td").first).to_have_text("6")
        await expect(tab.locator('li[data-reason="queue_paused"]')).to_contain_text(
            "queue images is paused"
        )
        dead = tab.locator('.card[data-state="dead"]')
        await expect(dead.locator(".card-value")).to_have_text(str(ran.failed))
        await expect(tab.locator("a.card-link").filter(has=dead)).to_have_attribute(
            "href", "#/jobs?state=dead&queue=images"
        )
        await screenshot(tab, "queue-page", full_page=True)
        low = await tab.evaluate(LOW_CONTRAST)
        assert not low, "; ".join(low)

        # The window, from the keyboard: its control is labelled and takes arrow keys.
        picker = tab.get_by_label("window")
        await picker.focus()
        await tab.keyboard.press("ArrowDown")
        await expect(tab).to_have_url(served.url + "/#/queues/images?window=6h")
        await expect(throughput).to_have_attribute(
            "aria-label", f"Throughput: {ran.succeeded} succeeded in the last 6 hours"
        )
        await expect(throughput.locator("rect")).to_have_count(MINUTES // 5)

        await tab.goto(served.url + f"/#/jobs/{ran.dead_job}")
        await tab.locator('dd a[href="#/kinds/resize"]').click()
        await expect(tab.locator("h1")).to_contain_text("Kind resize")
        kind_total = tab.locator('svg[aria-label^="Throughput"]')
        await expect(kind_total).to_have_attribute("data-total", str(ran.succeeded))
        await expect(tab.locator("table.errors tbody tr")).to_have_count(2)
        await expect(tab.locator('[data-held="none"]')).to_be_visible()
        await assert_same_document(tab)
        await screenshot(tab, "kind-page", full_page=True)
        low = await tab.evaluate(LOW_CONTRAST)
        assert not low, "; ".join(low)
        for chart in await tab.locator("svg.chart").all():
            assert await chart.get_attribute("role") == "img"
            assert await chart.get_attribute("aria-label")
        # The overview's and the jobs list's names lead to the pages too.
        await tab.goto(served.url + "/#/")
        await tab.locator('main a[href="#/queues/images"]').click()
        await expect(tab.locator("h1")).to_contain_text("Queue images")
        await tab.goto(served.url + "/#/jobs")
        await tab.locator('td.kind a[href="#/kinds/resize"]').first.click()
        await expect(tab.locator("h1")).to_contain_text("Kind resize")
    await page.assert_clean()


async def test_a_hostile_error_shows_as_text_on_the_kind_page(page: Watched) -> None:
    store = MemoryStore()
    with serve_store(store, ApiSettings()) as served:
        job_id = await dead_job(store, kind="hostile")
        tab = page.page
        await tab.goto(served.url + f"/#/jobs/{job_id}")
        await tab.locator('dd a[href="#/kinds/hostile"]').click()
        sample = tab.locator("table.errors .sample")
        await expect(sample).to_contain_text(f"failed: {HOSTILE}"[:200])
        await expect(tab.locator("table.errors tbody tr")).to_have_count(1)
    await page.assert_clean()


async def test_the_queue_page_reads_in_dark_mode_too(browser: Browser) -> None:
    clock = FakeClock(START)
    store = MemoryStore(clock=clock)
    await an_hour_of_jobs(store, clock)
    context = await browser.new_context(color_scheme="dark")
    try:
        tab = await context.new_page()
        with serve_store(store, ApiSettings()) as served:
            await tab.goto(served.url + "/#/queues/images")
            await expect(tab.locator("table.errors tbody tr")).to_have_count(2)
            await expect(tab.locator('svg[aria-label^="Throughput"]')).to_be_visible()
            low = await tab.evaluate(LOW_CONTRAST)
            assert not low, "; ".join(low)
    finally:
        await context.close()
