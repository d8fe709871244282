"""The exception tree: every error rota raises, and the two signals handlers raise.

::

    RotaError
    ├── InvalidInput (also ValueError)      bad input; nothing was written
    │   ├── InvalidJob                       a JobSpec field is wrong (``.field`` names it)
    │   ├── InvalidSchedule                  a schedule definition is wrong
    │   └── InvalidCursor                    a list cursor was not one we issued
    ├── NotFound (also LookupError)
    │   ├── JobNotFound
    │   ├── ScheduleNotFound
    │   ├── WorkflowNotFound
    │   └── ParentNotFound (also InvalidJob)  a job names a parent that does not exist
    ├── StateConflict                        the verb does not apply in the job's state
    │   └── JobRunning                       a worker holds the job (delete, edit): cancel first
    ├── JobFailed                            awaited job ended dead (``.error``: its last error)
    ├── JobCancelled                         awaited job was cancelled
    ├── ResultTimeout (also TimeoutError)    awaited job did not finish in time; it carries on
    ├── WaitTimeout (also TimeoutError)      ``ctx.wait_for``'s deadline passed with no signal
    ├── LeaseLost                            a fenced write found another token (or none)
    ├── StoreUnavailable                     the store cannot be reached right now
    │   └── ConnectionFailed                 no connection could be made; says why in one line
    └── MigrationsPending                    the schema is older than this code

    Permanent (Exception)     raised by a handler: fail now, no retry
    └── StepFailed            raised by ``ctx.step``: a step used up its own max_attempts
    Snooze (Exception)        raised by a handler: run again after a delay, attempt given back
    Abandon (Exception)       raised by a handler: act as if its worker died (demos, tests)

``Permanent``, ``Snooze`` and ``Abandon`` are not ``RotaError``: they travel from user code to the worker and
never out of rota.
"""

from __future__ import annotations

from datetime import timedelta

from rota.domain.wording import counted, plural


class RotaError(Exception):
    """Base of every error rota raises."""


class InvalidInput(RotaError, ValueError):
    """Input was rejected before anything was written."""


class InvalidJob(InvalidInput):
    """A job specification is invalid; ``field`` names the offending field."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.reason = message


class InvalidSchedule(InvalidInput):
    """A schedule definition is invalid; ``field`` names the offending field."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.reason = message


class InvalidCursor(InvalidInput):
    """A pagination cursor was malformed or not issued by rota."""


class NotFound(RotaError, LookupError):
    """The named thing does not exist."""


class JobNotFound(NotFound):
    """No job has this id."""

    def __init__(self, job_id: int) -> None:
        super().__init__(f"job {job_id} not found")
        self.job_id = job_id


class WorkflowNotFound(NotFound):
    """No job belongs to a workflow with this id."""

    def __init__(self, workflow_id: int) -> None:
        super().__init__(f"workflow {workflow_id} not found")
        self.workflow_id = workflow_id


class ParentNotFound(NotFound, InvalidJob):
    """A job's ``depends_on`` names a job that does not exist; nothing was written. An
    InvalidJob of the field ``depends_on`` too, so callers checking input catch it."""

    def __init__(self, job_id: int) -> None:
        InvalidJob.__init__(self, "depends_on", f"unknown parent job {job_id}")
        self.job_id = job_id


class ScheduleNotFound(NotFound):
    """No schedule has this name."""

    def __init__(self, name: str) -> None:
        super().__init__(f"schedule {name!r} not found")
        self.name = name


class StateConflict(RotaError):
    """The operation does not apply to the job in its current state (e.g. retrying a pending job)."""


class JobFailed(RotaError):
    """A job whose result was awaited ended dead: ``error`` is its last error (None if it
    recorded none), ``job`` the job as it ended."""

    def __init__(self, job_id: int, error: str | None, job: object = None) -> None:
        super().__init__(f"job {job_id} failed: {error or 'no error recorded'}")
        self.job_id = job_id
        self.error = error
        self.job = job


class JobCancelled(RotaError):
    """A job whose result was awaited was cancelled before it could finish; ``job`` is the
    job as it ended."""

    def __init__(self, job_id: int, job: object = None) -> None:
        super().__init__(f"job {job_id} was cancelled")
        self.job_id = job_id
        self.job = job


class ResultTimeout(RotaError, TimeoutError):
    """A job whose result was awaited had not finished when the wait's timeout passed; the
    job itself carries on (``job_ids``: those still unfinished)."""

    def __init__(self, job_ids: list[int], timeout_s: float) -> None:
        listed = ", ".join(str(job_id) for job_id in job_ids[:10])
        more = f" and {len(job_ids) - 10} more" if len(job_ids) > 10 else ""
        jobs = plural("job", len(job_ids))
        super().__init__(f"{jobs} {listed}{more} not finished after {timeout_s:g}s")
        self.job_ids = job_ids
        self.timeout_s = timeout_s


class JobRunning(StateConflict):
    """The job is running (claimed by a worker): it cannot be deleted or edited now, and an
    edit fenced against a concurrent claim reports that claim with this error. Cancel first."""

    def __init__(self, job_id: int, verb: str) -> None:
        super().__init__(f"job {job_id} is running: cannot {verb} it (cancel it first)")
        self.job_id = job_id


class LeaseLost(RotaError):
    """A fenced write was rejected: the job is no longer running under this lease's token.

    Raised, never swallowed: the caller must stop working on the job and report nothing.
    """

    def __init__(self, job_id: int, token: int) -> None:
        super().__init__(f"lease lost: job {job_id} is no longer held with token {token}")
        self.job_id = job_id
        self.token = token


class WaitTimeout(RotaError, TimeoutError):
    """``ctx.wait_for(key, timeout=...)`` reached its deadline before a signal came. Raised in
    the handler, which may catch it; every later run of the job raises it again at that wait
    (the timeout is recorded like a step's result)."""

    def __init__(self, key: str, name: str) -> None:
        super().__init__(f"no signal for {key!r} came before the deadline of wait {name!r}")
        self.key = key
        self.name = name


class StoreUnavailable(RotaError):
    """The store could not be reached; the operation may be retried later."""


class ConnectionFailed(StoreUnavailable):
    """No connection to the database could be made. The message says why in one line
    ("connection refused at host:port", "database "x" does not exist", an authentication or
    SSL failure) and never holds a password.

    ``permanent`` is True when waiting cannot help (a wrong database, role, password or
    setting): those are raised at once, while a refused connection, which a restart also
    causes, is retried for a while first. ``address`` is the server's ``host:port``.
    """

    def __init__(self, message: str, *, address: str, permanent: bool) -> None:
        super().__init__(message)
        self.address = address
        self.permanent = permanent


class MigrationsPending(RotaError):
    """The database schema is behind this version of rota; run `rota migrate`."""


class Permanent(Exception):
    """Raise from a handler when retrying cannot help: the job goes dead at once."""


class StepFailed(Permanent):
    """Raised by ``ctx.step`` when a step with its own ``max_attempts`` failed for the last
    time: the job goes dead unless the handler catches it. ``__cause__`` is the step's last
    error."""

    def __init__(self, name: str, attempts: int, error: str) -> None:
        super().__init__(f"step {name!r} failed {counted(attempts, 'time')}; last error: {error}")
        self.name = name
        self.attempts = attempts


class Snooze(Exception):
    """Raise from a handler to run the job again after ``delay``; the attempt is given back."""

    def __init__(self, delay: timedelta | float) -> None:
        self.delay = delay if isinstance(delay, timedelta) else timedelta(seconds=delay)
        if self.delay < timedelta(0):
            raise InvalidInput("Snooze delay must not be negative")
        super().__init__(f"snoozed for {self.delay.total_seconds():g}s")


class Abandon(Exception):
    """Raise from a handler to simulate its worker dying mid-job (for demos and tests).

    The worker stops heartbeating the job, reports nothing and claims nothing for one lease,
    as if its process had been killed and restarted: the lease expires and another worker
    takes the job over as the next attempt.
    """
