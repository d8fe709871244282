"""The queues view in headless Chromium: pause and resume a queue, add a limit through the
form, see limits, paused queues and per-tenant running counts, under the dashboard's CSP and
without a reload, each change leaving its audit entry; read-only mode shows them with no way
to change them."""

from __future__ import annotations

from datetime import timedelta

import pytest
from playwright.async_api import expect

from rota.api import ApiSettings
from rota.domain.flow import Limit, LimitScope
from rota.domain.job import JobSpec
from tests.e2e.conftest import (
    AS_ADMIN,
    Served,
    Watched,
    assert_same_document,
    expect_audit,
    log_in,
    same_document,
)

pytestmark = pytest.mark.browser


@pytest.mark.parametrize("served", [AS_ADMIN], indirect=True)
async def test_a_queue_is_paused_and_resumed_from_the_queues_view(
    page: Watched, served: Served
) -> None:
    tab = page.page
    await log_in(tab, served)
    await served.store.enqueue([JobSpec(kind="email", queue="mail") for _ in range(2)])
    await served.store.enqueue([JobSpec(kind="report")])

    await tab.goto(served.url + "/#/queues")
    await expect(tab.locator("#nav a.active")).to_have_text("Queues")
    row = tab.locator('tr[data-queue="mail"]')
    await expect(row.locator(".badge.s-active")).to_have_text("active")
    # The counts by state: waiting first, then pending.
    await expect(row.locator("td.num").nth(1)).to_have_text("2")
    await same_document(tab)

    await row.locator('button[data-action="pause"]').click()
    await expect(row.locator(".badge.s-paused")).to_have_text("paused")
    await expect(tab.locator("#notice")).to_contain_text("Queue mail paused")
    await assert_same_document(tab)
    [mail] = [queue for queue in await served.store.list_queues() if queue.name == "mail"]
    assert mail.paused
    claimed = await served.store.claim("w", queues=["mail"], limit=5, lease=timedelta(seconds=30))
    assert claimed == [], "a paused queue gives workers nothing"

    await tab.goto(served.url + "/#/")
    await expect(tab.locator('.flow [data-paused-queue="mail"]')).to_be_visible()
    await tab.goto(served.url + "/#/queues")
    await row.locator('button[data-action="resume"]').click()
    await expect(row.locator(".badge.s-active")).to_have_text("active")
    assert not any(queue.paused for queue in await served.store.list_queues())
    await expect_audit(
        tab,
        served,
        [
            ("token:admin", "queue.resume", "queue:mail", "", ""),
            ("token:admin", "queue.pause", "queue:mail", "", ""),
        ],
    )
    await page.assert_clean()


@pytest.mark.parametrize("served", [AS_ADMIN], indirect=True)
async def test_a_limit_is_added_through_the_form_and_listed(page: Watched, served: Served) -> None:
    tab = page.page
    await log_in(tab, served)
    await tab.goto(served.url + "/#/queues")
    await expect(tab.locator("table.limits")).to_contain_text("No limits")
    await same_document(tab)

    form = tab.locator("form.limit-form")
    await form.locator("select[name=scope]").select_option("kind")
    await form.locator("input[name=key]").fill("pdf")
    await form.locator("input[name=concurrency]").fill("3")
    await form.locator("input[name=rate]").fill("100")
    await form.locator("select[name=per]").select_option(label="minute")
    await form.get_by_role("button", name="Set limit").click()

    row = tab.locator('tr[data-limit="kind:pdf"]')
    await expect(row).to_be_visible()
    await expect(row.locator("td").nth(2)).to_have_text("3")
    await expect(row.locator("td").nth(3)).to_have_text("100 / minute")
    await expect(tab.locator("#notice")).to_contain_text("Limit on kind pdf set.")
    await assert_same_document(tab)
    [info] = await served.store.list_limits()
    assert info.limit == Limit(
        LimitScope.KIND, "pdf", concurrency=3, rate=100, period=timedelta(minutes=1)
    )

    # A bad limit is refused with the server's message naming the field; nothing changes.
    await form.locator("select[name=scope]").select_option("queue")
    await form.locator("input[name=key]").fill("mail")
    await form.locator("input[name=rate]").fill("5")
    await form.get_by_role("button", name="Set limit").click()
    await expect(tab.locator("#notice.error")).to_contain_text("rate: rates apply to kinds")
    page.problems.clear()  # the browser logs the refused request (400) itself
    assert len(await served.store.list_limits()) == 1

    # Edit fills the form; setting it again replaces the limit.
    await row.locator('button[data-action="edit"]').click()
    await expect(form.locator("input[name=key]")).to_have_value("pdf")
    await form.locator("input[name=concurrency]").fill("5")
    await form.get_by_role("button", name="Set limit").click()
    await expect(row.locator("td").nth(2)).to_have_text("5")

    await row.locator('button[data-action="remove"]').click()
    dialog = tab.locator("dialog.confirm")
    await dialog.get_by_role("button", name="Remove").click()
    await expect(dialog).to_contain_text("Removed the limit on kind pdf.")
    await dialog.get_by_role("button", name="Close").click()
    await expect(row).to_have_count(0)
    assert await served.store.list_limits() == []
    # The refused limit left no entry.
    await expect_audit(
        tab,
        served,
        [
            ("token:admin", action, "limit:kind:pdf", "", "")
            for action in ("limit.delete", "limit.set", "limit.set")
        ],
    )
    await page.assert_clean()


async def test_limits_and_tenants_show_their_use_on_the_queues_view_and_overview(
    page: Watched, served: Served
) -> None:
    tab = page.page
    store = served.store
    await store.set_limit(Limit(LimitScope.TENANT, "*", concurrency=2))
    await store.enqueue(
        [JobSpec(kind="a", tenant="acme") for _ in range(3)] + [JobSpec(kind="a", tenant="globex")]
    )
    await store.claim("w", queues=["default"], limit=10, lease=timedelta(minutes=5))

    await tab.goto(served.url + "/#/queues")
    tenants = tab.locator("table.tenants")
    await expect(tenants.locator('tr[data-tenant="acme"] td.num')).to_have_text("2")
    await expect(tenants.locator('tr[data-tenant="globex"] td.num')).to_have_text("1")
    every = tab.locator('tr[data-limit="tenant:*"]')
    await expect(every.locator("td").nth(4)).to_have_text("3")

    await tab.goto(served.url + "/#/")
    await expect(tab.locator('.flow [data-limit="tenant:*"]')).to_contain_text(
        "every tenant at most 2 each, 3 running"
    )
    await page.assert_clean()


@pytest.mark.parametrize("served", [ApiSettings(read_only=True)], indirect=True)
async def test_read_only_queues_view_has_no_controls(page: Watched, served: Served) -> None:
    await served.store.enqueue([JobSpec(kind="email", queue="mail")])
    await served.store.set_limit(Limit(LimitScope.KIND, "pdf", concurrency=1))
    await served.store.pause_queue("mail")

    await page.page.goto(served.url + "/#/queues")
    await expect(page.page.locator('tr[data-queue="mail"] .badge.s-paused')).to_be_visible()
    await expect(page.page.locator('tr[data-limit="kind:pdf"]')).to_be_visible()
    assert await page.page.locator("main button, main form").count() == 0
    await page.assert_clean()
