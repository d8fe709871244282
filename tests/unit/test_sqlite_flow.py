"""SqliteStore's flow control beyond the contract: the claim's index plans, the jobs it never
reads, tenants past the group cap, the starts it keeps, a kind limit across processes sharing
one file, and parity with the reference store over random flow-control operations."""

from __future__ import annotations

import asyncio
import multiprocessing
import queue
import random
import sqlite3
import traceback
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from datetime import timedelta
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from rota.domain.flow import EVERY_TENANT, Limit, LimitScope
from rota.domain.job import JobSpec
from rota.domain.job_state import JobState
from rota.store.memory import MemoryStore
from rota.store.sqlite import SqliteStore, claims
from rota.testing import FakeClock
from tests.support.vm_steps import vm_steps

LEASE = timedelta(seconds=30)


@pytest.fixture
async def store(tmp_path: Path, clock: FakeClock) -> AsyncIterator[SqliteStore]:
    store = SqliteStore(tmp_path / "rota.db", clock=clock)
    await store.migrate()
    yield store
    await store.close()


@contextmanager
def _raw(store: SqliteStore) -> Iterator[sqlite3.Connection]:
    conn = sqlite3.connect(store.path, isolation_level=None)
    try:
        yield conn
    finally:
        conn.close()


def _claim_rolled_back(
    conn: sqlite3.Connection, clock: FakeClock, limit: int, *, after: str = ""
) -> claims.Claimed:
    """Run one claim's transaction body on ``conn`` and undo it."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        return claims.claim(
            conn, "w", ["default", "mail"], limit, LEASE, clock.now(), fair=True, after=after
        )
    finally:
        conn.execute("ROLLBACK")


# ---------------------------------------------------------------------- plans


async def test_every_claim_statement_reaches_jobs_through_an_index(
    store: SqliteStore, clock: FakeClock
) -> None:
    await store.set_limit(Limit(LimitScope.KIND, "pdf", concurrency=5))
    await store.set_limit(
        Limit(LimitScope.TENANT, EVERY_TENANT, rate=50, period=timedelta(hours=1))
    )
    await store.enqueue(
        [
            JobSpec(kind=kind, queue=q, tenant=tenant, priority=priority, delay=delay)
            for kind in ("pdf", "mail")
            for q in ("default", "mail")
            for tenant in (None, "acme", "globex")
            for priority in (0, 5)
            for delay in (timedelta(0), timedelta(hours=1))
        ]
    )
    await store.claim("w", queues=["default"], limit=3, lease=timedelta(seconds=5))
    clock.advance(timedelta(seconds=10))  # those leases expired: the claim takes them over
    statements: list[str] = []
    with _raw(store) as conn:
        conn.set_trace_callback(statements.append)
        claimed = _claim_rolled_back(conn, clock, 20, after="acme")
        conn.set_trace_callback(None)
        assert {job.kind for job in claimed.jobs} == {"pdf", "mail"}
        plans = {
            sql: [row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {sql}")]
            for sql in statements
            if not sql.startswith(("BEGIN", "ROLLBACK"))
        }
    walks = [plan for sql, plan in plans.items() if "WITH RECURSIVE walk" in sql]
    reads = [
        plan
        for sql, plan in plans.items()
        if "INDEXED BY rota_jobs_due" in sql and "WITH RECURSIVE walk" not in sql
    ]
    assert walks and reads
    for plan in plans.values():
        assert not [step for step in plan if step.startswith("SCAN rota_jobs")], plan
        assert not [step for step in plan if "SEARCH rota_jobs USING INDEX rota_jobs_state" in step]
    for plan in walks + reads:  # ordered by the index: nothing is sorted
        assert not [step for step in plan if "TEMP B-TREE" in step], plan
    for plan in walks:
        probes = [step for step in plan if step.startswith("SEARCH rota_jobs")]
        assert probes and all("USING COVERING INDEX rota_jobs_due" in step for step in probes)
    group_read = (
        "SEARCH rota_jobs USING COVERING INDEX rota_jobs_due "
        "(queue=? AND tenant=? AND priority=? AND kind=? AND run_at<?)"
    )
    assert any(group_read in plan for plan in reads)
    for plan in reads:
        searches = [step for step in plan if step.startswith("SEARCH rota_jobs")]
        assert all(step == group_read for step in searches if "rota_jobs_due" in step), plan
    expiry = "SEARCH rota_jobs USING INDEX rota_jobs_leases (lease_until<?)"
    running = "SEARCH rota_jobs USING INDEX rota_jobs_leases (lease_until>?)"
    every_step = [step for plan in plans.values() for step in plan]
    assert expiry in every_step and running in every_step


async def test_jobs_not_yet_due_cost_a_claim_nothing(tmp_path: Path, clock: FakeClock) -> None:
    steps: dict[int, tuple[int, int]] = {}
    for future in (10, 5_000):
        store = SqliteStore(tmp_path / f"future-{future}.db", clock=clock)
        await store.migrate()
        await store.enqueue([JobSpec(kind="a", delay=timedelta(hours=1)) for _ in range(future)])
        with _raw(store) as conn:
            idle, nothing = vm_steps(conn, partial(_claim_rolled_back, conn, clock, 20))
        await store.enqueue([JobSpec(kind="a") for _ in range(20)])
        with _raw(store) as conn:
            busy, claimed = vm_steps(conn, partial(_claim_rolled_back, conn, clock, 20))
        assert (len(nothing.jobs), len(claimed.jobs)) == (0, 20)
        steps[future] = (idle, busy)
        await store.close()
    (idle_few, busy_few), (idle_many, busy_many) = steps[10], steps[5_000]
    assert idle_many < idle_few * 1.2 + 50, steps
    assert busy_many < busy_few * 1.2 + 50, steps


async def test_a_kind_at_its_limit_is_skipped_without_reading_its_backlog(
    tmp_path: Path, clock: FakeClock
) -> None:
    steps: dict[int, int] = {}
    for backlog in (10, 5_000):
        store = SqliteStore(tmp_path / f"backlog-{backlog}.db", clock=clock)
        await store.migrate()
        await store.set_limit(Limit(LimitScope.KIND, "pdf", concurrency=1))
        await store.enqueue([JobSpec(kind="pdf") for _ in range(backlog + 1)])
        await store.enqueue([JobSpec(kind="mail") for _ in range(20)])
        [held] = await store.claim("w", queues=["default"], limit=1, lease=LEASE)
        assert held.kind == "pdf"
        with _raw(store) as conn:
            steps[backlog], claimed = vm_steps(conn, partial(_claim_rolled_back, conn, clock, 20))
        assert [job.kind for job in claimed.jobs] == ["mail"] * 20
        await store.close()
    assert steps[5_000] < steps[10] * 1.2 + 50, steps


# ---------------------------------------------------------------------- reach and rotation


async def test_a_tenant_beyond_the_group_cap_is_reached_on_the_next_claim(
    store: SqliteStore,
) -> None:
    await store.enqueue(
        [JobSpec(kind="a", tenant=f"a{i:02d}", delay=timedelta(hours=1)) for i in range(70)]
    )
    [late] = await store.enqueue([JobSpec(kind="a", tenant="zed")])
    first = await store.claim("w", queues=["default"], limit=5, lease=LEASE)
    second = await store.claim("w", queues=["default"], limit=5, lease=LEASE)
    assert [job.id for job in first + second] == [late.job.id]


async def test_fair_claims_serve_every_tenant_once_before_any_twice(store: SqliteStore) -> None:
    tenants = [f"t{i:03d}" for i in range(100)]
    await store.enqueue([JobSpec(kind="a", tenant=tenant) for _ in range(2) for tenant in tenants])
    served: list[str] = []
    for _ in range(10):
        jobs = await store.claim("w", queues=["default"], limit=10, lease=LEASE)
        served += [str(job.tenant) for job in jobs]
    assert sorted(served) == tenants


# ---------------------------------------------------------------------- starts


async def test_only_the_starts_a_rate_can_count_are_kept(
    store: SqliteStore, clock: FakeClock
) -> None:
    await store.set_limit(Limit(LimitScope.KIND, "api", rate=3, period=timedelta(minutes=1)))
    await store.enqueue([JobSpec(kind="api") for _ in range(20)])
    for _ in range(6):
        jobs = await store.claim("w", queues=["default"], limit=2, lease=LEASE)
        assert len(jobs) <= 3
        clock.advance(timedelta(seconds=25))
    with _raw(store) as conn:
        (kept,) = conn.execute("SELECT sum(n) FROM rota_limit_starts").fetchone()
    assert kept == 3
    [info] = await store.list_limits()
    assert info.recent_starts <= 3
    clock.advance(timedelta(days=1, seconds=1))  # beyond any period: forgotten at next start
    await store.set_limit(Limit(LimitScope.KIND, "other", rate=1, period=timedelta(seconds=1)))
    await store.enqueue([JobSpec(kind="other", queue="other")])
    assert len(await store.claim("w", queues=["other"], limit=5, lease=LEASE)) == 1
    with _raw(store) as conn:
        rows = conn.execute("SELECT key, n FROM rota_limit_starts ORDER BY key").fetchall()
    assert rows[-1] == ("other", 1) and "api" not in {key for key, _ in rows}


# ---------------------------------------------------------------------- processes

PROCESSES = 8
PDF_LIMIT = 3


async def _drain_under_the_limit(url: str, index: int) -> int:
    """Claim small batches and finish them, some at once and some a claim later, until
    nothing is pending; return how many jobs this process ran."""
    rnd = random.Random(index)
    store = SqliteStore.from_url(url)
    ran = 0
    held: list[Any] = []
    try:
        while True:
            jobs = await store.claim(
                f"p{index}",
                queues=["default"],
                limit=rnd.randint(1, 4),
                lease=timedelta(minutes=10),
            )
            ran += len(jobs)
            held += [job.lease for job in jobs]
            if held and (not jobs or rnd.random() < 0.6):
                assert await store.complete_many(held) == []
                held = []
            if not jobs and not held:
                counts = await store.counts()
                if counts.total(JobState.PENDING) == 0:
                    return ran
                await asyncio.sleep(0.001)
    finally:
        await store.close()


def _process(url: str, index: int, start: Any, results: Any) -> None:
    try:
        start.wait(timeout=60)
        results.put(("ok", index, asyncio.run(_drain_under_the_limit(url, index))))
    except BaseException:
        results.put(("error", index, traceback.format_exc()))


def test_a_kind_limit_holds_across_processes_sharing_one_file(tmp_path: Path) -> None:
    path = tmp_path / "rota.db"
    url = f"sqlite:///{path}"

    async def seed() -> None:
        store = SqliteStore.from_url(url)
        await store.migrate()
        await store.set_limit(Limit(LimitScope.KIND, "pdf", concurrency=PDF_LIMIT))
        await store.enqueue(
            [JobSpec(kind=kind) for _ in range(60) for kind in ("pdf", "mail", "mail")]
        )
        await store.close()

    asyncio.run(seed())
    context = multiprocessing.get_context("spawn")
    start = context.Barrier(PROCESSES)
    results = context.Queue()
    processes = [
        context.Process(target=_process, args=(url, index, start, results), daemon=True)
        for index in range(PROCESSES)
    ]
    for process in processes:
        process.start()
    reports = []
    try:
        for _ in processes:
            reports.append(results.get(timeout=90))
    except queue.Empty:
        pytest.fail(f"only {len(reports)} of {PROCESSES} processes reported")
    finally:
        for process in processes:
            process.join(timeout=30)
    errors = [report[2] for report in reports if report[0] == "error"]
    assert errors == [], "\n".join(errors)
    assert sum(report[2] for report in reports) == 180

    with sqlite3.connect(path) as raw:
        assert raw.execute("SELECT state, count(*) FROM rota_jobs GROUP BY state").fetchall() == [
            ("succeeded", 180)
        ]
        # Claims and completions each read the clock inside the write lock, so the attempts'
        # instants follow the order of the writes; a finish and a start at one instant were a
        # finish, then a start.
        events = sorted(
            event
            for started, finished in raw.execute(
                "SELECT a.started_at, a.finished_at FROM rota_attempts a "
                "JOIN rota_jobs j ON j.id = a.job_id WHERE j.kind = 'pdf'"
            )
            for event in ((started, 1), (finished, -1))
        )
    running = peak = 0
    for _, change in events:
        running += change
        peak = max(peak, running)
    assert peak == PDF_LIMIT


# ---------------------------------------------------------------------- parity


# 9, 12 and 190 once found claims that read too few refused jobs or expired leases to give
# each tenant its reference turn.
@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5, 6, 9, 12, 190])
async def test_flow_control_matches_the_reference_store_over_random_operations(
    store: SqliteStore, clock: FakeClock, seed: int
) -> None:
    """Claims under random limits, pauses, tenants, kinds and priorities, fair or not, and
    every flow-control verb return what the reference store returns (with fewer than
    MAX_CLAIM_GROUPS groups per queue, the SQLite claim chooses exactly as select does)."""
    rnd = random.Random(seed)
    reference = MemoryStore(clock=clock)
    leases: list[Any] = []

    async def both(verb: str, *args: Any, **kwargs: Any) -> Any:
        outcomes: list[tuple[Any, ...]] = []
        for target in (reference, store):
            try:
                outcomes.append(("returned", await getattr(target, verb)(*args, **kwargs)))
            except Exception as error:
                outcomes.append(("raised", type(error), str(error)))
        assert outcomes[0] == outcomes[1], f"{verb}{args}{kwargs}: {_brief(outcomes)}"
        return outcomes[0][1] if outcomes[0][0] == "returned" else None

    def a_limit() -> Limit:
        scope = rnd.choice(list(LimitScope))
        if scope is LimitScope.QUEUE:
            return Limit(scope, rnd.choice(["default", "mail"]), concurrency=rnd.randint(0, 4))
        key = rnd.choice(["a", "b", "c"] if scope is LimitScope.KIND else ["t1", "t2", "*"])
        concurrency = rnd.choice([None, rnd.randint(0, 4)])
        rate = (
            rnd.choice([None, rnd.randint(1, 5)]) if concurrency is not None else rnd.randint(1, 5)
        )
        period = timedelta(seconds=rnd.choice([5, 20, 60])) if rate is not None else None
        return Limit(scope, key, concurrency=concurrency, rate=rate, period=period)

    for _ in range(300):
        verb = rnd.choice(
            ["enqueue"] * 4
            + ["claim"] * 5
            + ["complete"] * 3
            + ["fail", "advance", "advance", "set_limit", "delete_limit", "pause", "resume"]
            + ["list_limits", "running_by_tenant", "list_queues", "rescue"]
        )
        if verb == "enqueue":
            specs = [
                JobSpec(
                    kind=rnd.choice("abc"),
                    queue=rnd.choice(["default", "default", "mail"]),
                    tenant=rnd.choice([None, "t1", "t2", "t3"]),
                    priority=rnd.choice([0, 0, 5, -5]),
                    max_attempts=rnd.randint(1, 3),
                    delay=timedelta(seconds=rnd.choice([0, 0, 0, 15, 90])),
                )
                for _ in range(rnd.randint(1, 6))
            ]
            await both("enqueue", specs)
        elif verb == "claim":
            claimed = await both(
                "claim",
                rnd.choice(["w1", "w2"]),
                queues=rnd.choice(
                    [["default"], ["mail"], ["default", "mail"], ["mail", "default"]]
                ),
                limit=rnd.randint(1, 8),
                lease=timedelta(seconds=rnd.randint(5, 40)),
                fair=rnd.random() < 0.7,
            )
            leases += [job.lease for job in claimed or []]
        elif verb == "complete" and leases:
            done = rnd.sample(leases, min(len(leases), rnd.randint(1, 4)))
            await both("complete_many", done)
        elif verb == "fail" and leases:
            await both("fail", rnd.choice(leases), error="boom", retry_in=timedelta(seconds=3))
        elif verb == "advance":
            clock.advance(timedelta(seconds=rnd.choice([1, 4, 11, 30])))
        elif verb == "set_limit":
            await both("set_limit", a_limit())
        elif verb == "delete_limit":
            scope = rnd.choice(list(LimitScope))
            await both("delete_limit", scope, rnd.choice(["default", "mail", "a", "t1", "*"]))
        elif verb in ("pause", "resume"):
            await both(f"{verb}_queue", rnd.choice(["default", "mail"]))
        elif verb == "rescue":
            await both("rescue", limit=rnd.randint(1, 3))
        elif verb in ("list_limits", "running_by_tenant", "list_queues"):
            await both(verb)
    await both("list_limits")
    await both("counts")


def _brief(outcomes: list[tuple[Any, ...]]) -> str:
    """Claimed jobs as (id, queue, tenant, kind, priority) for a readable mismatch."""
    shown = []
    for outcome in outcomes:
        value = outcome[1]
        if isinstance(value, list) and value and hasattr(value[0], "kind"):
            value = [(job.id, job.queue, job.tenant, job.kind, job.priority) for job in value]
        shown.append(value)
    return f"reference {shown[0]} != sqlite {shown[1]}"
