"""The one transition table (rota.domain.transitions): its SQL forms, its refusals, and the
state machine it draws. Every store verb is driven against it in
tests/contract/test_transitions.py."""

from __future__ import annotations

from rota.domain.job_state import FINISHED_STATES, HOLDABLE_STATES, RETRYABLE_STATES, JobState
from rota.domain.transitions import MOVES, accepts, in_list, refusal, released_state
from rota.store.postgres.queries import queries


def test_the_sql_forms_name_the_tables_states_in_jobstate_order() -> None:
    assert accepts("reschedule") == "state = 'pending'"
    assert accepts("hold", "j.state") == "j.state IN ('waiting', 'pending')"
    assert in_list({JobState.CANCELLED, JobState.DEAD}) == "'dead', 'cancelled'"
    assert accepts("cancel") == "state IN ('waiting', 'pending', 'running', 'held')"


def test_the_named_state_sets_are_the_tables() -> None:
    assert MOVES["retry"].sources == RETRYABLE_STATES
    assert MOVES["purge"].sources == FINISHED_STATES
    assert MOVES["hold"].sources == HOLDABLE_STATES
    assert MOVES["delete"].sources == frozenset(JobState) - {JobState.RUNNING}


def test_a_refusal_names_the_state_and_what_the_verb_takes() -> None:
    assert refusal(7, JobState.RUNNING, "hold") == (
        "job 7 is running; only waiting or pending jobs can be held (cancel a running one)"
    )
    assert refusal(7, "dead", "rerun") == "job 7 is dead; only succeeded jobs re-run"


def test_a_released_job_waits_while_parents_are_left() -> None:
    assert released_state(2) is JobState.WAITING
    assert released_state(0) is JobState.PENDING


def test_every_state_is_reached_and_left_by_some_verb() -> None:
    reached = {state for move in MOVES.values() for state in move.targets}
    left = {state for move in MOVES.values() for state in move.sources}
    assert reached == set(JobState)
    assert left == set(JobState)


def test_the_postgres_statements_spell_no_state_list_the_table_holds() -> None:
    """The operator verbs' statements take their states from the table: none of them spells
    a state list by hand any more (a hand-written one could drift from the table)."""
    for name in ("retry", "rerun", "cancel", "reschedule", "hold", "release_held", "purge"):
        text = queries()[name]
        assert accepts(name) in text, name
