"""The Audit view in headless Chromium: an action taken in the dashboard shows up there with
the identity that took it; a read-only login sees everything and is offered no action; a
hostile identity renders as text."""

from __future__ import annotations

import pytest
from playwright.async_api import Browser, expect

from rota.api import ApiSettings
from rota.domain.audit import AuditFilter
from tests.e2e.conftest import (
    ADMIN_TOKEN,
    HOSTILE,
    WATCH_CSP,
    Served,
    Watched,
    dead_job,
    log_in,
)

pytestmark = pytest.mark.browser

READ_TOKEN = "e2e-read-token-4567"
BOTH = ApiSettings(auth_token=ADMIN_TOKEN, read_token=READ_TOKEN)


@pytest.mark.parametrize("served", [BOTH], indirect=True)
async def test_a_retry_in_the_dashboard_leaves_an_audit_entry_with_its_identity(
    page: Watched, served: Served
) -> None:
    job_id = await dead_job(served.store, kind="email")
    await log_in(page.page, served)
    await page.page.goto(served.url + f"/#/jobs/{job_id}")
    await page.page.click("button[data-action=retry]")
    await expect(page.page.locator("h1 .badge")).to_have_text("pending")

    await page.page.click("#nav a[data-view=audit]")
    await expect(page.page.locator("#nav a.active")).to_have_text("Audit")
    row = page.page.locator("table.audit tbody tr")
    await expect(row).to_have_count(1)
    await expect(row.locator(".identity")).to_have_text("token:admin")
    await expect(row.locator(".action")).to_have_text("job.retry")
    await expect(row.locator(".target")).to_have_text(f"job:{job_id}")
    await expect(row.locator(".count")).to_have_text("1")
    # The target links to the job.
    await row.locator(".target a").click()
    await expect(page.page.locator("h1 .badge")).to_have_text("pending")

    # Filters: an identity that did nothing shows nothing; the action filter finds the retry.
    await page.page.goto(served.url + "/#/audit?identity=token:read")
    await expect(page.page.get_by_text("No operator actions match.")).to_be_visible()
    await page.page.goto(served.url + "/#/audit")
    await page.page.select_option("form[data-filters=audit] select[name=action]", "job.retry")
    await page.page.click("form[data-filters=audit] button[type=submit]")
    await expect(page.page).to_have_url(f"{served.url}/#/audit?action=job.retry")
    await expect(page.page.locator("table.audit tbody tr")).to_have_count(1)
    [entry] = (await served.store.list_audit(AuditFilter())).entries
    assert (entry.identity, entry.action, entry.target) == (
        "token:admin",
        "job.retry",
        f"job:{job_id}",
    )
    await page.assert_clean()


@pytest.mark.parametrize("served", [BOTH], indirect=True)
async def test_a_read_only_login_sees_the_audit_and_is_offered_no_action(
    page: Watched, served: Served
) -> None:
    job_id = await dead_job(served.store, kind="email")
    await log_in(page.page, served, READ_TOKEN)
    await expect(page.page.locator("#mode")).to_be_visible()
    await page.page.goto(served.url + f"/#/jobs/{job_id}")
    await expect(page.page.locator("h1 .badge")).to_have_text("dead")
    assert await page.page.locator("button[data-action=retry]").count() == 0
    # Even a request made by hand is refused, and leaves no entry.
    status = await page.page.evaluate(
        f"""fetch("/api/jobs/{job_id}/retry", {{method: "POST",
            headers: {{"Content-Type": "application/json"}}}}).then((r) => r.status)"""
    )
    assert status == 403
    # The browser logs the refusal it was asked to provoke; nothing else may be logged.
    page.problems = [p for p in page.problems if "status of 403" not in p]
    await page.page.goto(served.url + "/#/audit")
    await expect(page.page.get_by_text("You are token:read.")).to_be_visible()
    await expect(page.page.get_by_text("No operator actions match.")).to_be_visible()
    assert (await served.store.list_audit(AuditFilter())).entries == []
    assert (await served.store.get(job_id)).state.value == "dead"
    await page.assert_clean()


HOSTILE_USER = HOSTILE.replace(":", "")[:150]


@pytest.mark.parametrize(
    "served", [ApiSettings(basic_auth=(HOSTILE_USER, "basic-password-1"))], indirect=True
)
async def test_a_hostile_identity_renders_as_text(browser: Browser, served: Served) -> None:
    context = await browser.new_context(
        http_credentials={"username": HOSTILE_USER, "password": "basic-password-1"}
    )
    await context.add_init_script(WATCH_CSP)
    watched = Watched(await context.new_page())
    try:
        job_id = await dead_job(served.store, kind="email")
        await watched.page.goto(served.url + f"/#/jobs/{job_id}")
        await watched.page.click("button[data-action=retry]")
        await expect(watched.page.locator("h1 .badge")).to_have_text("pending")
        await watched.page.goto(served.url + "/#/audit")
        cell = watched.page.locator("table.audit tbody tr .identity")
        await expect(cell).to_have_text(f"basic:{HOSTILE_USER}")
        assert await watched.page.locator("main img, main script, main svg").count() == 0
        await watched.assert_clean()
    finally:
        await context.close()
