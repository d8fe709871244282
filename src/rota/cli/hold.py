"""`rota jobs hold | release`: one job by id, or every job a filter matches.

By id, the verb acts at once. Without an id, it acts as the bulk verbs do (rota.cli.bulk):
it confirms how many jobs it will touch (``--yes`` without a terminal), works in batches and
says how many it held or released. An id together with a filter is refused (exit 2).
"""

from __future__ import annotations

from typing import Any

import click

from rota.cli.bulk import BulkVerb, bulk, chosen_filter, filter_options
from rota.cli.group import Target, uses_database, with_operator
from rota.cli.jobs import jobs
from rota.domain.audit import AuditAction
from rota.domain.errors import InvalidInput

HOLD = BulkVerb(
    name="hold",
    move="hold",
    state_help="Only jobs in this state (repeatable; default: waiting and pending).",
    summary="",
    what="waiting or pending job",
    ask="Hold",
    doing="holding",
    done="held",
    call=lambda client, filter, limit: client.bulk_hold(filter, limit=limit),
    action=AuditAction.JOBS_HOLD,
)
RELEASE = BulkVerb(
    name="release",
    move="release_held",
    state_help="Only held jobs (the only state a release acts on).",
    summary="",
    what="held job",
    ask="Release",
    doing="releasing",
    done="released",
    call=lambda client, filter, limit: client.bulk_release(filter, limit=limit),
    action=AuditAction.JOBS_RELEASE,
)


def _one_or_many(
    verb: BulkVerb,
    target: Target,
    job_id: int | None,
    state: tuple[str, ...],
    yes: bool,
    **names: Any,
) -> None:
    if job_id is None:
        bulk(target, chosen_filter(verb, state, names), yes, verb)
        return
    if state or any(value is not None for value in names.values()):
        raise InvalidInput(f"give a job id or filters to {verb.name}, not both")
    if verb is HOLD:
        job = with_operator(target, lambda op: op.hold(job_id))
        click.echo(f"job {job.id} held: no worker claims it until it is released")
    else:
        job = with_operator(target, lambda op: op.release(job_id))
        click.echo(f"job {job.id} released: {job.state} again")


@jobs.command("hold")
@click.argument("job_id", type=click.IntRange(1, 2**63 - 1), required=False)
@uses_database(creates=False)
@filter_options(HOLD)
def jobs_hold(
    target: Target, job_id: int | None, state: tuple[str, ...], yes: bool, **names: Any
) -> None:
    """Hold a waiting or pending job, or every one matching the filters (after confirming how
    many, at most 10,000 per run): no worker claims it until it is released. A running job
    cannot be held (cancel it instead)."""
    _one_or_many(HOLD, target, job_id, state, yes, **names)


@jobs.command("release")
@click.argument("job_id", type=click.IntRange(1, 2**63 - 1), required=False)
@uses_database(creates=False)
@filter_options(RELEASE)
def jobs_release(
    target: Target, job_id: int | None, state: tuple[str, ...], yes: bool, **names: Any
) -> None:
    """Release a held job, or every held job matching the filters (after confirming how
    many): waiting again while parents are left, else pending, due at its own time."""
    _one_or_many(RELEASE, target, job_id, state, yes, **names)
