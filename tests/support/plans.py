"""The plans PostgreSQL runs rota's statements under, read with EXPLAIN.

A claim runs prepared under a generic plan (``Connections.claim_connection``): ``EXPLAIN`` of
the statement with its parameters would show a custom plan instead, so ``generic_plan``
prepares the statement with its parameters left open and explains ``EXECUTE`` of it with the
values given, under ``force_generic_plan``, in a transaction rolled back after it (ANALYZE
runs the claim).
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import Any

import psycopg
from psycopg import sql

_PARAMETER = re.compile(r"%\((\w+)\)s")


def sent_params(store: Any, *, run: bool = True) -> dict[str, dict[str, Any]]:
    """The parameters of each named statement ``store`` sends from now on (the last of each),
    run (``run``) or only captured."""
    sent: dict[str, dict[str, Any]] = {}
    fetch = store._fetch

    async def capture(name: str, params: dict[str, Any], **options: Any) -> list[Any]:
        sent[name] = dict(params)
        return await fetch(name, params, **options) if run else []

    store._fetch = capture
    return sent


def _type_of(value: Any) -> str:
    """The SQL type a parameter of this value is declared as (unknown: inferred)."""
    if value is None:
        return "unknown"
    if isinstance(value, list):
        return "bigint[]" if value and isinstance(value[0], int) else "text[]"
    for python, name in _TYPES:
        if isinstance(value, python):
            return name
    raise TypeError(f"no SQL type for {value!r}")


_TYPES = (
    (bool, "boolean"),
    (int, "bigint"),
    (float, "double precision"),
    (str, "text"),
    (timedelta, "interval"),
    (datetime, "timestamptz"),
)


def generic_plan(
    url: str, statement: str, params: dict[str, Any], *, analyze: bool = False
) -> dict[str, Any]:
    """The top node of ``statement``'s generic plan (EXPLAIN FORMAT JSON), for ``params``."""
    names: list[str] = []

    def numbered(match: re.Match[str]) -> str:
        if match.group(1) not in names:
            names.append(match.group(1))
        return f"${names.index(match.group(1)) + 1}"

    # The statement's own %% are literal percent signs once it is no longer a psycopg query.
    text = _PARAMETER.sub(numbered, statement).replace("%%", "%")
    options = "ANALYZE, BUFFERS, FORMAT JSON" if analyze else "FORMAT JSON"
    types = sql.SQL(", ").join(sql.SQL(_type_of(params[name])) for name in names)
    arguments = sql.SQL(", ").join(sql.Literal(params[name]) for name in names)
    with psycopg.connect(url) as conn:
        conn.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        conn.execute(sql.SQL("PREPARE planned ({}) AS {}").format(types, sql.SQL(text)))  # type: ignore[arg-type]
        [(plan,)] = conn.execute(
            sql.SQL("EXPLAIN ({}) EXECUTE planned({})").format(sql.SQL(options), arguments)  # type: ignore[arg-type]
        ).fetchall()
        conn.rollback()
    top: dict[str, Any] = plan[0]
    return top


def nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    """Every node of a plan, the top one first."""
    found, todo = [], [plan]
    while todo:
        node = todo.pop()
        todo += node.get("Plans", [])
        found.append(node)
    return found
