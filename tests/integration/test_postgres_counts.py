"""The maintained job counts of PostgreSQL (017_counts) equal an exact count of the rows:
after every step of a random mix of every verb that writes jobs, after several connections
claim and finish jobs at once, and after migrating a database that already holds jobs."""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from rota.domain.errors import RotaError
from rota.domain.job import JobEdit, JobSpec
from rota.domain.lease import Lease
from rota.domain.workflow import Workflow
from rota.store import JobFilter, Store, open_store
from rota.store.postgres import enqueue as pg_enqueue
from rota.store.postgres.queries import migrations
from rota.store.postgres.store import PostgresStore
from rota.store.records import WorkerInfo
from rota.testing import FakeClock
from tests.support.plans import sent_params
from tests.support.postgres import Server

pytestmark = pytest.mark.postgres

LEASE = timedelta(seconds=30)
QUEUES = ("q1", "q2")
KINDS = ("a", "b")


def exact(url: str) -> tuple[Counter[tuple[str, str]], Counter[tuple[str, str, str]]]:
    """Counts by (queue, state) and by (queue, kind, state): from the rows, and (second)
    from the maintained tables; the caller compares each with the store's."""
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute("SELECT queue, kind, state, count(*) FROM rota_jobs GROUP BY 1, 2, 3")
        by_kind = Counter({(q, k, s): n for q, k, s, n in rows.fetchall()})
    by_queue: Counter[tuple[str, str]] = Counter()
    for (queue, _, state), n in by_kind.items():
        by_queue[queue, state] += n
    return by_queue, by_kind


def maintained(url: str) -> Counter[tuple[str, str, str]]:
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT queue, kind, state, sum(n) FROM (SELECT * FROM rota_counts"
            " UNION ALL SELECT * FROM rota_count_deltas) AS c GROUP BY 1, 2, 3 HAVING sum(n) <> 0"
        ).fetchall()
    return Counter({(q, k, s): int(n) for q, k, s, n in rows})


async def store_counts(store: Store) -> Counter[tuple[str, str]]:
    counts = await store.counts()
    return Counter(
        {
            (queue, state.value): n
            for queue, per_state in counts.by_queue.items()
            for state, n in per_state.items()
            if n
        }
    )


@asynccontextmanager
async def postgres_store(url: str, **options: Any) -> AsyncIterator[PostgresStore]:
    """A PostgreSQL store of its own (``open_store`` options), closed after."""
    store = open_store(url, **options)
    assert isinstance(store, PostgresStore)
    try:
        yield store
    finally:
        await store.close()


async def assert_counts_exact(store: Store, url: str) -> None:
    by_queue, by_kind = exact(url)
    assert await store_counts(store) == by_queue
    assert maintained(url) == by_kind
    totals = (await store.counts()).by_state
    assert {s.value: n for s, n in totals.items() if n} == {
        state: sum(n for (_, s), n in by_queue.items() if s == state)
        for state in {s for _, s in by_queue}
    }


class CountsMachine(RuleBasedStateMachine):
    """Every verb that writes jobs, on random jobs, in any order; after each step the
    maintained counts equal a GROUP BY over the rows. Refusals (lease lost, wrong state) are
    part of the mix: a refused verb must change no count either."""

    server: Server

    def __init__(self) -> None:
        super().__init__()
        # A database of its own per example: nothing one leaves behind reaches the next.
        self.database = self.server.database()
        self.url = self.database.__enter__()
        self.loop = asyncio.new_event_loop()
        self.clock = FakeClock()
        self.store = open_store(self.url, clock=self.clock)
        self.run(self.store.migrate())
        self.run(
            self.store.register_worker(
                WorkerInfo(name="w1", host="h", pid=1, queues=("q1",), concurrency=4, kinds=("a",))
            )
        )
        self.leases: list[Lease] = []
        self.ids: list[int] = []

    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    def attempt(self, coro: Any) -> Any:
        try:
            return self.run(coro)
        except RotaError:
            return None

    def teardown(self) -> None:
        self.run(self.store.close())
        self.loop.close()
        self.database.__exit__(None, None, None)

    def _spec(self, data: st.DataObject, **extra: Any) -> JobSpec:
        return JobSpec(
            kind=data.draw(st.sampled_from(KINDS)),
            queue=data.draw(st.sampled_from(QUEUES)),
            delay=timedelta(seconds=data.draw(st.sampled_from([0, 0, 60]))),
            max_attempts=data.draw(st.integers(1, 2)),
            **extra,
        )

    # ------------------------------------------------------------------ writes

    @rule(data=st.data(), count=st.integers(1, 3))
    def enqueue(self, data: st.DataObject, count: int) -> None:
        specs = [self._spec(data) for _ in range(count)]
        self.ids += [r.job.id for r in self.run(self.store.enqueue(specs))]

    @rule(data=st.data(), replace=st.booleans(), lasting=st.booleans())
    def enqueue_unique(self, data: st.DataObject, replace: bool, lasting: bool) -> None:
        spec = self._spec(
            data,
            unique_key=data.draw(st.sampled_from(["k1", "k2"])),
            on_conflict="replace" if replace else "skip",
            unique_for=timedelta(seconds=120) if lasting else None,
        )
        self.ids += [r.job.id for r in self.run(self.store.enqueue([spec]))]

    @rule(data=st.data())
    def enqueue_by_copy(self, data: st.DataObject) -> None:
        # A few drawn specs repeated to the COPY path's size: drawing each of the 2,000 took
        # most of the test's time, and the batch's mix of queues, kinds and delays is the same.
        drawn = [self._spec(data) for _ in range(4)]
        specs = [drawn[index % len(drawn)] for index in range(pg_enqueue.COPY_THRESHOLD)]
        self.ids += [r.job.id for r in self.run(self.store.enqueue(specs))][:5]

    @rule(data=st.data(), policy=st.sampled_from(["cancel", "run"]))
    def enqueue_workflow(self, data: st.DataObject, policy: str) -> None:
        graph = Workflow()
        first = graph.add(self._spec(data))
        second = graph.add(self._spec(data), after=[first], on_parent_failure=policy)
        graph.add(self._spec(data), after=[first, second], on_parent_failure=policy)
        self.ids += [job.id for job in self.run(self.store.enqueue_workflow(graph))]

    @rule(queue=st.sampled_from(QUEUES), limit=st.integers(1, 4))
    def claim(self, queue: str, limit: int) -> None:
        claimed = self.run(self.store.claim("w1", queues=[queue], limit=limit, lease=LEASE))
        self.leases += [job.lease for job in claimed]

    @precondition(lambda self: self.leases)
    @rule(
        data=st.data(),
        outcome=st.sampled_from(
            ["complete", "complete_many", "fail", "permanent", "snooze", "release", "heartbeat"]
        ),
    )
    def finish(self, data: st.DataObject, outcome: str) -> None:
        lease = data.draw(st.sampled_from(self.leases))
        store = self.store
        if outcome == "complete":
            self.attempt(store.complete(lease))
        elif outcome == "complete_many":
            self.run(
                store.complete_many(
                    self.leases[:3], results=["1", None, "[]"][: len(self.leases[:3])]
                )
            )
        elif outcome in ("fail", "permanent"):
            self.attempt(
                store.fail(
                    lease,
                    error="boom",
                    retry_in=timedelta(seconds=5),
                    permanent=outcome == "permanent",
                )
            )
        elif outcome == "snooze":
            self.attempt(store.snooze(lease, timedelta(seconds=5)))
        elif outcome == "release":
            self.attempt(store.release(lease))
        else:
            self.run(store.heartbeat([lease], lease=LEASE))

    @precondition(lambda self: self.ids)
    @rule(
        data=st.data(),
        verb=st.sampled_from(
            ["retry", "rerun", "cancel", "delete", "move", "run_now", "cancel_workflow"]
        ),
    )
    def operate(self, data: st.DataObject, verb: str) -> None:
        job_id = data.draw(st.sampled_from(self.ids))
        store = self.store
        if verb == "retry":
            self.attempt(store.retry(job_id))
        elif verb == "rerun":
            self.attempt(store.rerun(job_id))
        elif verb == "cancel":
            self.attempt(store.cancel(job_id))
        elif verb == "delete":
            self.attempt(store.delete(job_id))
        elif verb == "move":
            queue = data.draw(st.sampled_from(QUEUES))
            self.attempt(store.reschedule(job_id, JobEdit(queue=queue, priority=1)))
        elif verb == "run_now":
            self.attempt(store.reschedule(job_id, JobEdit(run_now=True)))
        else:
            job = self.attempt(store.get(job_id))
            if job is not None and job.workflow is not None:
                self.attempt(store.cancel_workflow(job.workflow))

    @rule(data=st.data(), verb=st.sampled_from(["bulk_retry", "bulk_cancel", "purge"]))
    def bulk(self, data: st.DataObject, verb: str) -> None:
        filter = JobFilter(
            queue=data.draw(st.sampled_from([None, *QUEUES])),
            kind=data.draw(st.sampled_from([None, *KINDS])),
        )
        self.run(getattr(self.store, verb)(filter, limit=5))

    @rule(seconds=st.sampled_from([1, 10, 31, 200]))
    def advance(self, seconds: int) -> None:
        self.clock.advance(timedelta(seconds=seconds))

    @rule(verb=st.sampled_from(["rescue", "expire", "end_unrunnable", "prune", "fold"]))
    def maintain(self, verb: str) -> None:
        store = self.store
        if verb == "rescue":
            self.run(store.rescue())
        elif verb == "expire":
            self.run(store.expire())
        elif verb == "end_unrunnable":
            self.run(store.beat_worker("w1"))
            self.run(store.end_unrunnable(grace=timedelta(0), alive_within=timedelta(minutes=5)))
        elif verb == "prune":
            self.run(store.prune(older_than=self.clock.now() - timedelta(seconds=30)))
        else:
            assert isinstance(store, PostgresStore)
            self.run(store.fold_counts())

    # ------------------------------------------------------------------ invariant

    @invariant()
    def counts_equal_the_rows(self) -> None:
        self.run(assert_counts_exact(self.store, self.url))


@pytest.fixture
def counts_machine(pg_server: Server) -> type[CountsMachine]:
    class Machine(CountsMachine):
        server = pg_server

    Machine.TestCase.settings = settings(
        max_examples=15,
        stateful_step_count=40,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
    return Machine


def test_maintained_counts_equal_the_rows_after_every_verb(
    counts_machine: type[CountsMachine],
) -> None:
    counts_machine.TestCase().runTest()


async def test_counts_stay_exact_while_connections_claim_and_finish_at_once(pg_url: str) -> None:
    stores = [open_store(pg_url) for _ in range(4)]
    rng = random.Random(13)
    try:
        await stores[0].enqueue(
            [JobSpec(kind=rng.choice(KINDS), queue=rng.choice(QUEUES)) for _ in range(3000)]
        )

        async def work(store: Store, seed: int) -> None:
            local = random.Random(seed)
            for _ in range(40):
                claimed = await store.claim("w", queues=list(QUEUES), limit=20, lease=LEASE)
                if not claimed:
                    return
                leases = [job.lease for job in claimed]
                split = local.randrange(len(leases) + 1)
                await store.complete_many(leases[:split])
                for lease in leases[split:]:
                    if local.random() < 0.5:
                        await store.fail(lease, error="x", retry_in=timedelta(0))
                    else:
                        await store.release(lease)
                await store.enqueue([JobSpec(kind="a", queue=local.choice(QUEUES))])
                if local.random() < 0.2:
                    assert isinstance(store, PostgresStore)
                    await store.fold_counts()

        await asyncio.gather(*(work(store, n) for n, store in enumerate(stores)))
        await assert_counts_exact(stores[0], pg_url)
    finally:
        for store in stores:
            await store.close()


def test_migrating_a_database_with_jobs_starts_the_counts_from_its_rows(
    pg_server: Server,
) -> None:
    before = [(version, text) for version, text in migrations() if version < "017"]
    with pg_server.database(migrated=False) as url:
        with psycopg.connect(url) as conn:
            for _, text in before:
                conn.execute(text, prepare=False)
            conn.execute(
                "INSERT INTO rota_jobs (kind, queue, payload, state, run_at, max_attempts,"
                " created_at) SELECT 'k' || (n % 3), 'q' || (n % 2), '{}',"
                " (ARRAY['pending', 'running', 'succeeded', 'dead'])[1 + n % 4], now(), 3, now()"
                " FROM generate_series(1, 500) AS n"
            )
            conn.execute(
                "CREATE TABLE rota_migrations (version text PRIMARY KEY,"
                " applied_at timestamptz NOT NULL DEFAULT now())"
            )
            conn.cursor().executemany(
                "INSERT INTO rota_migrations (version) VALUES (%s)", [(v,) for v, _ in before]
            )

        async def upgrade() -> None:
            store = open_store(url)
            try:
                assert await store.migrate() == [v for v, _ in migrations() if v >= "017"]
                await assert_counts_exact(store, url)
                await store.enqueue([JobSpec(kind="k0", queue="q0")])
                await assert_counts_exact(store, url)
                with psycopg.connect(url, autocommit=True) as conn:
                    conn.execute("TRUNCATE rota_jobs CASCADE")
                assert await store_counts(store) == Counter()
            finally:
                await store.close()

        asyncio.run(upgrade())


async def test_a_claim_that_meets_an_expired_lease_takes_it_over_through_rota_claim(
    pg_url: str,
) -> None:
    """A claim of fewer jobs than are due runs rota_claim_fresh, which takes over no lease:
    while one it could take over has expired, it claims nothing and says so, and the claim
    runs rota_claim instead, which takes over the expired lease beside the due jobs. The
    counts stay exact both ways (rota_claim_fresh writes its own count deltas; rota_claim's
    are the trigger's)."""
    clock = FakeClock()
    async with postgres_store(pg_url, clock=clock) as store:
        await store.enqueue([JobSpec(kind="a", queue="q1") for _ in range(3)])
        sent = sent_params(store)
        [first] = await store.claim("w1", queues=["q1"], limit=1, lease=LEASE)
        # Three due for a batch of one: rota_claim_all steps aside for the fair walk.
        assert set(sent) == {"claim_all_call", "claim_fresh_call"}, sent
        await assert_counts_exact(store, pg_url)

        clock.advance(LEASE + timedelta(seconds=1))
        sent.clear()
        claimed = await store.claim("w2", queues=["q1"], limit=10, lease=LEASE)
        assert set(sent) == {"claim_fresh_call", "claim_call"}, sent
        assert len(claimed) == 3
        [again] = [job for job in claimed if job.id == first.id]
        assert again.lease_token > first.lease_token and again.worker == "w2"
        await assert_counts_exact(store, pg_url)

        sent.clear()
        assert await store.claim("w2", queues=["q1"], limit=10, lease=LEASE) == []
        assert set(sent) == {"claim_fresh_call"}, sent


async def test_a_claim_whose_due_jobs_all_fit_takes_them_all_through_rota_claim_all(
    pg_url: str,
) -> None:
    """While its last claim came back short, a store claims through rota_claim_all: when every
    due job fits in the batch (the fair choice is then all of them), one statement takes
    every due job of the queues asked for, and none not yet due or of another queue."""
    async with postgres_store(pg_url) as store:
        due = await store.enqueue(
            [JobSpec(kind="a", queue="q1", tenant=tenant) for tenant in ("t1", "t1", "t2")]
        )
        await store.enqueue([JobSpec(kind="a", queue="q1", delay=timedelta(hours=1))])
        await store.enqueue([JobSpec(kind="a", queue="q2")])
        sent = sent_params(store)
        claimed = await store.claim("w1", queues=["q1"], limit=10, lease=LEASE)
        assert set(sent) == {"claim_all_call"}, sent
        assert sorted(job.id for job in claimed) == sorted(r.job.id for r in due)
        assert all(job.lease_token is not None and job.attempt == 1 for job in claimed)
        await assert_counts_exact(store, pg_url)


async def test_a_claim_with_more_due_than_its_batch_takes_turns_through_rota_claim_fresh(
    pg_url: str,
) -> None:
    """rota_claim_all claims nothing when more jobs are due than the batch takes: the claim
    goes on through rota_claim_fresh, whose walk gives each tenant its turn. The next
    CROWDED_SKIP claims go to rota_claim_fresh at once, short or not; then rota_claim_all is
    tried again."""
    from rota.store.postgres.store import CROWDED_SKIP

    async with postgres_store(pg_url) as store:
        await store.enqueue(
            [JobSpec(kind="a", queue="q1", tenant="t1") for _ in range(5)]
            + [JobSpec(kind="a", queue="q1", tenant=tenant) for tenant in ("t2", "t3")]
        )
        sent = sent_params(store)
        claimed = await store.claim("w1", queues=["q1"], limit=3, lease=LEASE)
        assert set(sent) == {"claim_all_call", "claim_fresh_call"}, sent
        assert sorted(job.tenant or "" for job in claimed) == ["t1", "t2", "t3"]
        await assert_counts_exact(store, pg_url)
        for _ in range(CROWDED_SKIP):
            sent.clear()
            await store.claim("w1", queues=["q1"], limit=3, lease=LEASE)
            assert set(sent) == {"claim_fresh_call"}, sent
        sent.clear()
        assert await store.claim("w1", queues=["q1"], limit=3, lease=LEASE) == []
        assert set(sent) == {"claim_all_call"}, sent
        await assert_counts_exact(store, pg_url)


async def test_an_attempt_that_runs_alone_among_due_jobs_is_claimed_alone(pg_url: str) -> None:
    """A crash suspect's attempt runs alone (rota.domain.job_state.runs_alone): rota_claim_all
    never claims it beside other jobs, and leaves the claim to the walk, which takes it alone
    when it comes first. Alone in its queue, rota_claim_all takes it itself, not yet started
    (its worker says when it begins)."""
    async with postgres_store(pg_url) as store:
        [suspect] = await store.enqueue([JobSpec(kind="a", queue="q1")])
        await store.enqueue([JobSpec(kind="a", queue="q1") for _ in range(2)])
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute("UPDATE rota_jobs SET crashes = 2 WHERE id = %s", [suspect.job.id])
        sent = sent_params(store)
        [alone] = await store.claim("w1", queues=["q1"], limit=10, lease=LEASE)
        assert set(sent) == {"claim_all_call", "claim_fresh_call"}, sent
        assert alone.id == suspect.job.id
        await assert_counts_exact(store, pg_url)

        [lone] = await store.enqueue([JobSpec(kind="a", queue="q2")])
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute("UPDATE rota_jobs SET crashes = 2 WHERE id = %s", [lone.job.id])
        # A store of its own: this one found a crowd and skips rota_claim_all (CROWDED_SKIP).
        async with postgres_store(pg_url) as claimer:
            sent = sent_params(claimer)
            [claimed] = await claimer.claim("w1", queues=["q2"], limit=10, lease=LEASE)
            assert set(sent) == {"claim_all_call"}, sent
        with psycopg.connect(pg_url, autocommit=True) as conn:
            [(started,)] = conn.execute(
                "SELECT lease_started FROM rota_jobs WHERE id = %s", [lone.job.id]
            ).fetchall()
        assert claimed.id == lone.job.id and started is False
        await assert_counts_exact(store, pg_url)


async def test_rota_claim_all_meeting_an_expired_lease_leaves_the_claim_to_rota_claim(
    pg_url: str,
) -> None:
    """While a lease the claim could take over has expired, rota_claim_all claims nothing and
    says so, and the claim runs rota_claim at once, which takes it over with the due jobs."""
    clock = FakeClock()
    async with postgres_store(pg_url, clock=clock) as store:
        await store.enqueue([JobSpec(kind="a", queue="q1")])
        [first] = await store.claim("w1", queues=["q1"], limit=10, lease=LEASE)
        clock.advance(LEASE + timedelta(seconds=1))
        await store.enqueue([JobSpec(kind="a", queue="q1")])
        sent = sent_params(store)
        claimed = await store.claim("w2", queues=["q1"], limit=10, lease=LEASE)
        assert set(sent) == {"claim_all_call", "claim_call"}, sent
        assert len(claimed) == 2 and first.id in {job.id for job in claimed}
        await assert_counts_exact(store, pg_url)
