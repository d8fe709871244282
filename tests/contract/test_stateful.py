"""A stateful property test: random sequences of store verbs against a small reference model.

Each backend runs the same machine; after every step the store's rows must equal the model's,
and a fenced verb must raise LeaseLost exactly when the model says the lease moved on.
ROTA_STATEFUL_EXAMPLES raises the example count (nightly runs).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from rota.domain import blame
from rota.domain.errors import JobNotFound, LeaseLost, StateConflict
from rota.domain.job import JobSpec
from rota.domain.job_state import JobState, runs_alone
from rota.domain.lease import Lease
from rota.store import Store, open_store
from rota.testing import FakeClock
from tests.support.postgres import Server

EXAMPLES = int(os.environ.get("ROTA_STATEFUL_EXAMPLES", "25"))
LEASE = timedelta(seconds=30)


@dataclass
class ModelJob:
    id: int
    state: JobState
    run_at: datetime
    attempt: int
    max_attempts: int
    token: int | None = None
    lease_until: datetime | None = None
    crashes: int = 0
    #: Whether the current lease's handler started (rota.domain.blame).
    started: bool = True

    def alone_next(self) -> bool:
        """Whether a claim's next attempt of this job runs alone."""
        if self.state is JobState.RUNNING:
            return blame.alone_after(self.expiry(), self.max_attempts)
        return runs_alone(self.crashes, self.attempt + 1, self.max_attempts)

    def expiry(self) -> blame.Expiry:
        return blame.expire(
            attempt=self.attempt,
            max_attempts=self.max_attempts,
            crashes=self.crashes,
            started=self.started,
        )


class StoreMachine(RuleBasedStateMachine):
    """Drives one store; subclasses say which (``open`` returns a fresh, empty store)."""

    def open(self, clock: FakeClock) -> Store:
        raise NotImplementedError

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.clock = FakeClock()
        self.store = self.open(self.clock)
        self.run(self.store.migrate())
        self.jobs: dict[int, ModelJob] = {}
        self.leases: list[Lease] = []
        self.max_token = 0

    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    def teardown(self) -> None:
        self.run(self.store.close())
        self.loop.close()

    @property
    def now(self) -> datetime:
        return self.clock.now()

    def _holds(self, lease: Lease) -> bool:
        job = self.jobs.get(lease.job_id)
        return job is not None and job.state is JobState.RUNNING and job.token == lease.token

    # ------------------------------------------------------------------ rules

    @initialize()
    def start(self) -> None:
        assert self.run(self.store.counts()).by_state[JobState.PENDING] == 0

    @rule(
        count=st.integers(1, 3),
        delay_s=st.sampled_from([0, 0, 5, 60]),
        max_attempts=st.integers(1, 3),
    )
    def enqueue(self, count: int, delay_s: int, max_attempts: int) -> None:
        specs = [
            JobSpec(kind="k", delay=timedelta(seconds=delay_s), max_attempts=max_attempts)
            for _ in range(count)
        ]
        for result in self.run(self.store.enqueue(specs)):
            job = result.job
            self.jobs[job.id] = ModelJob(
                job.id, JobState.PENDING, self.now + timedelta(seconds=delay_s), 0, max_attempts
            )

    @rule(limit=st.integers(1, 4))
    def claim(self, limit: int) -> None:
        due = [job for job in self.jobs.values() if job.state is JobState.PENDING]
        expired = sorted(
            (
                job
                for job in self.jobs.values()
                if job.state is JobState.RUNNING
                and job.lease_until is not None
                and job.lease_until < self.now
                and not job.expiry().dead
            ),
            key=lambda job: (job.run_at, job.id),
        )
        candidates = [job for job in due if job.run_at <= self.now] + expired
        claimable: list[ModelJob] = []
        for job in sorted(candidates, key=lambda job: (job.run_at, job.id))[:limit]:
            alone = job.alone_next()
            if alone and claimable:
                break
            claimable.append(job)
            if alone:
                break
        claimed = self.run(self.store.claim("w", queues=["default"], limit=limit, lease=LEASE))
        assert [job.id for job in claimed] == [job.id for job in claimable]
        tokens = [job.lease_token or 0 for job in claimed]
        assert all(token > self.max_token for token in tokens), "tokens strictly increase"
        assert len(set(tokens)) == len(tokens)
        self.max_token = max([self.max_token, *tokens])
        for job in claimed:
            model = self.jobs[job.id]
            if model.state is JobState.RUNNING:  # taking over an expired lease
                expiry = model.expiry()
                model.attempt, model.crashes = expiry.attempt, expiry.crashes
            model.state, model.attempt = JobState.RUNNING, model.attempt + 1
            model.token, model.lease_until = job.lease_token, self.now + LEASE
            model.started = not runs_alone(model.crashes, model.attempt, model.max_attempts)
            self.leases.append(job.lease)

    @precondition(lambda self: self.leases)
    @rule(data=st.data())
    def begin(self, data: st.DataObject) -> None:
        lease = data.draw(st.sampled_from(self.leases))
        try:
            self.run(self.store.begin(lease))
        except LeaseLost:
            assert not self._holds(lease), "a held lease was refused"
            return
        assert self._holds(lease), "a stale lease was accepted"
        self.jobs[lease.job_id].started = True

    @precondition(lambda self: self.leases)
    @rule(data=st.data())
    def heartbeat(self, data: st.DataObject) -> None:
        lease = data.draw(st.sampled_from(self.leases))
        lost = self.run(self.store.heartbeat([lease], lease=LEASE)).lost
        assert (lost == []) == self._holds(lease)
        if not lost:
            self.jobs[lease.job_id].lease_until = self.now + LEASE

    @precondition(lambda self: self.leases)
    @rule(data=st.data(), outcome=st.sampled_from(["complete", "fail", "permanent", "release"]))
    def finish(self, data: st.DataObject, outcome: str) -> None:
        lease = data.draw(st.sampled_from(self.leases))
        held = self._holds(lease)
        job = self.jobs[lease.job_id]
        try:
            if outcome == "complete":
                self.run(self.store.complete(lease))
            elif outcome == "release":
                self.run(self.store.release(lease))
            else:
                state = self.run(
                    self.store.fail(
                        lease,
                        error="boom",
                        retry_in=timedelta(seconds=10),
                        permanent=outcome == "permanent",
                    )
                )
                expected_dead = outcome == "permanent" or job.attempt >= job.max_attempts
                assert state is (JobState.DEAD if expected_dead else JobState.PENDING)
        except LeaseLost:
            assert not held, "a held lease was refused"
            return
        assert held, "a stale lease was accepted"
        job.lease_until = None
        if outcome == "complete":
            job.state = JobState.SUCCEEDED
        elif outcome == "release":
            job.state, job.run_at, job.attempt = JobState.PENDING, self.now, job.attempt - 1
        elif outcome == "permanent" or job.attempt >= job.max_attempts:
            job.state = JobState.DEAD
        else:
            job.state, job.run_at = JobState.PENDING, self.now + timedelta(seconds=10)

    @rule(seconds=st.sampled_from([1, 10, 29, 31, 61]))
    def advance(self, seconds: int) -> None:
        self.clock.advance(timedelta(seconds=seconds))

    @rule()
    def rescue(self) -> None:
        result = self.run(self.store.rescue())
        expired = [
            job
            for job in self.jobs.values()
            if job.state is JobState.RUNNING
            and job.lease_until is not None
            and job.lease_until < self.now
        ]
        assert sorted(result.dead + result.requeued) == sorted(job.id for job in expired)
        for job in expired:
            job.lease_until = None
            expiry = job.expiry()
            job.attempt, job.crashes = expiry.attempt, expiry.crashes
            if expiry.dead:
                job.state = JobState.DEAD
            else:
                job.state = JobState.PENDING  # at its own run_at: its place in line

    @precondition(lambda self: self.jobs)
    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        job = self.jobs[data.draw(st.sampled_from(sorted(self.jobs)))]
        try:
            self.run(self.store.cancel(job.id))
        except StateConflict:
            assert job.state.is_terminal
            return
        assert not job.state.is_terminal
        job.state, job.lease_until = JobState.CANCELLED, None

    @precondition(lambda self: self.jobs)
    @rule(data=st.data())
    def retry(self, data: st.DataObject) -> None:
        job = self.jobs[data.draw(st.sampled_from(sorted(self.jobs)))]
        try:
            self.run(self.store.retry(job.id))
        except StateConflict:
            assert job.state not in (JobState.DEAD, JobState.CANCELLED)
            return
        assert job.state in (JobState.DEAD, JobState.CANCELLED)
        job.state, job.run_at, job.attempt = JobState.PENDING, self.now, 0

    @rule()
    def unknown_job(self) -> None:
        try:
            self.run(self.store.get(10**12))
        except JobNotFound:
            return
        raise AssertionError("a job that was never enqueued was found")

    # ------------------------------------------------------------------ invariant

    @invariant()
    def rows_equal_the_model(self) -> None:
        for model in self.jobs.values():
            row = self.run(self.store.get(model.id))
            assert row.state is model.state, (model, row)
            assert row.attempt == model.attempt
            assert row.crashes == model.crashes
            assert row.attempt <= row.max_attempts
            if model.state is JobState.RUNNING:
                assert (row.lease_token, row.lease_until) == (model.token, model.lease_until)
            if model.state is JobState.PENDING:
                assert row.run_at == model.run_at


def machine_test(open_store_for: Any) -> Any:
    class Machine(StoreMachine):
        def open(self, clock: FakeClock) -> Store:
            return open_store_for(clock)

    Machine.TestCase.settings = settings(
        max_examples=EXAMPLES,
        stateful_step_count=30,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
    return Machine


def test_memory_store_matches_the_model() -> None:
    machine_test(lambda clock: open_store("memory://", clock=clock)).TestCase().runTest()


def test_sqlite_store_matches_the_model(tmp_path: Path) -> None:
    counter = iter(range(10**9))

    def fresh(clock: FakeClock) -> Store:
        return open_store(f"sqlite:///{tmp_path / f'm{next(counter)}.db'}", clock=clock)

    machine_test(fresh).TestCase().runTest()


@pytest.fixture
def pg_databases(pg_server: Server) -> Iterator[Any]:
    stack: list[Any] = []

    def fresh(clock: FakeClock) -> Store:
        context = pg_server.database()
        stack.append(context)
        return open_store(context.__enter__(), clock=clock)

    yield fresh
    for context in stack:
        context.__exit__(None, None, None)


@pytest.mark.postgres
def test_postgres_store_matches_the_model(pg_databases: Any) -> None:
    machine_test(pg_databases).TestCase().runTest()
