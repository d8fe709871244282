"""The kind and queue pages' routes (/api/queues/{name}/activity, /api/kinds/{name}/activity)
against a MemoryStore on a FakeClock: bars from the tallies, totals and percentiles, grouped
errors, what holds a queue or kind back, bad input and read-only identities."""

from __future__ import annotations

from datetime import timedelta

import httpx
import pytest

from rota.api import ApiSettings
from rota.domain.flow import Limit, LimitScope
from rota.domain.job import JobSpec
from rota.store.memory import MemoryStore
from rota.store.records import WorkerInfo
from rota.testing import FakeClock
from tests.unit.api.conftest import TOKEN, MakeApp, asgi_client

LEASE = timedelta(seconds=30)


async def run_jobs(store: MemoryStore, clock: FakeClock) -> None:
    """In the minute from 12:00: three pdf jobs in "default" wait 2 s and run 3 s, two
    succeed and one fails for good; one email job in "mail" fails and is retried."""
    await store.enqueue([JobSpec(kind="pdf", max_attempts=1) for _ in range(3)])
    await store.enqueue([JobSpec(kind="email", queue="mail")])
    clock.advance(timedelta(seconds=2))
    pdfs = await store.claim("w", queues=["default"], limit=3, lease=LEASE)
    [email] = await store.claim("w", queues=["mail"], limit=1, lease=LEASE)
    clock.advance(timedelta(seconds=3))
    assert await store.complete_many([job.lease for job in pdfs[:2]]) == []
    await store.fail(pdfs[2].lease, error="render failed on page 7", retry_in=timedelta(0))
    await store.fail(email.lease, error="smtp 421 try later", retry_in=timedelta(hours=1))
    clock.advance(timedelta(minutes=1))


async def test_a_kinds_activity_has_a_bar_per_minute_totals_and_its_errors(
    api: httpx.AsyncClient, store: MemoryStore, clock: FakeClock
) -> None:
    await run_jobs(store, clock)
    body = (await api.get("/api/kinds/pdf/activity")).json()
    assert (body["name"], body["window"], body["bucket_seconds"]) == ("pdf", "1h", 60)
    assert len(body["buckets"]) == 60
    # The last bar is the current minute (12:01), the one before it 12:00.
    assert body["buckets"][-1]["start"] == "2026-01-01T12:01:00Z"
    bar = body["buckets"][-2]
    assert (bar["start"], bar["succeeded"], bar["failed"], bar["dead"]) == (
        "2026-01-01T12:00:00Z", 2, 1, 1,
    )  # fmt: skip
    # 3 s runs and 2 s waits, read within the [2 s, 5 s) bucket.
    assert bar["p50_run_seconds"] == pytest.approx(2 + 3 * 1.5 / 3)
    assert bar["p95_run_seconds"] == pytest.approx(2 + 3 * 2.85 / 3)
    assert bar["p95_wait_seconds"] == pytest.approx(2 + 3 * 2.85 / 3)
    totals = body["totals"]
    assert (totals["succeeded"], totals["failed"], totals["dead"]) == (2, 1, 1)
    assert body["errors"] == [
        {
            "fingerprint": "render failed on page N",
            "count": 1,
            "last_at": "2026-01-01T12:00:00Z",
            "sample": "render failed on page 7",
        }
    ]
    assert body["counts"] is None
    assert [h["message"] for h in body["held_by"]] == ["no live worker runs kind pdf"]


async def test_a_queues_activity_counts_its_jobs_and_says_what_holds_it_back(
    api: httpx.AsyncClient, store: MemoryStore, clock: FakeClock
) -> None:
    await run_jobs(store, clock)
    await store.register_worker(WorkerInfo("w1", "host", 1, ("default",), 4))
    await store.set_limit(Limit(LimitScope.QUEUE, "mail", concurrency=0))
    assert (await api.post("/api/queues/mail/pause")).status_code == 204
    body = (await api.get("/api/queues/mail/activity", params={"window": "6h"})).json()
    assert (body["window"], body["bucket_seconds"], len(body["buckets"])) == ("6h", 300, 72)
    assert (body["totals"]["succeeded"], body["totals"]["failed"]) == (0, 1)
    assert [e["fingerprint"] for e in body["errors"]] == ["smtp N try later"]
    assert body["counts"]["pending"] == 1
    assert [(h["reason"], h["message"]) for h in body["held_by"]] == [
        ("queue_paused", "queue mail is paused"),
        ("queue_limit", "queue mail is at its limit: 0 of 0 running"),
        ("no_worker", "no live worker claims from queue mail"),
    ]
    default = (await api.get("/api/queues/default/activity")).json()
    assert default["held_by"] == []
    assert default["totals"]["succeeded"] == 2


async def test_a_kind_no_live_worker_runs_is_held_back(
    api: httpx.AsyncClient, store: MemoryStore
) -> None:
    await store.register_worker(WorkerInfo("w1", "host", 1, ("default",), 4, kinds=("pdf",)))
    held = (await api.get("/api/kinds/email/activity")).json()["held_by"]
    assert [(h["reason"], h["message"]) for h in held] == [
        ("no_worker_for_kind", "no live worker runs kind email")
    ]
    assert (await api.get("/api/kinds/pdf/activity")).json()["held_by"] == []


async def test_an_unknown_queue_or_kind_has_empty_charts(api: httpx.AsyncClient) -> None:
    for path in ("/api/queues/nothing-here/activity", "/api/kinds/nothing-here/activity"):
        response = await api.get(path, params={"window": "24h"})
        assert response.status_code == 200
        body = response.json()
        assert (body["bucket_seconds"], len(body["buckets"])) == (1200, 72)
        assert body["totals"]["succeeded"] == 0
        assert body["totals"]["p95_run_seconds"] is None
        assert body["errors"] == []


@pytest.mark.parametrize(
    ("path", "field"),
    [
        ("/api/queues/mail/activity?window=2h", "window"),
        ("/api/kinds/pdf/activity?window=", "window"),
        ("/api/kinds/" + "k" * 300 + "/activity", "name"),
        ("/api/queues/bad%20name/activity", "name"),
    ],
)
async def test_bad_input_is_a_400_naming_the_field(
    api: httpx.AsyncClient, path: str, field: str
) -> None:
    response = await api.get(path)
    assert response.status_code == 400
    assert field in response.json()["error"]


async def test_read_only_identities_see_the_pages_and_anonymous_ones_do_not(
    make_app: MakeApp,
) -> None:
    app = make_app(ApiSettings(auth_token=TOKEN, read_only=True))
    async with asgi_client(app) as api:
        assert (await api.get("/api/kinds/pdf/activity")).status_code == 401
        answer = await api.get(
            "/api/kinds/pdf/activity", headers={"authorization": f"Bearer {TOKEN}"}
        )
        assert answer.status_code == 200
