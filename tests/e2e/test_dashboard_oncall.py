"""The dashboard as on-call engineers use it, in headless Chromium: act on selected rows and on
a filter (each after a dialog that states its scope), see why a pending job is not running,
state tabs with counts, UTC or local time, dark mode, a retried job's history read right, and
dialogs that close when the user goes Back; all under the CSP and without a reload. Every
action leaves its audit entry, one per job for a selection (one request each)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest
from playwright.async_api import Browser, expect

from rota.api import ApiSettings
from rota.domain.audit import AuditFilter
from rota.domain.flow import Limit, LimitScope
from rota.domain.job import JobSpec
from rota.domain.job_state import JobState
from rota.store.memory import MemoryStore
from tests.e2e.conftest import (
    AS_ADMIN,
    Served,
    Watched,
    assert_same_document,
    dead_job,
    expect_audit,
    log_in,
    same_document,
)

pytestmark = pytest.mark.browser

LEASE = timedelta(seconds=30)


@pytest.fixture
def context_options() -> dict[str, Any]:
    """Local time is Berlin's, so "local" differs from UTC."""
    return {"timezone_id": "Europe/Berlin"}


async def pending_job(store: MemoryStore, **spec: object) -> int:
    [result] = await store.enqueue([JobSpec(kind="email", **spec)])  # type: ignore[arg-type]
    return result.job.id


@pytest.mark.parametrize("served", [AS_ADMIN], indirect=True)
async def test_selected_rows_are_retried_after_a_dialog_naming_them(
    page: Watched, served: Served
) -> None:
    tab = page.page
    await log_in(tab, served)
    dead = [await dead_job(served.store, kind="sync") for _ in range(3)]
    pending = await pending_job(served.store)
    await tab.goto(served.url + "/#/jobs")
    await expect(tab.locator("table.jobs tbody tr")).to_have_count(4)
    await same_document(tab)
    await expect(tab.locator(".selection")).to_be_hidden()

    for job_id in (dead[0], dead[2], pending):
        await tab.locator(f'input.select-row[data-job="{job_id}"]').check()
    await expect(tab.locator(".selected-count")).to_have_text("3 selected")
    await tab.click("button[data-selection=retry]")
    dialog = tab.locator("dialog.confirm")
    await expect(dialog).to_contain_text(
        f"Retry 2 selected dead or cancelled jobs: {dead[0]}, {dead[2]}? "
        "1 selected job that is not dead or cancelled is left alone."
    )
    await dialog.locator("button.primary").click()
    await expect(dialog).to_contain_text("Retried 2 jobs.")
    await dialog.get_by_role("button", name="Close").click()
    await expect(tab.locator(".selected-count")).to_have_text("1 selected")

    states = {job_id: (await served.store.get(job_id)).state for job_id in dead}
    assert states == {
        dead[0]: JobState.PENDING,
        dead[1]: JobState.DEAD,
        dead[2]: JobState.PENDING,
    }
    await assert_same_document(tab)
    await expect_audit(
        tab,
        served,
        [("token:admin", "job.retry", f"job:{job_id}", "", "1") for job_id in (dead[2], dead[0])],
    )
    await page.assert_clean()


@pytest.mark.parametrize("served", [AS_ADMIN], indirect=True)
async def test_selected_rows_are_cancelled_and_deleted_and_refusals_reported(
    page: Watched, served: Served
) -> None:
    tab = page.page
    await log_in(tab, served)
    first, second = [await pending_job(served.store) for _ in range(2)]
    finished = await dead_job(served.store, kind="sync")
    await tab.goto(served.url + "/#/jobs")
    await expect(tab.locator("table.jobs tbody tr")).to_have_count(3)

    await tab.locator("input.select-all").check()
    await expect(tab.locator(".selected-count")).to_have_text("3 selected")
    await tab.click("button[data-selection=cancel]")
    dialog = tab.locator("dialog.confirm")
    await expect(dialog).to_contain_text(
        f"Cancel 2 selected waiting, pending, held or running jobs: {first}, {second}?"
    )
    # Meanwhile a worker takes one and another operator cancels it: the server refuses.
    await served.store.cancel(second)
    await dialog.locator("button.danger").click()
    await expect(dialog).to_contain_text("Cancelled 1 job. Refused: job")
    await expect(dialog).to_contain_text(f"job {second}:")
    page.problems.clear()  # the browser logs the refused request's 409 itself
    await dialog.get_by_role("button", name="Close").click()
    assert (await served.store.get(first)).state is JobState.CANCELLED

    await expect(tab.locator(f'tr[data-job="{first}"] .badge')).to_have_text("cancelled")
    # The job cancelled left the selection; the refused one and the dead one stay in it.
    await expect(tab.locator(".selected-count")).to_have_text("2 selected")
    await tab.locator("input.select-all").check()
    await tab.click("button[data-selection=delete]")
    await expect(dialog).to_contain_text(
        f"Delete 3 selected not running jobs: {first}, {second}, {finished}? "
        "Their history goes too; this cannot be undone."
    )
    await dialog.locator("button.danger").click()
    await expect(dialog).to_contain_text("Deleted 3 jobs.")
    await dialog.get_by_role("button", name="Close").click()
    await expect(tab.locator("table.jobs tbody tr")).to_have_count(0)
    await expect(tab.locator(".selection")).to_be_hidden()
    assert sum((await served.store.counts()).by_state.values()) == 0
    # One entry per job acted on; the refused cancel left none.
    await expect_audit(
        tab,
        served,
        [("token:admin", "job.delete", f"job:{job_id}", "", "1") for job_id in (finished, second)]
        + [
            ("token:admin", "job.delete", f"job:{first}", "", "1"),
            ("token:admin", "job.cancel", f"job:{first}", "", "1"),
        ],
    )
    await page.assert_clean()


@pytest.mark.parametrize("served", [AS_ADMIN], indirect=True)
async def test_finished_jobs_matching_a_filter_are_deleted_after_the_scope_dialog(
    page: Watched, served: Served
) -> None:
    tab = page.page
    await log_in(tab, served)
    for _ in range(2):
        await dead_job(served.store, kind="sync")
    kept = await dead_job(served.store, kind="email")
    waiting = await pending_job(served.store, queue="sync")
    await tab.goto(served.url + "/#/jobs?kind=sync")
    await tab.click("button[data-bulk=delete]")
    dialog = tab.locator("dialog.confirm")
    await expect(dialog).to_contain_text(
        "Delete 2 finished (succeeded, dead or cancelled) jobs matching kind = sync? "
        "Their history goes too; this cannot be undone."
    )
    await dialog.get_by_role("button", name="Cancel").click()
    await expect(dialog).to_have_count(0)
    assert (await served.store.counts()).total(JobState.DEAD) == 3, "cancelled: nothing changed"
    assert (await served.store.list_audit(AuditFilter())).entries == [], "and nothing recorded"

    await tab.click("button[data-bulk=delete]")
    await dialog.locator("button.danger").click()
    await expect(dialog).to_contain_text("Deleted 2 jobs.")
    assert (await served.store.get(kept)).state is JobState.DEAD
    assert (await served.store.get(waiting)).state is JobState.PENDING
    await expect_audit(tab, served, [("token:admin", "jobs.purge", "", "kind sync", "2")])
    await page.assert_clean()


async def test_a_dialog_closes_when_the_user_goes_back(page: Watched, served: Served) -> None:
    tab = page.page
    await dead_job(served.store, kind="sync")
    await tab.goto(served.url + "/#/")
    await expect(tab.locator("#status")).to_have_text("live")
    await tab.click("#nav a[data-view=jobs]")
    await expect(tab.locator("table.jobs tbody tr")).to_have_count(1)
    await tab.click("button[data-bulk=retry]")
    await expect(tab.locator("dialog.confirm")).to_be_visible()
    await tab.go_back()
    await expect(tab.locator(".cards .card").first).to_be_visible()
    await expect(tab.locator("dialog.confirm")).to_have_count(0)
    assert (await served.store.counts()).total(JobState.DEAD) == 1
    await page.assert_clean()


async def test_a_pending_job_says_why_it_is_not_running(page: Watched, served: Served) -> None:
    tab = page.page
    await served.store.enqueue([JobSpec(kind="pdf", queue="mail") for _ in range(2)])
    await served.store.claim("w1", queues=["mail"], limit=1, lease=LEASE)
    await served.store.set_limit(Limit(LimitScope.KIND, "pdf", concurrency=1))
    await served.store.pause_queue("mail")
    later = await pending_job(served.store, delay=timedelta(hours=2))

    await tab.goto(served.url + "/#/jobs")
    held = tab.locator('tr[data-job="2"] .blocked')
    await expect(held.locator(".blocker")).to_have_text(["queue paused", "kind limit", "no worker"])
    await expect(held).to_have_attribute(
        "title",
        "queue mail is paused; kind pdf is at its limit: 1 of 1 running; "
        "no live worker claims from queue mail",
    )
    await expect(tab.locator('tr[data-job="1"] .blocked')).to_have_count(0)

    await tab.goto(served.url + "/#/jobs/2")
    why = tab.locator("ul.why li")
    await expect(why).to_have_count(3)
    await expect(why.first).to_contain_text("queue mail is paused")
    await served.store.resume_queue("mail")
    await expect(why).to_have_count(2)

    await tab.goto(served.url + f"/#/jobs/{later}")
    await expect(tab.locator('ul.why li[data-blocker="not_due"]')).to_contain_text(
        "not due yet (due in 2.0 h,"
    )
    await page.assert_clean()


async def test_state_tabs_show_counts_and_filter_the_list(page: Watched, served: Served) -> None:
    tab = page.page
    for _ in range(2):
        await dead_job(served.store, kind="sync")
    for _ in range(3):
        await pending_job(served.store)
    await tab.goto(served.url + "/#/jobs")
    tabs = tab.locator("nav.tabs a")
    await expect(tab.locator('a[data-tab="all"] .tab-count')).to_have_text("5")
    await expect(tab.locator('a[data-tab="dead"] .tab-count')).to_have_text("2")
    await expect(tab.locator('a[data-tab="pending"] .tab-count')).to_have_text("3")
    await expect(tab.locator('a[data-tab="running"] .tab-count')).to_have_text("0")
    await expect(tabs).to_have_count(8)
    await same_document(tab)

    await tab.click('a[data-tab="dead"]')
    await expect(tab.locator("table.jobs tbody tr")).to_have_count(2)
    await expect(tab.locator('a[data-tab="dead"]')).to_have_class("tab active")
    await tab.fill("input[name=kind]", "email")
    await tab.click("form.filters button[type=submit]")
    await expect(tab.locator('a[data-tab="pending"] .tab-count')).to_have_text("3")
    await expect(tab.locator('a[data-tab="dead"] .tab-count')).to_have_text("0")
    await assert_same_document(tab)
    await page.assert_clean()


async def test_times_switch_between_utc_and_local_and_the_choice_is_kept(
    page: Watched, served: Served
) -> None:
    tab = page.page
    job_id = await pending_job(
        served.store, run_at=datetime.fromisoformat("2026-07-01T12:00:00+00:00")
    )
    await tab.goto(served.url + f"/#/jobs/{job_id}")
    toggle = tab.locator("#time-mode")
    await expect(toggle).to_have_text("UTC")
    run_at = tab.locator("dl.fields dd").nth(8)
    await expect(run_at).to_contain_text("(2026-07-01 12:00:00 UTC)")
    await toggle.click()
    await expect(toggle).to_have_text("local time")
    await expect(run_at).to_contain_text("(2026-07-01 14:00:00 GMT+2)")
    await tab.reload()
    await expect(tab.locator("#time-mode")).to_have_text("local time")
    await expect(tab.locator("dl.fields dd").nth(8)).to_contain_text("14:00:00 GMT+2")
    await page.assert_clean()


async def test_dark_mode_follows_the_system_choice(browser: Browser, served: Served) -> None:
    colours = {}
    for scheme in ("light", "dark"):
        context = await browser.new_context(color_scheme=scheme)
        tab = await context.new_page()
        await tab.goto(served.url + "/#/jobs")
        await expect(tab.locator("#status")).to_have_text("live")
        colours[scheme] = await tab.evaluate(
            "[getComputedStyle(document.body).backgroundColor,"
            " getComputedStyle(document.querySelector('table.grid')).backgroundColor]"
        )
        await context.close()
    assert colours["light"] == ["rgb(247, 248, 250)", "rgb(255, 255, 255)"]
    assert colours["dark"] == ["rgb(18, 23, 29)", "rgb(26, 33, 41)"]


async def test_a_job_that_succeeded_after_a_retry_reads_as_a_success(
    page: Watched, served: Served
) -> None:
    tab = page.page
    job_id = await dead_job(served.store, kind="email", max_attempts=1)
    await served.store.retry(job_id)
    [claimed] = await served.store.claim("w2", queues=["default"], limit=1, lease=LEASE)
    await served.store.complete(claimed.lease)

    await tab.goto(served.url + f"/#/jobs/{job_id}")
    await expect(tab.locator("h1 .badge")).to_have_text("succeeded")
    await expect(tab.locator("pre.last-error")).to_have_count(0)
    # Red is left to the failed attempt's own row in the history.
    await expect(tab.locator("main .error-text:visible:not(table.attempts *)")).to_have_count(0)
    await expect(tab.locator("details.earlier-error summary")).to_have_text(
        "an earlier attempt failed (the job succeeded since)"
    )
    runs = tab.locator("table.attempts tbody tr[data-run] td:first-child")
    await expect(runs).to_have_text(["1", "2"])
    await expect(tab.locator("table.attempts tr.series")).to_have_text(
        "retried: attempts counted afresh"
    )
    await expect(tab.locator("ol.timeline")).to_contain_text("#2 started on w2 (attempt 1, retried")
    await page.assert_clean()


@pytest.mark.parametrize("served", [ApiSettings(read_only=True)], indirect=True)
async def test_read_only_shows_no_selection_and_no_schedule_edits(
    page: Watched, served: Served
) -> None:
    tab = page.page
    await dead_job(served.store, kind="email")
    await tab.goto(served.url + "/#/jobs")
    await expect(tab.locator("table.jobs tbody tr")).to_have_count(1)
    await expect(tab.locator('a[data-tab="dead"] .tab-count')).to_have_text("1")
    assert await tab.locator("input.select-row, input.select-all, .selection").count() == 0
    await tab.goto(served.url + "/#/schedules")
    await expect(tab.get_by_role("heading", name="Schedules")).to_be_visible()
    assert await tab.locator("form.schedule-form, button[data-action]").count() == 0
    await page.assert_clean()
