"""A job's own answer reads the first part of a large payload and result, cut as the store
reads them, never the whole values; the whole payload and result have their own routes."""

from __future__ import annotations

import json
import tracemalloc
from collections.abc import AsyncIterator

import httpx
import pytest

from rota.api import ApiSettings, create_app
from rota.api.job_models import DETAIL_PREVIEW_BYTES, DETAIL_PREVIEW_CHARS
from rota.client import Client
from rota.domain.errors import JobNotFound
from rota.domain.job import JobSpec
from rota.domain.payload import Preview
from rota.store import Store
from tests.contract.helpers import claim_one

HEAVY = 900_000
BLOB = "é" + "x" * HEAVY


def _in_memory(store: Store) -> bool:
    """The memory store holds the values themselves: there is nothing to read."""
    return type(store).__name__ == "MemoryStore"


@pytest.fixture
async def api(store: Store) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=create_app(Client(store), settings=ApiSettings()))
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        yield client


async def _heavy_done(store: Store) -> int:
    """A job of a 900 KB payload that succeeded with a 900 KB result."""
    await store.enqueue([JobSpec(kind="heavy", payload={"blob": BLOB})])
    job = await claim_one(store)
    assert job is not None
    assert (
        await store.complete_many([job.lease], results=[json.dumps([BLOB], ensure_ascii=False)])
        == []
    )
    return job.id


async def test_a_preview_of_a_job_reads_at_most_the_characters_asked(store: Store) -> None:
    job_id = await _heavy_done(store)
    [light] = await store.enqueue([JobSpec(kind="light", payload={"n": 1})])

    tracemalloc.start()
    try:
        job = await store.get_preview(job_id, chars=1000)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert isinstance(job.payload, Preview) and isinstance(job.result, Preview)
    assert len(job.payload.text) == 1000 and job.payload.text.startswith('{"blob":"éxx')
    assert len(job.result.text) == 1000 and job.result.text.startswith('["éxx')
    if not _in_memory(store):
        # A payload and a result of 900 KB read whole take 1.8 MB at least.
        assert peak < 500_000, peak

    small = await store.get_preview(light.job.id, chars=1000)
    assert isinstance(small.payload, Preview) and json.loads(small.payload.text) == {"n": 1}
    assert small.result is None
    with pytest.raises(JobNotFound):
        await store.get_preview(10**9, chars=1000)


async def test_the_job_route_cuts_a_900_kb_payload_and_the_whole_is_fetched_apart(
    store: Store, api: httpx.AsyncClient
) -> None:
    job_id = await _heavy_done(store)
    [light] = await store.enqueue([JobSpec(kind="light", payload={"n": 1})])

    tracemalloc.start()
    try:
        answer = await api.get(f"/api/jobs/{job_id}")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    detail = answer.raise_for_status().json()
    assert detail["payload"] is None and detail["payload_truncated"] is True
    assert detail["result"] is None and detail["result_truncated"] is True
    for name in ("payload", "result"):
        cut = detail[f"{name}_preview"]
        assert len(cut.encode()) <= DETAIL_PREVIEW_BYTES < len(cut) + 4
    assert detail["payload_preview"].startswith('{"blob":"éxx')
    if not _in_memory(store):
        assert peak < 1_500_000, peak
    assert DETAIL_PREVIEW_CHARS < HEAVY

    whole = await api.get(f"/api/jobs/{job_id}/payload")
    assert whole.json() == {"blob": BLOB}
    assert (await api.get(f"/api/jobs/{job_id}/result")).json() == [BLOB]
    small = (await api.get(f"/api/jobs/{light.job.id}")).json()
    assert small["payload"] == {"n": 1} and small["payload_truncated"] is False
