"""WHERE clauses for job filters, composed with psycopg.sql from fixed fragments only."""

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
