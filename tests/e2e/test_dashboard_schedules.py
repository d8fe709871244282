"""The schedules view in headless Chromium: next runs, last outcome, add, edit, remove, pause,
resume and run now, under the dashboard's CSP and without a reload, each change leaving its
audit entry."""

from __future__ import annotations

from datetime import timedelta

import pytest
from playwright.async_api import expect

from rota.domain.schedule import Rule, ScheduleSpec
from tests.e2e.conftest import AS_ADMIN, Served, Watched, expect_audit, log_in

pytestmark = pytest.mark.browser


@pytest.mark.parametrize("served", [AS_ADMIN], indirect=True)
async def test_schedules_view_pauses_resumes_and_runs_a_schedule_now(
    page: Watched, served: Served
) -> None:
    tab = page.page
    await log_in(tab, served)
    await served.store.upsert_schedule(
        ScheduleSpec(name="nightly", kind="backup", rule=Rule.cron("30 2 * * *", "Europe/Berlin"))
    )

    await tab.goto(served.url + "/#/schedules")
    row = tab.locator('tr[data-schedule="nightly"]')
    await expect(row).to_contain_text("every day at 02:30 (Europe/Berlin)")
    await expect(row.locator(".badge")).to_have_text("active")
    await expect(row.locator(".later li")).to_have_count(3)

    await row.locator('button[data-action="pause"]').click()
    dialog = tab.locator("dialog.confirm")
    await expect(dialog).to_contain_text("The runs that fall due while it is paused are:")
    await dialog.get_by_label("dropped", exact=False).check()
    await dialog.get_by_role("button", name="Pause it").click()
    await expect(dialog).to_contain_text("the runs it misses will be dropped")
    await dialog.get_by_role("button", name="Close").click()
    await expect(row.locator(".badge")).to_have_text("paused")
    await expect(row.locator('[data-missed="drop"]')).to_have_text(
        "paused; missed runs will be dropped"
    )
    assert (await served.store.get_schedule("nightly")).missed.value == "drop"
    await row.locator('button[data-action="run"]').click()
    await expect(tab.locator("#notice")).to_contain_text("Schedule nightly: job 1 enqueued.")
    await expect(row.locator(".badge").first).to_have_text("pending")
    await row.locator('button[data-action="resume"]').click()
    await expect(row.locator(".badge").last).to_have_text("active")

    schedule = await served.store.get_schedule("nightly")
    assert (schedule.paused, schedule.last_job_id) == (False, 1)
    await expect_audit(
        tab,
        served,
        [
            ("token:admin", "schedule.resume", "schedule:nightly", "", ""),
            ("token:admin", "schedule.run", "schedule:nightly", "", "1"),
            ("token:admin", "schedule.pause", "schedule:nightly", "", ""),
        ],
    )
    await expect(tab.locator("table.audit tbody tr .detail").nth(1)).to_have_text(
        "duplicate false, job 1"
    )
    await page.assert_clean()


async def test_schedules_come_a_page_at_a_time_and_the_overview_asks_for_the_soonest(
    page: Watched, served: Served
) -> None:
    tab = page.page
    for index in range(60):
        # s00 runs every minute: the soonest (or tied, first by name) at whatever time of day
        # the test runs; the others once a day, at 09:01 to 09:59.
        every = "* * * * *" if index == 0 else f"{index} 9 * * *"
        await served.store.upsert_schedule(
            ScheduleSpec(name=f"s{index:02}", kind="ping", rule=Rule.cron(every))
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
    await page.assert_clean()


@pytest.mark.parametrize("served", [AS_ADMIN], indirect=True)
async def test_a_schedule_is_added_from_the_form_and_a_bad_rule_is_refused_in_place(
    page: Watched, served: Served
) -> None:
    tab = page.page
    await log_in(tab, served)
    await tab.goto(served.url + "/#/schedules")
    await expect(tab.get_by_text("No schedules yet.")).to_be_visible()
    await tab.click('button[data-action="add"]')
    form = tab.locator("form.schedule-form")
    await form.locator("input[name=name]").fill("nightly")
    await form.locator("input[name=kind]").fill("backup")
    await form.locator("input[name=cron]").fill("61 2 * * *")
    await form.locator("textarea[name=payload]").fill('{"full": true}')
    await form.locator("button[type=submit]").click()
    await expect(form.locator(".form-error")).to_contain_text("cron:")
    assert await served.store.list_schedules() == []
    page.problems.clear()  # the browser logs the refused request's 400 itself

    await form.locator("input[name=cron]").fill("30 2 * * *")
    await form.locator("input[name=timezone]").fill("Europe/Berlin")
    await form.locator("button[type=submit]").click()
    await expect(form).to_be_hidden()
    row = tab.locator('tr[data-schedule="nightly"]')
    await expect(row).to_contain_text("every day at 02:30 (Europe/Berlin)")
    await expect(tab.locator("#notice")).to_contain_text("Schedule nightly created")
    schedule = await served.store.get_schedule("nightly")
    assert (schedule.spec.kind, schedule.spec.payload) == ("backup", {"full": True})
    # The refused rule left no entry.
    await expect_audit(
        tab, served, [("token:admin", "schedule.create", "schedule:nightly", "", "")]
    )
    await page.assert_clean()


@pytest.mark.parametrize("served", [AS_ADMIN], indirect=True)
async def test_a_schedule_is_edited_removed_and_its_recent_jobs_shown(
    page: Watched, served: Served
) -> None:
    tab = page.page
    await log_in(tab, served)
    await served.store.upsert_schedule(
        ScheduleSpec(name="sync", kind="sync", rule=Rule.every(timedelta(minutes=5)), priority=2)
    )
    await served.store.upsert_schedule(
        ScheduleSpec(name="other", kind="sync", rule=Rule.cron("@daily"))
    )
    runs = [await served.store.trigger_schedule("sync") for _ in range(2)]
    await tab.goto(served.url + "/#/schedules")
    row = tab.locator('tr[data-schedule="sync"]')
    await expect(row).to_contain_text("every 5 min")

    await row.locator('button[data-action="jobs"]').click()
    recent = tab.locator('tr[data-jobs-of="sync"] tbody tr')
    await expect(recent).to_have_count(2)
    await expect(recent.first).to_have_attribute("data-job", str(runs[1].job.id))
    await row.locator('button[data-action="jobs"]').click()
    await expect(tab.locator('tr[data-jobs-of="sync"]')).to_have_count(0)

    await row.locator('button[data-action="edit"]').click()
    form = tab.locator("form.schedule-form")
    await expect(form.locator("input[name=name]")).to_be_disabled()
    await expect(form.locator("input[name=every_seconds]")).to_have_value("300")
    await expect(form.locator("input[name=priority]")).to_have_value("2")
    await form.locator("select[name=rule]").select_option("cron")
    await form.locator("input[name=cron]").fill("0 * * * *")
    await form.locator("button[type=submit]").click()
    await expect(form).to_be_hidden()
    await expect(row).to_contain_text("every hour")
    edited = await served.store.get_schedule("sync")
    assert (edited.spec.priority, edited.last_job_id) == (2, runs[1].job.id)

    await row.locator('button[data-action="remove"]').click()
    dialog = tab.locator("dialog.confirm")
    await expect(dialog).to_contain_text("Remove schedule sync (every hour)?")
    await dialog.locator("button.danger").click()
    await expect(dialog).to_contain_text("Removed schedule sync.")
    await dialog.get_by_role("button", name="Close").click()
    await expect(tab.locator("tr[data-schedule]")).to_have_count(1)
    assert [s.spec.name for s in await served.store.list_schedules()] == ["other"]
    assert (await served.store.get(runs[0].job.id)).schedule == "sync", "its jobs stay"
    await expect_audit(
        tab,
        served,
        [
            ("token:admin", "schedule.delete", "schedule:sync", "", ""),
            ("token:admin", "schedule.replace", "schedule:sync", "", ""),
        ],
    )
    await expect(tab.locator("table.audit tbody tr .detail").last).to_contain_text("cron 0 * * * *")
    await page.assert_clean()
