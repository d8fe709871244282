"""WHERE clauses for job filters, composed with psycopg.sql from fixed fragments only.

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
from typing import Any

from psycopg import sql

from rota.store.base import JobFilter


def where(
    filter: JobFilter, *, states_override: Iterable[str] | None = None
) -> tuple[sql.Composable, dict[str, Any]]:
    """A WHERE clause for ``filter``, from fixed fragments and parameters only."""
    clauses: list[sql.Composable] = [sql.SQL("TRUE")]
    params: dict[str, Any] = {}
    states = (
        list(states_override)
        if states_override is not None
        else (sorted(s.value for s in filter.states) if filter.states is not None else None)
    )
    if states is not None:
        clauses.append(sql.SQL("state = ANY(%(states)b::text[])"))
        params["states"] = states
    for column in ("kind", "queue", "tenant", "schedule"):
        value = getattr(filter, column)
        if value is not None:
            clauses.append(sql.SQL("{} = %({})s").format(sql.Identifier(column), sql.SQL(column)))
            params[column] = value
    if filter.search is not None:
        if filter.search_id is not None:
            clauses.append(sql.SQL("(id = %(search_id)s OR unique_key = %(search)s)"))
            params["search_id"] = filter.search_id
        else:
            clauses.append(sql.SQL("unique_key = %(search)s"))
        params["search"] = filter.search
    return sql.SQL(" AND ").join(clauses), params


def guarded(
    statement: sql.Composable, filter: JobFilter, *, states: Iterable[str] | None = None
) -> sql.Composable:
    """``statement`` (which filters by ``where(filter, states_override=states)``, with its
    parameters) returning no row at once when the maintained counts hold no job of the
    filter's kind and queue in those states; unchanged for a filter on neither."""
    if filter.kind is None and filter.queue is None:
        return statement
    if states is None and filter.states is not None:
        states = [state.value for state in filter.states]
    counted: list[sql.Composable] = []
    if states is not None:
        counted.append(sql.SQL("c.state = ANY(%(states)b::text[])"))
    counted.extend(
        sql.SQL("c.{} = %({})s").format(sql.Identifier(column), sql.SQL(column))
        for column in ("kind", "queue")
        if getattr(filter, column) is not None
    )
    return sql.SQL(
        "SELECT * FROM ({}) AS matched WHERE EXISTS ("
        "SELECT FROM (SELECT queue, kind, state, n FROM rota_counts"
        " UNION ALL SELECT queue, kind, state, n FROM rota_count_deltas) AS c"
        " WHERE {} HAVING sum(c.n) > 0)"
    ).format(statement, sql.SQL(" AND ").join(counted))
