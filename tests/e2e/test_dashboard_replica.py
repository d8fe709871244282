"""The overview's replica lag card: shown only when reads go to a replica, and kept live."""

from __future__ import annotations

from datetime import timedelta

import pytest
from playwright.async_api import Browser, expect

from rota.api import ApiSettings, create_app
from rota.client import Client
from rota.store.memory import MemoryStore
from tests.e2e.conftest import Served, serve_asgi
from tests.support.replica import StaleCopy

pytestmark = pytest.mark.browser


async def test_the_overview_shows_the_replica_lag_only_with_a_replica(
    browser: Browser, served: Served
) -> None:
    page = await browser.new_page()
    await page.goto(served.url + "/")
    await expect(page.locator(".cards .card")).to_have_count(9)
    await expect(page.locator("[data-replica-lag]")).to_have_count(0)

    copy = StaleCopy(MemoryStore(), timedelta(seconds=2.5))
    with serve_asgi(create_app(Client(MemoryStore()), settings=ApiSettings(), replica=copy)) as url:
        await page.goto(url + "/")
        card = page.locator("[data-replica-lag]")
        await expect(card.locator(".card-label")).to_have_text("replica lag")
        await expect(card.locator(".card-value")).to_have_text("2.5 s")
        copy.behind = timedelta(0)
        await expect(card.locator(".card-value")).to_have_text("caught up")
        copy.behind = None
        await expect(card.locator(".card-value")).to_have_text("unknown")
