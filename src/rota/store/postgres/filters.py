"""WHERE clauses for job filters, composed with psycopg.sql from fixed fragments only.

A filter on kind or queue also asks the maintained counts (017_counts) whether any job of
that kind and queue (in those states) exists at all: when none does, the condition is false
before any job is read. Without it a filter that matches nothing reads every job looking for
one (no index leads with kind; the queue's is for pending jobs). One statement, one snapshot:
the counts agree with the rows the same statement would read.
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
        clauses.append(sql.SQL("state = ANY(%(states)s::text[])"))
        params["states"] = states
    if filter.kind is not None or filter.queue is not None:
        clauses.append(_any_counted(filter, states))
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


def _any_counted(filter: JobFilter, states: list[str] | None) -> sql.Composable:
    """Whether the maintained counts hold a job of the filter's kind and queue (and states)."""
    counted: list[sql.Composable] = []
    if states is not None:
        counted.append(sql.SQL("c.state = ANY(%(states)s::text[])"))
    counted.extend(
        sql.SQL("c.{} = %({})s").format(sql.Identifier(column), sql.SQL(column))
        for column in ("kind", "queue")
        if getattr(filter, column) is not None
    )
    return sql.SQL(
        "EXISTS (SELECT FROM (SELECT queue, kind, state, n FROM rota_counts"
        " UNION ALL SELECT queue, kind, state, n FROM rota_count_deltas) AS c"
        " WHERE {} HAVING sum(c.n) > 0)"
    ).format(sql.SQL(" AND ").join(counted))
