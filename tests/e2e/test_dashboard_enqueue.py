"""Creating jobs in headless Chromium: the form with the accepted kinds and a payload checked
as it is typed, a job created there that runs and is audited with the identity, an editable
copy of any job, and no form (and a refused POST) for a read-only identity."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from playwright.async_api import Page, expect

from rota import App, JobContext
from rota.api import ApiSettings
from rota.domain.job import JobSpec
from rota.store.memory import MemoryStore
from rota.store.records import JobFilter
from rota.testing import drain
from tests.e2e.conftest import (
    ADMIN_TOKEN,
    AS_ADMIN,
    HOSTILE,
    Served,
    Watched,
    expect_audit,
    log_in,
    screenshot,
    serve_store,
)

pytestmark = pytest.mark.browser

READ_TOKEN = "e2e-read-token-4567"
BOTH = ApiSettings(auth_token=ADMIN_TOKEN, read_token=READ_TOKEN)


@pytest.fixture
async def app() -> AsyncIterator[App]:
    jobs = App("memory://")

    @jobs.job("email")
    async def email(ctx: JobContext, payload: Any) -> dict[str, Any]:
        return {"sent_to": payload["to"]}

    @jobs.job("report")
    async def report(ctx: JobContext, payload: Any) -> None:
        return None

    await jobs.open()
    try:
        yield jobs
    finally:
        await jobs.close()


def job_id_of(tab: Page) -> int:
    match = re.search(r"#/jobs/(\d+)$", tab.url)
    assert match, tab.url
    return int(match.group(1))


async def test_a_job_created_from_the_form_runs_and_is_audited_with_the_identity(
    page: Watched, app: App
) -> None:
    store = app.store
    assert isinstance(store, MemoryStore)
    with serve_store(store, AS_ADMIN, kinds=["email", "report"]) as served:
        tab = page.page
        await log_in(tab, served)
        await tab.goto(served.url + "/#/jobs")
        await tab.click('a[data-action="new-job"]')
        await expect(tab.locator("h1")).to_have_text("New job")
        form = tab.locator("form.enqueue-form")
        kinds = form.locator("select[name=kind] option")
        await expect(kinds).to_have_text(["email", "report"])
        await form.locator("select[name=kind]").select_option("email")
        payload = form.locator("textarea[name=payload]")
        submit = form.locator("button[type=submit]")

        await payload.press_sequentially('{"to": ')
        await expect(form.locator(".payload-check")).to_contain_text("Not valid JSON")
        await expect(payload).to_have_attribute("aria-invalid", "true")
        await expect(submit).to_be_disabled()
        await payload.press_sequentially('"ann@example.com"}')
        await expect(form.locator(".payload-check")).to_have_text("Valid JSON.")
        await expect(submit).to_be_enabled()
        await form.locator("input[name=priority]").fill("5")
        await form.locator("input[name=unique_key]").fill("welcome-ann")
        await screenshot(tab, "new-job")
        await submit.click()

        await expect(tab.locator("h1 .badge")).to_have_text("pending")
        job_id = job_id_of(tab)
        assert await drain(app) == 1
        await expect(tab.locator("h1 .badge")).to_have_text("succeeded")
        await expect(tab.locator("pre.result")).to_contain_text('"sent_to": "ann@example.com"')
        job = await store.get(job_id)
        assert (job.kind, job.payload, job.priority, job.unique_key) == (
            "email",
            {"to": "ann@example.com"},
            5,
            "welcome-ann",
        )
        await expect_audit(tab, served, [("token:admin", "job.create", f"job:{job_id}", "", "1")])
        await page.assert_clean()


@pytest.mark.parametrize("served", [AS_ADMIN], indirect=True)
async def test_a_copy_of_any_job_is_enqueued_as_edited(page: Watched, served: Served) -> None:
    [original] = await served.store.enqueue(
        [JobSpec(kind="report", payload={"month": 11}, priority=3, queue="reports")]
    )
    tab = page.page
    await log_in(tab, served)
    await tab.goto(served.url + f"/#/jobs/{original.job.id}")
    await tab.click('a[data-action="copy"]')
    await expect(tab.locator("h1")).to_have_text(f"Enqueue a copy of job {original.job.id}")
    form = tab.locator("form.enqueue-form")
    payload = form.locator("textarea[name=payload]")
    await expect(payload).to_have_value('{\n  "month": 11\n}')
    await expect(form.locator("input[name=queue]")).to_have_value("reports")
    await payload.fill('{"month": 12}')
    await form.locator("input[name=run_at]").fill("2030-01-02T03:04:05")  # UTC, as shown
    await form.locator("button[type=submit]").click()

    await expect(tab.locator("h1 .badge")).to_have_text("pending")
    copy = await served.store.get(job_id_of(tab))
    assert copy.id != original.job.id
    assert copy.run_at == datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)
    assert (copy.kind, copy.payload, copy.priority, copy.queue) == (
        "report",
        {"month": 12},
        3,
        "reports",
    )
    await page.assert_clean()


async def test_a_read_only_identity_sees_no_form_and_its_enqueue_is_refused(
    page: Watched,
) -> None:
    store = MemoryStore()
    [existing] = await store.enqueue([JobSpec(kind="email")])
    with serve_store(store, BOTH) as served:
        tab = page.page
        await log_in(tab, served, READ_TOKEN)
        await tab.goto(served.url + "/#/jobs")
        await expect(tab.locator("table.jobs tbody tr")).to_have_count(1)
        await expect(tab.locator('a[data-action="new-job"]')).to_have_count(0)
        await tab.goto(served.url + f"/#/jobs/{existing.job.id}")
        await expect(tab.locator("h1 .badge")).to_have_text("pending")
        await expect(tab.locator('a[data-action="copy"]')).to_have_count(0)
        await tab.goto(served.url + "/#/jobs/new")
        await expect(tab.locator(".read-only-note")).to_be_visible()
        await expect(tab.locator("form.enqueue-form")).to_have_count(0)

        # The page's own same-origin request, with the session: refused all the same.
        status = await tab.evaluate(
            """async () => (await fetch("/api/jobs", {
                method: "POST", headers: {"Content-Type": "application/json"},
                body: JSON.stringify({kind: "email"}), credentials: "same-origin"})).status"""
        )
        assert status == 403
        assert [job.id for job in (await store.list_jobs(JobFilter())).jobs] == [existing.job.id]
        page.problems.clear()  # the browser logs the refused request's 403 itself
        await page.assert_clean()


async def test_a_hostile_job_s_timeline_and_copy_render_as_text(
    page: Watched, served: Served
) -> None:
    [result] = await served.store.enqueue(
        [JobSpec(kind="email", payload={"html": HOSTILE}, unique_key=HOSTILE[:200])]
    )
    [claimed] = await served.store.claim(
        HOSTILE[:120], queues=["default"], limit=1, lease=timedelta(seconds=30)
    )
    await served.store.fail(claimed.lease, error=HOSTILE, retry_in=timedelta(0))
    tab = page.page

    await tab.goto(served.url + f"/#/jobs/{result.job.id}")
    label = tab.locator("svg.job-timeline text.row-label").first
    await expect(label).to_contain_text("#1 <script>")
    await tab.hover('svg.job-timeline rect[data-run="1"]')
    await tab.click('a[data-action="copy"]')
    payload = tab.locator("form.enqueue-form textarea[name=payload]")
    await expect(payload).to_have_value(json.dumps({"html": HOSTILE}, indent=2))
    await expect(tab.locator("input[name=unique_key]")).to_have_value(HOSTILE[:200])
    assert await tab.locator("main img, main script, main svg:not(.chart)").count() == 0
    await page.assert_clean()
