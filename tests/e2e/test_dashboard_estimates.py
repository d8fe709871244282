"""A state tab whose count is an estimate says so: "about", never a bare number (a SQLite
store past the exact-count threshold, set low here)."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.async_api import Browser, expect

from rota.api import ApiSettings, create_app
from rota.client import Client
from rota.domain.job import JobSpec
from rota.store import open_store
from tests.e2e.conftest import serve_asgi

pytestmark = pytest.mark.browser


async def test_an_estimated_tab_count_reads_about(browser: Browser, tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'rota.db'}")
    await store.migrate()
    try:
        await store.enqueue([JobSpec(kind="email", tenant="acme") for _ in range(30)])
        await store.enqueue([JobSpec(kind="email", tenant="zed") for _ in range(2)])
        settings = ApiSettings(exact_count_up_to=5)
        page = await browser.new_page()
        with serve_asgi(create_app(Client(store), settings=settings)) as url:
            await page.goto(url + "/#/jobs?tenant=acme")
            pending = page.locator('a[data-tab="pending"] .tab-count')
            await expect(pending).to_have_text("about 30")
            await expect(page.locator('a[data-tab="all"] .tab-count')).to_have_text("about 30")
            await expect(page.locator('a[data-tab="dead"] .tab-count')).to_have_text("0")
            # Under the threshold the count is exact and bare.
            await page.goto(url + "/#/jobs?tenant=zed")
            await expect(pending).to_have_text("2")
            await expect(page.locator('a[data-tab="all"] .tab-count')).to_have_text("2")
            # Millions read as a person says them.
            said = await page.evaluate(
                "import('/static/format.js').then((f) =>"
                " [1234567, 45300, 450000, 1001].map(f.about))"
            )
            assert said == ["about 1.2M", "about 45.3K", "about 450K", "about 1,001"]
    finally:
        await store.close()
