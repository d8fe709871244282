"""Results and progress in the HTTP API: whole in a job's detail, a bounded preview in lists."""

from __future__ import annotations

from datetime import timedelta

import httpx

from rota.domain.job import JobSpec
from rota.domain.payload import PREVIEW_BYTES, Progress
from rota.store.memory import MemoryStore

LEASE = timedelta(seconds=30)


async def test_a_job_s_detail_has_its_result_and_lists_a_bounded_preview(
    api: httpx.AsyncClient, store: MemoryStore
) -> None:
    big = {"rows": ["é" * 100] * 300}  # about 60 KB of JSON
    await store.enqueue([JobSpec(kind="report"), JobSpec(kind="report"), JobSpec(kind="report")])
    claimed = await store.claim("w", queues=["default"], limit=3, lease=LEASE)
    texts = ['{"rows":' + str(big["rows"]).replace("'", '"') + "}", '{"answer":42}', None]
    assert await store.complete_many([job.lease for job in claimed], results=texts) == []
    by_token = sorted(claimed, key=lambda job: job.lease_token or 0)
    first, second, third = (job.id for job in by_token)

    detail = (await api.get(f"/api/jobs/{first}")).json()
    assert detail["result"] == big
    assert (await api.get(f"/api/jobs/{second}")).json()["result"] == {"answer": 42}
    assert (await api.get(f"/api/jobs/{third}")).json()["result"] is None

    response = await api.get("/api/jobs")
    assert len(response.content) < 5_000, "a page of large results stays small"
    listed = {job["id"]: job for job in response.json()["jobs"]}
    assert all("result" not in job for job in listed.values())
    assert listed[first]["result_truncated"] is True
    assert len(listed[first]["result_preview"].encode()) <= PREVIEW_BYTES
    assert listed[first]["result_preview"].startswith('{"rows":["éé')
    assert (listed[second]["result_preview"], listed[second]["result_truncated"]) == (
        '{"answer":42}',
        False,
    )
    assert (listed[third]["result_preview"], listed[third]["result_truncated"]) == (None, False)


async def test_a_running_job_shows_its_progress_in_detail_and_lists(
    api: httpx.AsyncClient, store: MemoryStore
) -> None:
    [enqueued] = await store.enqueue([JobSpec(kind="crawl")])
    [job] = await store.claim("w", queues=["default"], limit=1, lease=LEASE)
    before = (await api.get(f"/api/jobs/{job.id}")).json()
    assert (before["progress"], before["progress_message"]) == (None, None)
    await store.heartbeat([job.lease], lease=LEASE, progress={job.id: Progress(0.42, "page 42")})
    detail = (await api.get(f"/api/jobs/{enqueued.job.id}")).json()
    assert (detail["progress"], detail["progress_message"]) == (0.42, "page 42")
    [listed] = (await api.get("/api/jobs", params={"state": "running"})).json()["jobs"]
    assert (listed["progress"], listed["progress_message"]) == (0.42, "page 42")


async def test_a_succeeded_job_shows_progress_one_whatever_it_last_reported(
    api: httpx.AsyncClient, store: MemoryStore
) -> None:
    await store.enqueue([JobSpec(kind="crawl")])
    [job] = await store.claim("w", queues=["default"], limit=1, lease=LEASE)
    await store.heartbeat([job.lease], lease=LEASE, progress={job.id: Progress(0.92, "page 92")})
    assert await store.complete_many([job.lease]) == []
    detail = (await api.get(f"/api/jobs/{job.id}")).json()
    assert (detail["state"], detail["progress"]) == ("succeeded", 1.0)
    [listed] = (await api.get("/api/jobs", params={"state": "succeeded"})).json()["jobs"]
    assert listed["progress"] == 1.0
