"""Workflows at the API's edge: a workflow's jobs and edges, its graph, and a job's parents
and children."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field

from rota.api.job_models import JobSummary


class EdgeOut(BaseModel):
    """Job ``child`` runs after job ``parent``."""

    parent: int
    child: int
    on_parent_failure: Literal["cancel", "run"]


class WorkflowCounts(BaseModel):
    """A workflow's id and how many of its jobs are in each state."""

    id: int
    by_state: dict[str, int]
    total: int = Field(description="How many jobs the workflow has.")
    finished: bool


class WorkflowOut(WorkflowCounts):
    """One page of a workflow: its jobs by id with their states (previews, as in lists), the
    edges into them, and how many of all its jobs are in each state."""

    now: datetime
    jobs: list[JobSummary]
    edges: list[EdgeOut] = Field(
        description="The edges into this page's jobs, in (child, parent) order, at most "
        "1,000: a job's parents beyond them are paged by GET /api/jobs/{id}/parents."
    )
    edges_truncated: bool = Field(description="True when more edges lead into this page's jobs.")
    next_cursor: str | None = Field(description="Pass back as cursor for the next page.")


class GraphNode(BaseModel):
    """A job of a workflow as its graph draws it."""

    id: int
    kind: str
    state: str
    waiting_on: int = Field(description="How many parents it still waits on.")


class WorkflowGraph(WorkflowCounts):
    """A workflow's jobs by id, at most ``limit`` of them, and the edges into them: what the
    dashboard draws. ``shown`` of ``total`` jobs are here."""

    nodes: list[GraphNode]
    edges: list[EdgeOut] = Field(
        description="The edges into these jobs, in (child, parent) order; a job's parents "
        "beyond 1,000 may be left out (edges_truncated)."
    )
    edges_truncated: bool = Field(description="True when some edges into these jobs are left out.")
    shown: int = Field(description="How many of them are in nodes (the first by id).")


class RelatedOut(BaseModel):
    """A job's parent or child: its id, its state, and the edge's on_parent_failure."""

    id: int
    state: str
    on_parent_failure: Literal["cancel", "run"]


class RelatedPage(BaseModel):
    """One page of a job's parents or children by id."""

    jobs: list[RelatedOut]
    next_cursor: str | None
