"""A list page reads the first characters of each payload and result, never the whole
values: its size and the memory it takes stay bounded whatever the jobs hold."""

from __future__ import annotations

import tracemalloc

from rota.domain.job import JobSpec
from rota.domain.job_state import JobState
from rota.domain.payload import PREVIEW_BYTES, PREVIEW_CHARS, Preview, preview
from rota.store import JobFilter, Store
from tests.contract.helpers import claim_one

HEAVY = 900_000


async def test_a_page_of_900_kb_payloads_reads_a_preview_of_each(store: Store) -> None:
    blob = "é" + "x" * HEAVY
    await store.enqueue([JobSpec(kind="heavy", payload={"blob": blob, "n": n}) for n in range(12)])
    [first] = await store.enqueue([JobSpec(kind="light", payload={"n": 1})])
    job = await claim_one(store)
    assert job is not None and job.kind == "heavy"
    # Its result weighs 900 KB too (results travel as their JSON text).
    assert await store.complete_many([job.lease], results=[f'["{blob}"]']) == []

    tracemalloc.start()
    try:
        page = await store.list_jobs(JobFilter(), limit=50, previews=True)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(page.jobs) == 13
    # Twelve payloads of 900 KB read whole take 10 MB at least; their previews a few KB.
    assert peak < 3_000_000, peak
    for listed in page.jobs:
        assert isinstance(listed.payload, Preview)
        assert len(listed.payload.text) <= PREVIEW_CHARS
    light, *heavy = page.jobs
    assert light.id == first.job.id and preview(light.payload.text) == ('{"n":1}', False)
    assert light.result is None
    done = next(listed for listed in heavy if listed.id == job.id)
    assert isinstance(done.result, Preview) and len(done.result.text) <= PREVIEW_CHARS
    assert preview(done.result.text)[0].startswith('["éxx')  # type: ignore[union-attr]
    for listed in heavy:
        text, cut = preview(listed.payload.text)
        assert cut and text is not None and text.startswith('{"blob":"éxxx')
        assert len(text.encode()) <= PREVIEW_BYTES

    # Without previews the list is what it always was: whole payloads.
    whole = await store.list_jobs(JobFilter(kind="heavy"), limit=1)
    assert whole.jobs[0].payload == {"blob": blob, "n": 11}
    assert whole.jobs[0].state is JobState.PENDING
