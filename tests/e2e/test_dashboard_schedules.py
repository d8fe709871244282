"""The schedules view in headless Chromium: next runs, last outcome, pause, resume and run now,
under the dashboard's CSP and without a reload."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from playwright.async_api import Browser, Page, expect

from rota.domain.schedule import Rule, ScheduleSpec
from tests.e2e.conftest import Served

pytestmark = pytest.mark.browser


@pytest.fixture
async def page(browser: Browser) -> AsyncIterator[tuple[Page, list[str]]]:
    context = await browser.new_context()
    tab = await context.new_page()
    problems: list[str] = []
    tab.on("pageerror", lambda error: problems.append(f"page error: {error}"))
    tab.on(
        "console",
        lambda message: (
            problems.append(f"console: {message.text}")
            if message.type in ("error", "warning")
            else None
        ),
    )
    try:
        yield tab, problems
    finally:
        await context.close()


async def test_schedules_view_pauses_resumes_and_runs_a_schedule_now(
    page: tuple[Page, list[str]], served: Served
) -> None:
    tab, problems = page
    await served.store.upsert_schedule(
        ScheduleSpec(name="nightly", kind="backup", rule=Rule.cron("30 2 * * *", "Europe/Berlin"))
    )

    await tab.goto(served.url + "/#/schedules")
    row = tab.locator('tr[data-schedule="nightly"]')
    await expect(row).to_contain_text("every day at 02:30 (Europe/Berlin)")
    await expect(row.locator(".badge")).to_have_text("active")
    await expect(row.locator(".later li")).to_have_count(3)

    await row.locator('button[data-action="pause"]').click()
    await expect(row.locator(".badge")).to_have_text("paused")
    await row.locator('button[data-action="run"]').click()
    await expect(tab.locator("#notice")).to_contain_text("Schedule nightly: job 1 enqueued.")
    await expect(row.locator(".badge").first).to_have_text("pending")
    await row.locator('button[data-action="resume"]').click()
    await expect(row.locator(".badge").last).to_have_text("active")

    schedule = await served.store.get_schedule("nightly")
    assert (schedule.paused, schedule.last_job_id) == (False, 1)
    assert problems == []


async def test_schedules_come_a_page_at_a_time_and_the_overview_asks_for_the_soonest(
    page: tuple[Page, list[str]], served: Served
) -> None:
    tab, problems = page
    for index in range(60):
        await served.store.upsert_schedule(
            ScheduleSpec(name=f"s{index:02}", kind="ping", rule=Rule.cron(f"{index % 60} 9 * * *"))
        )
    asked: list[str] = []
    tab.on("request", lambda request: asked.append(request.url))

    await tab.goto(served.url + "/#/schedules")
    rows = tab.locator("tr[data-schedule]")
    await expect(rows).to_have_count(50)
    await expect(rows.first).to_have_attribute("data-schedule", "s00")
    await tab.locator('button[data-page="next"]').click()
    await expect(rows).to_have_count(10)
    await expect(rows.first).to_have_attribute("data-schedule", "s50")
    await expect(tab.locator('button[data-page="next"]')).to_be_disabled()
    await tab.locator('button[data-page="previous"]').click()
    await expect(rows).to_have_count(50)

    await tab.goto(served.url + "/#/")
    upcoming = tab.get_by_role("link", name="s00")
    await expect(upcoming.first).to_be_visible()
    listed = [url for url in asked if "/api/schedules" in url]
    assert listed and all("limit=" in url for url in listed), listed
    assert any("order=due" in url for url in listed)
    assert problems == []
