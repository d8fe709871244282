"""`rota jobs bulk-cancel` names every state a cancel acts on (waiting and held besides
pending and running), takes them all unless --state names some, as the API's bulk cancel
does, and refuses, with the state machine's reason, a state it does not act on."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from rota.domain.job import JobSpec
from rota.domain.job_state import JobState
from rota.domain.workflow import Workflow
from rota.store import Store
from tests.support.cli import invoke, rota, sqlite_url
from tests.unit.test_cli_operator import on_store


async def _one_in_each_unfinished_state(store: Store) -> dict[JobState, int]:
    """A running job, a held workflow parent with its waiting child, and a pending job."""
    await store.enqueue([JobSpec(kind="email")])
    [running] = await store.claim("w", queues=["default"], limit=1, lease=timedelta(seconds=30))
    graph = Workflow()
    parent = graph.add(JobSpec(kind="email"))
    graph.add(JobSpec(kind="email"), after=[parent])
    held, waiting = await store.enqueue_workflow(graph)
    await store.hold(held.id)
    [pending] = await store.enqueue([JobSpec(kind="email")])
    return {
        JobState.RUNNING: running.id,
        JobState.WAITING: waiting.id,
        JobState.HELD: held.id,
        JobState.PENDING: pending.job.id,
    }


def _states(db: Path, ids: dict[JobState, int]) -> dict[JobState, JobState]:
    async def read(store: Store) -> dict[JobState, JobState]:
        return {was: (await store.get(job_id)).state for was, job_id in ids.items()}

    return on_store(db, read)


def test_bulk_cancel_cancels_held_and_waiting_jobs_when_named(tmp_path: Path) -> None:
    db = tmp_path / "ops.db"
    ids = on_store(db, _one_in_each_unfinished_state)
    env = {"ROTA_DATABASE_URL": sqlite_url(db)}
    waiting = invoke("jobs", "bulk-cancel", "--state", "waiting", "--yes", env=env)
    assert (waiting.code, waiting.out) == (
        0,
        "cancelled 1 unfinished job matching state waiting\n",
    )
    held = invoke("jobs", "bulk-cancel", "--state", "held", "--yes", env=env)
    assert held.out == "cancelled 1 unfinished job matching state held\n"
    assert _states(db, ids) == {
        JobState.RUNNING: JobState.RUNNING,
        JobState.WAITING: JobState.CANCELLED,
        JobState.HELD: JobState.CANCELLED,
        JobState.PENDING: JobState.PENDING,
    }


def test_bulk_cancel_without_a_state_cancels_every_unfinished_state_as_the_api_does(
    tmp_path: Path,
) -> None:
    db = tmp_path / "ops.db"
    ids = on_store(db, _one_in_each_unfinished_state)
    env = {"ROTA_DATABASE_URL": sqlite_url(db)}
    cancelled = invoke("jobs", "bulk-cancel", "--yes", env=env)
    assert cancelled.out == (
        "cancelled 4 unfinished jobs matching state held|pending|running|waiting\n"
    )
    assert _states(db, ids) == dict.fromkeys(ids, JobState.CANCELLED)


def test_bulk_cancel_refuses_a_state_it_cannot_cancel_and_changes_nothing(
    tmp_path: Path,
) -> None:
    db = tmp_path / "ops.db"
    ids = on_store(db, _one_in_each_unfinished_state)
    finished = rota(
        "jobs",
        "bulk-cancel",
        "--state",
        "held",
        "--state",
        "succeeded",
        "--yes",
        url=sqlite_url(db),
    )
    assert finished.code == 2
    assert finished.err_lines == [
        "error: --state succeeded: bulk-cancel cannot act on a succeeded job; it is already "
        "finished. It takes held, pending, running, waiting"
    ]
    unknown = rota("jobs", "bulk-cancel", "--state", "paused", "--yes", url=sqlite_url(db))
    assert unknown.code == 2
    assert unknown.err_lines == [
        "error: --state paused: not a job state. bulk-cancel takes held, pending, running, waiting"
    ]
    assert _states(db, ids) == {state: state for state in ids}


def test_bulk_cancel_help_names_every_state_it_can_cancel() -> None:
    shown = invoke("jobs", "bulk-cancel", "--help")
    assert "--state [held|pending|running|waiting]" in shown.out
    words = " ".join(shown.out.split())
    assert "default: waiting, pending, held and running, as the API's bulk cancel" in words
