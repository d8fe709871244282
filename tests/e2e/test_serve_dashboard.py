"""The dashboard of a real `rota serve` (demo kinds, in-process workers) in headless Chromium."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from playwright.async_api import Browser, Page, expect

from tests.support.serve import Served, serving

pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.fixture
def demo(tmp_path: Path) -> AsyncIterator[Served]:
    with serving(tmp_path) as served:
        yield served


@pytest.fixture
async def tab(browser: Browser) -> AsyncIterator[Page]:
    context = await browser.new_context()
    page = await context.new_page()
    try:
        yield page
    finally:
        await context.close()


async def test_a_preset_button_enqueues_a_job_that_turns_succeeded_without_reload(
    tab: Page, demo: Served
) -> None:
    await tab.goto(demo.url + "/#/jobs")
    await tab.get_by_role("button", name="+ email", exact=True).click()
    row = tab.locator("tr[data-job]").filter(has_text="email").first
    await expect(row).to_be_visible(timeout=10_000)
    # The page refreshes itself: the same row turns succeeded with no navigation.
    navigations: list[str] = []
    tab.on("framenavigated", lambda frame: navigations.append(frame.url))
    await expect(row.locator(".badge.s-succeeded")).to_be_visible(timeout=15_000)
    assert navigations == []
