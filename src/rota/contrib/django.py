"""rota as a Django Tasks backend (``django.tasks`` in Django 6, the ``django-tasks`` backport
on Django 5.2): ``@task`` functions enqueued with ``.enqueue()`` run on ``rota worker``.

In settings::

    TASKS = {
        "default": {
            "BACKEND": "rota.contrib.django.RotaBackend",
            "QUEUES": ["default", "emails"],
            "OPTIONS": {"DATABASE": "default"},  # or {"DATABASE_URL": "sqlite:///rota.db"}
        }
    }

and run the tasks with ``DJANGO_SETTINGS_MODULE=mysite.settings rota worker --app
rota.contrib.django:app``. OPTIONS:

- ``DATABASE``: a Django database alias on PostgreSQL (psycopg 3) whose database holds rota's
  tables (``rota migrate`` creates them). Enqueueing writes the job on that alias's own
  connection, inside whatever transaction it has open: the job exists exactly when the
  transaction commits.
- ``DATABASE_URL``: rota's database anywhere else (``sqlite:///rota.db``, ``postgresql://...``);
  the job is written at once on rota's own connection. Inside a transaction, enqueue from
  ``transaction.on_commit`` as Django's documentation says.
- ``MAX_ATTEMPTS`` (default 3): how often a task that raises is tried before it is FAILED.
- ``MODULES``: modules that define tasks, besides the ``tasks`` module of each installed app.

A task's kind is its dotted path (``shop.tasks.send_receipt``); its payload ``{"args": [...],
"kwargs": {...}}``; its priority is rota's (-100..100 both; higher runs first); its queue is
``queue_name``; ``run_after`` is ``run_at``. A worker runs only Task objects defined in the
project's own code (the modules above, imported when it starts): a kind is never imported by
name from the job.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import re
import threading
from collections.abc import Callable
from datetime import datetime
from inspect import iscoroutinefunction
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import quote, urlencode

import psycopg
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import close_old_connections, connections
from django.utils import timezone
from django.utils.module_loading import autodiscover_modules

from rota.app import App
from rota.domain.errors import InvalidInput, JobCancelled, JobFailed, JobNotFound, Permanent
from rota.domain.job import DEFAULT_MAX_ATTEMPTS, Attempt, Job
from rota.domain.job_state import JobState, Outcome
from rota.domain.names import MAX_NAME_LENGTH, NAME_PATTERN
from rota.runtime.context import JobContext
from rota.runtime.worker import Worker
from rota.runtime.worker_settings import WorkerSettings
from rota.store import Store

if TYPE_CHECKING:
    from django_tasks import TaskContext, TaskResult, TaskResultStatus, task_backends
    from django_tasks.backends.base import BaseTaskBackend
    from django_tasks.base import Task, TaskError
    from django_tasks.exceptions import InvalidTaskError as InvalidTask
    from django_tasks.exceptions import TaskResultDoesNotExist
    from django_tasks.signals import task_enqueued
    from django_tasks.utils import normalize_json
else:
    try:  # Django 6 and later
        from django.tasks import TaskContext, TaskResult, TaskResultStatus, task_backends
        from django.tasks.backends.base import BaseTaskBackend
        from django.tasks.base import Task, TaskError
        from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
        from django.tasks.signals import task_enqueued
        from django.utils.json import normalize_json
    except ImportError:  # Django 5.2 with the django-tasks backport
        from django_tasks import TaskContext, TaskResult, TaskResultStatus, task_backends
        from django_tasks.backends.base import BaseTaskBackend
        from django_tasks.base import Task, TaskError
        from django_tasks.exceptions import InvalidTaskError as InvalidTask
        from django_tasks.exceptions import TaskResultDoesNotExist
        from django_tasks.signals import task_enqueued
        from django_tasks.utils import normalize_json

__all__ = ["DjangoApp", "RotaBackend", "worker_app"]

OPTION_NAMES = frozenset({"DATABASE", "DATABASE_URL", "MAX_ATTEMPTS", "MODULES"})

#: rota's job states as Django's task statuses: Django has no "cancelled", so a cancelled job
#: is FAILED (its result raises as a failure's does); a job retrying after an error is READY.
STATUS_BY_STATE = {
    JobState.WAITING: TaskResultStatus.READY,
    JobState.PENDING: TaskResultStatus.READY,
    JobState.RUNNING: TaskResultStatus.RUNNING,
    JobState.SUCCEEDED: TaskResultStatus.SUCCESSFUL,
    JobState.DEAD: TaskResultStatus.FAILED,
    JobState.CANCELLED: TaskResultStatus.FAILED,
}

#: Executions that did not count as attempts (rota gave the attempt back).
_NOT_ATTEMPTS = frozenset({Outcome.SNOOZED, Outcome.RELEASED})
_EXCEPTION_NAME = re.compile(r"[A-Za-z_][\w.]*")
#: Connection settings of a Django database's OPTIONS that rota's URL carries over to libpq.
_LIBPQ_OPTIONS = frozenset(
    {
        "application_name",
        "connect_timeout",
        "options",
        "passfile",
        "service",
        "sslcert",
        "sslkey",
        "sslmode",
        "sslrootcert",
        "target_session_attrs",
    }
)


class DjangoApp(App):
    """The App behind a RotaBackend: a worker of it claims from the backend's QUEUES unless
    told otherwise (``rota worker --queues``)."""

    def __init__(self, database_url: str, *, queues: frozenset[str]) -> None:
        super().__init__(database_url)
        self.task_queues = queues

    def worker(
        self, settings: WorkerSettings | None = None, *, store: Store | None = None, **options: Any
    ) -> Worker:
        if settings is None and options.get("queues") is None and self.task_queues:
            options["queues"] = sorted(self.task_queues)
        return super().worker(settings, store=store, **options)


@dataclasses.dataclass
class _Shared:
    """What every thread's instance of one backend shares (Django makes one per thread): the
    App, with its pool and bridge, and the tasks defined so far, by kind."""

    app: DjangoApp
    tasks: dict[str, Task[Any, Any]] = dataclasses.field(default_factory=dict)
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)
    discovered: bool = False
    #: Set once a worker App was asked for: tasks defined later get handlers too.
    serving: bool = False


_shared: dict[tuple[str, str, str | None], _Shared] = {}
_shared_lock = threading.Lock()


class RotaBackend(BaseTaskBackend):
    """A Django Tasks backend storing tasks as rota jobs (the module docstring has the options).

    ``enqueue`` returns a READY TaskResult whose id is the rota job's id (``rota jobs show
    ID``); ``get_result`` reads the job back: status, return value, one TaskError per failed
    attempt (its traceback as recorded), the workers of its attempts. Retries follow rota:
    a task that raises runs again after a backoff (READY, with the error listed) until
    MAX_ATTEMPTS are used, then it is FAILED.
    """

    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        options = {str(key).upper(): value for key, value in self.options.items()}
        unknown = sorted(set(options) - OPTION_NAMES)
        if unknown:
            raise ImproperlyConfigured(
                f"TASKS[{alias!r}] has unknown OPTIONS {', '.join(unknown)}; "
                f"known: {', '.join(sorted(OPTION_NAMES))}"
            )
        database, url = options.get("DATABASE"), options.get("DATABASE_URL")
        if (database is None) == (url is None):
            raise ImproperlyConfigured(
                f"TASKS[{alias!r}] OPTIONS needs exactly one of DATABASE (a Django database "
                "alias on PostgreSQL holding rota's tables) or DATABASE_URL"
            )
        max_attempts = options.get("MAX_ATTEMPTS", DEFAULT_MAX_ATTEMPTS)
        if isinstance(max_attempts, bool) or not isinstance(max_attempts, int):
            raise ImproperlyConfigured(f"TASKS[{alias!r}] MAX_ATTEMPTS must be a whole number")
        modules = options.get("MODULES", ())
        if isinstance(modules, str) or not all(isinstance(name, str) for name in modules):
            raise ImproperlyConfigured(f"TASKS[{alias!r}] MODULES must be a list of module names")
        #: The Django database alias whose connection enqueues join; None with DATABASE_URL.
        self.database: str | None = database
        self.database_url: str = url if url is not None else _database_url(alias, str(database))
        self.max_attempts: int = max_attempts
        self.modules: tuple[str, ...] = tuple(modules)
        self._key = (alias, self.database_url, database)

    # ------------------------------------------------------------------ shared state

    @property
    def _state(self) -> _Shared:
        state = _shared.get(self._key)
        if state is None:
            with _shared_lock:
                state = _shared.get(self._key)
                if state is None:
                    app = DjangoApp(self.database_url, queues=frozenset(self.queues))
                    state = _shared[self._key] = _Shared(app)
        return state

    @property
    def app(self) -> DjangoApp:
        """The rota App this backend enqueues through (one per alias and process)."""
        return self._state.app

    def discover(self) -> dict[str, Task[Any, Any]]:
        """Import the ``tasks`` module of every installed app and the MODULES option (names
        from settings, never from jobs); every Task for this backend they define is then
        known, by kind. Returns them."""
        state = self._state
        if not state.discovered:
            autodiscover_modules("tasks")
            for name in self.modules:
                importlib.import_module(name)
            state.discovered = True
        return dict(state.tasks)

    # ------------------------------------------------------------------ the contract

    def validate_task(self, task: Task[Any, Any]) -> None:
        """Django's checks, plus a dotted path rota accepts as a kind; every valid Task is
        remembered (it is project code: Django validates each Task as it is defined)."""
        super().validate_task(task)
        kind = task.module_path
        if len(kind) > MAX_NAME_LENGTH or not NAME_PATTERN.fullmatch(kind):
            raise InvalidTask(
                f"task path {kind!r} is not a rota kind (at most {MAX_NAME_LENGTH} letters, "
                "digits and _ . : -)"
            )
        state = self._state
        with state.lock:
            known = state.tasks.get(kind)
            if known is None or known.func is not task.func:
                state.tasks[kind] = task
                if state.serving and kind not in state.app.registry:
                    self._register(task)

    def enqueue(self, task: Task[Any, Any], args: Any, kwargs: Any) -> TaskResult[Any]:
        self.validate_task(task)
        # Built first: it turns args and kwargs into JSON (TypeError for what is not).
        result: TaskResult[Any] = TaskResult(
            task=task,
            id="",
            status=_status(JobState.PENDING),
            enqueued_at=None,
            started_at=None,
            last_attempted_at=None,
            finished_at=None,
            args=args,
            kwargs=kwargs,
            backend=self.alias,
            errors=[],
            worker_ids=[],
        )
        options: dict[str, Any] = {
            "queue": task.queue_name,
            "priority": task.priority,
            "max_attempts": self.max_attempts,
            "run_at": _aware(task.run_after),
        }
        payload = {"args": result.args, "kwargs": result.kwargs}
        if self.database is not None:
            enqueued = self.app.enqueue_sync(
                task.module_path, payload, connection=self._connection(), **options
            )
        else:
            enqueued = self.app.enqueue_sync(task.module_path, payload, **options)
        object.__setattr__(result, "id", str(enqueued.job.id))
        object.__setattr__(result, "enqueued_at", enqueued.job.created_at)
        task_enqueued.send(type(self), task_result=result)
        return result

    def _connection(self) -> psycopg.Connection[Any]:
        """The DATABASE alias's own psycopg connection, in whatever transaction it has open."""
        assert self.database is not None
        connection = connections[self.database]
        connection.ensure_connection()
        raw = connection.connection
        if not isinstance(raw, psycopg.Connection):
            raise ImproperlyConfigured(
                f"TASKS[{self.alias!r}] DATABASE {self.database!r} runs on "
                f"{type(raw).__module__}: enqueues join its transaction with psycopg 3 only "
                "(pip install psycopg; Django picks it over psycopg2)"
            )
        return raw

    def get_result(self, result_id: str) -> TaskResult[Any]:
        """The task's result now. TaskResultDoesNotExist for an id that is no job, or a job
        that is not a task of this backend."""
        job_id = _job_id(result_id)
        try:
            job = self.app.jobs.get_sync(job_id)
        except JobNotFound:
            raise TaskResultDoesNotExist(result_id) from None
        task = self._task(job.kind)
        arguments = _arguments(job.payload)
        if task is None or arguments is None:
            raise TaskResultDoesNotExist(f"job {result_id} is not a task of {self.alias!r}")
        return self._result(task, job, arguments, self.app.jobs.attempts_sync(job_id))

    def wait_result(self, result_id: str, *, timeout: float | None = None) -> TaskResult[Any]:
        """Block until the task has finished (rota's ``app.results.get_sync``: woken by a notification
        on PostgreSQL, polled on SQLite) and return its result; rota's ResultTimeout (a
        TimeoutError) after ``timeout`` seconds. Not part of Django's API."""
        job_id = _job_id(result_id)
        try:
            self.app.results.get_sync(job_id, timeout=timeout)
        except (JobFailed, JobCancelled):
            pass
        except JobNotFound:
            raise TaskResultDoesNotExist(result_id) from None
        return self.get_result(result_id)

    # ------------------------------------------------------------------ the worker side

    def worker_app(self) -> DjangoApp:
        """The App with a handler for every task of this backend (discovered first), for
        ``rota worker``; tasks defined later in this process get handlers as they appear."""
        tasks = self.discover()
        state = self._state
        with state.lock:
            state.serving = True
            for kind in sorted(tasks):
                if kind not in state.app.registry:
                    self._register(tasks[kind])
        return state.app

    def _register(self, task: Task[Any, Any]) -> None:
        self.app.registry.register(
            task.module_path,
            _handler(task, self.alias),
            queue=task.queue_name,
            max_attempts=self.max_attempts,
        )

    def _task(self, kind: str) -> Task[Any, Any] | None:
        state = self._state
        if kind not in state.tasks:
            self.discover()
        return state.tasks.get(kind)

    def _result(
        self,
        task: Task[Any, Any],
        job: Job,
        arguments: tuple[list[Any], dict[str, Any]],
        attempts: list[Attempt],
    ) -> TaskResult[Any]:
        counted = [attempt for attempt in attempts if attempt.outcome not in _NOT_ATTEMPTS]
        with contextlib.suppress(InvalidTask):  # the job's queue is no longer in QUEUES
            task = task.using(priority=job.priority, queue_name=job.queue)
        result: TaskResult[Any] = TaskResult(
            task=task,
            id=str(job.id),
            status=_status(job.state),
            enqueued_at=job.created_at,
            started_at=counted[0].started_at if counted else None,
            last_attempted_at=counted[-1].started_at if counted else None,
            finished_at=job.finished_at if job.is_terminal else None,
            args=arguments[0],
            kwargs=arguments[1],
            backend=self.alias,
            errors=[_error(attempt) for attempt in counted if attempt.outcome is Outcome.FAILED],
            worker_ids=[attempt.worker or "" for attempt in counted],
        )
        if job.state is JobState.SUCCEEDED:
            object.__setattr__(result, "_return_value", job.result)
        return result


def worker_app(alias: str = "default") -> DjangoApp:
    """Set Django up (DJANGO_SETTINGS_MODULE) and return the App running the tasks of the
    RotaBackend configured as ``TASKS[alias]``. InvalidInput saying what is wrong otherwise."""
    import django

    try:
        django.setup()
        backend = task_backends[alias]
    except Exception as error:  # settings missing or broken: one line for the CLI
        raise InvalidInput(f"cannot set Django up for rota: {error}") from None
    if not isinstance(backend, RotaBackend):
        raise InvalidInput(
            f"TASKS[{alias!r}] uses {type(backend).__name__}, not rota.contrib.django.RotaBackend"
        )
    return backend.worker_app()


def __getattr__(name: str) -> Any:
    """``rota.contrib.django:app``, for ``rota worker --app``: the default alias's worker App."""
    if name == "app":
        return worker_app()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# ---------------------------------------------------------------------- executing a task


def _handler(task: Task[Any, Any], alias: str) -> Callable[[JobContext, Any], Any]:
    """The rota handler running ``task``: its coroutine on the worker's loop, a plain function
    in the worker's threads with Django's stale connections closed around it (as Django does
    around a request). The return value is stored as the job's result, as JSON."""
    func = task.func

    def call_arguments(ctx: JobContext, payload: Any) -> tuple[list[Any], dict[str, Any]]:
        arguments = _arguments(payload)
        if arguments is None:
            raise Permanent("the payload is not a task's {args: [...], kwargs: {...}}")
        args, kwargs = arguments
        if task.takes_context:
            return [_context(task, ctx, alias, args, kwargs), *args], kwargs
        return args, kwargs

    if iscoroutinefunction(func):

        async def run_async(ctx: JobContext, payload: Any) -> Any:
            args, kwargs = call_arguments(ctx, payload)
            return normalize_json(await func(*args, **kwargs))

        return run_async

    def run(ctx: JobContext, payload: Any) -> Any:
        args, kwargs = call_arguments(ctx, payload)
        close_old_connections()
        try:
            return normalize_json(func(*args, **kwargs))
        finally:
            close_old_connections()

    return run


def _context(
    task: Task[Any, Any], ctx: JobContext, alias: str, args: list[Any], kwargs: dict[str, Any]
) -> TaskContext:
    """Django's TaskContext for the running attempt: its ``attempt`` is rota's attempt number
    (``task_result.worker_ids`` has one entry per attempt, this worker's name in each)."""
    job = ctx.job
    result: TaskResult[Any] = TaskResult(
        task=task,
        id=str(job.id),
        status=_status(JobState.RUNNING),
        enqueued_at=job.created_at,
        started_at=job.started_at,
        last_attempted_at=job.started_at,
        finished_at=None,
        args=args,
        kwargs=kwargs,
        backend=alias,
        errors=[],
        worker_ids=[ctx.worker] * job.attempt,
    )
    return TaskContext(task_result=result)


# ---------------------------------------------------------------------- helpers


def _status(state: JobState) -> TaskResultStatus:
    # Django's TextChoices members, which mypy (without Django's stubs) takes for tuples.
    return cast(TaskResultStatus, STATUS_BY_STATE[state])


def _arguments(payload: Any) -> tuple[list[Any], dict[str, Any]] | None:
    """A task job's payload as (args, kwargs); None for any other payload."""
    if not isinstance(payload, dict) or set(payload) != {"args", "kwargs"}:
        return None
    args, kwargs = payload["args"], payload["kwargs"]
    if not isinstance(args, list) or not isinstance(kwargs, dict):
        return None
    return args, kwargs


def _job_id(result_id: str) -> int:
    text = str(result_id)
    if not text.isascii() or not text.isdigit() or len(text) > 19 or int(text) <= 0:
        raise TaskResultDoesNotExist(result_id)
    return int(text)


def _error(attempt: Attempt) -> TaskError:
    """One failed attempt as Django's TaskError: the exception's dotted path is read from the
    last line of the recorded traceback (builtins have no module there)."""
    text = attempt.traceback or attempt.error or ""
    lines = [line for line in text.splitlines() if line.strip()]
    name = lines[-1].split(":", 1)[0].strip() if lines else ""
    if not _EXCEPTION_NAME.fullmatch(name):
        name = "Exception"
    path = name if "." in name else f"builtins.{name}"
    return TaskError(exception_class_path=path, traceback=text)


def _aware(run_after: datetime | None) -> datetime | None:
    """``run_after`` as an aware instant (naive ones, with USE_TZ off, are in TIME_ZONE)."""
    if run_after is None or timezone.is_aware(run_after):
        return run_after
    return cast(datetime, timezone.make_aware(run_after, timezone.get_default_timezone()))


def _database_url(alias: str, database: str) -> str:
    """rota's URL for the Django database ``database``, which must be PostgreSQL."""
    databases = settings.DATABASES
    if database not in databases:
        raise ImproperlyConfigured(f"TASKS[{alias!r}] DATABASE {database!r} is not in DATABASES")
    config = databases[database]
    if "postgresql" not in str(config.get("ENGINE", "")):
        raise ImproperlyConfigured(
            f"TASKS[{alias!r}] DATABASE {database!r} is not PostgreSQL: enqueues can join "
            "only a PostgreSQL transaction; give DATABASE_URL for rota's own database instead"
        )
    user = quote(str(config.get("USER") or ""), safe="")
    password = quote(str(config.get("PASSWORD") or ""), safe="")
    credentials = f"{user}:{password}@" if password else (f"{user}@" if user else "")
    host = str(config.get("HOST") or "")
    host = f"[{host}]" if ":" in host else quote(host, safe="")
    port = f":{config['PORT']}" if config.get("PORT") else ""
    name = quote(str(config.get("NAME") or ""), safe="")
    extra = {
        key: value
        for key, value in (config.get("OPTIONS") or {}).items()
        if key in _LIBPQ_OPTIONS and isinstance(value, str | int)
    }
    query = f"?{urlencode(extra)}" if extra else ""
    return f"postgresql://{credentials}{host}{port}/{name}{query}"
