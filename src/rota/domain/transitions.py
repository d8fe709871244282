"""The job state machine as one table: which verb moves a job from which states to which.

Every store consults it: the reference store checks ``MOVES[verb].sources`` before it writes,
and the SQL stores splice ``in_list(MOVES[verb].sources)`` into the statements that must name
the states themselves (a conditional ``UPDATE ... WHERE state IN (...)``), so that the SQL and
the Python cannot drift apart. A unit test drives every store verb against the table
(tests/unit/test_transitions.py); docs/decisions/0007-one-transition-table.md says why.

A verb's targets are the states it may lead to; which one is the job's own business (a
failed attempt retries or goes dead, a released job waits again if parents are left).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from rota.domain.job_state import JobState

_W, _P, _R, _H = JobState.WAITING, JobState.PENDING, JobState.RUNNING, JobState.HELD
_S, _D, _C = JobState.SUCCEEDED, JobState.DEAD, JobState.CANCELLED


@dataclass(frozen=True, slots=True)
class Move:
    """One verb of the state machine: the states it accepts, the states it leads to (empty:
    the job is removed), and what a refusal says after "job N is <state>; "."""

    sources: frozenset[JobState]
    targets: frozenset[JobState]
    refusal: str


def _move(sources: Iterable[JobState], targets: Iterable[JobState], refusal: str) -> Move:
    return Move(frozenset(sources), frozenset(targets), refusal)


MOVES: Mapping[str, Move] = MappingProxyType(
    {
        # The runtime's verbs, after a claim fenced on the lease token besides.
        "claim": _move({_P}, {_R}, "only pending jobs are claimed"),
        "complete": _move({_R}, {_S}, "only running jobs complete"),
        "fail": _move({_R}, {_P, _D}, "only running jobs fail"),
        "give_back": _move({_R}, {_P}, "only running jobs are given back"),
        "rescue": _move({_R}, {_P, _D}, "only running jobs are rescued"),
        "expire": _move({_P}, {_C}, "only pending jobs expire"),
        "end_unrunnable": _move({_P}, {_D}, "only pending jobs end unrunnable"),
        # Workflows: what a parent's end does to a child (rota.domain.workflow).
        "parent_succeeded": _move({_W}, {_P}, "only waiting jobs start on their parents"),
        "parent_failed": _move({_W, _H}, {_C}, "only waiting or held jobs wait on parents"),
        "parent_retried": _move({_C}, {_W}, "only cancelled jobs are re-armed"),
        # The operator's verbs.
        "retry": _move({_D, _C}, {_W, _P}, "only dead or cancelled jobs retry"),
        "rerun": _move({_S}, {_P}, "only succeeded jobs re-run"),
        "cancel": _move({_W, _P, _H, _R}, {_C}, "it is already finished"),
        "reschedule": _move({_P}, {_P}, "only pending jobs can be edited"),
        "hold": _move(
            {_W, _P}, {_H}, "only waiting or pending jobs can be held (cancel a running one)"
        ),
        "release_held": _move({_H}, {_W, _P}, "only held jobs can be released"),
        "delete": _move({_W, _P, _H, _S, _D, _C}, (), "a running job cannot be deleted"),
        "purge": _move({_S, _D, _C}, (), "only finished jobs are purged"),
    }
)


def refusal(job_id: int, state: JobState | str, verb: str) -> str:
    """What a StateConflict says when ``verb`` meets a job in ``state``."""
    return f"job {job_id} is {JobState(state).value}; {MOVES[verb].refusal}"


def released_state(waiting_on: int) -> JobState:
    """Where a held job goes when released: waiting while parents are left, else pending."""
    return _W if waiting_on > 0 else _P


#: The states a parent's failure on a "cancel" edge cancels: the child has not started.
HELD_BACK = MOVES["parent_failed"].sources


def accepts(verb: str, column: str = "state") -> str:
    """The SQL condition that ``column`` is a state ``verb`` accepts: ``state = 'pending'``
    for one state (the form a partial index's condition is matched in), else ``state IN
    (...)``; constants of ours, spliced into statements."""
    sources = MOVES[verb].sources
    if len(sources) == 1:
        [state] = sources
        return f"{column} = '{state.value}'"
    return f"{column} IN ({in_list(sources)})"


def in_list(states: Iterable[JobState]) -> str:
    """``states`` as the inside of an SQL ``IN (...)``, in JobState's order: constants of ours
    spliced into statements (``'waiting', 'pending'``)."""
    chosen = set(states)
    return ", ".join(f"'{state.value}'" for state in JobState if state in chosen)
