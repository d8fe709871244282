"""`rota workflows show | cancel`: workflows (jobs that depend on jobs) from the command line."""

from __future__ import annotations

import json

import click

from rota.cli.group import Target, cli, json_option, uses_database, with_client, with_operator
from rota.cli.jobs import job_json
from rota.cli.terminal import console, table
from rota.domain.wording import counted


@cli.group()
def workflows() -> None:
    """Show and cancel workflows: jobs that run after other jobs."""


@workflows.command("show")
@click.argument("workflow_id", type=click.IntRange(1))
@uses_database(creates=False)
@json_option
def workflows_show(workflow_id: int, target: Target, as_json: bool) -> None:
    """Show a workflow's jobs in id order, with their states and the parents each waits for."""
    from rota import workflows as use

    run = with_client(target, lambda client: use.get_workflow(client.store, workflow_id))
    if as_json:
        body = {
            "id": run.id,
            "jobs": [job_json(job) for job in run.jobs],
            "edges": [
                {"parent": parent, "child": child, "on_parent_failure": policy}
                for parent, child, policy in run.edges
            ],
            "finished": run.is_finished,
        }
        click.echo(json.dumps(body))
        return
    parents: dict[int, list[str]] = {}
    for parent, child, policy in run.edges:
        parents.setdefault(child, []).append(f"{parent}" + (" (run)" if policy == "run" else ""))
    console().print(
        table(
            ("id", "kind", "state", "waiting on", "after", "last error"),
            (
                (
                    job.id,
                    job.kind,
                    job.state.value,
                    job.waiting_on or "",
                    ", ".join(parents.get(job.id, [])),
                    (job.last_error or "")[:60],
                )
                for job in run.jobs
            ),
        )
    )


@workflows.command("cancel")
@click.argument("workflow_id", type=click.IntRange(1))
@uses_database(creates=False)
def workflows_cancel(workflow_id: int, target: Target) -> None:
    """Cancel every job of the workflow that has not finished."""
    count = with_operator(target, lambda op: op.cancel_workflow(workflow_id))
    click.echo(f"workflow {workflow_id}: {counted(count, 'job')} cancelled")
