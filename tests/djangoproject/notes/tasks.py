"""The project's tasks: plain, failing, with context, async, and ones that touch the ORM."""

from __future__ import annotations

from typing import Any

try:
    from django.tasks import TaskContext, task
except ImportError:
    from django_tasks import TaskContext, task

from tests.djangoproject.notes.models import Note


@task
def add(a: int, b: int) -> int:
    return a + b


@task
def fail(message: str) -> None:
    raise ValueError(message)


@task(takes_context=True)
def whoami(context: TaskContext, label: str) -> dict[str, Any]:
    return {"id": context.task_result.id, "attempt": context.attempt, "label": label}


@task
async def double(number: int) -> int:
    return number * 2


@task(queue_name="emails")
def record(text: str) -> int:
    """Write a note: the notes' ids show the order the tasks ran in."""
    return Note.objects.create(text=text).id


@task
def count_notes(text: str) -> int:
    """How many notes with this text the worker sees (committed ones only)."""
    return Note.objects.filter(text=text).count()
