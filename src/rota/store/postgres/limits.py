"""Limited claims and limit usage on PostgreSQL: claims serialise on the limit rows' locks,
count what the ones before them committed, and choose under the domain's Budget."""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta
from typing import Any

import psycopg
from psycopg.rows import TupleRow

from rota.domain.flow import EVERY_TENANT, Budget, Key, Limit, LimitScope, select
from rota.domain.job import Job
from rota.store.postgres.queries import CLAIM_SETTINGS, query
from rota.store.postgres.rows import candidate_job, counted_keys_of, row_to_job
from rota.store.records import LimitInfo

#: How long a limited claim's transaction may wait for its client (see ``claim_limited``):
#: far above the few milliseconds between its statements.
LIMITED_CLAIM_IDLE = "5s"


async def claim_limited(
    conn: psycopg.AsyncConnection[TupleRow], params: dict[str, Any], limit: int
) -> list[Job]:
    """Claim under the limits' budget, in one transaction that holds every limit row's
    lock, so concurrent limited claims run one after another and none overshoots.

    A claimer stopped inside it (a paused process) would hold every limited claim up for as
    long as it is stopped: the server ends a transaction whose client is silent for longer
    than LIMITED_CLAIM_IDLE (its session with it), releasing the locks and the rows."""
    # This transaction's settings, in one statement: the limit's idle timeout and the claim's
    # planner settings (queries.CLAIM_SETTINGS), as rota_claim has them.
    settings = [("idle_in_transaction_session_timeout", LIMITED_CLAIM_IDLE), *CLAIM_SETTINGS]
    await conn.execute(
        "SELECT " + ", ".join(f"set_config('{name}', '{value}', true)" for name, value in settings)
    )
    limits = {
        (LimitScope(scope), key): Limit(
            LimitScope(scope),
            key,
            concurrency,
            rate,
            timedelta(microseconds=period_us) if period_us else None,
        )
        for scope, key, concurrency, rate, period_us in await (
            await conn.execute(query("lock_limits"))
        ).fetchall()
    }
    [(at,)] = await (await conn.execute(query("now"), params)).fetchall()
    running: dict[Key, int] = {}
    for queue, kind, tenant, count in await (
        await conn.execute(query("running_counts"), params)
    ).fetchall():
        for key in counted_keys_of(queue, kind, tenant):
            running[key] = running.get(key, 0) + count
    periods = [lim.period for lim in limits.values() if lim.period is not None]
    starts: dict[Key, list[datetime]] = {}
    if periods:
        rows = await (
            await conn.execute(query("recent_starts"), {**params, "period": max(periods)})
        ).fetchall()
        starts = {(LimitScope(scope), key): list(at_) for scope, key, at_ in rows}
    budget = Budget(limits, running, starts, at)
    full = budget.exhausted()
    queues = [q for q in params["queues"] if (LimitScope.QUEUE, q) not in full]
    candidates = await (
        await conn.execute(
            query("claim_candidates"),
            {
                **params,
                "queues": queues,
                "take": min(4 * limit, 1000),
                "limited": True,
                "blocked_kinds": [k for s, k in full if s is LimitScope.KIND],
                "blocked_tenants": [k for s, k in full if s is LimitScope.TENANT],
            },
        )
    ).fetchall()
    alone = {row[0] for row in candidates if row[10]}
    found_at = {row[0]: row[11] for row in candidates}
    chosen = select(
        (candidate_job(row) for row in candidates),
        limit=limit,
        budget=budget,
        fair=params["fair"],
        alone=lambda job: job.id in alone,
    )
    if not chosen:
        return []
    rows = await (
        await conn.execute(
            query("claim_ids"), {"locs": [found_at[job.id] for job in chosen], **params}
        )
    ).fetchall()
    if budget.started:
        tally = Counter(budget.started)
        await conn.execute(
            query("record_starts"),
            {
                "now": params["now"],
                "scopes": [scope.value for scope, _ in tally],
                "keys": [key for _, key in tally],
                "counts": list(tally.values()),
            },
        )
    return [row_to_job(row) for row in rows]


async def limits_in_use(
    conn: psycopg.AsyncConnection[TupleRow], params: dict[str, Any]
) -> list[LimitInfo]:
    """Every limit with what is using it now: live running jobs and starts in its period."""
    rows = await (await conn.execute(query("list_limits"))).fetchall()
    if not rows:
        # Nothing to count for: without this, every list page with a pending job on it and
        # every GET /api/queues grouped every running job (30 ms beside 10,000 of them).
        return []
    running_rows = await (await conn.execute(query("running_counts"), params)).fetchall()
    start_rows = await (await conn.execute(query("all_starts"))).fetchall()
    [(at,)] = await (await conn.execute(query("now"), params)).fetchall()
    running: dict[Key, int] = {}
    for queue, kind, tenant, count in running_rows:
        for scope, name in counted_keys_of(queue, kind, tenant):
            for key in ((scope, name), (scope, EVERY_TENANT)):
                running[key] = running.get(key, 0) + count
    infos = []
    for scope, key, concurrency, rate, period_us in rows:
        period = timedelta(microseconds=period_us) if period_us else None
        limit = Limit(LimitScope(scope), key, concurrency, rate, period)
        recent = 0
        if period is not None:
            recent = sum(
                1
                for start_scope, start_key, starts in start_rows
                if start_scope == scope and (start_key == key or key == EVERY_TENANT)
                for instant in starts
                if instant > at - period
            )
        infos.append(LimitInfo(limit, running.get(limit.ident, 0), recent))
    return infos
