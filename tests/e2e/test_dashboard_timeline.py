"""A job's timeline in headless Chromium: its runs, each run's last heartbeat, where a silent
worker's lease ran out, the gap before a takeover and its durable steps drawn to scale, times
absolute with relative ones beside them, progress live."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from playwright.async_api import Locator, expect

from rota.domain.job import JobSpec
from rota.domain.payload import Progress
from tests.e2e.conftest import Served, Watched, screenshot

pytestmark = pytest.mark.browser

LEASE = timedelta(seconds=5)


async def box(locator: Locator) -> tuple[float, float]:
    """Where ``locator`` is drawn: its left edge and its width, in screen pixels."""
    drawn = await locator.bounding_box()
    assert drawn is not None
    return drawn["x"], drawn["width"]


def close(a: float, b: float) -> bool:
    return abs(a - b) <= max(1.0, 0.01 * max(abs(a), abs(b)))


async def test_a_job_killed_once_shows_both_runs_and_the_takeover_gap_to_scale(
    page: Watched, served: Served
) -> None:
    store = served.store
    t0 = await store.now() - timedelta(minutes=2)

    def at(seconds: float) -> datetime:
        return t0 + timedelta(seconds=seconds)

    [result] = await store.enqueue([JobSpec(kind="checkout")], now=at(0))
    [silent] = await store.claim("worker-1", queues=["default"], limit=1, lease=LEASE, now=at(1))
    # worker-1 beats once at +3 s and dies: its lease runs out at +8 s, and the rescuer hands
    # the job back at +9 s ...
    await store.heartbeat([silent.lease], lease=LEASE, now=at(3))
    assert (await store.rescue(now=at(9))).requeued == [result.job.id]
    # ... and worker-2 takes it over at +12 s, runs a durable step from +13 s to +15 s.
    [job] = await store.claim("worker-2", queues=["default"], limit=1, lease=LEASE, now=at(12))
    await store.checkpoint(
        job.lease, "charge", result=None, duration=timedelta(seconds=2), now=at(15)
    )
    await store.complete(job.lease, now=at(16))
    tab = page.page

    await tab.goto(served.url + f"/#/jobs/{result.job.id}")
    chart = tab.locator("svg.job-timeline")
    await expect(chart.locator("rect[data-run]")).to_have_count(2)
    first_x, first_w = await box(chart.locator('rect[data-run="1"]'))
    gap_x, gap_w = await box(chart.locator('rect[data-gap="2"]'))
    second_x, second_w = await box(chart.locator('rect[data-run="2"]'))
    step_x, step_w = await box(chart.locator('rect[data-step-bar="charge"]'))
    second = first_w / 8  # run 1 lasted 8 s: the drawing's pixels per second
    assert close(gap_w, 3 * second), (gap_w, second)
    assert close(second_w, 4 * second), (second_w, second)
    assert close(step_w, 2 * second), (step_w, second)
    # Each begins where it began in time: the gap right after run 1, run 2 right after it.
    assert close(gap_x, first_x + first_w)
    assert close(second_x, gap_x + gap_w)
    assert close(step_x, first_x + 12 * second)
    # Run 1's last heartbeat, then where its lease ran out, then the takeover's start.
    beat_x, beat_w = await box(chart.locator('rect[data-beat="1"]'))
    end_x, end_w = await box(chart.locator('rect[data-lease-end="1"]'))
    beat_at, lease_end_at = beat_x + beat_w / 2, end_x + end_w / 2
    assert close(beat_at, first_x + 2 * second), (beat_at, first_x, second)
    assert close(lease_end_at, first_x + 7 * second), (lease_end_at, first_x, second)
    assert beat_at < lease_end_at < second_x
    await expect(chart.locator('rect[data-run="2"]')).to_have_count(1)
    await expect(chart.locator('rect[data-beat="2"]')).to_have_count(0)  # run 2 never beat
    beats = tab.locator('table.attempts tr[data-run="1"] td.beats')
    await expect(beats).to_contain_text("1 heartbeat, last at ")
    await expect(beats).to_contain_text(" UTC (2 min ago)")
    await expect(chart.locator('rect[data-beat="1"] title')).to_contain_text("#1: 1 heartbeat")
    await expect(chart.locator('rect[data-run="1"] title')).to_contain_text(
        "#1 on worker-1 (attempt 1): lease expired after 8.0 s"
    )
    await expect(chart.locator('rect[data-gap="2"] title')).to_contain_text("3.0 s")
    # The list below says each instant absolutely, its relative age beside it.
    events = tab.locator("ol.timeline li")
    await expect(events.first).to_contain_text(" UTC (2 min ago) created")
    await screenshot(tab, "job", full_page=True)
    await page.assert_clean()


async def test_a_running_job_s_progress_and_lease_follow_live(
    page: Watched, served: Served
) -> None:
    store = served.store
    [result] = await store.enqueue([JobSpec(kind="resize")])
    [job] = await store.claim("worker-1", queues=["default"], limit=1, lease=timedelta(minutes=1))
    tab = page.page

    await tab.goto(served.url + f"/#/jobs/{result.job.id}")
    chart = tab.locator("svg.job-timeline")
    await expect(chart.locator('rect[data-lease="1"]')).to_have_count(1)
    await store.heartbeat(
        [job.lease], lease=timedelta(minutes=1), progress={job.id: Progress(0.42, "pages")}
    )
    await expect(chart.locator("text.row-label").first).to_have_text("#1 worker-1 42%")
    await expect(tab.locator("dl.fields .progress-text")).to_have_text("42% pages")
    await page.assert_clean()
