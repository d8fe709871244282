"""A bulk enqueue of specs made one by one (a generator) on PostgreSQL: written by COPY while
the caller makes the rest, with ids reserved in blocks, and as atomic as any enqueue: a bad
spec midway leaves nothing written, a keyed spec midway takes the keyed path in the same
transaction. Jobs due now are written without their instants (the columns' default), and a
job due later among them still gets its own."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

from rota import App
from rota.domain.errors import InvalidJob
from rota.domain.job import JobSpec
from rota.store.postgres import enqueue as pg_enqueue

pytestmark = pytest.mark.postgres

#: Past the first block (COPY_THRESHOLD ids) and the second (twice it), into a third.
MANY = 4 * pg_enqueue.COPY_THRESHOLD + 500


def rows(url: str) -> list[tuple[int, int]]:
    """(id, payload seq) of every job, by id."""
    with psycopg.connect(url, autocommit=True) as conn:
        found = conn.execute("SELECT id, (payload->>'seq')::int FROM rota_jobs ORDER BY id")
        return [(int(job_id), int(seq)) for job_id, seq in found.fetchall()]


def plain(count: int, start: int = 0) -> Iterator[JobSpec]:
    for seq in range(start, start + count):
        yield JobSpec(kind="k", payload={"seq": seq})


async def test_a_generator_of_jobs_is_written_whole_and_in_order(pg_url: str) -> None:
    async with App(pg_url) as app:
        results = await app.enqueue_many(plain(MANY))
    ids = [result.job.id for result in results]
    assert [result.job.payload["seq"] for result in results] == list(range(MANY))
    assert ids == sorted(set(ids))
    assert not any(result.duplicate for result in results)
    assert rows(pg_url) == list(zip(ids, range(MANY), strict=True))


async def test_a_bad_spec_midway_leaves_nothing_written(pg_url: str) -> None:
    def specs() -> Iterator[JobSpec]:
        yield from plain(3 * pg_enqueue.COPY_THRESHOLD)
        yield JobSpec(kind="k", priority=10**6)  # raises InvalidJob("priority")

    async with App(pg_url) as app:
        with pytest.raises(InvalidJob, match="priority"):
            await app.enqueue_many(specs())
        assert rows(pg_url) == []
        # The store is fine afterwards: the next enqueue goes through.
        await app.enqueue_many(plain(pg_enqueue.COPY_THRESHOLD))
    assert len(rows(pg_url)) == pg_enqueue.COPY_THRESHOLD


async def test_an_unknown_kind_midway_leaves_nothing_written(pg_url: str) -> None:
    app = App(pg_url)

    @app.job("k")
    async def handler(ctx: object, payload: object) -> None:
        return None

    def specs() -> Iterator[JobSpec]:
        yield from plain(pg_enqueue.COPY_THRESHOLD + 1_500)
        yield JobSpec(kind="mistyped")

    async with app:
        with pytest.raises(InvalidJob, match="kind"):
            await app.enqueue_many(specs())
    assert rows(pg_url) == []


async def test_a_keyed_spec_midway_takes_the_keyed_path_in_the_same_enqueue(
    pg_url: str,
) -> None:
    cut = pg_enqueue.COPY_THRESHOLD + 1_234

    def specs() -> Iterator[JobSpec]:
        yield from plain(cut)
        yield JobSpec(kind="k", payload={"seq": -1}, unique_key="held")
        yield from plain(1_000, start=cut)

    async with App(pg_url) as app:
        holder = await app.enqueue("k", {"seq": -2}, unique_key="held")
        results = await app.enqueue_many(specs())
    assert len(results) == cut + 1 + 1_000
    assert results[cut].duplicate and results[cut].job.id == holder.job.id
    written = [result for result in results if not result.duplicate]
    assert [result.job.payload["seq"] for result in written] == list(range(cut + 1_000))
    found = rows(pg_url)
    assert len(found) == 1 + cut + 1_000
    assert {job_id for job_id, _ in found} == {holder.job.id} | {r.job.id for r in written}


async def test_the_collector_rests_while_a_copy_block_is_made_and_no_longer(
    pg_url: str,
) -> None:
    """Python's cyclic garbage collector is held off while the rows of a COPY block are made
    (each spec, Job and result lives until the call returns: a collection would only walk
    them again), and is on again after the call, whether it wrote everything or a bad spec
    stopped it. A collector the caller had turned off stays off."""
    seen: list[bool] = []

    def watched(specs: Iterator[JobSpec]) -> Iterator[JobSpec]:
        for spec in specs:
            seen.append(gc.isenabled())
            yield spec

    def bad_after(count: int) -> Iterator[JobSpec]:
        yield from plain(count)
        yield JobSpec(kind="k", priority=10**6)

    async with App(pg_url) as app:
        assert gc.isenabled()
        await app.enqueue_many(watched(plain(MANY)))
        assert gc.isenabled()
        # The first COPY_THRESHOLD specs decide the path, before any block; every later one
        # is made inside a block.
        head = pg_enqueue.COPY_THRESHOLD
        assert seen[:head] == [True] * head and seen[head:] == [False] * (MANY - head)
        with pytest.raises(InvalidJob, match="priority"):
            await app.enqueue_many(bad_after(MANY))
        assert gc.isenabled()
        gc.disable()
        try:
            await app.enqueue_many(plain(MANY))
            assert not gc.isenabled()
        finally:
            gc.enable()
    assert len(rows(pg_url)) == 2 * MANY


#: Which jobs of 3 chunks are due later (the rest due now), by seq: in a chunk midway (the
#: COPY of jobs due now ends before it), in the first (a COPY with instants from the start;
#: from a generator, the next block goes back to jobs due now), in the last, in every chunk.
LATER = {
    "midway": (pg_enqueue.COPY_CHUNK + 500, pg_enqueue.COPY_CHUNK + 501),
    "first": (10,),
    "last": (3 * pg_enqueue.COPY_CHUNK - 1,),
    "each chunk": (5, pg_enqueue.COPY_CHUNK + 5, 2 * pg_enqueue.COPY_CHUNK + 5),
}


@pytest.mark.parametrize("made", ["list", "generator"])
@pytest.mark.parametrize("later", LATER.values(), ids=LATER.keys())
async def test_jobs_due_later_among_jobs_due_now_are_stored_as_returned(
    pg_url: str, made: str, later: tuple[int, ...]
) -> None:
    """A COPY of jobs due now leaves run_at and created_at to the columns' default, the
    transaction's now(): a chunk holding a job due later ends it, and the rest is written with
    every instant. Each job is stored as the enqueue returned it, all created at one instant."""

    def specs() -> Iterator[JobSpec]:
        for seq in range(3 * pg_enqueue.COPY_CHUNK):
            delay = timedelta(minutes=5) if seq in later else None
            yield JobSpec(kind="k", payload={"seq": seq}, delay=delay)

    async with App(pg_url) as app:
        given = list(specs()) if made == "list" else specs()
        results = await app.enqueue_many(given)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        stored = {
            job_id: (run_at, created_at)
            for job_id, run_at, created_at in conn.execute(
                "SELECT id, run_at, created_at FROM rota_jobs"
            ).fetchall()
        }
    assert len(stored) == len(results) == 3 * pg_enqueue.COPY_CHUNK
    assert {r.job.id: (r.job.run_at, r.job.created_at) for r in results} == stored
    [created] = {r.job.created_at for r in results}
    delayed = {r.job.payload["seq"]: r.job.run_at for r in results if r.job.run_at != created}
    assert delayed == {seq: created + timedelta(minutes=5) for seq in later}
    ids = [r.job.id for r in results]
    assert ids == sorted(set(ids))


async def test_a_copy_of_jobs_due_now_stores_every_field(pg_url: str) -> None:
    """The COPY of jobs due now (no clock given: the store's own) writes every other field
    as the COPY with instants does: each job returned is the job stored."""
    slot = datetime(2026, 1, 1, 3, tzinfo=UTC)
    shapes = [
        JobSpec("plain"),
        JobSpec("full", payload={"n": [1, 2.5], "s": "a\\b"}, queue="mail", priority=3,
                tenant="acme", timeout=timedelta(seconds=9), expire_after=timedelta(days=1),
                max_attempts=4),
        JobSpec("fired", schedule="nightly"),
        JobSpec("slotted", slot_at=slot),
        JobSpec("traced", trace_context={"traceparent": "00-" + "a" * 32 + "-" + "b" * 16 + "-01"}),
    ]  # fmt: skip
    specs = [shapes[i % len(shapes)] for i in range(pg_enqueue.COPY_THRESHOLD)]
    async with App(pg_url) as app:
        results = await app.enqueue_many(specs)
        stored = {job.id: job for job in await app.store.get_many([r.job.id for r in results])}
    assert [stored[result.job.id] for result in results] == [result.job for result in results]
    full = results[1].job
    assert (full.tenant, full.timeout, full.payload["s"]) == ("acme", timedelta(seconds=9), "a\\b")
    assert full.expires_at == full.created_at + timedelta(days=1) == full.run_at + timedelta(days=1)
    assert results[2].job.schedule == "nightly" and results[3].job.slot_at == slot
    assert results[4].job.trace_context == shapes[4].trace_context
