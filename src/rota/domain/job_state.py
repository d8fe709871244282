"""The job: its states, what a caller asks for (JobSpec), and what the store holds (Job).

A job moves through one state machine (docs/architecture.md draws it)::

    waiting ──every parent succeeded (or ended, on_parent_failure="run")──> pending
       │  └──a parent ended dead or cancelled──> cancelled ──that parent retried──> waiting
    pending ──claim──> running ──success──> succeeded
       ^  ^               │  ├──error, attempts left──> pending (run_at = now + backoff)
       │  │               │  ├──permanent error / last attempt──> dead
       │  └──snooze / release / lease expired (see rota.domain.blame)──┘
       │                  └──lease expired on the last attempt, running alone──> dead
       └──retry── dead, cancelled <──cancel── waiting, pending, running
    pending ──expires_at passed──> cancelled ("expired")      succeeded ──rerun──> pending
    waiting, pending ──hold──> held ──release──> waiting (parents left) or pending
    held ──cancel──> cancelled

A held job is never claimed, expired or ended for want of a worker, and never pruned or
purged: it waits for an operator's release. It keeps its unique key (it is active), its
run_at (released, it is due at its time) and its count of parents left: a parent that
succeeds counts it down, one that ends dead or cancelled on a "cancel" edge cancels it as it
cancels a waiting job (docs/concepts/hold.md).
"""

from __future__ import annotations

from enum import StrEnum


class JobState(StrEnum):
    """Where a job is in its life. The same strings are used in SQL, JSON and metrics."""

    #: has parents that have not all succeeded (rota.domain.workflow); never claimed
    WAITING = "waiting"
    PENDING = "pending"  #: claimable once run_at <= now
    RUNNING = "running"  #: leased to a worker until lease_until
    SUCCEEDED = "succeeded"  #: terminal: the handler returned
    #: terminal: attempts used up, permanent error, or its worker died on its last attempt
    #: while it ran alone (rota.domain.blame)
    DEAD = "dead"
    CANCELLED = "cancelled"  #: terminal: cancelled before it could finish
    #: put aside by an operator (``hold``) from waiting or pending; never claimed until
    #: released, then waiting again if parents are left, else pending
    HELD = "held"

    @property
    def is_terminal(self) -> bool:
        return self in _TERMINAL

    @property
    def is_active(self) -> bool:
        return self in (JobState.WAITING, JobState.PENDING, JobState.RUNNING, JobState.HELD)


_TERMINAL = frozenset({JobState.SUCCEEDED, JobState.DEAD, JobState.CANCELLED})
#: The states a job's unique key is always held in (a held job keeps its key).
ACTIVE_STATES = frozenset({JobState.PENDING, JobState.RUNNING, JobState.HELD})
#: The states a unique key is held in when ``unique_for`` is given without ``unique_states``.
HELD_BY_DEFAULT = ACTIVE_STATES | {JobState.SUCCEEDED}
#: One bit per state, for the stores' ``unique_states`` column.
STATE_BITS = {
    JobState.PENDING: 1,
    JobState.RUNNING: 2,
    JobState.SUCCEEDED: 4,
    JobState.DEAD: 8,
    JobState.CANCELLED: 16,
    # Named for completeness: a workflow job (the only kind that waits) holds no unique key.
    JobState.WAITING: 32,
    JobState.HELD: 64,
}


#: SQL for the bit of the row's ``state`` (a constant of ours, spliced into statements).
STATE_BIT_SQL = (
    "(CASE state WHEN 'pending' THEN 1 WHEN 'running' THEN 2 WHEN 'succeeded' THEN 4 "
    "WHEN 'dead' THEN 8 WHEN 'cancelled' THEN 16 WHEN 'waiting' THEN 32 WHEN 'held' THEN 64 "
    "ELSE 0 END)"
)


def state_mask(states: frozenset[JobState]) -> int:
    return sum(STATE_BITS[state] for state in states)


def mask_states(mask: int) -> frozenset[JobState]:
    return frozenset(state for state, bit in STATE_BITS.items() if mask & bit)


#: Finished states: what a purge deletes.
FINISHED_STATES = _TERMINAL
#: States from which a manual retry is allowed.
RETRYABLE_STATES = frozenset({JobState.DEAD, JobState.CANCELLED})
#: States an operator may hold a job in (``hold``): it has not started.
HOLDABLE_STATES = frozenset({JobState.WAITING, JobState.PENDING})
#: Every state a job has not ended in: what cancel accepts.
UNFINISHED_STATES = frozenset(JobState) - _TERMINAL


class Outcome(StrEnum):
    """How one attempt ended."""

    RUNNING = "running"  #: not ended yet
    SUCCEEDED = "succeeded"
    FAILED = "failed"  #: the handler raised; the job retried or went dead
    SNOOZED = "snoozed"  #: the handler asked to run later; the attempt was given back
    RELEASED = "released"  #: the worker shut down and handed the job back
    LEASE_EXPIRED = "lease_expired"  #: the worker went silent past its lease
    SLEPT = "slept"  #: the handler began a durable sleep; the attempt was given back
    WAITED = "waited"  #: the handler began waiting for a signal; the attempt was given back
    CANCELLED = "cancelled"


#: The last_error of a job cancelled because it expired before it could start.
EXPIRED = "expired"


#: The last_error of a job ended because no live worker runs its kind (``unrunnable``).
UNRUNNABLE = "no live worker runs kind '{kind}': ended after waiting for one"


def unrunnable(kind: str) -> str:
    """The last error of a job ended because no live worker runs its kind."""
    return UNRUNNABLE.replace("{kind}", kind)


#: A job whose worker died this often while running it runs alone from then on.
ALONE_AFTER_CRASHES = 2


def runs_alone(crashes: int, attempt: int, max_attempts: int) -> bool:
    """Whether attempt ``attempt`` of a job with ``crashes`` runs alone: a crash suspect's
    last attempt, and every attempt once its worker died ``ALONE_AFTER_CRASHES`` times."""
    return crashes >= ALONE_AFTER_CRASHES or (crashes > 0 and attempt >= max_attempts)
