"""Every store verb against the one transition table (rota.domain.transitions.MOVES), on every
backend: a verb accepts a job exactly in the states the table gives it, leads it only to the
states the table names, and refuses every other state with StateConflict, changing nothing."""

from __future__ import annotations

import itertools
from collections.abc import Awaitable, Callable
from datetime import timedelta

import pytest

from rota.domain.errors import JobNotFound, StateConflict
from rota.domain.job import Job, JobEdit, JobSpec
from rota.domain.job_state import JobState
from rota.domain.transitions import MOVES
from rota.domain.workflow import Workflow
from rota.store import JobFilter, Store
from tests.contract.helpers import LEASE, add

_queues = itertools.count()


async def job_in(store: Store, state: JobState) -> Job:
    """A job in ``state``, alone in a queue of its own (so that claims meet no other job)."""
    queue = f"q{next(_queues)}"
    if state is JobState.WAITING:
        graph = Workflow()
        parent = graph.add(JobSpec(kind="a", queue=f"{queue}-parent"))
        graph.add(JobSpec(kind="a", queue=queue), after=[parent])
        return (await store.enqueue_workflow(graph))[1]
    job = await add(store, queue=queue, max_attempts=1)
    if state is JobState.HELD:
        return await store.hold(job.id)
    if state is JobState.CANCELLED:
        return await store.cancel(job.id)
    if state in (JobState.RUNNING, JobState.SUCCEEDED, JobState.DEAD):
        [claimed] = await store.claim("w", queues=[queue], limit=1, lease=LEASE)
        if state is JobState.SUCCEEDED:
            await store.complete(claimed.lease)
        elif state is JobState.DEAD:
            await store.fail(claimed.lease, error="boom", retry_in=timedelta(0))
    return await store.get(job.id)


#: Each operator verb, as a call on one job that returns its state after (None: it is gone).
Verb = Callable[[Store, Job], Awaitable[JobState | None]]


async def _state_of(store: Store, job_id: int) -> JobState | None:
    try:
        return (await store.get(job_id)).state
    except JobNotFound:
        return None


async def _claim(store: Store, job: Job) -> JobState | None:
    claimed = await store.claim("w2", queues=[job.queue], limit=1, lease=LEASE)
    if not claimed:
        raise StateConflict("not claimed")
    return claimed[0].state


async def _purge(store: Store, job: Job) -> JobState | None:
    if await store.purge(JobFilter(queue=job.queue)) == 0:
        raise StateConflict("not purged")
    return await _state_of(store, job.id)


async def _delete(store: Store, job: Job) -> JobState | None:
    await store.delete(job.id)
    return await _state_of(store, job.id)


VERBS: dict[str, Verb] = {
    "claim": _claim,
    "retry": lambda store, job: _then(store.retry(job.id)),
    "rerun": lambda store, job: _then(store.rerun(job.id)),
    "cancel": lambda store, job: _then(store.cancel(job.id)),
    "reschedule": lambda store, job: _then(store.reschedule(job.id, JobEdit(priority=5))),
    "hold": lambda store, job: _then(store.hold(job.id)),
    "release_held": lambda store, job: _then(store.release_held(job.id)),
    "delete": _delete,
    "purge": _purge,
}


async def _then(changed: Awaitable[Job]) -> JobState:
    return (await changed).state


def test_every_verb_tested_here_is_in_the_table() -> None:
    assert set(VERBS) <= set(MOVES)
    for move in MOVES.values():
        assert move.targets <= set(JobState) and move.sources <= set(JobState)


@pytest.mark.parametrize("verb", sorted(VERBS))
async def test_a_verb_moves_exactly_the_states_the_table_gives_it(store: Store, verb: str) -> None:
    move = MOVES[verb]
    for state in JobState:
        job = await job_in(store, state)
        assert job.state is state
        if state in move.sources:
            after = await VERBS[verb](store, job)
            expected = move.targets or {None}
            assert after in expected, f"{verb} took a {state} job to {after}"
        else:
            with pytest.raises(StateConflict):
                await VERBS[verb](store, job)
            assert await _state_of(store, job.id) is state, f"a refused {verb} changed it"
