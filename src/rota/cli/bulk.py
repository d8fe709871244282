"""`rota jobs purge | bulk-retry | bulk-cancel` (and `hold`, `release` by filter, rota.cli.hold):
one verb over every job a filter matches.

Each confirms how many jobs it will touch (``--yes`` without a terminal), then works through
them in batches of BATCH, one short statement each, showing its progress on stderr when
stderr is a terminal. Every verb takes its jobs out of the filter's reach (deleted, pending
again, cancelled), so the batches never meet a job twice; a run covers at most MAX_BULK jobs.
A run that touched any job leaves one audit entry, as ``cli:<os user>``, with the total.
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import click

from rota.cli.group import Target, cli_user, uses_database, with_client
from rota.cli.jobs import jobs, name_filter
from rota.cli.terminal import progress
from rota.client import Client
from rota.domain.audit import AuditAction
from rota.domain.errors import InvalidInput
from rota.domain.job_state import JobState
from rota.domain.transitions import MOVES
from rota.domain.wording import counted, plural
from rota.store import JobFilter
from rota.store.records import MAX_BULK

#: Jobs per statement: small enough that no batch holds its locks for long.
BATCH = 500

Verb = Callable[[Client, JobFilter, int], Awaitable[int]]


def filter_options(verb: BulkVerb) -> Callable[[Any], Any]:
    """--state (among the states ``verb`` acts on), --kind, --queue, --tenant, --schedule,
    --workflow and --yes. A --state the verb cannot act on is refused with the state
    machine's reason (exit 2)."""
    choices = sorted(state.value for state in verb.states)

    def states(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> Any:
        for value in values:
            if value in choices:
                continue
            among = ", ".join(choices)
            if value in {state.value for state in JobState}:
                reason = MOVES[verb.move].refusal
                raise InvalidInput(
                    f"--state {value}: {verb.name} cannot act on a {value} job; {reason}. "
                    f"It takes {among}"
                )
            raise InvalidInput(f"--state {value}: not a job state. {verb.name} takes {among}")
        return values

    def decorate(command: Any) -> Any:
        for option in reversed(
            [
                click.option(
                    "--state",
                    envvar="ROTA_STATE",
                    metavar=f"[{'|'.join(choices)}]",
                    callback=states,
                    multiple=True,
                    help=verb.state_help,
                ),
                click.option(
                    "--kind", envvar="ROTA_KIND", callback=name_filter, help="Only this kind."
                ),
                click.option(
                    "--queue", envvar="ROTA_QUEUE", callback=name_filter, help="Only this queue."
                ),
                click.option(
                    "--tenant",
                    envvar="ROTA_TENANT",
                    callback=name_filter,
                    help="Only this tenant's jobs.",
                ),
                click.option(
                    "--schedule",
                    envvar="ROTA_SCHEDULE",
                    callback=name_filter,
                    help="Only the jobs this schedule enqueued.",
                ),
                click.option(
                    "--workflow",
                    envvar="ROTA_WORKFLOW",
                    type=click.IntRange(1, 2**63 - 1),
                    help="Only the jobs of this workflow (its first job's id).",
                ),
                click.option(
                    "--yes",
                    is_flag=True,
                    help="Go ahead without asking (needed without a terminal).",
                ),
            ]
        ):
            command = option(command)
        return command

    return decorate


@dataclass(frozen=True)
class BulkVerb:
    """One bulk command: its name, its verb in the state machine (``MOVES[move]``: the
    states it may touch, and touches unless --state names some of them, as the API's bulk
    verb does), its words (``what`` in the singular: "held job"; counts put it in
    agreement)."""

    name: str
    move: str
    state_help: str
    summary: str
    what: str
    ask: str
    doing: str
    done: str
    call: Verb
    action: AuditAction

    @property
    def states(self) -> frozenset[JobState]:
        """Every state this verb may touch: what --state may name, and what it touches
        when --state is not given."""
        return MOVES[self.move].sources


_AT_MOST = "after confirming how many (at most 10,000 per run)."

VERBS = (
    BulkVerb(
        name="purge",
        move="purge",
        state_help="Only finished jobs in this state (repeatable; default: every finished state).",
        summary=f"Delete finished jobs matching the filters, with their history, {_AT_MOST}",
        what="finished job",
        ask="Delete",
        doing="deleting",
        done="deleted",
        call=lambda client, filter, limit: client.purge(filter, limit=limit),
        action=AuditAction.JOBS_PURGE,
    ),
    BulkVerb(
        name="bulk-retry",
        move="retry",
        state_help="Only jobs in this state (repeatable; default: dead and cancelled).",
        summary="Run again every dead or cancelled job matching the filters, with fresh "
        f"attempts, {_AT_MOST}",
        what="dead or cancelled job",
        ask="Retry",
        doing="retrying",
        done="retried",
        call=lambda client, filter, limit: client.bulk_retry(filter, limit=limit),
        action=AuditAction.JOBS_RETRY,
    ),
    BulkVerb(
        name="bulk-cancel",
        move="cancel",
        state_help="Only jobs in this state (repeatable; default: waiting, pending, held and "
        "running, as the API's bulk cancel).",
        summary="Cancel every waiting, pending, held or running job matching the filters "
        f"(running handlers are stopped at their next heartbeat), {_AT_MOST}",
        what="unfinished job",
        ask="Cancel",
        doing="cancelling",
        done="cancelled",
        call=lambda client, filter, limit: client.bulk_cancel(filter, limit=limit),
        action=AuditAction.JOBS_CANCEL,
    ),
)


def _command(verb: BulkVerb) -> None:
    """Register ``rota jobs <verb.name>``."""

    @jobs.command(verb.name, help=verb.summary)
    @uses_database(creates=False)
    @filter_options(verb)
    def command(target: Target, state: tuple[str, ...], yes: bool, **names: Any) -> None:
        bulk(target, chosen_filter(verb, state, names), yes, verb)


for _verb in VERBS:
    _command(_verb)


def chosen_filter(verb: BulkVerb, state: tuple[str, ...], names: dict[str, Any]) -> JobFilter:
    """The filter the options name: every state the verb acts on unless --state names some."""
    states = frozenset(JobState(value) for value in state) if state else verb.states
    return JobFilter(states=states, **names)


def bulk(target: Target, filter: JobFilter, yes: bool, verb: BulkVerb) -> None:
    """Count, confirm, then apply ``verb`` batch by batch with progress on a terminal."""
    what, ask, doing, done = verb.what, verb.ask, verb.doing, verb.done
    scope = describe_filter(filter)
    matching = with_client(target, lambda c: c.store.count_jobs(filter, limit=MAX_BULK + 1))
    if matching == 0:
        click.echo(f"no {plural(what)} match {scope}; nothing {done}")
        return
    total = min(matching, MAX_BULK)
    amount = (
        f"the first {MAX_BULK} of the {plural(what)}"
        if matching > MAX_BULK
        else counted(matching, what)
    )
    scope_text = f"{amount} matching {scope}"
    if not yes:
        if not sys.stdin.isatty():
            verb_word = ask.lower()
            raise InvalidInput(f"would {verb_word} {scope_text}: pass --yes to confirm")
        if not click.confirm(f"{ask} {scope_text}?", default=False):
            click.echo(f"nothing {done}", err=True)
            return

    identity = cli_user()

    async def run(client: Client) -> int:
        from rota.operator import Operator

        count = 0
        try:
            with progress(f"{doing} {plural(what)}", total) as advance:
                while count < total:
                    changed = await verb.call(client, filter, min(BATCH, total - count))
                    if changed == 0:
                        break
                    count += changed
                    advance(changed)
        finally:  # what an interrupted run did is recorded too
            if count:
                await Operator(client, identity).record_bulk(verb.action, filter, count)
        return count

    count = with_client(target, run)
    click.echo(f"{done} {counted(count, what)} matching {scope}")


def describe_filter(filter: JobFilter) -> str:
    """The filter in words, for a confirmation: ``state dead, kind email``."""
    parts = []
    if filter.states is not None:
        parts.append("state " + "|".join(sorted(state.value for state in filter.states)))
    for name in ("kind", "queue", "tenant", "schedule", "workflow"):
        value = getattr(filter, name)
        if value is not None:
            parts.append(f"{name} {value}")
    return ", ".join(parts) or "every job"
