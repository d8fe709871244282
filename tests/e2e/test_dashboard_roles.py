"""An operator's dashboard, in headless Chromium: it offers what an operator may do (retry,
cancel, pause, run a schedule now) and not what only an admin may (delete jobs, change limits,
create, edit or remove schedules), which the server would refuse with 403 anyway."""

from __future__ import annotations

import pytest
from playwright.async_api import expect

from rota.api import ApiSettings
from rota.api.credentials import Credential, Role
from rota.domain.schedule import Rule, ScheduleSpec
from rota.store.memory import MemoryStore
from tests.e2e.conftest import ADMIN_TOKEN, Watched, dead_job, log_in, screenshot, serve_store

pytestmark = pytest.mark.browser

OPERATOR_TOKEN = "e2e-operator-token-0123"
SETTINGS = ApiSettings(
    auth_token=ADMIN_TOKEN,
    credentials=(Credential("olga", Role.OPERATOR, token=OPERATOR_TOKEN),),
)


async def test_an_operator_sees_no_admin_only_controls(page: Watched) -> None:
    store = MemoryStore()
    dead = await dead_job(store, kind="email")
    await store.upsert_schedule(
        ScheduleSpec(name="nightly", kind="email", rule=Rule.cron("0 2 * * *"))
    )
    with serve_store(store, SETTINGS) as served:
        tab = page.page
        await tab.goto(served.url + "/login")
        await expect(tab.locator("input[name=token]")).to_be_visible()
        await screenshot(tab, "login")
        await log_in(tab, served, OPERATOR_TOKEN)

        await tab.goto(served.url + f"/#/jobs/{dead}")
        await expect(tab.locator('button[data-action="retry"]')).to_be_visible()
        await expect(tab.locator('button[data-action="delete"]')).to_have_count(0)

        await tab.goto(served.url + "/#/jobs")
        await expect(tab.locator('button[data-bulk="retry"]')).to_be_visible()
        await expect(tab.locator('button[data-bulk="cancel"]')).to_be_visible()
        await expect(tab.locator('[data-bulk="delete"], [data-selection="delete"]')).to_have_count(
            0
        )

        await tab.goto(served.url + "/#/schedules")
        row = tab.locator("table.schedules tbody tr").first
        await expect(row.locator('button[data-action="pause"]')).to_be_visible()
        await expect(row.locator('button[data-action="run"]')).to_be_visible()
        await expect(
            tab.locator('[data-action="edit"], [data-action="remove"], [data-action="add"]')
        ).to_have_count(0)
        await expect(tab.locator("form.schedule-form")).to_have_count(0)

        await tab.goto(served.url + "/#/queues")
        await expect(tab.locator("table.limits")).to_be_visible()
        await expect(tab.locator("form.limit-form")).to_have_count(0)
        await page.assert_clean()
