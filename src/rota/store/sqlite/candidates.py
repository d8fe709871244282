"""What a claim on SQLite chooses among: a walk over the due index, then bounded reads.

``rota_jobs_due`` holds pending jobs by (queue, tenant, priority DESC, kind, run_at, id), jobs
without a tenant first. A claim walks the (queue, tenant, priority, kind) groups, one index
probe per group (a loose index scan), at most as many per queue as the batch asks for jobs (and
never fewer than MAX_CLAIM_GROUPS), starting after the
tenant where the store's last claim left off and wrapping around, so every tenant is reached
over successive claims. It then reads each group in run_at order with ``run_at <= now`` in the
index range: a read stops at the first job not yet due, so future jobs cost nothing however
many there are, and a kind or tenant at its limit costs one probe however many of its jobs
wait. Each group is read up to twice an even share of the batch, and further only if what was
read could not decide the claim. Walk and reads are covered by the index: the table is read
only by the UPDATE that takes the chosen rows.
"""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from rota.domain import blame
from rota.domain.flow import Budget, select
from rota.domain.job import Job
from rota.domain.job_state import ALONE_AFTER_CRASHES, JobState
from rota.store.sqlite.flow import Usage
from rota.store.sqlite.rows import EPOCH, chunks, from_us, marks

#: How many (tenant, priority, kind) groups one claim walks per queue at least; a claim of more
#: jobs walks as many groups as it asks for jobs, so a batch can fill one job per tenant. More
#: groups than that are reached over successive claims, each starting after the tenant where
#: the last one stopped.
MAX_CLAIM_GROUPS = 64
#: The most groups one claim walks per queue, however many jobs it asks for.
MAX_WALK_GROUPS = 1000
#: How far ahead of its batch a claim reads a group or the expired leases (see ``choose``).
MAX_READ_AHEAD = 1000
#: Group reads per statement: SQLite refuses compound SELECTs of more than 500 terms.
_READS_PER_STATEMENT = 200


class Group(NamedTuple):
    """The pending jobs of one queue, tenant, priority and kind: one range of the index."""

    queue: str
    tenant: str | None
    priority: int
    kind: str


@dataclass(frozen=True, slots=True)
class Walk:
    """The groups a claim reads, in walk order, and where a walk cut short stopped."""

    groups: list[Group]
    #: The last tenant walked in the first queue with more groups than the walk visits.
    cut_at: str | None


@dataclass(frozen=True, slots=True)
class Blocked:
    """Queues, kinds and tenants at a limit already: none of their jobs can start now; and
    the kinds the claiming worker runs (None: every kind), the others left for other workers."""

    queues: frozenset[str] = frozenset()
    kinds: frozenset[str] = frozenset()
    tenants: frozenset[str] = frozenset()
    runs: frozenset[str] | None = None

    def readable(self, group: Group, *, fair: bool) -> bool:
        """Whether a claim needs ``group``'s jobs as candidates.

        A blocked tenant's jobs are not: they could only delay its own later jobs. When
        tenants take turns, a blocked queue's or kind's jobs are, refused, because they still
        take their tenant's turns (``rota.domain.flow.interleave``), and so decide the turn of
        its other jobs.
        """
        if group.tenant in self.tenants or (self.runs is not None and group.kind not in self.runs):
            return False
        return fair or (group.queue not in self.queues and group.kind not in self.kinds)


@dataclass(frozen=True, slots=True)
class Choice:
    """The jobs a claim takes, in the order they were chosen, the tokens of the expired
    leases among them, and the budget spent on them."""

    ids: list[int]
    expired_tokens: list[int]
    budget: Budget | None


# The walk: a loose index scan as a recursive CTE. Each step finds the next group's first job
# (the same tenant and priority's next kind, else the tenant's next lower priority, else the
# next tenant; coalesce stops at the first probe that finds one), and the next step reads that
# group's key through the job's id. {after} starts the walk after a tenant, {until} ends it at
# one. Tenant names are never empty, so "tenant > ''" is every tenant after the jobs without
# one. INDEXED BY here and below: a claim is only as cheap as its index ranges.
_WALK = """
WITH RECURSIVE walk (id, steps) AS (
    SELECT (SELECT id FROM rota_jobs INDEXED BY rota_jobs_due
            WHERE state = 'pending' AND queue = :queue{after}
            ORDER BY tenant, priority DESC, kind LIMIT 1), 1
    UNION ALL
    SELECT coalesce(
        (SELECT id FROM rota_jobs INDEXED BY rota_jobs_due
         WHERE state = 'pending' AND queue = :queue AND tenant IS j.tenant
           AND priority = j.priority AND kind > j.kind
         ORDER BY kind LIMIT 1),
        (SELECT id FROM rota_jobs INDEXED BY rota_jobs_due
         WHERE state = 'pending' AND queue = :queue AND tenant IS j.tenant
           AND priority < j.priority
         ORDER BY priority DESC, kind LIMIT 1),
        (SELECT id FROM rota_jobs INDEXED BY rota_jobs_due
         WHERE state = 'pending' AND queue = :queue AND tenant > coalesce(j.tenant, '')
         ORDER BY tenant, priority DESC, kind LIMIT 1)),
        w.steps + 1
    FROM walk w JOIN rota_jobs j ON j.id = w.id
    WHERE w.steps < :steps{until}
)
SELECT j.tenant, j.priority, j.kind FROM walk w JOIN rota_jobs j ON j.id = w.id
"""
_WALK_ALL = _WALK.format(after="", until="")
_WALK_AFTER = _WALK.format(after=" AND tenant > :after", until="")
_WALK_UNTIL = _WALK.format(after="", until=" AND coalesce(j.tenant, '') <= :after")

# Every candidate row: id, queue, tenant, priority, run_at, kind, and the lease token of a
# running job whose lease expired (NULL for a pending job); an expired lease's row goes on
# with attempt, max_attempts, crashes and lease_started, for the blame rule.
_GROUP_READ = """
SELECT * FROM (
    SELECT id, queue, tenant, priority, run_at, kind, NULL FROM rota_jobs INDEXED BY rota_jobs_due
    WHERE state = 'pending' AND queue = ? AND tenant IS ? AND priority = ? AND kind = ?
      AND run_at <= ? AND (expires_at IS NULL OR expires_at > ?)
    ORDER BY run_at, id LIMIT ?
)"""

# A lease is held through its lease_until instant and expired strictly after it; one whose
# expiry makes its job dead (rota.domain.blame.expire) is left to the rescuer. Without
# INDEXED BY, SQLite (having no statistics) prefers the (state, id) index and would walk every
# running job instead of the expired range of the partial index.
_EXPIRED_READ = """
SELECT id, queue, tenant, priority, run_at, kind, lease_token,
       attempt, max_attempts, crashes, lease_started
FROM rota_jobs INDEXED BY rota_jobs_leases
WHERE state = 'running' AND lease_until < ?
  AND NOT (lease_started AND crashes > 0 AND attempt >= max_attempts)
  AND queue IN ({queues}){kinds}{tenants}
ORDER BY priority DESC, run_at, id LIMIT ?
"""

Row = tuple[Any, ...]

#: Whether the attempt a claim gives a row runs alone (rota.domain.job.runs_alone), from the
#: row's values before the claim (an expired lease taken over is settled first).
ALONE_NEXT = f"(crashes >= {ALONE_AFTER_CRASHES} OR (crashes > 0 AND attempt + 1 >= max_attempts))"


def walk(
    conn: sqlite3.Connection, queues: Sequence[str], after: str, most: int = MAX_CLAIM_GROUPS
) -> Walk:
    """The groups with pending jobs in ``queues``, at most ``most`` per queue: those of
    tenants after ``after`` first, then from the first group up to ``after`` itself."""
    groups: list[Group] = []
    cut_at: str | None = None
    for queue in queues:
        # One step more than wanted tells whether the walk was cut short.
        params = {"queue": queue, "after": after, "steps": most + 1}
        walked = conn.execute(_WALK_AFTER if after else _WALK_ALL, params).fetchall()
        if after and len(walked) <= most:  # wrap around to where the walk began
            params["steps"] = most + 1 - len(walked)
            wrapped = conn.execute(_WALK_UNTIL, params).fetchall()
            walked += [row for row in wrapped if (row[0] or "") <= after]
        if len(walked) > most:
            del walked[most:]
            if cut_at is None:
                cut_at = walked[-1][0] or ""
        groups += [Group(queue, *row) for row in walked]
    return Walk(groups, cut_at)


def choose(
    conn: sqlite3.Connection,
    groups: Sequence[Group],
    *,
    queues: Sequence[str],
    at_us: int,
    limit: int,
    fair: bool,
    usage: Usage | None,
    blocked: Blocked | None = None,
    alone: frozenset[int] = frozenset(),
) -> Choice:
    """Up to ``limit`` due jobs of ``groups`` and expired leases of ``queues``, as
    ``rota.domain.flow.select`` chooses them (under a budget from ``usage``, if any), reading
    only the candidates ``blocked`` leaves it to consider.

    Each group is first read up to twice an even share of the batch, then, in rounds, the
    groups whose further jobs could still change the choice are read four times deeper. In
    plain claim order no group is read beyond ``limit`` jobs: they all count against the same
    queue, kind and tenant, so once a budget refuses one it refuses the rest. When tenants
    take turns, a refused job still takes its tenant's turn, so the jobs a budget refuses
    ahead of another decide when that one comes: groups are then read up to four batches or
    64 jobs, MAX_READ_AHEAD at most (with more refused jobs ahead, a turn may come early).
    Expired leases, few and of any group, are read that far ahead at once. The jobs of
    ``alone`` (pending) and the expired leases whose next attempt runs alone are taken alone
    (``select``).
    """
    blocked = blocked or Blocked()
    readable = [group for group in groups if blocked.readable(group, fair=fair)]
    ahead = max(limit, min(max(4 * limit, 64), MAX_READ_AHEAD))
    expired = _read_expired(conn, queues, ahead, at_us, blocked, fair=fair)
    alone = alone | {row[0] for row in expired if _alone_after_expiry(row)}
    tenants = {group.tenant for group in readable} | {row[2] for row in expired}
    turns = fair and len(tenants) > 1
    deepest = ahead if turns else limit
    quota = min(limit, 2 * math.ceil(limit / len(readable))) if readable else limit
    asked = dict.fromkeys(readable, quota)
    rows = _read_groups(conn, readable, quota, at_us)
    in_order = len(readable) <= 1 and not expired  # one group's rows come in claim order
    while True:
        choice = _choose(rows + expired, limit, fair, usage, in_order=in_order, alone=alone)
        if min(asked.values(), default=deepest) >= deepest:
            return choice
        again = [
            group
            for group in _undecided(choice, rows, expired, asked, limit, turns=turns)
            if asked[group] < deepest
        ]
        if not again:
            return choice
        # Each round reads deeper than any before it, up to ``deepest``: rounds are few.
        quota = min(deepest, 4 * max(asked[group] for group in again))
        asked.update(dict.fromkeys(again, quota))
        rows = [row for row in rows if _group_of(row) not in again]
        rows += _read_groups(conn, again, quota, at_us)
        in_order = False


def _choose(
    candidates: list[Row],
    limit: int,
    fair: bool,
    usage: Usage | None,
    *,
    in_order: bool,
    alone: frozenset[int],
) -> Choice:
    """``select`` over ``candidates``, under a fresh budget from ``usage``."""
    lone = any(row[0] in alone for row in candidates)
    if usage is None and not lone and (not fair or len({row[2] for row in candidates}) <= 1):
        # Without a budget or a job to take alone, in plain claim order or with one tenant,
        # select would take the first candidates in claim order: the claim of jobs without
        # tenants or limits, spared building a Job per candidate.
        ordered = candidates if in_order else sorted(candidates, key=_claim_key)
        taken = ordered[:limit]
        expired = [row[6] for row in taken if row[6] is not None]
        return Choice([row[0] for row in taken], expired, None)
    budget = usage.budget() if usage is not None else None
    chosen = select(
        [_candidate(row) for row in candidates],
        limit=limit,
        budget=budget,
        fair=fair,
        alone=lambda job: job.id in alone,
    )
    expired = [job.lease_token for job in chosen if job.lease_token is not None]
    return Choice([job.id for job in chosen], expired, budget)


def _undecided(
    choice: Choice,
    rows: Sequence[Row],
    expired: Sequence[Row],
    asked: dict[Group, int],
    limit: int,
    *,
    turns: bool,
) -> list[Group]:
    """The groups that gave every row asked of them and whose further jobs could change
    ``choice``.

    ``select`` considers candidates in one order and stops once the batch is full, so a full
    batch stands if no job left unread could come before its last one. A cut group's unread
    jobs come after its last row read, in claim order. In plain claim order that settles it
    group by group. When tenants take turns, a tenant's jobs up to the earliest last row read
    of its cut groups were all read, so their turns are exact, and any other job of its comes
    in a later turn: the batch stands if its last job came in an earlier turn than that.
    A batch left short may have missed anything, even in groups its budget ended up refusing
    (a job read further could have come before the jobs that filled the limit).
    """
    last_read: dict[Group, Row] = {}
    counts: dict[Group, int] = {}
    for row in rows:
        group = _group_of(row)
        last_read[group] = row
        counts[group] = counts.get(group, 0) + 1
    cut = sorted(
        (group for group, count in counts.items() if count == asked[group]), key=_group_order
    )
    if not cut or len(choice.ids) < limit:
        return cut
    by_id = {row[0]: row for row in [*rows, *expired]}
    last_row = by_id[choice.ids[-1]]
    last = _claim_key(last_row)
    if not turns:
        return [group for group in cut if _claim_key(last_read[group]) < last]
    turn = sum(1 for row in by_id.values() if row[2] == last_row[2] and _claim_key(row) < last)
    undecided: list[Group] = []
    for tenant in {group.tenant for group in cut}:
        theirs = [group for group in cut if group.tenant == tenant]
        horizon = min(_claim_key(last_read[group]) for group in theirs)
        exact = sum(1 for row in by_id.values() if row[2] == tenant and _claim_key(row) <= horizon)
        if turn >= exact:
            undecided += theirs
    return sorted(undecided, key=_group_order)


def _group_of(row: Row) -> Group:
    return Group(row[1], row[2], row[3], row[5])


def _group_order(group: Group) -> tuple[str, str, int, str]:
    """Index order, for statements that read the same groups to look the same."""
    return (group.queue, group.tenant or "", -group.priority, group.kind)


def _claim_key(row: Row) -> tuple[int, int, int]:
    """``rota.domain.flow.claim_order`` of a candidate row."""
    return (-row[3], row[4], row[0])


def _read_groups(
    conn: sqlite3.Connection, groups: Sequence[Group], quota: int, at_us: int
) -> list[Row]:
    """Each group's first ``quota`` due jobs, one statement per _READS_PER_STATEMENT groups."""
    rows: list[Row] = []
    for part in chunks(groups, _READS_PER_STATEMENT):
        params: list[object] = []
        for queue, tenant, priority, kind in part:
            params += [queue, tenant, priority, kind, at_us, at_us, quota]
        sql = "\nUNION ALL\n".join([_GROUP_READ] * len(part))
        rows += conn.execute(sql, params).fetchall()
    return rows


def _read_expired(
    conn: sqlite3.Connection,
    queues: Sequence[str],
    limit: int,
    at_us: int,
    blocked: Blocked,
    *,
    fair: bool,
) -> list[Row]:
    """Up to ``limit`` running jobs of ``queues`` whose lease expired and can be taken over,
    in claim order, as ``blocked`` leaves them to consider."""
    kinds = [] if fair else sorted(blocked.kinds)
    tenants = sorted(blocked.tenants)
    runs = [] if blocked.runs is None else sorted(blocked.runs)
    sql = _EXPIRED_READ.format(
        queues=marks(len(queues)),
        kinds=_not_in("kind", kinds)
        + ("" if blocked.runs is None else f" AND kind IN ({marks(len(runs))})"),
        tenants=_not_in("coalesce(tenant, '')", tenants),
    )
    rows: list[Row] = conn.execute(sql, [at_us, *queues, *kinds, *runs, *tenants, limit]).fetchall()
    return rows


_ALONE = f"""
SELECT id FROM rota_jobs INDEXED BY rota_jobs_suspects
WHERE state = 'pending' AND crashes > 0 AND queue IN ({{queues}}) AND {ALONE_NEXT}
"""


def alone(conn: sqlite3.Connection, queues: Sequence[str]) -> frozenset[int]:
    """The ids of the pending jobs of ``queues`` whose next attempt runs alone: crash suspects
    only, so a probe of a small index."""
    if not queues:
        return frozenset()
    sql = _ALONE.format(queues=marks(len(queues)))
    return frozenset(job_id for (job_id,) in conn.execute(sql, list(queues)))


def _alone_after_expiry(row: Row) -> bool:
    attempt, max_attempts, crashes, started = row[7:11]
    expiry = blame.expire(
        attempt=attempt, max_attempts=max_attempts, crashes=crashes, started=bool(started)
    )
    return blame.alone_after(expiry, max_attempts)


def _not_in(column: str, values: Sequence[str]) -> str:
    return f" AND {column} NOT IN ({marks(len(values))})" if values else ""


def _candidate(row: Row) -> Job:
    """A claim candidate with just the fields the budget and the claim order look at."""
    job_id, queue, tenant, priority, run_at, kind, lease_token = row[:7]
    return Job(
        id=job_id,
        kind=kind,
        queue=queue,
        payload=None,
        state=JobState.PENDING if lease_token is None else JobState.RUNNING,
        priority=priority,
        run_at=from_us(run_at),
        attempt=0,
        max_attempts=1,
        created_at=EPOCH,
        tenant=tenant,
        lease_token=lease_token,
    )
