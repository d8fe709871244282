"""WHERE clauses for job filters, composed with psycopg.sql from fixed fragments and quoted
literals: the statements that list, count and select jobs by filter.

Every value of a filter is written into the statement as a literal (``sql.Literal``, quoted
by psycopg), and these statements run unprepared (``prepare=False``): PostgreSQL plans each
with the values it filters on. A prepared statement with parameters settles on a generic plan
after its fifth execution, one plan for every value: with ``state = ANY($1)`` that plan cannot
prune the partitions of rota_jobs (019), and listed the pending jobs by reading every day of
finished ones; with ``tenant = $1`` it guessed every tenant holds 1% of a state and walked
the newest jobs of that state looking for one of a tenant that had none
(tests/integration/test_postgres_list_plans.py). Planning costs a millisecond or so a call.

A statement filtering on kind or queue is wrapped (``guarded``) in a question to the
maintained counts (017_counts): whether any job of that kind and queue (in those states)
exists at all. When none does, the statement ends before it reads a job. Without it a filter
that matches nothing reads every job looking for one (no index leads with kind; the queue's is
for pending jobs). The question sits above the statement's LIMIT, so no part of the plan (a
parallel scan's workers included) starts. One statement, one snapshot: the counts agree with
the rows the same statement would read.
"""

from __future__ import annotations

from collections.abc import Iterable

from psycopg import sql

from rota.domain.job_state import JobState
from rota.store.records import JobFilter

#: The filter's columns compared for equality, in the order the clauses name them.
_EQUAL = ("kind", "queue", "tenant", "schedule")


def state_in(states: Iterable[str], *, column: str = "state") -> sql.Composable:
    """``state IN (...)`` for these states (JobState values, checked), as literals."""
    chosen = sorted({JobState(state).value for state in states})
    if not chosen:
        return sql.SQL("FALSE")
    return sql.SQL("{} IN ({})").format(
        sql.SQL(column), sql.SQL(", ").join(sql.Literal(state) for state in chosen)
    )


def _states(filter: JobFilter) -> list[str] | None:
    return None if filter.states is None else sorted(s.value for s in filter.states)


def where(filter: JobFilter, *, states_override: Iterable[str] | None = None) -> sql.Composable:
    """A WHERE clause for ``filter``, from fixed fragments and quoted literals only."""
    clauses: list[sql.Composable] = [sql.SQL("TRUE")]
    states = list(states_override) if states_override is not None else _states(filter)
    if states is not None:
        clauses.append(state_in(states))
    for column in _EQUAL:
        value = getattr(filter, column)
        if value is not None:
            clauses.append(sql.SQL("{} = {}").format(sql.Identifier(column), sql.Literal(value)))
    if filter.workflow is not None:
        clauses.append(sql.SQL("workflow = {}").format(sql.Literal(filter.workflow)))
    if filter.search is not None:
        key = sql.Literal(filter.search)
        if filter.search_id is not None:
            found = sql.SQL("(id = {} OR unique_key = {})").format(
                sql.Literal(filter.search_id), key
            )
        else:
            found = sql.SQL("unique_key = {}").format(key)
        clauses.append(found)
    return sql.SQL(" AND ").join(clauses)


def guarded(
    statement: sql.Composable, filter: JobFilter, *, states: Iterable[str] | None = None
) -> sql.Composable:
    """``statement`` (which filters by ``where(filter, states_override=states)``) returning
    no row at once when the maintained counts hold no job of the filter's kind and queue in
    those states; unchanged for a filter on neither."""
    if filter.kind is None and filter.queue is None:
        return statement
    if states is None:
        states = _states(filter)
    counted: list[sql.Composable] = []
    if states is not None:
        counted.append(state_in(states, column="c.state"))
    counted.extend(
        sql.SQL("c.{} = {}").format(sql.Identifier(column), sql.Literal(getattr(filter, column)))
        for column in ("kind", "queue")
        if getattr(filter, column) is not None
    )
    return sql.SQL(
        "SELECT * FROM ({}) AS matched WHERE EXISTS ("
        "SELECT FROM (SELECT queue, kind, state, n FROM rota_counts"
        " UNION ALL SELECT queue, kind, state, n FROM rota_count_deltas) AS c"
        " WHERE {} HAVING sum(c.n) > 0)"
    ).format(statement, sql.SQL(" AND ").join(counted))


def by_state(filter: JobFilter) -> list[str] | None:
    """The states to read one at a time for ``filter`` (see ``page``), or None to read them
    together: a filter on a tenant, kind, queue or schedule over several states (or all)."""
    states = _states(filter)
    narrowed = any(getattr(filter, column) is not None for column in _EQUAL)
    if filter.search is not None or not narrowed or (states is not None and len(states) == 1):
        return None
    return states if states is not None else [state.value for state in JobState]


def page(filter: JobFilter, columns: str, *, after: int | None, limit: int) -> sql.Composable:
    """One keyset page of ``filter``'s jobs, newest first: ``limit`` rows of ``columns``.

    A filter on a tenant, kind, queue or schedule over several states (or all) reads each
    state on its own, newest first, and merges them: each part is pruned to its state's
    partitions and walks an index in id order (rota_jobs_tenant and rota_jobs_schedule lead
    with what they pin, then the state: 024), stopping after ``limit`` rows. Over several
    states at once such an index yields no id order, and the plan would sort every job of the
    tenant.

    A tenant's jobs of a kind or queue are found first by their ids alone, then read: the
    tenant's index carries the kind and the queue (027), so an index-only scan checks them
    without reading a row, where a plain index scan read the row of each of the tenant's
    jobs of the state to check its kind (a tenant with no job of that kind in a state read
    all 14,000 of its jobs there at ten million jobs:
    ``test_a_tenants_list_of_a_kind_checks_the_kind_in_the_index``)."""
    keyset = sql.SQL("") if after is None else sql.SQL(" AND id < {}").format(sql.Literal(after))
    by_ids = filter.tenant is not None and (filter.kind is not None or filter.queue is not None)

    def take(condition: sql.Composable) -> sql.Composed:
        if by_ids:
            return sql.SQL(
                "SELECT {} FROM rota_jobs WHERE {} AND id IN ("
                "SELECT id FROM rota_jobs WHERE {}{} ORDER BY id DESC LIMIT {}"
                ") ORDER BY id DESC LIMIT {}"
            ).format(
                sql.SQL(columns),
                condition,
                condition,
                keyset,
                sql.Literal(limit),
                sql.Literal(limit),
            )
        return sql.SQL("SELECT {} FROM rota_jobs WHERE {}{} ORDER BY id DESC LIMIT {}").format(
            sql.SQL(columns), condition, keyset, sql.Literal(limit)
        )

    states = by_state(filter)
    if states is None:
        statement = take(where(filter))
    else:
        # Each part asks the counts on its own: a state with no job of the kind or queue
        # (no running job of a queue: reading every running job to learn it) costs nothing.
        parts = [
            sql.SQL("({})").format(
                guarded(
                    take(where(filter, states_override=[state])),
                    filter,
                    states=[state],
                )
            )
            for state in states
        ]
        return sql.SQL("SELECT * FROM ({}) AS merged ORDER BY id DESC LIMIT {}").format(
            sql.SQL(" UNION ALL ").join(parts), sql.Literal(limit)
        )
    return guarded(statement, filter)


def estimate(filter: JobFilter) -> sql.Composable:
    """The plan (EXPLAIN, JSON) of selecting ``filter``'s jobs: its top node's ``Plan Rows``
    is the planner's estimate of how many match, from the statistics of each table the
    filter's states leave in the plan: of each column, and of the columns filters combine
    together (031: the common combinations of tenant and state; of tenant, state, kind and
    queue; of schedule and state), without which it takes a tenant's share of a state for its
    share of all jobs."""
    return sql.SQL("EXPLAIN (FORMAT JSON) SELECT 1 FROM rota_jobs WHERE {}").format(where(filter))


def counted(filter: JobFilter) -> bool:
    """Whether the maintained counts (017_counts, by queue, kind and state) hold how many jobs
    match ``filter``: a filter on states, kind and queue only."""
    return all(
        value is None for value in (filter.tenant, filter.schedule, filter.workflow, filter.search)
    )


def from_counts(filter: JobFilter) -> sql.Composable:
    """How many jobs match ``filter`` (``counted``), from the folded counts and the deltas not
    folded yet, in one snapshot: a few hundred rows, however many jobs match."""
    conditions: list[sql.Composable] = [sql.SQL("TRUE")]
    states = _states(filter)
    if states is not None:
        conditions.append(state_in(states, column="c.state"))
    conditions.extend(
        sql.SQL("c.{} = {}").format(sql.Identifier(column), sql.Literal(getattr(filter, column)))
        for column in ("kind", "queue")
        if getattr(filter, column) is not None
    )
    return sql.SQL(
        "SELECT coalesce(sum(c.n), 0)::bigint FROM (SELECT queue, kind, state, n FROM rota_counts"
        " UNION ALL SELECT queue, kind, state, n FROM rota_count_deltas) AS c WHERE {}"
    ).format(sql.SQL(" AND ").join(conditions))
