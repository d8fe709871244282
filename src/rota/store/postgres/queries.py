"""Loads the named statements of queries.sql and the versioned migrations."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from functools import cache
from importlib import resources

from rota.domain import blame
from rota.domain.activity import DURATION_BOUNDS_US
from rota.domain.job_state import (
    ACTIVE_STATES,
    ALONE_AFTER_CRASHES,
    STATE_BIT_SQL,
    UNFINISHED_STATES,
    JobState,
)
from rota.domain.payload import PREVIEW_CHARS
from rota.domain.transitions import MOVES, accepts, in_list

#: The columns every statement returning a job selects: Job's fields, in their order
#: (``row_to_job`` builds a Job positionally from them; timeout travels as microseconds).
_JOB_COLUMN_TYPES = (
    ("id", "bigint"),
    ("kind", "text"),
    ("queue", "text"),
    ("payload", "json"),
    ("state", "text"),
    ("priority", "smallint"),
    ("run_at", "timestamptz"),
    ("attempt", "integer"),
    ("max_attempts", "integer"),
    ("created_at", "timestamptz"),
    ("tenant", "text"),
    ("unique_key", "text"),
    ("timeout_us", "bigint"),
    ("lease_token", "bigint"),
    ("lease_until", "timestamptz"),
    ("worker", "text"),
    ("started_at", "timestamptz"),
    ("finished_at", "timestamptz"),
    ("last_error", "text"),
    ("schedule", "text"),
    ("slot_at", "timestamptz"),
    ("crashes", "integer"),
    ("trace_context", "json"),
    ("result", "json"),
    ("progress", "double precision"),
    ("progress_message", "text"),
    ("expires_at", "timestamptz"),
    ("workflow", "bigint"),
    ("waiting_on", "integer"),
    ("heartbeats", "integer"),
    ("last_heartbeat_at", "timestamptz"),
)
JOB_COLUMNS = ", ".join(name for name, _ in _JOB_COLUMN_TYPES)
#: JOB_COLUMNS as a list reads them: the first characters of the payload's and result's JSON
#: text and of the last error (rows.row_to_listed makes Previews of the first two). substr of
#: a toasted value reads only the slice it returns, not the whole (900 KB) value.
_CUT = {
    "payload": "substr(payload::text, 1, {n})",
    # A result kept apart (025) is cut from rota_results, under the token that wrote it.
    "result": "CASE WHEN result IS NULL AND state = 'succeeded' THEN (SELECT substr(r.result::text,"
    " 1, {n}) FROM rota_results r WHERE r.job_id = rota_jobs.id AND r.token = rota_jobs.lease_token)"
    " ELSE substr(result::text, 1, {n}) END",
    "last_error": "substr(last_error, 1, {n})",
}


def preview_columns(chars: int) -> str:
    """JOB_COLUMNS with the payload, result and last error cut to their first ``chars``
    characters in SQL."""
    return ", ".join(
        _CUT[name].format(n=int(chars)) if name in _CUT else name for name, _ in _JOB_COLUMN_TYPES
    )


LIST_COLUMNS = preview_columns(PREVIEW_CHARS)

_UNFINISHED = in_list(UNFINISHED_STATES)
#: A workflow schedule's last state is its last workflow's (rota.domain.workflow
#: .workflow_outcome), read by the rota_jobs_workflow index; any other's, its last job's.
_LAST_STATE = (
    "CASE WHEN s.workflow AND j.workflow IS NOT NULL THEN ("
    f"SELECT CASE WHEN bool_or(w.state IN ({_UNFINISHED})) THEN 'running'"
    " WHEN bool_or(w.state = 'dead') THEN 'dead'"
    " WHEN bool_or(w.state = 'cancelled') THEN 'cancelled' ELSE 'succeeded' END"
    " FROM rota_jobs w WHERE w.workflow = j.workflow) ELSE j.state END"
)
#: A schedule's columns (alias s) and its last job's state (alias j), in the order
#: ``postgres.schedules`` reads them.
SCHEDULE_COLUMNS = (
    "s.name, s.kind, s.payload, s.queue, s.priority, s.tenant, s.max_attempts, s.every_us, "
    "s.cron, s.timezone, s.anchor, s.jitter_us, s.misfire, s.misfire_limit, s.grace_us, "
    "s.overlap, s.workflow, s.paused, s.next_run_at, s.last_run_at, s.last_job_id, "
    f"s.created_at, s.updated_at, s.missed, {_LAST_STATE}"
)

_QUALIFIED_COLUMNS = ", ".join("j." + column.strip() for column in JOB_COLUMNS.split(","))
_NULL_COLUMNS = ", ".join("NULL" for _ in JOB_COLUMNS.split(","))


def _marker_row(column: str, value: str) -> str:
    """A claim's marker row: every job column NULL but ``column``, which is ``value``."""
    return ", ".join(value if name.strip() == column else "NULL" for name in JOB_COLUMNS.split(","))


#: The claim's "walk was cut" row: every job column NULL but the tenant, which carries g.last.
_WALK_MARKER = _marker_row("tenant", "g.last")
#: The state "claim_fresh" gives its row of NULLs when a lease it could take over has expired.
EXPIRED_MARKER = "expired"
_EXPIRED_MARKER = _marker_row("state", f"'{EXPIRED_MARKER}'")
#: The state "claim_all" gives its row of NULLs when more jobs are due than its batch takes.
CROWDED_MARKER = "crowded"
_CROWDED_MARKER = _marker_row("state", f"'{CROWDED_MARKER}'")
#: Counts the rows of a CTE named "done" that reached a terminal state, per minute.
_TALLY = """
    INSERT INTO rota_finished_per_minute (minute, state, n)
    SELECT date_trunc('minute', coalesce(%(now)s::timestamptz, now())), state, count(*)
    FROM done WHERE state IN ('succeeded', 'dead', 'cancelled') GROUP BY state
    ON CONFLICT (minute, state) DO UPDATE SET n = rota_finished_per_minute.n + excluded.n
""".strip()
#: DURATION_BOUNDS_US as an interval[] literal: width_bucket on intervals spares each row the
#: numeric arithmetic of extract(epoch ...).
_BOUNDS = "{" + ",".join(f'"{us} us"' for us in DURATION_BOUNDS_US) + "}"
#: Adds the attempts that rows of a CTE named "done" ended to the per-minute activity tallies
#: (029_activity), rows taken in key order (two batches never deadlock on them). Each row
#: ended one attempt: succeeded, or failed (pending again, or dead).
_ACTIVITY = f"""
    INSERT INTO rota_activity AS a (minute, queue, kind, bucket, succeeded, failed, dead, waited)
    SELECT date_trunc('minute', coalesce(%(now)s::timestamptz, now())), queue, kind, bucket,
           count(*) FILTER (WHERE measure = 'run' AND state = 'succeeded'),
           count(*) FILTER (WHERE measure = 'run' AND state <> 'succeeded'),
           count(*) FILTER (WHERE measure = 'run' AND state = 'dead'),
           count(*) FILTER (WHERE measure = 'wait')
    FROM (
        SELECT done.queue, done.kind, done.state, m.measure,
               width_bucket(m.took, '{_BOUNDS}'::interval[]) AS bucket
        FROM done CROSS JOIN LATERAL (VALUES
            ('run', coalesce(%(now)s::timestamptz, now()) - done.started_at),
            ('wait', done.started_at - done.due_at)
        ) AS m(measure, took)
    ) AS ended
    GROUP BY queue, kind, bucket
    ORDER BY queue, kind, bucket
    ON CONFLICT (minute, queue, kind, bucket) DO UPDATE SET
        succeeded = a.succeeded + excluded.succeeded, failed = a.failed + excluded.failed,
        dead = a.dead + excluded.dead, waited = a.waited + excluded.waited
""".strip()
#: Wakes workers for the rows of a CTE named "done" that became pending (the same message
#: the insert trigger sends), sent on commit; "woke" must be referenced for it to run.
_WAKE = """
    wake AS (
        SELECT pg_notify('rota_jobs',
                         queue || ' ' || (extract(epoch FROM min(run_at)) * 1000000)::bigint)
        FROM done WHERE state = 'pending' GROUP BY queue
    ), woke AS (SELECT count(*) FROM wake)
""".strip()
#: Tells result waiters (LISTEN rota_finished) that rows of a CTE named "done" that someone
#: waits for (rota_result_waits) reached a terminal state: their wait rows are consumed and one
#: constant notification is sent on commit, inside the statement that finishes the jobs (no
#: round trip); a statement finishing only jobs nobody waits for sends none, so it never takes
#: the commit lock NOTIFY needs. "told" must be referenced for the notification to be sent.
#: The EXISTS is tested once per statement: while nobody waits for any job (the usual case)
#: the wait table is not probed for each finished job (about a tenth of a completion's time).
_FINISHED = """
    waited AS (
        DELETE FROM rota_result_waits
        WHERE EXISTS (SELECT FROM rota_result_waits) AND job_id IN (
            SELECT id FROM done WHERE state IN ('succeeded', 'dead', 'cancelled'))
        RETURNING 1
    ), finished AS (
        SELECT pg_notify('rota_finished', '') WHERE EXISTS (SELECT 1 FROM waited)
    ), told AS (SELECT count(*) FROM finished)
""".strip()
#: The states statements name, from the state machine's table (rota.domain.transitions), so
#: that the SQL cannot drift from it: ``{accepts:VERB}`` is the condition that the row's state
#: is one VERB accepts.
_STATES = {
    **{f"{{accepts:{verb}}}": accepts(verb) for verb in MOVES},
    **{f"{{j.accepts:{verb}}}": accepts(verb, "j.state") for verb in MOVES},
    "{unfinished}": in_list(UNFINISHED_STATES),
    "{keeps_key}": in_list(ACTIVE_STATES),
    # Pending, spelled as none of the other active states: a condition no partial index's
    # follows from (the claim's TID scan, "_due").
    "{pending_among_active}": " AND ".join(
        f"j.state <> '{state.value}'"
        for state in JobState
        if state in UNFINISHED_STATES and state is not JobState.PENDING
    ),
}
_NAME = re.compile(r"^-- name: (\w+)\s*$", re.MULTILINE)


def _literal(text: str) -> str:
    """``text`` as an SQL string literal (a constant of ours: no quote, no ``%``)."""
    if "'" in text or "%" in text:
        raise ValueError(f"not a plain constant: {text!r}")
    return f"'{text}'"


_LAST = "j.attempt >= j.max_attempts"
_GIVEN_BACK = f"(NOT j.lease_started OR (j.crashes = 0 AND {_LAST}))"
_CRASHES_AFTER = "(j.crashes + j.lease_started::int)"
_ATTEMPT_AFTER = f"(j.attempt - CASE WHEN {_GIVEN_BACK} THEN 1 ELSE 0 END)"


def _alone(crashes: str, attempt: str) -> str:
    """rota.domain.job_state.runs_alone of the row j's next attempt, SQL for its crashes and the
    attempt before it."""
    return (
        f"({crashes} >= {ALONE_AFTER_CRASHES}"
        f" OR ({crashes} > 0 AND {attempt} + 1 >= j.max_attempts))"
    )


#: rota.domain.blame.expire, for the expired lease of the row aliased j, and which attempts
#: run alone.
_EXPIRY = {
    "{expiry_dead}": f"(j.lease_started AND j.crashes > 0 AND {_LAST})",
    "{expiry_given_back}": _GIVEN_BACK,
    "{expiry_crashes}": _CRASHES_AFTER,
    #: Whether the next attempt runs alone: of a pending row, and after the row's expiry.
    "{alone_next}": _alone("j.crashes", "j.attempt"),
    "{alone_after_expiry}": _alone(_CRASHES_AFTER, _ATTEMPT_AFTER),
    "{expiry_error}": (
        f"(CASE WHEN NOT j.lease_started THEN {_literal(blame.NOT_STARTED)}"
        f" WHEN j.crashes = 0 AND {_LAST} THEN {_literal(blame.LAST_SHARED)}"
        f" WHEN {_LAST} THEN "
        + _literal(blame.DIED).replace("{crashes}", "' || (j.crashes + 1) || '")
        + f" ELSE {_literal(blame.LEASE_EXPIRED)} END)"
    ),
}


@cache
def queries() -> dict[str, str]:
    """Every named statement of queries.sql and durable.sql, with {job_columns} (and {j.job_columns}, the
    same columns qualified by the alias j) and {schedule_columns} filled in."""
    folder = resources.files(__package__)
    # durable.sql: the durable verbs' statements (postgres/durable.py), in the same form.
    text = "\n".join(
        folder.joinpath(name).read_text(encoding="utf-8") for name in ("queries.sql", "durable.sql")
    )
    parts = _NAME.split(text)
    bodies = {name: body.strip() for name, body in zip(parts[1::2], parts[2::2], strict=True)}
    # Names starting with "_" are fragments, spliced into statements as {_name}.
    fragments = {name: body for name, body in bodies.items() if name.startswith("_")}
    # A fragment may splice in another ({_beats} in {_take}): those are spliced first.
    for name, body in fragments.items():
        for inner, text_of in fragments.items():
            body = body.replace("{" + inner + "}", text_of)
        fragments[name] = body
    named: dict[str, str] = {}
    for name, body in bodies.items():
        for fragment, text_of in fragments.items():
            body = body.replace("{" + fragment + "}", text_of)
        for placeholder, text_of in (*_EXPIRY.items(), *_STATES.items()):
            body = body.replace(placeholder, text_of)
        named[name] = (
            body.replace("{job_columns}", JOB_COLUMNS)
            .replace("{j.job_columns}", _QUALIFIED_COLUMNS)
            .replace("{null_job_columns}", _NULL_COLUMNS)
            .replace("{walk_marker_columns}", _WALK_MARKER)
            .replace("{expired_marker_columns}", _EXPIRED_MARKER)
            .replace("{crowded_marker_columns}", _CROWDED_MARKER)
            .replace("{tally}", _TALLY)
            .replace("{activity}", _ACTIVITY)
            .replace("{wake}", _WAKE)
            .replace("{finished}", _FINISHED)
            .replace("{schedule_columns}", SCHEDULE_COLUMNS)
            .replace("{state_bit}", STATE_BIT_SQL)
        )
    for name, routine in ROUTINES.items():
        named[name] = routine.call()
    return named


def query(name: str) -> str:
    return queries()[name]


@dataclass(frozen=True)
class Routine:
    """A statement of queries.sql run inside a PL/pgSQL function of the same parameters.

    Why a function: a claim's parameters (the queue array, the batch size) make PostgreSQL
    estimate its generic plan far above its custom plans, so prepared, it never settles on the
    generic plan and is planned afresh on every call, about as long as it takes to run. A
    PL/pgSQL function keeps its statement's plan for the session, and its own setting of
    plan_cache_mode makes that plan the generic one: the statement is planned once per
    connection and stays one statement that commits by itself. ``migrate`` makes the
    functions from this version's statements (``routines``), dropping and creating each, so a
    change of parameters or columns needs nothing more.
    """

    statement: str
    function: str
    parameters: tuple[tuple[str, str], ...]
    returns: tuple[tuple[str, str], ...]
    #: Planner settings for the function's statements (SET on the function).
    settings: tuple[tuple[str, str], ...] = ()

    def definition(self) -> str:
        body = queries()[self.statement].rstrip().removesuffix(";")
        for name, _ in self.parameters:
            body = body.replace(f"%({name})s", f"p_{name}").replace(f"%({name})b", f"p_{name}")
        if "%" in body or "$routine$" in body:
            raise ValueError(f"{self.statement} has a parameter {self.function} does not take")
        parameters = ", ".join(f"p_{name} {kind}" for name, kind in self.parameters)
        columns = ", ".join(f"{name} {kind}" for name, kind in self.returns)
        return (
            f"DROP FUNCTION IF EXISTS {self.function};\n"
            f"CREATE FUNCTION {self.function}({parameters})\nRETURNS TABLE ({columns})\n"
            "LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan"
            f"{''.join(f' SET {name} = {value}' for name, value in self.settings)}"
            " AS $routine$\n"
            "#variable_conflict use_column\nBEGIN\nRETURN QUERY\n"
            f"{body};\nEND\n$routine$;\n"
        )

    def call(self) -> str:
        """The statement the store sends (its parameters typed: NULLs would leave the function
        to call unresolved; arrays sent in binary, as every statement sends them)."""
        arguments = ", ".join(
            f"%({name}){'b' if kind.endswith('[]') else 's'}::{kind}"
            for name, kind in self.parameters
        )
        return f"SELECT * FROM {self.function}({arguments})"


#: Planner settings for a claim's statements: every read of a claim has an index made for it
#: (or, for the rows it leases, their tuple ids), and with sequential and bitmap scans off its
#: plan uses them whatever the statistics said when it was made (rota_claim's, and the limited
#: claim's transaction). With sorts off, a read in an index's order is taken over a sort
#: wherever one exists (the check for expired leases: rota_jobs_leases, not every running job
#: through the (state, id) index, when the statistics were taken while few jobs ran). A
#: disabled node's cost stays in the estimate, far above JIT's thresholds: JIT is off (it
#: would compile every claim, for far longer than a claim runs).
CLAIM_SETTINGS = (
    ("enable_seqscan", "off"),
    ("enable_bitmapscan", "off"),
    ("enable_sort", "off"),
    ("jit", "off"),
)

#: The parameters of a claim's functions (rota_claim, rota_claim_fresh, rota_claim_all).
_CLAIM_PARAMETERS = (
    ("now", "timestamptz"),
    ("queues", "text[]"),
    ("take", "integer"),
    ("lease", "interval"),
    ("worker", "text"),
    ("fair", "boolean"),
    ("after", "text"),
    ("max_groups", "integer"),
    ("blocked_kinds", "text[]"),
    ("blocked_tenants", "text[]"),
    ("kinds", "text[]"),
    ("limited", "boolean"),
)

#: The statements run as functions, by the name of the statement the store sends for each.
#: A claim's plan is made once, from the statistics of that moment, and kept: made while the
#: table was empty (a fresh database, or one analysed between bursts), it could read every
#: pending job per claimed row once a burst arrived (~50 ms a claim of 250 at 20,000 pending);
#: hence CLAIM_SETTINGS.
ROUTINES = {
    f"{statement}_call": Routine(
        statement=statement,
        function=f"rota_{statement}",
        parameters=_CLAIM_PARAMETERS,
        returns=_JOB_COLUMN_TYPES,
        settings=CLAIM_SETTINGS,
    )
    # The claim's functions: rota_claim, rota_claim_fresh, rota_claim_all.
    for statement in ("claim", "claim_fresh", "claim_all")
}


def routines() -> str:
    """The functions of ``ROUTINES``, as this version defines them."""
    return "".join(routine.definition() for routine in ROUTINES.values())


@cache
def migrations() -> list[tuple[str, str]]:
    """(version, SQL) of every migration, in order: the versioned files (the version is the
    file's stem), then the functions of this version's ``ROUTINES``, named by their digest, so
    a schema whose functions are another version's has a migration pending."""
    folder = resources.files(__package__).joinpath("migrations")
    found = sorted(
        (entry.name.removesuffix(".sql"), entry.read_text(encoding="utf-8"))
        for entry in folder.iterdir()
        if entry.name.endswith(".sql")
    )
    functions = routines()
    digest = hashlib.sha256(functions.encode()).hexdigest()[:12]
    return [*found, (f"routines_{digest}", functions)]
