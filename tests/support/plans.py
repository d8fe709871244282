"""The plans PostgreSQL runs rota's functions under, read with EXPLAIN.

A claim runs inside a function (``queries.ROUTINES``), under the generic plan of its
statement: ``EXPLAIN`` of the statement with its parameters would show a custom plan
instead, so ``routine_plan`` prepares the statement with its parameters left open, typed as the
function declares them, and explains ``EXECUTE`` of it with the values the store sent, under
``force_generic_plan`` and the function's own settings, in a transaction rolled back after it (ANALYZE runs the statement).
"""

from __future__ import annotations

import re
from typing import Any

import psycopg
from psycopg import sql

from rota.store.postgres.queries import ROUTINES, query

_PARAMETER = re.compile(r"%\((\w+)\)[sb]")
#: The functions a claim runs to walk the tenants: rota_claim_fresh, and rota_claim after a
#: lease expired (rota_claim_all, tried first while the queues look idle, walks nothing).
CLAIM_CALLS = ("claim_fresh_call", "claim_call")


def sent_params(store: Any, *, run: bool = True) -> dict[str, dict[str, Any]]:
    """The parameters of each named statement ``store`` sends from now on (the last of each),
    run (``run``) or only captured. A claim's are under the names of the functions it called
    (``claim_all_call``, ``claim_fresh_call``, ``claim_call``); all take the same."""
    sent: dict[str, dict[str, Any]] = {}

    def capturing(fetch: Any) -> Any:
        async def capture(name: str, params: dict[str, Any]) -> list[Any]:
            sent[name] = dict(params)
            return await fetch(name, params) if run else []

        return capture

    store._fetch = capturing(store._fetch)
    store._fetch_claim = capturing(store._fetch_claim)
    return sent


def routine_plan(
    url: str, call: str, params: dict[str, Any], *, analyze: bool = False
) -> dict[str, Any]:
    """The top of the generic plan (EXPLAIN FORMAT JSON) of the statement the function that
    ``call`` (a name of ``ROUTINES``) runs, for ``params``."""
    routine = ROUTINES[call]
    types = dict(routine.parameters)
    names = [name for name, _ in routine.parameters]
    text = _PARAMETER.sub(
        lambda match: f"${names.index(match.group(1)) + 1}", query(routine.statement)
    )
    options = "ANALYZE, BUFFERS, FORMAT JSON" if analyze else "FORMAT JSON"
    declared = sql.SQL(", ").join(sql.SQL(types[name]) for name in names)
    arguments = sql.SQL(", ").join(sql.Literal(params[name]) for name in names)
    with psycopg.connect(url) as conn:
        conn.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        for name, value in routine.settings:  # as the function sets them for its statement
            conn.execute(sql.SQL("SET LOCAL {} = {}").format(sql.Identifier(name), sql.SQL(value)))
        conn.execute(sql.SQL("PREPARE planned ({}) AS {}").format(declared, sql.SQL(text)))  # type: ignore[arg-type]
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
