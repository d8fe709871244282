"""Enqueue: single and bulk, defaults, unique keys, schedule slots."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from rota.domain.job import DEFAULT_MAX_ATTEMPTS, JobSpec
from rota.domain.job_state import JobState
from rota.store import Store
from rota.testing import FakeClock
from tests.contract.helpers import add, claim_one


async def test_enqueue_stores_every_field(store: Store, clock: FakeClock) -> None:
    run_at = clock.now() + timedelta(hours=1)
    payload = {"to": "ada@example.com", "n": [1, 2.5, None, True], "nested": {"ü": "✓"}}
    job = await add(
        store,
        "email.send",
        payload=payload,
        queue="mail",
        priority=7,
        run_at=run_at,
        max_attempts=9,
        tenant="acme",
        unique_key="welcome:42",
        timeout=timedelta(seconds=90),
    )
    stored = await store.get(job.id)
    assert stored == job
    assert (stored.kind, stored.queue, stored.priority, stored.run_at) == (
        "email.send",
        "mail",
        7,
        run_at,
    )
    assert stored.payload == payload
    assert (stored.max_attempts, stored.tenant, stored.unique_key) == (9, "acme", "welcome:42")
    assert stored.timeout == timedelta(seconds=90)
    assert (stored.state, stored.attempt, stored.created_at) == (JobState.PENDING, 0, clock.now())
    assert stored.lease_token is None and stored.worker is None


async def test_one_job_alone_and_in_a_batch_is_stored_alike(store: Store, clock: FakeClock) -> None:
    """A job enqueued alone (on PostgreSQL, a statement of its own) and the same job in a
    batch are stored with the same fields, every optional one set."""
    common: dict[str, object] = {
        "kind": "email.send",
        "payload": {"to": "ada@example.com", "n": [1, 2.5, None]},
        "queue": "mail",
        "priority": -3,
        "delay": timedelta(minutes=5),
        "max_attempts": 4,
        "tenant": "acme",
        "timeout": timedelta(seconds=90),
        "trace_context": {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
        "expire_after": timedelta(hours=2),
        "unique_for": timedelta(days=1),
        "unique_states": frozenset({JobState.PENDING, JobState.SUCCEEDED}),
    }
    [alone] = await store.enqueue([JobSpec(unique_key="alone", **common)])  # type: ignore[arg-type]
    [batched, _] = await store.enqueue(
        [JobSpec(unique_key="batched", **common), JobSpec(kind="other")]  # type: ignore[arg-type]
    )
    one, other = await store.get(alone.job.id), await store.get(batched.job.id)
    assert one == alone.job and other == batched.job
    assert replace(one, id=other.id, unique_key="batched") == other
    assert one.run_at == clock.now() + timedelta(minutes=5)
    assert one.expires_at == clock.now() + timedelta(hours=2)
    assert one.trace_context == common["trace_context"]


async def test_enqueue_defaults(store: Store, clock: FakeClock) -> None:
    job = await add(store)
    assert (job.queue, job.priority, job.max_attempts, job.run_at, job.payload) == (
        "default",
        0,
        DEFAULT_MAX_ATTEMPTS,
        clock.now(),
        {},
    )


async def test_bulk_enqueue_keeps_order_and_ids_increase(store: Store) -> None:
    specs = [JobSpec(kind="bulk", payload={"i": i}) for i in range(250)]
    results = await store.enqueue(specs)
    assert [result.job.payload["i"] for result in results] == list(range(250))
    ids = [result.job.id for result in results]
    assert ids == sorted(ids) and len(set(ids)) == 250
    assert not any(result.duplicate for result in results)


async def test_payloads_of_every_json_shape_round_trip(store: Store) -> None:
    payloads = [None, 0, -1, 2**62, 1.5, "text", [], {}, [1, "a", {"b": [None]}], {"": ""}]
    results = await store.enqueue([JobSpec(kind="a", payload=p) for p in payloads])
    for result, payload in zip(results, payloads, strict=True):
        assert (await store.get(result.job.id)).payload == payload


async def test_duplicate_unique_key_returns_the_active_job(store: Store) -> None:
    first = await add(store, unique_key="report:2026-01-01")
    [again] = await store.enqueue([JobSpec(kind="a", unique_key="report:2026-01-01")])
    assert again.duplicate and again.job.id == first.id
    held = await claim_one(store)
    assert held is not None
    [while_running] = await store.enqueue([JobSpec(kind="a", unique_key="report:2026-01-01")])
    assert while_running.duplicate and while_running.job.id == first.id
    await store.complete(held.lease)
    [after] = await store.enqueue([JobSpec(kind="a", unique_key="report:2026-01-01")])
    assert not after.duplicate and after.job.id != first.id


async def test_duplicate_within_one_batch_is_reported(store: Store) -> None:
    results = await store.enqueue(
        [JobSpec(kind="a", unique_key="k"), JobSpec(kind="a", unique_key="k"), JobSpec(kind="a")]
    )
    assert [result.duplicate for result in results] == [False, True, False]
    assert results[1].job.id == results[0].job.id


async def test_schedule_slot_is_unique_across_all_states(store: Store) -> None:
    slot = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
    first = await add(store, schedule="nightly", slot_at=slot)
    held = await claim_one(store)
    assert held is not None
    await store.complete(held.lease)
    [again] = await store.enqueue([JobSpec(kind="a", schedule="nightly", slot_at=slot)])
    assert again.duplicate and again.job.id == first.id
    [other] = await store.enqueue(
        [JobSpec(kind="a", schedule="nightly", slot_at=slot + timedelta(days=1))]
    )
    assert not other.duplicate
    stored = await store.get(other.job.id)
    assert (stored.schedule, stored.slot_at) == ("nightly", slot + timedelta(days=1))


async def test_a_large_batch_is_inserted_whole_and_in_order(store: Store, clock: FakeClock) -> None:
    specs = [
        JobSpec(kind="bulk", payload={"i": i}, delay=timedelta(seconds=i % 3), tenant="t")
        for i in range(2_500)
    ]
    results = await store.enqueue(specs)
    ids = [result.job.id for result in results]
    assert ids == sorted(ids)
    assert len(set(ids)) == 2_500
    sample = await store.get(ids[1_234])
    assert (sample.payload, sample.tenant, sample.run_at) == (
        {"i": 1_234},
        "t",
        clock.now() + timedelta(seconds=1_234 % 3),
    )
    assert results[1_234].job == sample
    assert (await store.counts()).by_state[JobState.PENDING] == 2_500


TRACE = {
    "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
    "tracestate": "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7",
}


async def test_the_trace_context_travels_with_the_job_to_its_claim(store: Store) -> None:
    traced = await add(store, "traced", trace_context=TRACE)
    plain = await add(store, "plain")
    assert traced.trace_context == TRACE and plain.trace_context is None
    assert (await store.get(traced.id)).trace_context == TRACE
    assert (await store.get(plain.id)).trace_context is None
    claimed = await store.claim("w", queues=["default"], limit=2, lease=timedelta(seconds=30))
    assert {job.id: job.trace_context for job in claimed} == {traced.id: TRACE, plain.id: None}


async def test_a_large_batch_keeps_each_jobs_trace_context(store: Store) -> None:
    specs = [
        JobSpec(kind="bulk", trace_context={"traceparent": TRACE["traceparent"]} if i % 2 else None)
        for i in range(2_500)
    ]
    results = await store.enqueue(specs)
    for index in (0, 1, 1_234, 2_499):
        stored = await store.get(results[index].job.id)
        assert stored.trace_context == specs[index].trace_context
        assert results[index].job == stored


async def test_a_large_keyless_batch_stores_every_field(store: Store, clock: FakeClock) -> None:
    """Batches past PostgreSQL's COPY threshold and SQLite's keyless insert take their own
    path: each job returned is the job stored, a schedule without a slot and a slot without
    a schedule included."""
    slot = clock.now() - timedelta(minutes=5)
    shapes = [
        JobSpec("plain"),
        JobSpec("full", payload={"n": [1, 2.5]}, queue="mail", priority=3, tenant="acme",
                timeout=timedelta(seconds=9), run_at=clock.now() + timedelta(hours=1),
                expire_after=timedelta(days=1), max_attempts=4),
        JobSpec("fired", schedule="nightly"),
        JobSpec("slotted", slot_at=slot),
        JobSpec("traced", trace_context={"traceparent": "00-" + "a" * 32 + "-" + "b" * 16 + "-01"}),
    ]  # fmt: skip
    specs = [shapes[i % len(shapes)] for i in range(2_000)]
    results = await store.enqueue(specs)
    assert not any(result.duplicate for result in results)
    stored = {job.id: job for job in await store.get_many([r.job.id for r in results])}
    assert [stored[result.job.id] for result in results] == [result.job for result in results]
    assert results[2].job.schedule == "nightly" and results[3].job.slot_at == slot
