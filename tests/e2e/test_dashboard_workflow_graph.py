"""A workflow drawn as a graph in headless Chromium: boxes change colour as jobs finish without
a reload; retrying a dead job from the graph re-arms the jobs its end cancelled, which then
run; a 1,000-job workflow is drawn with its big sibling group collapsed and pans, zooms,
expands and collapses; a read-only identity sees no action; every control has a name and the
boxes' text keeps its contrast."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from playwright.async_api import Locator, Page, expect

from rota.api import ApiSettings
from rota.domain.job import JobSpec
from rota.domain.job_state import JobState
from rota.domain.workflow import Workflow
from rota.store.memory import MemoryStore
from tests.e2e.conftest import (
    ADMIN_TOKEN,
    AS_ADMIN,
    HOSTILE,
    Served,
    Watched,
    assert_same_document,
    expect_audit,
    log_in,
    same_document,
    screenshot,
    serve_store,
)

pytestmark = pytest.mark.browser

LEASE = timedelta(seconds=30)
READ_TOKEN = "e2e-read-token-4567"
BOTH = ApiSettings(auth_token=ADMIN_TOKEN, read_token=READ_TOKEN)


async def run_all(store: MemoryStore, count: int, *, fail: int | None = None) -> list[int]:
    """Claim ``count`` jobs and complete them (the one with id ``fail`` ends dead instead)."""
    claimed = await store.claim("w", queues=["default"], limit=count, lease=LEASE)
    assert len(claimed) == count
    for job in claimed:
        if job.id == fail:
            await store.fail(job.lease, error="boom", retry_in=timedelta(0), permanent=True)
        else:
            assert await store.complete_many([job.lease]) == []
    return [job.id for job in claimed]


def box(tab: Page, job_id: int) -> Locator:
    return tab.locator(f'svg.graph g.node[data-job="{job_id}"]')


async def expect_state(tab: Page, job_id: int, state: str) -> None:
    await expect(box(tab, job_id)).to_have_class(re.compile(rf"\bs-{state}\b"))


def thirty_jobs() -> Workflow:
    """A root, 8 fetches, a parse after each, a merge of the parses, 12 reports after it."""
    graph = Workflow()
    root = graph.add(JobSpec("plan", payload={"note": HOSTILE}))
    fetches = [graph.add(JobSpec("fetch"), after=[root]) for _ in range(8)]
    parses = [graph.add(JobSpec("parse"), after=[fetch]) for fetch in fetches]
    merge = graph.add(JobSpec("merge"), after=parses)
    for n in range(12):
        graph.add(JobSpec(f"report-{n}"), after=[merge], on_parent_failure="cancel")
    return graph


# Contrast of each box's text over its fill, computed as WCAG defines it, in the page.
CONTRASTS = """() => {
  const rgb = (value) => {
    const m = value.match(/[\\d.]+/g).map(Number);
    const scale = value.startsWith("color(") ? 255 : 1;
    return m.slice(0, 3).map((c) => c * scale);
  };
  const lum = (c) => {
    const [r, g, b] = c.map((v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; });
    return 0.2126 * r + 0.7152 * g + 0.0722 * b;
  };
  const ratios = [];
  for (const node of document.querySelectorAll("svg.graph g.node")) {
    const boxes = node.querySelectorAll(".node-box");
    const fill = lum(rgb(getComputedStyle(boxes[boxes.length - 1]).fill));
    for (const text of node.querySelectorAll("text")) {
      const ink = lum(rgb(getComputedStyle(text).fill));
      ratios.push((Math.max(fill, ink) + 0.05) / (Math.min(fill, ink) + 0.05));
    }
  }
  return Math.min(...ratios);
}"""

# The focusable elements of the page that have no accessible name.
UNNAMED = """() => [...document.querySelectorAll("main a, main button, main [tabindex]")]
  .filter((el) => !(el.getAttribute("aria-label") || el.textContent || "").trim())
  .map((el) => el.outerHTML.slice(0, 80))"""


@pytest.mark.parametrize("served", [AS_ADMIN], indirect=True)
async def test_a_workflow_graph_follows_its_jobs_live_and_retries_a_dead_one(
    page: Watched, served: Served
) -> None:
    tab = page.page
    await log_in(tab, served)
    store = served.store
    jobs = await store.enqueue_workflow(thirty_jobs())
    ids = [job.id for job in jobs]
    root, fetches, parses, merge, reports = ids[0], ids[1:9], ids[9:17], ids[17], ids[18:]

    await tab.goto(served.url + f"/#/workflows/{root}")
    await expect(tab.locator("svg.graph g.node.job")).to_have_count(30)
    await same_document(tab)
    await expect_state(tab, root, "pending")
    await expect_state(tab, merge, "waiting")
    await expect(tab.locator('svg.graph path.edge[data-policy="cancel"]')).to_have_count(36)

    await run_all(store, 1)
    await expect_state(tab, root, "succeeded")
    await expect_state(tab, fetches[0], "pending")
    await run_all(store, 8)
    for fetch in fetches:
        await expect_state(tab, fetch, "succeeded")
    dead = parses[3]
    await run_all(store, 8, fail=dead)
    await expect_state(tab, dead, "dead")
    await expect_state(tab, merge, "cancelled")
    for report in reports:
        await expect_state(tab, report, "cancelled")
    await expect(tab.locator(".workflow-summary")).to_have_text("30 of 30 jobs finished")

    await box(tab, dead).click()
    panel = tab.locator(".graph-panel")
    await expect(panel.locator("h2")).to_have_text(f"Job {dead}")
    await expect(box(tab, merge)).to_have_class(re.compile(r"\bdownstream\b"))
    await expect(panel.get_by_role("button", name="Cancel", exact=True)).to_be_disabled()
    await screenshot(tab, "workflow-graph")
    await panel.get_by_role("button", name="Retry", exact=True).click()
    await tab.locator("dialog").get_by_role("button", name="Retry").click()
    await expect(tab.locator("dialog .dialog-text")).to_have_text("1 job retried.")
    await tab.locator("dialog").get_by_role("button", name="Close").click()
    await expect_state(tab, dead, "pending")
    await expect_state(tab, merge, "waiting")  # re-armed: it waits for the retried parse
    for report in reports:
        await expect_state(tab, report, "waiting")

    assert await run_all(store, 1) == [dead]
    assert await run_all(store, 1) == [merge]
    await run_all(store, 12)
    for job_id in (dead, merge, *reports):
        await expect_state(tab, job_id, "succeeded")
    assert (await store.get(reports[-1])).state is JobState.SUCCEEDED
    await assert_same_document(tab)
    assert await tab.evaluate(UNNAMED) == []
    assert await tab.evaluate(CONTRASTS) >= 4.5

    await box(tab, merge).dblclick()
    await expect(tab.locator("h1")).to_contain_text(str(merge))
    await expect_audit(
        tab,
        served,
        [("token:admin", "workflow.node.retry", f"job:{dead}", "", "1")],
    )
    await page.assert_clean()


@pytest.mark.parametrize("served", [AS_ADMIN], indirect=True)
async def test_cancelling_downstream_from_the_graph_cancels_what_follows(
    page: Watched, served: Served
) -> None:
    tab = page.page
    await log_in(tab, served)
    graph = Workflow()
    first = graph.add(JobSpec("a"))
    second = graph.add(JobSpec("b"), after=[first])
    graph.add(JobSpec("c"), after=[second], on_parent_failure="run")
    graph.add(JobSpec("d"))
    a, b, c, d = await served.store.enqueue_workflow(graph)
    await run_all(served.store, 1)

    await tab.goto(served.url + f"/#/workflows/{a.id}")
    await expect(tab.locator('svg.graph path.edge[data-policy="run"]')).to_have_count(1)
    await expect_state(tab, b.id, "pending")
    await box(tab, b.id).focus()
    await tab.keyboard.press("Enter")
    panel = tab.locator(".graph-panel")
    await panel.get_by_role("button", name="Cancel with what follows").click()
    await tab.locator("dialog").get_by_role("button", name="Cancel them").click()
    await expect(tab.locator("dialog .dialog-text")).to_have_text("2 jobs cancelled.")
    await tab.keyboard.press("Escape")
    await expect_state(tab, b.id, "cancelled")
    await expect_state(tab, c.id, "cancelled")
    await expect_state(tab, d.id, "pending")
    await page.assert_clean()


async def test_a_thousand_job_workflow_pans_zooms_and_collapses(
    page: Watched, served: Served
) -> None:
    tab = page.page
    graph = Workflow()
    root = graph.add(JobSpec("split"))
    shards = [graph.add(JobSpec("shard"), after=[root]) for _ in range(990)]
    join = graph.add(JobSpec("join"), after=shards)
    for n in range(8):
        graph.add(JobSpec(f"publish-{n}"), after=[join], on_parent_failure="run")
    jobs = await served.store.enqueue_workflow(graph)
    assert len(jobs) == 1_000

    await tab.goto(served.url + f"/#/workflows/{jobs[0].id}")
    frame = tab.locator(".graph-frame")
    group = tab.locator("svg.graph g.node.group")
    await expect(group).to_have_count(1)
    await expect(group).to_have_attribute("data-count", "990")
    await expect(group).to_have_attribute(
        "aria-label", re.compile(r"^990 jobs \(shard\).*990 waiting")
    )
    await expect(frame).to_have_attribute("data-boxes", "11")
    await screenshot(tab, "workflow-graph-large")

    viewport = tab.locator("svg.graph g.viewport")
    before = translation(await viewport.get_attribute("transform"))
    scale = await scale_of(frame)
    await tab.get_by_role("button", name="Zoom in").click()
    assert await scale_of(frame) == pytest.approx(scale * 1.25, abs=1e-3)
    await tab.get_by_role("button", name="Zoom out").click()
    assert await scale_of(frame) == pytest.approx(scale, abs=1e-3)
    assert translation(await viewport.get_attribute("transform")) == pytest.approx(before, abs=0.2)

    area = await frame.bounding_box()
    assert area is not None
    x, y = area["x"] + 8, area["y"] + area["height"] - 8  # the background, never a box
    await tab.mouse.move(x, y)
    await tab.mouse.down()
    await tab.mouse.move(x + 40, y - 30, steps=4)
    await tab.mouse.up()
    moved = translation(await viewport.get_attribute("transform"))
    assert moved == pytest.approx(shift(before, 40, -30), abs=0.5)

    await tab.mouse.move(area["x"] + area["width"] / 2, area["y"] + area["height"] / 2)
    await tab.mouse.wheel(0, -100)
    await expect(frame).not_to_have_attribute("data-scale", f"{scale:.4f}")
    zoomed = await scale_of(frame)
    assert zoomed > scale

    await frame.focus()
    await tab.keyboard.press("-")
    assert await scale_of(frame) == pytest.approx(zoomed * 0.8, abs=1e-3)
    panned = translation(await viewport.get_attribute("transform"))
    await tab.keyboard.press("ArrowLeft")
    assert translation(await viewport.get_attribute("transform")) == pytest.approx(
        shift(panned, 60, 0), abs=0.2
    )

    await group.focus()
    await tab.keyboard.press("Enter")
    await expect(frame).to_have_attribute("data-boxes", "1000")
    await expect(tab.locator("svg.graph g.node.job")).to_have_count(1_000)
    await tab.get_by_role("button", name="Collapse groups").click()
    await expect(frame).to_have_attribute("data-boxes", "4")  # split, 990 shards, join, 8
    await tab.get_by_role("button", name="Expand all").click()
    await expect(frame).to_have_attribute("data-boxes", "1000")
    await tab.keyboard.press("0")
    assert await tab.evaluate(UNNAMED) == []
    await page.assert_clean()


async def scale_of(frame: Locator) -> float:
    return float(await frame.get_attribute("data-scale") or "nan")


def translation(transform: str | None) -> tuple[float, float]:
    found = re.match(r"translate\(([-\d.]+),([-\d.]+)\)", transform or "")
    assert found, transform
    return float(found[1]), float(found[2])


def shift(point: tuple[float, float], dx: float, dy: float) -> tuple[float, float]:
    return point[0] + dx, point[1] + dy


async def test_a_read_only_identity_sees_the_graph_without_actions(page: Watched) -> None:
    store = MemoryStore()
    graph = Workflow()
    first = graph.add(JobSpec("a"))
    graph.add(JobSpec("b"), after=[first])
    a, b = await store.enqueue_workflow(graph)
    with serve_store(store, BOTH) as served:
        tab = page.page
        await log_in(tab, served, READ_TOKEN)
        await tab.goto(served.url + f"/#/workflows/{a.id}")
        await box(tab, b.id).click()
        panel = tab.locator(".graph-panel")
        await expect(panel.locator("a.open-job")).to_have_text(f"Open job {b.id} →")
        await expect(panel.locator("button")).to_have_count(0)
        await expect(tab.get_by_role("button", name="Cancel workflow…")).to_have_count(0)
        status = await tab.evaluate(
            f"""async () => (await fetch("/api/workflows/{a.id}/nodes/{b.id}/cancel", {{
                method: "POST", headers: {{"Content-Type": "application/json"}},
                credentials: "same-origin"}})).status"""
        )
        assert status == 403
        assert (await store.get(b.id)).state is JobState.WAITING
        page.problems.clear()  # the browser logs the refused request's 403 itself
        await page.assert_clean()


async def test_a_workflow_past_the_graph_s_cap_says_how_much_it_shows(
    page: Watched, served: Served
) -> None:
    graph = Workflow()
    root = graph.add(JobSpec("split"))
    for _ in range(2_000):
        graph.add(JobSpec("shard"), after=[root])
    jobs = await served.store.enqueue_workflow(graph)

    await page.page.goto(served.url + f"/#/workflows/{jobs[0].id}")
    await expect(page.page.locator(".graph-note")).to_contain_text(
        "Showing the first 2,000 of 2,001 jobs (by id)"
    )
    await expect(page.page.locator("svg.graph g.node.group")).to_have_attribute(
        "data-count", "1999"
    )
    await expect(page.page.locator(".workflow-summary")).to_have_text("0 of 2,001 jobs finished")
    await page.assert_clean()
