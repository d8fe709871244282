"""PostgresStore's operator verbs (store.py): retry, rerun, cancel, hold, delete, reschedule
and purge, one job at a time or by filter, and the workflow verbs."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from datetime import datetime
from typing import Any

import psycopg
from psycopg import sql

from rota.domain.errors import JobNotFound, JobRunning, StateConflict
from rota.domain.job import Job, JobEdit
from rota.domain.job_state import JobState
from rota.domain.transitions import MOVES, refusal
from rota.domain.workflow import Workflow
from rota.store.postgres.filters import guarded, where
from rota.store.postgres.part import PostgresPart
from rota.store.postgres.queries import JOB_COLUMNS, LIST_COLUMNS, query
from rota.store.postgres.rows import Row, row_to_job, row_to_listed
from rota.store.postgres.workflows import enqueue_workflow_flow
from rota.store.records import MAX_BULK, MAX_PAGE_EDGES, JobFilter


class PostgresOperate(PostgresPart):
    """The verbs an operator calls on jobs and workflows."""

    # ------------------------------------------------------------------ operator verbs

    async def retry(
        self, job_id: int, *, max_attempts: int | None = None, now: datetime | None = None
    ) -> Job:
        try:
            rows = await self._fetch(
                "retry",
                {"now": self._now(now), "ids": [job_id], "max_attempts": max_attempts or 1},
            )
        except psycopg.errors.UniqueViolation:
            raise StateConflict(f"job {job_id}: another active job holds its unique key") from None
        if rows:
            return row_to_job(rows[0])
        raise await self._conflict(job_id, "retry")

    async def rerun(self, job_id: int, *, now: datetime | None = None) -> Job:
        try:
            rows = await self._fetch("rerun", {"now": self._now(now), "id": job_id})
        except psycopg.errors.UniqueViolation:
            raise StateConflict(f"job {job_id}: another active job holds its unique key") from None
        if rows:
            return row_to_job(rows[0])
        raise await self._conflict(job_id, "rerun")

    async def cancel(self, job_id: int, *, now: datetime | None = None) -> Job:
        rows = await self._fetch("cancel", {"now": self._now(now), "ids": [job_id]})
        if rows:
            return row_to_job(rows[0])
        raise await self._conflict(job_id, "cancel")

    async def _conflict(self, job_id: int, verb: str) -> Exception:
        """Why ``verb`` changed no row: the job is gone, or the table refuses its state."""
        rows = await self._fetch("state_of", {"id": job_id})
        if not rows:
            return JobNotFound(job_id)
        return StateConflict(refusal(job_id, rows[0][0], verb))

    async def bulk_retry(self, filter: JobFilter, *, limit: int = MAX_BULK) -> int:
        ids = await self._matching_ids(filter, _values(MOVES["retry"].sources), limit)
        if not ids:
            return 0
        try:
            rows = await self._fetch(
                "retry", {"now": self._now(None), "ids": ids, "max_attempts": 1}
            )
            return len(rows)
        except psycopg.errors.UniqueViolation:
            # Some job's unique key is held by an active twin: retry the rest one by one.
            done = 0
            for job_id in ids:
                with contextlib.suppress(StateConflict, JobNotFound):
                    await self.retry(job_id)
                    done += 1
            return done

    async def bulk_cancel(self, filter: JobFilter, *, limit: int = MAX_BULK) -> int:
        ids = await self._matching_ids(filter, _values(MOVES["cancel"].sources), limit)
        if not ids:
            return 0
        return len(await self._fetch("cancel", {"now": self._now(None), "ids": ids}))

    async def hold(self, job_id: int, *, now: datetime | None = None) -> Job:
        return await self._move("hold", job_id)

    async def release_held(self, job_id: int, *, now: datetime | None = None) -> Job:
        return await self._move("release_held", job_id)

    async def _move(self, verb: str, job_id: int) -> Job:
        rows = await self._fetch(verb, {"ids": [job_id]})
        if rows:
            return row_to_job(rows[0])
        raise await self._conflict(job_id, verb)

    async def bulk_hold(self, filter: JobFilter, *, limit: int = MAX_BULK) -> int:
        return await self._bulk_move("hold", filter, limit)

    async def bulk_release_held(self, filter: JobFilter, *, limit: int = MAX_BULK) -> int:
        return await self._bulk_move("release_held", filter, limit)

    async def _bulk_move(self, verb: str, filter: JobFilter, limit: int) -> int:
        ids = await self._matching_ids(filter, _values(MOVES[verb].sources), limit)
        if not ids:
            return 0
        return len(await self._fetch(verb, {"ids": ids}))

    async def delete(self, job_id: int) -> Job:
        rows = await self._fetch("delete", {"id": job_id})
        if rows:
            return row_to_job(rows[0])
        if not await self._fetch("state_of", {"id": job_id}):
            raise JobNotFound(job_id)
        raise JobRunning(job_id, "delete")

    async def reschedule(self, job_id: int, edit: JobEdit, *, now: datetime | None = None) -> Job:
        rows = await self._fetch(
            "reschedule",
            {
                "now": self._now(now),
                "id": job_id,
                "run_now": edit.run_now,
                "run_at": edit.run_at,
                "priority": edit.priority,
                "queue": edit.queue,
            },
        )
        if rows:
            return row_to_job(rows[0])
        state = await self._fetch("state_of", {"id": job_id})
        if not state:
            raise JobNotFound(job_id)
        if state[0][0] == JobState.RUNNING:
            raise JobRunning(job_id, "edit")
        raise StateConflict(refusal(job_id, state[0][0], "reschedule"))

    async def purge(self, filter: JobFilter, *, limit: int = MAX_BULK) -> int:
        ids = await self._matching_ids(filter, _values(MOVES["purge"].sources), limit)
        if not ids:
            return 0
        return len(await self._fetch("purge", {"ids": ids}))

    async def _matching_ids(
        self, filter: JobFilter, allowed: tuple[str, ...], limit: int
    ) -> list[int]:
        states = set(allowed)
        if filter.states is not None:
            states &= {state.value for state in filter.states}
        if not states:
            return []
        statement = guarded(
            sql.SQL("SELECT id FROM rota_jobs WHERE {} ORDER BY id LIMIT {}").format(
                where(filter, states_override=sorted(states)),
                sql.Literal(max(0, min(limit, MAX_BULK))),
            ),
            filter,
            states=sorted(states),
        )
        rows = await self._filtered(statement)
        return [row[0] for row in rows]

    async def _filtered(self, statement: sql.Composable, *, again: bool = False) -> list[Row]:
        """The rows of a statement that filters jobs (filters.py), without JIT compilation. A
        filter the counts end at once is still planned as the scans it will not run, and at
        ten million jobs their cost set off JIT: 292 functions compiled for 15 s to read no
        row.

        Its values are literals in its text, so it is planned for them whether prepared or
        not. ``again``: a statement asked again word for word (a list's first page and the
        counts, which the dashboard polls) is prepared where the connection prepares, so a
        connection plans it once: planning one over a week of day partitions took 13 to 40 ms
        at ten million jobs on a busy machine, running it 1 to 3 ms. Other pages, whose
        cursor makes each text new, run unprepared."""
        async with self._connection() as conn, conn.transaction():
            await conn.execute("SET LOCAL jit = off")
            prepare = None if again else False
            rows: list[Row] = await (await conn.execute(statement, prepare=prepare)).fetchall()
        return rows

    # ------------------------------------------------------------------ workflows

    async def enqueue_workflow(self, graph: Workflow, *, now: datetime | None = None) -> list[Job]:
        graph.check()
        jobs: list[Job] = await self._run_flow(enqueue_workflow_flow(graph, self._now(now)))
        return jobs

    async def parent_results(self, job_id: int) -> dict[int, object]:
        return dict(await self._fetch("parent_results", {"id": job_id}))

    async def workflow(
        self,
        workflow_id: int,
        *,
        after: int | None = None,
        limit: int | None = None,
        previews: bool = False,
    ) -> tuple[list[Job], list[tuple[int, int, str]]]:
        if not -(2**63) <= workflow_id < 2**63:
            return [], []
        params: dict[str, Any] = {"workflow": workflow_id}
        async with self._connection() as conn, conn.transaction():
            if limit is None:
                job_rows = await (await conn.execute(query("workflow_jobs"), params)).fetchall()
                edge_rows = await (await conn.execute(query("workflow_edges"), params)).fetchall()
            else:
                statement = sql.SQL(
                    "SELECT {} FROM rota_jobs WHERE workflow = {} AND id > {} ORDER BY id LIMIT {}"
                ).format(
                    sql.SQL(LIST_COLUMNS if previews else JOB_COLUMNS),
                    sql.Literal(workflow_id),
                    sql.Literal(after if after is not None else 0),
                    sql.Literal(max(1, limit)),
                )
                job_rows = await (await conn.execute(statement, prepare=False)).fetchall()
                edge_rows = []
                if job_rows:
                    params.update(first=job_rows[0][0], last=job_rows[-1][0])
                    params["limit"] = MAX_PAGE_EDGES + 1
                    edge_rows = await (
                        await conn.execute(query("workflow_edges_into"), params)
                    ).fetchall()
        edges = [(int(parent), int(child), str(policy)) for parent, child, policy in edge_rows]
        build = row_to_listed if previews else row_to_job
        return [build(row) for row in job_rows], edges

    async def workflow_states(self, workflow_id: int) -> dict[JobState, int]:
        if not -(2**63) <= workflow_id < 2**63:
            return {}
        rows = await self._fetch("workflow_states", {"workflow": workflow_id})
        return {JobState(state): int(n) for state, n in rows}

    async def related(
        self, job_id: int, *, parents: bool, after: int | None = None, limit: int = 50
    ) -> list[tuple[int, JobState, str]]:
        if not -(2**63) <= job_id < 2**63:
            return []
        rows = await self._fetch(
            "parents_of" if parents else "children_of",
            {"id": job_id, "after": after if after is not None else 0, "limit": max(1, limit)},
        )
        return [(int(other), JobState(state), str(policy)) for other, state, policy in rows]

    async def cancel_workflow(self, workflow_id: int, *, now: datetime | None = None) -> int:
        [(count,)] = await self._fetch(
            "cancel_workflow", {"now": self._now(now), "workflow": workflow_id}
        )
        return int(count)


def _values(states: Iterable[JobState]) -> tuple[str, ...]:
    """``states`` as the text the rows hold, in JobState's order."""
    chosen = set(states)
    return tuple(state.value for state in JobState if state in chosen)
