"""rota as a Django Tasks backend, on a real Django project (tests/djangoproject) whose tasks
run on a real `rota worker --app rota.contrib.django:app`, on SQLite and on PostgreSQL (where
enqueues join Django's own transaction). Each Django step runs as a process of the project
(tests/djangoproject/scenarios.py) and reports what Django's task API showed it."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from rota.domain.job_state import JobState
from rota.store import JobFilter, Store, open_store
from tests.support.processes import REPO_ROOT, Fleet, WorkerOptions, eventually

pytestmark = pytest.mark.slow

TASKS = "tests.djangoproject.notes.tasks"


@dataclass
class Project:
    """The Django project on one pair of databases, and the rota workers that run its tasks."""

    env: dict[str, str]
    rota_url: str
    store: Store
    fleet: Fleet

    def step(self, name: str, *arguments: Any) -> Any:
        completed = subprocess.run(
            [
                sys.executable,
                "-m",
                "tests.djangoproject.scenarios",
                name,
                *map(json.dumps, arguments),
            ],
            cwd=REPO_ROOT,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert completed.returncode == 0, (
            f"step {name} failed:\n{completed.stderr}\nworkers:\n{self.fleet.logs(tail=40)}"
        )
        return json.loads(completed.stdout)

    async def start_worker(self) -> None:
        await self.fleet.start_ready("django-worker", app="rota.contrib.django:app", env=self.env)


@dataclass(frozen=True)
class Databases:
    django: str  #: Django's database, as the project's settings read it
    rota: str  #: rota's database
    tasks: str  #: the backend's option: rota's URL, or "join" (DATABASE, Django's connection)


def sqlite_databases(tmp_path: Path) -> Databases:
    rota = f"sqlite:///{tmp_path / 'rota.db'}"
    return Databases(f"sqlite:///{tmp_path / 'django.sqlite3'}", rota, rota)


def postgres_databases(pg_url: str) -> Databases:
    # One PostgreSQL database holds Django's tables and rota's (already migrated), and the
    # backend's DATABASE option joins Django's connection.
    return Databases(pg_url, pg_url, "join")


@contextlib.asynccontextmanager
async def django_project(databases: Databases, tmp_path: Path) -> AsyncIterator[Project]:
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.djangoproject.settings",
        "DJANGOPROJECT_DB": databases.django,
        "DJANGOPROJECT_ROTA": databases.tasks,
        "PYTHONPATH": os.pathsep.join([str(REPO_ROOT / "src"), str(REPO_ROOT)]),
    }
    store = open_store(databases.rota)
    await store.migrate()
    fleet = Fleet(databases.rota, store, tmp_path, WorkerOptions(concurrency=1))
    project = Project(env, databases.rota, store, fleet)
    try:
        project.step("migrate")
        yield project
    finally:
        await fleet.stop()
        fleet.close()
        await store.close()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def databases(request: pytest.FixtureRequest, tmp_path: Path) -> Databases:
    if request.param == "sqlite":
        return sqlite_databases(tmp_path)
    return postgres_databases(str(request.getfixturevalue("pg_url")))


@pytest.fixture
async def project(databases: Databases, tmp_path: Path) -> AsyncIterator[Project]:
    async with django_project(databases, tmp_path) as project:
        yield project


@pytest.fixture
async def pg_project(pg_url: str, tmp_path: Path) -> AsyncIterator[Project]:
    async with django_project(postgres_databases(pg_url), tmp_path) as project:
        yield project


async def test_tasks_enqueued_through_django_run_on_a_rota_worker_with_their_results(
    project: Project,
) -> None:
    await project.start_worker()
    outcome = project.step("roundtrip")

    assert outcome["ready"]["status"] == "READY" and outcome["ready"]["enqueued"]
    seen = outcome["seen"]
    add = seen["add"]
    assert add["status"] == "SUCCESSFUL" and add["return_value"] == 5
    assert add["args"] == [2] and add["kwargs"] == {"b": 3}
    assert add["attempts"] == 1 and add["worker_ids"] == ["django-worker"]
    assert add["started"] and add["finished"] and add["errors"] == []
    # MAX_ATTEMPTS=2: it ran twice, and each failure is in the errors Django shows.
    fail = seen["fail"]
    assert fail["status"] == "FAILED" and fail["is_finished"] and fail["attempts"] == 2
    assert [error["path"] for error in fail["errors"]] == ["builtins.ValueError"] * 2
    assert fail["errors"][0]["last_line"] == "ValueError: boom"
    assert seen["whoami"]["return_value"] == {
        "id": seen["whoami"]["id"],
        "attempt": 1,
        "label": "me",
    }
    assert seen["double"]["return_value"] == 42
    assert seen["aenqueued"]["return_value"] == 42
    assert outcome["by_task"] == add
    assert outcome["by_backend"] == seen["double"]

    job = await project.store.get(int(add["id"]))
    assert job.kind == f"{TASKS}.add" and job.payload == {"args": [2], "kwargs": {"b": 3}}


async def test_priorities_queues_and_run_after_reach_rota(project: Project) -> None:
    ids = project.step("enqueue_ordered")
    await project.start_worker()  # one slot: it runs the due tasks one at a time, in order
    outcome = project.step("ordered", ids)

    assert outcome["notes"] == ["high", "middle", "low"]
    assert outcome["high"]["queue"] == "emails" and outcome["high"]["priority"] == 50
    job = await project.store.get(int(ids["high"]))
    assert (job.queue, job.priority) == ("emails", 50)
    assert outcome["deferred"]["status"] == "READY" and not outcome["deferred"]["started"]
    assert datetime.fromisoformat(outcome["deferred_run_at"]) == datetime.fromisoformat(
        ids["run_after"]
    )


async def test_a_task_enqueued_on_commit_exists_only_once_its_transaction_commits(
    project: Project,
) -> None:
    await project.start_worker()
    outcome = project.step("on_commit")

    assert outcome["before_commit"] == 0
    [kept] = outcome["enqueued"]
    assert kept["args"] == ["kept"] and kept["return_value"] == 1  # the worker saw the note
    page = await project.store.list_jobs(JobFilter(), limit=10)
    assert [job.payload["args"] for job in page.jobs] == [["kept"]]


@pytest.mark.postgres
async def test_on_postgresql_an_enqueue_joins_djangos_own_transaction(
    pg_project: Project,
) -> None:
    await pg_project.start_worker()
    outcome = pg_project.step("join")

    # Written on Django's connection: invisible to any other until Django commits...
    assert outcome["seen_before_commit"] is False
    # ...then run, by a worker that sees the note committed with it.
    assert outcome["kept"]["status"] == "SUCCESSFUL" and outcome["kept"]["return_value"] == 1
    # Rolled back with Django's transaction: neither the note nor the job exists.
    assert outcome["dropped_exists"] is False
    assert outcome["notes"] == ["joined"]
    page = await pg_project.store.list_jobs(JobFilter(), limit=10)
    assert [job.payload["args"] for job in page.jobs] == [["joined"]]


async def test_bad_input_is_refused_and_a_job_that_is_no_task_never_runs(
    project: Project,
) -> None:
    await project.start_worker()
    outcome = project.step("refusals")

    assert "Unsupported type" in outcome["not_json"]
    assert "nowhere" in outcome["unknown_queue"]
    assert "priority" in outcome["priority"]
    for result_id in ("nope", "-1", "999999999", "١٢"):
        assert outcome[f"get {result_id}"] == "does not exist"
    assert outcome["not a task"] == "does not exist"

    # The worker registered the kinds it runs (the project's tasks): the job that is no task
    # is left pending for a worker that could run it, and, since none can, the rescuer's pass
    # ends it dead (here with no grace, at once).
    async def registered() -> bool:
        return any(info.kinds for info in await project.store.list_workers())

    await eventually(registered, what="the worker to register its kinds")
    left = await project.store.get(outcome["hostile_id"])
    assert (left.state, left.attempt) == (JobState.PENDING, 0)
    ended = await project.store.end_unrunnable(
        grace=timedelta(0), alive_within=timedelta(minutes=5)
    )
    assert ended == [outcome["hostile_id"]]
    job = await project.store.get(outcome["hostile_id"])
    assert job.state is JobState.DEAD and "os.system" in (job.last_error or "")
    page = await project.store.list_jobs(JobFilter(), limit=10)
    assert [job.kind for job in page.jobs] == ["os.system"]  # the refused enqueues wrote nothing


async def test_enqueue_hooks_registered_on_the_backends_app_run_on_each_enqueue(
    project: Project,
) -> None:
    outcome = project.step("enqueue_hooks")

    assert outcome["priority"] == 10, "the before hook raised the task's priority of 3"
    assert outcome["seen"] == [outcome["id"]], "the after hook saw the job written"
    assert outcome["refused"] == "refused by the project's hook"
    page = await project.store.list_jobs(JobFilter(), limit=10)
    assert [job.id for job in page.jobs] == [outcome["id"]], "the refused task wrote nothing"
