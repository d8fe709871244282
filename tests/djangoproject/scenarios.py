"""The Django side of tests/integration/test_django.py, run as a process of the project:
``python -m tests.djangoproject.scenarios STEP`` sets Django up, runs one step through Django's
own task API and prints what it saw as JSON on stdout."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Callable
from datetime import timedelta
from functools import partial
from typing import Any

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.djangoproject.settings")

import django

django.setup()

from django.core.management import call_command  # noqa: E402
from django.db import transaction  # noqa: E402
from django.utils import timezone  # noqa: E402

from rota.contrib.django import RotaBackend  # noqa: E402
from tests.djangoproject.notes import tasks  # noqa: E402
from tests.djangoproject.notes.models import Note  # noqa: E402

try:
    from django.tasks import TaskResult, default_task_backend, task_backends
    from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
except ImportError:
    from django_tasks import TaskResult, default_task_backend, task_backends
    from django_tasks.exceptions import InvalidTaskError as InvalidTask
    from django_tasks.exceptions import TaskResultDoesNotExist

STEPS: dict[str, Callable[[], Any]] = {}
#: The longest a step waits for the worker to finish a task.
WAIT_S = 60.0


class Rollback(Exception):
    """Raised inside ``transaction.atomic()`` to roll it back."""


def step(func: Callable[[], Any]) -> Callable[[], Any]:
    STEPS[func.__name__] = func
    return func


def backend() -> RotaBackend:
    backend = task_backends["default"]
    assert isinstance(backend, RotaBackend)
    return backend


def describe(result: TaskResult[Any]) -> dict[str, Any]:
    described: dict[str, Any] = {
        "id": result.id,
        "status": str(result.status),
        "is_finished": result.is_finished,
        "queue": result.task.queue_name,
        "priority": result.task.priority,
        "attempts": result.attempts,
        "worker_ids": result.worker_ids,
        "errors": [
            {"path": error.exception_class_path, "last_line": error.traceback.splitlines()[-1]}
            for error in result.errors
        ],
        "args": result.args,
        "kwargs": result.kwargs,
        "enqueued": result.enqueued_at is not None,
        "started": result.started_at is not None,
        "finished": result.finished_at is not None,
    }
    if result.status == "SUCCESSFUL":
        described["return_value"] = result.return_value
    return described


def wait(result: TaskResult[Any]) -> dict[str, Any]:
    """The result once finished, read back through Django's API (``refresh``)."""
    backend().wait_result(result.id, timeout=WAIT_S)
    result.refresh()
    return describe(result)


@step
def migrate() -> str:
    call_command("migrate", verbosity=0)
    return "migrated"


@step
def roundtrip() -> dict[str, Any]:
    """Each kind of task enqueued through Django's API, then read back once run."""
    enqueued = {
        "add": tasks.add.enqueue(2, b=3),
        "fail": tasks.fail.enqueue("boom"),
        "whoami": tasks.whoami.enqueue("me"),
        "double": tasks.double.enqueue(21),
        "aenqueued": asyncio.run(tasks.add.aenqueue(40, 2)),
    }
    ready = describe(enqueued["add"])
    seen = {name: wait(result) for name, result in enqueued.items()}
    by_task = tasks.add.get_result(enqueued["add"].id)
    by_backend = asyncio.run(default_task_backend.aget_result(enqueued["double"].id))
    return {
        "ready": ready,
        "seen": seen,
        "by_task": describe(by_task),
        "by_backend": describe(by_backend),
    }


@step
def enqueue_ordered() -> dict[str, Any]:
    """Tasks of three priorities and a deferred one, enqueued while no worker runs."""
    later = timezone.now() + timedelta(hours=1)
    return {
        "low": tasks.record.using(priority=-5).enqueue("low").id,
        "high": tasks.record.using(priority=50).enqueue("high").id,
        "middle": tasks.record.enqueue("middle").id,
        "deferred": tasks.add.using(run_after=later).enqueue(1, 1).id,
        "run_after": later.isoformat(),
    }


@step
def ordered() -> dict[str, Any]:
    ids = json.loads(sys.argv[2])
    for name in ("low", "high", "middle"):
        backend().wait_result(ids[name], timeout=WAIT_S)
    deferred = tasks.add.get_result(ids["deferred"])
    job = backend().app.jobs.get_sync(int(ids["deferred"]))
    return {
        "notes": list(Note.objects.order_by("id").values_list("text", flat=True)),
        "high": describe(tasks.record.get_result(ids["high"])),
        "deferred": describe(deferred),
        "deferred_run_at": job.run_at.isoformat(),
    }


@step
def on_commit() -> dict[str, Any]:
    """Django's way for a backend that does not join the transaction: enqueue on commit."""
    enqueued: list[TaskResult[Any]] = []

    def enqueue(text: str) -> None:
        enqueued.append(tasks.count_notes.enqueue(text))

    with transaction.atomic():
        Note.objects.create(text="kept")
        transaction.on_commit(partial(enqueue, "kept"))
        before_commit = len(enqueued)
    try:
        with transaction.atomic():
            Note.objects.create(text="dropped")
            transaction.on_commit(partial(enqueue, "dropped"))
            raise Rollback
    except Rollback:
        pass
    return {"before_commit": before_commit, "enqueued": [wait(result) for result in enqueued]}


@step
def join() -> dict[str, Any]:
    """DATABASE: the job is written on Django's connection, in Django's transaction."""
    with transaction.atomic():
        Note.objects.create(text="joined")
        kept = tasks.count_notes.enqueue("joined")
        try:
            backend().get_result(kept.id)  # on rota's own connection: not committed yet
            seen_before_commit = True
        except TaskResultDoesNotExist:
            seen_before_commit = False
    try:
        with transaction.atomic():
            Note.objects.create(text="rolled back")
            dropped = tasks.count_notes.enqueue("rolled back")
            raise Rollback
    except Rollback:
        pass
    try:
        backend().get_result(dropped.id)
        dropped_exists = True
    except TaskResultDoesNotExist:
        dropped_exists = False
    return {
        "seen_before_commit": seen_before_commit,
        "kept": wait(kept),
        "dropped_exists": dropped_exists,
        "notes": sorted(Note.objects.values_list("text", flat=True)),
    }


@step
def refusals() -> dict[str, Any]:
    """Bad input is refused with Django's errors, before anything is written."""
    outcomes: dict[str, Any] = {}
    try:
        tasks.add.enqueue(object(), 1)
    except TypeError as error:
        outcomes["not_json"] = str(error)
    try:
        tasks.add.using(queue_name="nowhere")
    except InvalidTask as error:
        outcomes["unknown_queue"] = str(error)
    try:
        tasks.add.using(priority=101)
    except InvalidTask as error:
        outcomes["priority"] = str(error)
    for result_id in ("nope", "-1", "999999999", "١٢"):
        try:
            backend().get_result(result_id)
        except TaskResultDoesNotExist:
            outcomes[f"get {result_id}"] = "does not exist"
    # A job rota holds that is no task: its kind names a callable, and is only ever a name.
    hostile = backend().app.enqueue_sync("os.system", {"args": ["id"], "kwargs": {}})
    try:
        backend().get_result(str(hostile.job.id))
    except TaskResultDoesNotExist:
        outcomes["not a task"] = "does not exist"
    outcomes["hostile_id"] = hostile.job.id
    return outcomes


@step
def enqueue_hooks() -> dict[str, Any]:
    """The backend's App honours enqueue hooks registered on it (as a project would in
    ``AppConfig.ready``): the before hook raises the priority and refuses one argument, the
    after hook sees each job written; on PostgreSQL inside Django's own transaction."""
    import dataclasses

    from rota.domain.errors import InvalidInput

    app = backend().app
    seen: list[int] = []

    def before(spec: Any) -> Any:
        if spec.payload["args"] == ["refused"]:
            raise InvalidInput("refused by the project's hook")
        return dataclasses.replace(spec, priority=spec.priority + 7)

    app.before_enqueue(before)
    app.after_enqueue(lambda spec, result: seen.append(result.job.id))
    with transaction.atomic():
        kept = tasks.record.using(priority=3).enqueue("hooked")
    try:
        tasks.record.enqueue("refused")
        refused = "written"
    except InvalidInput as error:
        refused = str(error)
    job = app.jobs.get_sync(int(kept.id))
    return {"id": int(kept.id), "priority": job.priority, "seen": seen, "refused": refused}


if __name__ == "__main__":
    print(json.dumps(STEPS[sys.argv[1]]()))
