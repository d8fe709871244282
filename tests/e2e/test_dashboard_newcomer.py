"""What a newcomer tripped on, in headless Chromium: one state vocabulary (the API's), each
schedule once among the upcoming runs, every problem of a new schedule reported at once,
counts that read as singular or plural, and a lease that ran out under a live worker told as
what it was."""

from __future__ import annotations

import os
from datetime import timedelta

import pytest
from playwright.async_api import expect

from rota.domain.job import JobSpec
from rota.domain.schedule import Rule, ScheduleSpec
from rota.domain.workflow import Workflow
from rota.store.memory import MemoryStore
from rota.store.records import WorkerInfo
from tests.e2e.conftest import (
    AS_ADMIN,
    Served,
    Watched,
    log_in,
    serve_store,
)

pytestmark = pytest.mark.browser

LEASE = timedelta(seconds=5)
API_STATES = {"waiting", "pending", "running", "succeeded", "dead", "cancelled"}


def worker(name: str) -> WorkerInfo:
    return WorkerInfo(name=name, host="host-a", pid=os.getpid(), queues=("default",), concurrency=4)


async def test_a_job_not_yet_due_reads_pending_with_when_it_is_due(
    page: Watched, served: Served
) -> None:
    [later] = await served.store.enqueue([JobSpec(kind="report", delay=timedelta(hours=1))])
    [retrying] = await served.store.enqueue([JobSpec(kind="sync", max_attempts=3)])
    [claimed] = await served.store.claim("worker-1", queues=["default"], limit=1, lease=LEASE)
    await served.store.fail(claimed.lease, error="timeout", retry_in=timedelta(minutes=5))
    tab = page.page

    await tab.goto(served.url + "/#/jobs")
    row = tab.locator(f'tr[data-job="{later.job.id}"]')
    await expect(row.locator(".badge")).to_have_text("pending")
    await expect(row.locator(".state-note")).to_have_text("due in 60 min")
    again = tab.locator(f'tr[data-job="{retrying.job.id}"]')
    await expect(again.locator(".badge")).to_have_text("pending")
    await expect(again.locator(".state-note")).to_have_text("due in 5 min, attempt 2 next")
    badges = await tab.locator("main .badge").all_text_contents()
    assert set(badges) <= API_STATES, badges

    await tab.goto(served.url + f"/#/jobs/{later.job.id}")
    await expect(tab.locator("h1 .badge")).to_have_text("pending")
    await expect(tab.locator("h1 .state-note")).to_have_text("due in 60 min")
    await page.assert_clean()


async def test_upcoming_schedule_runs_list_each_schedule_once(
    page: Watched, served: Served
) -> None:
    for name, cron in (("minutely", "* * * * *"), ("hourly", "0 * * * *")):
        await served.store.upsert_schedule(
            ScheduleSpec(name=name, kind="ping", rule=Rule.cron(cron))
        )

    await page.page.goto(served.url + "/#/")
    rows = page.page.locator("tr[data-upcoming]")
    await expect(rows).to_have_count(2)
    # Once each (in the last minute of an hour both are next due at the same instant, so the
    # order between them is not asserted); the runs after the next one share the row.
    minutely = page.page.locator('tr[data-upcoming="minutely"]')
    await expect(minutely).to_have_count(1)
    await expect(page.page.locator('tr[data-upcoming="hourly"]')).to_have_count(1)
    await expect(minutely.locator("td").last).to_contain_text(", ")
    await page.assert_clean()


async def test_a_bad_cron_and_an_unknown_kind_are_reported_together(page: Watched) -> None:
    store = MemoryStore()
    with serve_store(store, AS_ADMIN, kinds=["backup"]) as served:
        tab = page.page
        await log_in(tab, served)
        await tab.goto(served.url + "/#/schedules")
        await tab.click('button[data-action="add"]')
        form = tab.locator("form.schedule-form")
        await form.locator("input[name=name]").fill("nightly")
        await form.locator("input[name=kind]").fill("bakcup")
        await form.locator("input[name=cron]").fill("61 2 * * *")
        await form.locator("button[type=submit]").click()
        problems = form.locator(".form-error .problem")
        await expect(problems).to_have_count(2)
        await expect(problems.first).to_contain_text("kind: unknown kind 'bakcup'")
        await expect(problems.last).to_contain_text("cron:")
        assert await store.list_schedules() == []
        page.problems.clear()  # the browser logs the refused request's 400 itself
        await page.assert_clean()


@pytest.mark.parametrize("served", [AS_ADMIN], indirect=True)
async def test_counts_read_singular_or_plural(page: Watched, served: Served) -> None:
    graph = Workflow()
    parent = graph.add(JobSpec("fetch"))
    graph.add(JobSpec("merge"), after=[parent])
    first, child = await served.store.enqueue_workflow(graph)
    tab = page.page
    await log_in(tab, served)

    await tab.goto(served.url + f"/#/jobs/{child.id}")
    await expect(tab.locator("dl.workflow")).to_contain_text(f"{first.id}: 0 of 2 jobs finished")
    await expect(tab.locator("dl.workflow dd").nth(1)).to_have_text("1 parent job")
    await tab.goto(served.url + "/#/jobs")
    await tab.locator(f'input.select-row[data-job="{first.id}"]').check()
    await tab.click('button[data-selection="cancel"]')
    dialog = tab.locator("dialog.confirm")
    await expect(dialog).to_contain_text(
        f"Cancel 1 selected waiting, pending, held or running job: {first.id}?"
    )
    await dialog.locator("button.danger").click()
    await expect(dialog).to_contain_text("Cancelled 1 job.")
    assert "(s)" not in await tab.locator("body").inner_text()
    await page.assert_clean()


async def test_a_lease_that_ran_out_under_a_live_worker_says_it_was_taken_over(
    page: Watched, served: Served
) -> None:
    store = served.store
    for name in ("worker-1", "worker-2"):
        await store.register_worker(worker(name))
    [result] = await store.enqueue([JobSpec(kind="email")])
    await store.claim("worker-1", queues=["default"], limit=1, lease=LEASE)
    # worker-1 still beats (it is alive), but it held the job past its lease: it hung.
    later = await store.now() + LEASE + timedelta(seconds=1)
    assert (await store.rescue(now=later)).requeued == [result.job.id]
    await store.claim("worker-2", queues=["default"], limit=1, lease=LEASE, now=later)

    await page.page.goto(served.url + f"/#/jobs/{result.job.id}")
    line = page.page.locator("p.quarantine")
    await expect(line).to_have_text(
        "lease expired while its worker worker-1 was alive (it hung or lost the store; it did "
        "not crash): taken over by worker-2; so its last attempt runs alone"
    )
    await expect(line).not_to_have_class("error-text quarantine")
    await page.assert_clean()
