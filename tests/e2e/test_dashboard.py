"""The dashboard in headless Chromium: it loads cleanly under its CSP, renders hostile job data
as text (T38), and acts on jobs from their page and on a filter without a reload, each action
leaving its audit entry."""

from __future__ import annotations

from datetime import timedelta

import pytest
from playwright.async_api import expect

from rota.api import ApiSettings
from rota.domain.job import JobSpec
from rota.domain.job_state import JobState
from tests.e2e.conftest import (
    AS_ADMIN,
    HOSTILE,
    Served,
    Watched,
    assert_same_document,
    dead_job,
    expect_audit,
    log_in,
    same_document,
)

pytestmark = pytest.mark.browser


async def test_dashboard_loads_every_view_without_errors(page: Watched, served: Served) -> None:
    job_id = await dead_job(served.store, kind="email")
    await served.store.enqueue([JobSpec(kind="report", queue="reports", delay=timedelta(hours=1))])
    response = await page.page.goto(served.url + "/")
    assert response is not None and response.ok
    csp = response.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp
    await expect(page.page.locator(".cards .card")).to_have_count(9)
    await expect(page.page.locator("svg.chart")).to_be_visible()
    await expect(page.page.locator("#status")).to_have_text("live")

    await page.page.goto(served.url + "/#/jobs")
    await expect(page.page.locator("table.jobs tbody tr")).to_have_count(2)
    await expect(page.page.locator("table.jobs .state-note", has_text="due in")).to_have_count(1)

    await page.page.goto(served.url + f"/#/jobs/{job_id}")
    await expect(page.page.locator("h1 .badge")).to_have_text("dead")
    await page.page.goto(served.url + "/#/workers")
    await expect(page.page.get_by_text("No workers registered.")).to_be_visible()
    await page.page.goto(served.url + "/#/schedules")
    await expect(page.page.get_by_role("heading", name="Schedules")).to_be_visible()
    await page.assert_clean()


async def test_hostile_job_data_renders_as_text(page: Watched, served: Served) -> None:
    job_id = await dead_job(
        served.store,
        kind="email",
        payload={"html": HOSTILE, HOSTILE: [HOSTILE]},
        unique_key=HOSTILE[:200],
    )
    await page.page.goto(served.url + "/#/jobs")
    row = page.page.locator(f'tr[data-job="{job_id}"]')
    await expect(row.locator(".error-cell")).to_contain_text("<img src=x onerror=window.__x=2>")
    await page.page.hover(".error-cell")
    await page.page.fill("input[name=q]", HOSTILE[:200])
    await page.page.click("form.filters button[type=submit]")
    await expect(page.page.locator("table.jobs tbody tr")).to_have_count(1)

    await page.page.goto(served.url + f"/#/jobs/{job_id}")
    payload = page.page.locator("pre.payload")
    await expect(payload).to_contain_text("<script>window.__x=1</script>")
    await expect(page.page.locator("pre.last-error")).to_contain_text(
        "<svg onload=window.__x=5></svg>"
    )
    await page.page.click("details summary")
    await expect(page.page.locator("pre.trace")).to_contain_text(
        "</script><script>window.__x=6</script>"
    )
    await page.page.hover("pre.payload")
    # Nothing from the data became an element.
    assert await page.page.locator("main img, main script, main svg:not(.chart)").count() == 0
    await page.assert_clean()


async def test_a_crash_suspects_page_says_why_it_is_watched(page: Watched, served: Served) -> None:
    [result] = await served.store.enqueue([JobSpec(kind="email")])
    await served.store.claim("worker-1", queues=["default"], limit=1, lease=timedelta(seconds=5))
    later = await served.store.now() + timedelta(seconds=6)  # its worker died: lease expired
    assert (await served.store.rescue(now=later)).requeued == [result.job.id]
    await page.page.goto(served.url + f"/#/jobs/{result.job.id}")
    await expect(page.page.locator("p.quarantine")).to_have_text(
        "crash suspect: its lease ran out once while its handler ran (its worker died, hung or lost the store), so its last attempt runs alone"
    )
    await page.assert_clean()


@pytest.mark.parametrize("served", [AS_ADMIN], indirect=True)
async def test_dead_job_is_retried_and_cancelled_from_its_detail_page_without_reload(
    page: Watched, served: Served
) -> None:
    await log_in(page.page, served)
    job_id = await dead_job(served.store, kind="email")
    await page.page.goto(served.url + f"/#/jobs/{job_id}")
    await expect(page.page.locator("h1 .badge")).to_have_text("dead")
    await same_document(page.page)
    await page.page.click("button[data-action=retry]")
    await expect(page.page.locator("h1 .badge")).to_have_text("pending")
    assert (await served.store.get(job_id)).state.value == "pending"
    await page.page.click("button[data-action=cancel]")
    await expect(page.page.locator("h1 .badge")).to_have_text("cancelled")
    await assert_same_document(page.page)
    assert (await served.store.get(job_id)).state.value == "cancelled"
    await expect_audit(
        page.page,
        served,
        [
            ("token:admin", "job.cancel", f"job:{job_id}", "", "1"),
            ("token:admin", "job.retry", f"job:{job_id}", "", "1"),
        ],
    )
    await page.assert_clean()


@pytest.mark.parametrize("served", [AS_ADMIN], indirect=True)
@pytest.mark.parametrize(
    ("verb", "state", "which", "done", "after"),
    [
        ("retry", "dead", "dead or cancelled", "Retried", "pending"),
        ("cancel", "pending", "waiting, pending, held or running", "Cancelled", "cancelled"),
        ("hold", "pending", "waiting or pending", "Held", "held"),
        ("release", "held", "held", "Released", "pending"),
    ],
)
async def test_a_bulk_action_confirms_scope_and_count_and_is_audited(
    page: Watched, served: Served, verb: str, state: str, which: str, done: str, after: str
) -> None:
    await log_in(page.page, served)

    async def job(kind: str) -> int:
        if state == "dead":
            return await dead_job(served.store, kind=kind)
        [result] = await served.store.enqueue([JobSpec(kind=kind)])
        if state == "held":
            await served.store.hold(result.job.id)
        return result.job.id

    ids = [await job("sync") for _ in range(3)]
    await job("email")
    await page.page.goto(served.url + f"/#/jobs?state={state}&kind=sync")
    await expect(page.page.locator("table.jobs tbody tr")).to_have_count(3)
    await page.page.click(f"button[data-bulk={verb}]")
    dialog = page.page.locator("dialog.confirm")
    label = verb.capitalize()
    await expect(dialog).to_contain_text(
        f"{label} 3 {which} jobs matching state = {state}, kind = sync?"
    )
    await dialog.get_by_role("button", name=f"{label} them").click()
    await expect(dialog).to_contain_text(f"{done} 3 jobs.")
    await dialog.get_by_role("button", name="Close").click()
    await expect(page.page.locator("table.jobs tbody tr")).to_have_count(0)
    for job_id in ids:
        assert (await served.store.get(job_id)).state.value == after
    # One entry for the whole filter, with every job it touched.
    await expect_audit(
        page.page, served, [("token:admin", f"jobs.{verb}", "", f"kind sync, states {state}", "3")]
    )
    await page.assert_clean()


TOKEN = "e2e-token-0123456789"


@pytest.mark.parametrize("served", [ApiSettings(auth_token=TOKEN)], indirect=True)
async def test_token_login_opens_the_dashboard(page: Watched, served: Served) -> None:
    response = await page.page.goto(served.url + "/")
    assert response is not None and response.status == 401
    page.problems.clear()  # the browser reports the 401 document load itself
    await page.page.fill("input[name=token]", "wrong-token-000")
    await page.page.click("button[type=submit]")
    await expect(page.page.locator(".error")).to_have_text("Wrong token.")
    page.problems.clear()
    await page.page.fill("input[name=token]", TOKEN)
    await page.page.click("button[type=submit]")
    await expect(page.page.locator("#status")).to_have_text("live")
    await expect(page.page.locator("#logout")).to_be_visible()
    cookies = await page.page.context.cookies()
    [session] = [cookie for cookie in cookies if cookie["name"] == "rota_session"]
    assert session["httpOnly"] and session["sameSite"] == "Strict"
    assert TOKEN not in session["value"]
    await page.assert_clean()
    # A poll in flight while the cookie is cleared may meet a 401: expected, not checked.
    await page.page.click("#logout button")
    await expect(page.page.locator("input[name=token]")).to_be_visible()
    names = {cookie["name"] for cookie in await page.page.context.cookies()}
    assert "rota_session" not in names


@pytest.mark.parametrize("served", [ApiSettings(read_only=True)], indirect=True)
async def test_read_only_dashboard_hides_every_mutating_button(
    page: Watched, served: Served
) -> None:
    job_id = await dead_job(served.store, kind="email")
    await served.store.enqueue([JobSpec(kind="email")])
    await page.page.goto(served.url + "/#/jobs")
    await expect(page.page.locator("table.jobs tbody tr")).to_have_count(2)
    await expect(page.page.locator("#mode")).to_be_visible()
    assert await page.page.locator("main button[data-action], .bulk, .presets").count() == 0
    await page.page.goto(served.url + f"/#/jobs/{job_id}")
    await expect(page.page.locator("h1 .badge")).to_have_text("dead")
    assert await page.page.locator("button[data-action]").count() == 0
    await page.assert_clean()


@pytest.mark.parametrize("served", [AS_ADMIN], indirect=True)
async def test_a_job_is_run_now_rerun_and_deleted_from_its_detail_page(
    page: Watched, served: Served
) -> None:
    await log_in(page.page, served)
    [delayed] = await served.store.enqueue([JobSpec(kind="report", delay=timedelta(hours=1))])
    await page.page.goto(served.url + f"/#/jobs/{delayed.job.id}")
    await page.page.click("button[data-action=run-now]")
    await expect(page.page.locator("button[data-action=run-now]")).to_have_count(0)
    now = await served.store.now()
    assert (await served.store.get(delayed.job.id)).run_at <= now

    [claimed] = await served.store.claim(
        "worker-1", queues=["default"], limit=1, lease=timedelta(seconds=30)
    )
    await served.store.complete(claimed.lease)
    await expect(page.page.locator("h1 .badge")).to_have_text("succeeded")
    await page.page.click("button[data-action=rerun]")
    await expect(page.page.locator("h1 .badge")).to_have_text("pending")
    assert (await served.store.get(claimed.id)).attempt == 0

    await page.page.click("button[data-action=delete]")
    dialog = page.page.locator("dialog.confirm")
    await expect(dialog).to_contain_text(f"Delete job {claimed.id} (pending) and its history?")
    await dialog.locator("button.danger").click()
    await expect(dialog).to_contain_text(f"Deleted job {claimed.id}.")
    await dialog.get_by_role("button", name="Close").click()
    await expect(page.page.get_by_role("heading", name="Jobs")).to_be_visible()
    assert (await served.store.counts()).total(JobState.PENDING) == 0
    target = f"job:{claimed.id}"
    await expect_audit(
        page.page,
        served,
        [
            ("token:admin", action, target, "", "1")
            for action in ("job.delete", "job.rerun", "job.reschedule")
        ],
    )
    await expect(page.page.locator("table.audit tbody tr .detail").last).to_have_text("run_at now")
    await page.assert_clean()
