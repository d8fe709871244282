"""Enqueueing on PostgreSQL: the statements as a sans-I/O flow, and COPY for large batches.

The flow is a generator of (statement, parameters) steps that receives each step's rows, so
the same logic runs on the store's pool, on a caller's async connection and on a caller's sync
connection (transactional enqueue) without a hand-kept twin.
"""

from __future__ import annotations

import gc
import itertools
import json
from collections import Counter
from collections.abc import Generator, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any, TypeAlias

import psycopg
from psycopg.rows import TupleRow

from rota.domain.errors import StoreUnavailable
from rota.domain.job import EnqueueResult, Job, JobSpec
from rota.domain.job_state import JobState, state_mask
from rota.store.postgres.connect import PoolConnection
from rota.store.postgres.moved import again_if_moved, again_if_moved_sync
from rota.store.postgres.queries import query
from rota.store.postgres.rows import Row, array_or_null, returns_rows, row_to_job, us

#: A statement to run and the rows it returned: the steps of a sans-I/O flow.
Step: TypeAlias = tuple[str, dict[str, Any]]
Flow: TypeAlias = Generator[Step, list[Row], Any]

#: From this many jobs without unique keys, enqueue uses COPY instead of one INSERT.
COPY_THRESHOLD = 2_000
COPY_NULL = "\\N"
#: Jobs per COPY write: small enough that building one chunk's results overlaps the server's
#: work on the chunks still in the socket's buffer.
COPY_CHUNK = 1_000


def enqueue_flow(specs: Sequence[JobSpec], now: datetime | None) -> Flow:
    """The statements of an enqueue, independent of how they are executed.

    A spec not inserted because its key is taken resolves to the job holding the key; if that
    job finished between our insert and our lookup, the spec is inserted again (bounded).
    """
    results: list[EnqueueResult | None] = [None] * len(specs)
    slotted = [spec for spec in specs if spec.schedule is not None and spec.slot_at is not None]
    if slotted:
        holders = yield from slot_holders(slotted)
        for index, spec in enumerate(specs):
            holder = holders.get((spec.schedule, spec.slot_at))
            if holder is not None:
                results[index] = EnqueueResult(holder, duplicate=True)
    todo = [index for index, result in enumerate(results) if result is None]
    for _ in range(5 if todo else 0):
        batch = [specs[i] for i in todo]
        if len(batch) == 1 and batch[0].plain:
            [plain] = yield query("enqueue_plain"), enqueue_plain_params(batch[0], now)
            return [plain_result(batch[0], plain)]
        if len(batch) == 1:
            rows = yield query("enqueue_one"), enqueue_one_params(batch[0], now)
        else:
            rows = yield query("enqueue"), enqueue_params(batch, now)
        # Rows come back in insertion order (ids ascending): walk them beside the specs; a
        # keyed spec whose key does not match the next row was a duplicate.
        inserted = iter(sorted(rows))
        row = next(inserted, None)
        duplicates: list[int] = []
        for index in todo:
            spec = specs[index]
            if row is not None and (not spec.keyed or row_matches_key(row, spec)):
                job_id, run_at, created_at = row[0], row[1], row[2]
                job = spec.inserted(job_id, run_at, created_at, row[6])
                results[index] = EnqueueResult(job)
                row = next(inserted, None)
            else:
                duplicates.append(index)
        if not duplicates:
            break
        keyed = [specs[i] for i in duplicates]
        rows = yield (
            query("existing_for_keys"),
            {
                "unique_keys": [s.unique_key for s in keyed if s.unique_key is not None],
                "schedules": [s.schedule for s in keyed if s.schedule and s.slot_at],
                "slots": [s.slot_at for s in keyed if s.schedule and s.slot_at],
            },
        )
        holders = [row_to_job(row) for row in rows]
        todo = []
        for index in duplicates:
            spec = specs[index]
            holder = next((job for job in holders if job_matches_key(job, spec)), None)
            if holder is None:
                todo.append(index)  # the holder finished meanwhile: insert again
            else:
                results[index] = EnqueueResult(holder, duplicate=True)
        if not todo:
            break
    if any(result is None for result in results):
        raise StoreUnavailable("enqueue kept racing with jobs holding the same unique keys")
    return results


def slot_holders(specs: Sequence[JobSpec]) -> Flow:
    """Lock the schedule slots of ``specs`` until the transaction ends (every enqueue of a slot
    takes its lock first) and return the jobs that hold them already, by (schedule, slot_at):
    a slot is unique across every state, which no index can say across the partitions of
    finished jobs (019_finished_by_day). Run inside a transaction."""
    params = {
        "schedules": [spec.schedule for spec in specs],
        "slots": [spec.slot_at for spec in specs],
    }
    yield query("lock_slots"), params
    rows = yield query("slot_jobs"), params
    holders = (row_to_job(row) for row in rows)
    return {(job.schedule, job.slot_at): job for job in holders}


def enqueue_any_flow(specs: Sequence[JobSpec], now: datetime | None) -> Flow:
    """``enqueue_flow``, or, when some spec holds its key beyond the active states or
    replaces its holder, every spec in turn, each such spec serialised on its key (the caller
    runs the flow in one transaction)."""
    if not any(spec.holds_beyond_active for spec in specs):
        return (yield from enqueue_flow(specs, now))
    results: list[EnqueueResult] = []
    for spec in specs:
        if not spec.holds_beyond_active:
            results += yield from enqueue_flow([spec], now)
            continue
        yield query("lock_unique_key"), {"key": spec.unique_key}
        rows = yield query("held_unique_key"), {"key": spec.unique_key, "now": now}
        if not rows:
            [result] = yield from enqueue_flow([spec], now)
            if not result.duplicate:
                results.append(result)
                continue
            holder = result.job
        else:
            holder = row_to_job(rows[0])
        if spec.on_conflict == "replace" and holder.state is JobState.PENDING:
            replaced = yield (
                query("replace_held"),
                {
                    "now": now,
                    "id": holder.id,
                    "payload": spec.payload_json,
                    "run_at": spec.run_at,
                    "delay_us": us(spec.delay) if spec.delay is not None else 0,
                },
            )
            if replaced:
                results.append(
                    EnqueueResult(row_to_job(replaced[0]), duplicate=True, replaced=True)
                )
                continue
        results.append(EnqueueResult(holder, duplicate=True))
    return results


#: The parameters of "enqueue" (arrays) and "enqueue_one" (values), in ``_values``' order.
_COLUMNS = (
    "kind",
    "queue",
    "payload",
    "priority",
    "run_at",
    "delay_us",
    "max_attempts",
    "tenant",
    "unique_key",
    "timeout_us",
    "schedule",
    "slot_at",
    "trace_context",
    "expires_at",
    "expire_after_us",
    "unique_for_us",
    "unique_states",
)
#: The columns every spec sets; the others, left unset by most jobs, go as one NULL array.
_ALWAYS_SET = frozenset(("kind", "queue", "payload", "priority", "delay_us", "max_attempts"))


def _values(s: JobSpec) -> tuple[Any, ...]:
    """What ``s`` sends for each of ``_COLUMNS``."""
    return (
        s.kind,
        s.queue,
        s.payload_json,
        s.priority,
        s.run_at,
        us(s.delay) if s.delay is not None else 0,
        s.max_attempts,
        s.tenant,
        s.unique_key,
        us(s.timeout) if s.timeout is not None else None,
        s.schedule,
        s.slot_at,
        trace_context_json(s),
        s.expires_at,
        us(s.expire_after) if s.expire_after else None,
        us(s.unique_for) if s.unique_for else None,
        state_mask(s.unique_states) if s.unique_states is not None else None,
    )


def enqueue_params(specs: Sequence[JobSpec], now: datetime | None) -> dict[str, Any]:
    """The arrays of the "enqueue" statement; a column no spec sets is sent as NULL (unnest
    pads it with NULLs), so the options most jobs leave unset cost nothing to send."""
    params: dict[str, Any] = {"now": now}
    columns = list(zip(*map(_values, specs), strict=True)) or [()] * len(_COLUMNS)
    for name, column in zip(_COLUMNS, columns, strict=True):
        values = list(column)
        params[name] = values if name in _ALWAYS_SET else array_or_null(values)
    return params


def enqueue_one_params(spec: JobSpec, now: datetime | None) -> dict[str, Any]:
    """The values of the "enqueue_one" statement: one spec's, each on its own."""
    return {"now": now, **dict(zip(_COLUMNS, _values(spec), strict=True))}


def enqueue_plain_params(spec: JobSpec, now: datetime | None) -> dict[str, Any]:
    """The values of the "enqueue_plain" statement, for a ``plain`` spec."""
    return {
        "now": now,
        "kind": spec.kind,
        "queue": spec.queue,
        "payload": spec.payload_json,
        "priority": spec.priority,
        "run_at": spec.run_at,
        "delay_us": us(spec.delay) if spec.delay is not None else 0,
        "max_attempts": spec.max_attempts,
        "tenant": spec.tenant,
        "timeout_us": us(spec.timeout) if spec.timeout is not None else None,
    }


def plain_result(spec: JobSpec, row: Sequence[Any]) -> EnqueueResult:
    """The result of a ``plain`` spec from its "enqueue_plain" row (id, run_at, created_at,
    and the wake-up's void)."""
    job_id, run_at, created_at = row[0], row[1], row[2]
    return EnqueueResult(spec.inserted(job_id, run_at, created_at, None))


def trace_context_json(spec: JobSpec) -> str | None:
    return (
        None
        if spec.trace_context is None
        else json.dumps(spec.trace_context, separators=(",", ":"))
    )


def job_matches_key(job: Job, spec: JobSpec) -> bool:
    if spec.schedule is not None and spec.slot_at is not None:
        return job.schedule == spec.schedule and job.slot_at == spec.slot_at
    return job.unique_key == spec.unique_key


def row_matches_key(row: Row, spec: JobSpec) -> bool:
    """Whether an inserted row (id, run_at, created_at, unique_key, schedule, slot_at) is the
    one ``spec`` asked for."""
    if spec.schedule is not None and spec.slot_at is not None:
        return bool(row[4] == spec.schedule and row[5] == spec.slot_at)
    return bool(row[3] == spec.unique_key)


def copy_line(job_id: int, spec: JobSpec, now: datetime, now_text: str | None) -> str:
    """One row of COPY text for a keyless spec (no unique key, and no schedule and slot
    together; either alone is kept). Names are [A-Za-z0-9_.:-] by validation and
    compact JSON never holds a raw tab or newline, so only the JSON's backslashes need escaping
    (a trace context is printable ASCII, so its JSON holds neither either).

    ``now_text`` None: the row is for "copy_jobs_now", without run_at and created_at (the
    spec is due now, and both take their column's default)."""
    payload = spec.payload_json.replace("\\", "\\\\")
    traced = trace_context_json(spec)
    expires = spec.expiry_at(now)
    tenant = spec.tenant if spec.tenant is not None else COPY_NULL
    timeout = us(spec.timeout) if spec.timeout is not None else COPY_NULL
    traced = traced.replace("\\", "\\\\") if traced is not None else COPY_NULL
    expiry = expires.isoformat() if expires is not None else COPY_NULL
    schedule = spec.schedule if spec.schedule is not None else COPY_NULL
    slot = spec.slot_at.isoformat() if spec.slot_at is not None else COPY_NULL
    # One f-string: a fifth cheaper than joining a tuple of the fields.
    if now_text is None:
        return (
            f"{job_id}\t{spec.kind}\t{spec.queue}\t{payload}\t{spec.priority}\t"
            f"{spec.max_attempts}\t{tenant}\t{timeout}\t{traced}\t{expiry}\t{schedule}\t{slot}\n"
        )
    due = now_text if spec.run_at is None and spec.delay is None else spec.due_at(now).isoformat()
    return (
        f"{job_id}\t{spec.kind}\t{spec.queue}\t{payload}\t{spec.priority}\t{due}\t"
        f"{spec.max_attempts}\t{tenant}\t{timeout}\t{now_text}\t{traced}\t{expiry}\t"
        f"{schedule}\t{slot}\n"
    )


def due_now(specs: Sequence[JobSpec]) -> bool:
    """Whether every one of ``specs`` is due at the store's now (no run_at, no delay)."""
    return all(spec.run_at is None and spec.delay is None for spec in specs)


async def copy_jobs(
    conn: psycopg.AsyncConnection[TupleRow], specs: Sequence[JobSpec], now: datetime | None
) -> list[EnqueueResult]:
    """A large keyless batch by COPY, inside the caller's transaction: ids are reserved first,
    so every job is known without reading the rows back. One COPY unless a COPY of jobs due
    now meets later ones (``_copy_rows``): the rest then takes a COPY of its own."""
    chunks = (specs[start : start + COPY_CHUNK] for start in range(0, len(specs), COPY_CHUNK))
    results: list[EnqueueResult] = []
    first: Sequence[JobSpec] | None = next(chunks)
    while first is not None:
        left = len(specs) - len(results)
        done, _, first = await _copy_block(conn, left, first, chunks, now, keyless=True)
        results += done
    return results


async def stream_jobs(
    conn: psycopg.AsyncConnection[TupleRow],
    head: list[JobSpec],
    rest: Iterator[JobSpec],
    now: datetime | None,
) -> list[EnqueueResult]:
    """``head`` (keyless specs) and then those ``rest`` yields, inside the caller's
    transaction: by COPY while they are keyless, each chunk sent as soon as it is made, so the
    server inserts one chunk while the caller makes the next. The count is not known ahead, so
    ids are reserved in blocks that double (from ``len(head)`` to MAX_ID_BLOCK; the unused
    ids of the last block, or of one cut short by a job not due now, are left as a gap in the
    sequence). From the first keyed spec on, the rest goes through the enqueue flow, in the
    same transaction."""
    chunks = _chunked(head, rest)
    results: list[EnqueueResult] = []
    block = len(head)
    first: Sequence[JobSpec] | None = next(chunks, None)
    while first is not None:
        done, tail, first = await _copy_block(conn, block, first, chunks, now)
        results += done
        if tail:  # a keyed spec: it and everything after it take the flow
            results += await drive_async(conn, enqueue_any_flow([*tail, *rest], now))
            return results
        block = min(2 * block, MAX_ID_BLOCK)
    return results


#: The most ids a streamed enqueue reserves at once (see ``stream_jobs``).
MAX_ID_BLOCK = 65_536


def _chunked(head: list[JobSpec], rest: Iterator[JobSpec]) -> Iterator[Sequence[JobSpec]]:
    for start in range(0, len(head), COPY_CHUNK):
        yield head[start : start + COPY_CHUNK]
    while chunk := list(itertools.islice(rest, COPY_CHUNK)):
        yield chunk


async def _copy_block(
    conn: psycopg.AsyncConnection[TupleRow],
    count: int,
    first: Sequence[JobSpec],
    chunks: Iterator[Sequence[JobSpec]],
    now: datetime | None,
    *,
    keyless: bool = False,
) -> tuple[list[EnqueueResult], list[JobSpec], Sequence[JobSpec] | None]:
    """One COPY of up to ``count`` jobs (``count`` >= len(first)): ``first``, then chunks
    taken from ``chunks`` while the reserved ids last. Returns the results; the specs of a
    chunk from its first keyed spec on (which COPY cannot write; nothing after them was
    taken); and the chunk taken that did not fit, for the next block (None: none taken).
    ``keyless``: the caller knows no spec is keyed, and no chunk is searched for one."""
    cursor = await conn.execute(query("reserve_ids"), {"now": now, "count": count})
    row = await cursor.fetchone()
    assert row is not None
    at, ids = row
    # Without a clock given, ``at`` is the transaction's now(), the default of run_at and
    # created_at (022): a block that starts with jobs due now leaves both out of its rows.
    shape = "copy_jobs_now" if now is None and due_now(first) else "copy_jobs"
    with collector_paused():
        return await _copy_rows(conn, cursor, shape, count, ids, at, first, chunks, keyless=keyless)


@contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector held off for one COPY block (at most MAX_ID_BLOCK
    jobs, or one list given whole). A block makes three objects per job that all live until
    the call returns (the spec, its Job, its result): each collection the allocations set off
    walks them all again, a good part of a large enqueue's time. The collector is enabled
    again as the block ends, if it was before; reference counting frees everything else
    meanwhile."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


async def _copy_rows(
    conn: psycopg.AsyncConnection[TupleRow],
    cursor: psycopg.AsyncCursor[TupleRow],
    shape: str,
    count: int,
    ids: list[int],
    at: datetime,
    first: Sequence[JobSpec],
    chunks: Iterator[Sequence[JobSpec]],
    *,
    keyless: bool,
) -> tuple[list[EnqueueResult], list[JobSpec], Sequence[JobSpec] | None]:
    """The rows of one COPY (see ``_copy_block``). ``shape``: "copy_jobs", or
    "copy_jobs_now" (rows without run_at and created_at), whose COPY ends before a chunk
    holding a job not due now: that chunk is returned as the one that did not fit."""
    instants_left_out = shape == "copy_jobs_now"
    at_text = None if instants_left_out else at.isoformat()
    results: list[EnqueueResult] = []
    tail: list[JobSpec] = []
    used = 0
    chunk: Sequence[JobSpec] | None = first
    copied = Copied()
    async with cursor.copy(query(shape)) as copy:
        while chunk is not None:
            keyed = None if keyless else next((i for i, s in enumerate(chunk) if s.keyed), None)
            if keyed is not None:
                tail = list(chunk[keyed:])
                chunk = chunk[:keyed]
            ids_chunk = ids[used : used + len(chunk)]
            used += len(chunk)
            lines = zip(ids_chunk, chunk, strict=True)
            await copy.write("".join(copy_line(i, spec, at, at_text) for i, spec in lines))
            # The server parses and inserts what was just sent meanwhile: the jobs are known
            # already (their ids reserved), so build their results now rather than after.
            done = [
                EnqueueResult(spec.inserted(job_id, spec.due_at(at), at, spec.expiry_at(at)))
                for job_id, spec in zip(ids_chunk, chunk, strict=True)
            ]
            copied.add(done)
            results += done
            if tail:
                break
            chunk = next(chunks, None)
            if chunk is not None and (
                used + len(chunk) > count or (instants_left_out and not due_now(chunk))
            ):
                break
    if copied.counts:
        await conn.execute(query("copied"), copied.params())
    return results, tail, None if tail else chunk


class Copied:
    """What the jobs of one COPY add up to, for the "copied" statement: how many per (queue,
    kind), and the earliest run_at per queue."""

    __slots__ = ("counts", "due")

    def __init__(self) -> None:
        self.counts: Counter[tuple[str, str]] = Counter()
        self.due: dict[str, datetime] = {}

    def add(self, results: Sequence[EnqueueResult]) -> None:
        due = self.due
        for result in results:
            job = result.job
            earliest = due.get(job.queue)
            if earliest is None or job.run_at < earliest:
                due[job.queue] = job.run_at
        self.counts.update((result.job.queue, result.job.kind) for result in results)

    def params(self) -> dict[str, Any]:
        return {
            "queues": [queue for queue, _ in self.counts],
            "kinds": [kind for _, kind in self.counts],
            "counts": list(self.counts.values()),
            "due_queues": list(self.due),
            "due": list(self.due.values()),
        }


#: Steps that lock or update jobs that already exist, which a concurrent transaction may
#: have moved to another partition (moved.py): such a step runs in a savepoint, again if it
#: met a moved job, so the rest of the flow (and a caller's own transaction) goes on. Every
#: other step of a flow only inserts, or reads.
RELOCKING = ("replace_held", "workflow_parents", "workflow_adopt")


def _relocks(statement: str) -> bool:
    return any(statement == query(name) for name in RELOCKING)


async def _step(
    conn: psycopg.AsyncConnection[TupleRow], statement: str, params: dict[str, Any]
) -> psycopg.AsyncCursor[TupleRow]:
    # A pool connection's kept cursor (drive_async reads each step's rows before the next);
    # a caller's own connection gets a cursor of its own.
    cursor = conn.kept_cursor() if isinstance(conn, PoolConnection) else conn.cursor()
    if not _relocks(statement):
        return await cursor.execute(statement, params)

    async def in_savepoint() -> psycopg.AsyncCursor[TupleRow]:
        async with conn.transaction():
            return await cursor.execute(statement, params)

    return await again_if_moved(in_savepoint)


def _step_sync(
    conn: psycopg.Connection[Any], statement: str, params: dict[str, Any]
) -> psycopg.Cursor[Any]:
    if not _relocks(statement):
        return conn.execute(statement, params)

    def in_savepoint() -> psycopg.Cursor[Any]:
        with conn.transaction():
            return conn.execute(statement, params)

    return again_if_moved_sync(in_savepoint)


async def drive_async(conn: psycopg.AsyncConnection[TupleRow], flow: Flow) -> Any:
    """Run ``flow``'s steps on ``conn`` (inside whatever transaction it has open)."""
    try:
        statement, params = next(flow)
        while True:
            cursor = await _step(conn, statement, params)
            rows = await cursor.fetchall() if returns_rows(cursor) else []
            statement, params = flow.send(rows)
    except StopIteration as done:
        return done.value


def drive_sync(conn: psycopg.Connection[Any], flow: Flow) -> Any:
    """``drive_async`` on a synchronous connection."""
    try:
        statement, params = next(flow)
        while True:
            cursor = _step_sync(conn, statement, params)
            rows = cursor.fetchall() if returns_rows(cursor) else []
            statement, params = flow.send(rows)
    except StopIteration as done:
        return done.value
