"""Building a workflow graph: what the builder refuses, and each node's starting state."""

from __future__ import annotations

import pytest

from rota.domain.errors import InvalidJob, ParentNotFound
from rota.domain.job import JobSpec
from rota.domain.job_state import JobState
from rota.domain.workflow import MAX_PARENTS, Node, Workflow, chain, chord, plan, resolve


def test_a_node_can_only_follow_nodes_added_before_it_so_there_are_no_cycles() -> None:
    graph = Workflow()
    graph.add(JobSpec("a"))
    with pytest.raises(InvalidJob, match="only follow nodes added before it"):
        graph.add(JobSpec("b"), after=[Node(1)])
    with pytest.raises(InvalidJob, match="job ids or workflow nodes"):
        graph.add(JobSpec("b"), after=["1"])  # type: ignore[list-item]
    with pytest.raises(InvalidJob, match="on_parent_failure"):
        graph.add(JobSpec("b"), on_parent_failure="skip")
    with pytest.raises(InvalidJob, match=f"at most {MAX_PARENTS} parents"):
        graph.add(JobSpec("b"), after=range(1, MAX_PARENTS + 2))
    assert len(graph.specs) == 1, "a refused node is not added"


def test_repeated_parents_make_one_edge() -> None:
    graph = Workflow()
    first = graph.add(JobSpec("a"))
    graph.add(JobSpec("b"), after=[first, first, 7, 7])
    assert [(e.parent_node, e.parent_id) for e in graph.edges] == [(0, None), (None, 7)]
    assert graph.parent_ids == [7]


def test_the_plan_follows_each_parent_s_state() -> None:
    graph = chord([JobSpec("a"), JobSpec("b")], JobSpec("sum"))
    graph.add(JobSpec("after-done"), after=[10])
    graph.add(JobSpec("after-dead"), after=[11])
    graph.add(JobSpec("after-dead-run"), after=[11], on_parent_failure="run")
    below = graph.add(JobSpec("below-cancelled"), after=[Node(4)])
    graph.add(JobSpec("two-levels"), after=[below])
    planned, satisfied = plan(graph, {10: JobState.SUCCEEDED, 11: JobState.DEAD})
    states = [item.state for item in planned]
    assert states == [
        JobState.PENDING,
        JobState.PENDING,
        JobState.WAITING,
        JobState.PENDING,
        JobState.CANCELLED,
        JobState.PENDING,
        JobState.CANCELLED,
        JobState.CANCELLED,
    ]
    assert planned[2].waiting_on == 2
    assert satisfied == [False, False, True, False, True, False, False]
    ids = list(range(100, 108))
    reasons = [item.error for item in resolve(planned, ids)]
    assert reasons[4] == "cancelled: parent job 11 ended dead"
    assert reasons[6] == "cancelled: parent job 104 ended cancelled"
    assert reasons[7] == "cancelled: parent job 106 ended cancelled"


def test_an_unknown_parent_is_named() -> None:
    graph = Workflow()
    graph.add(JobSpec("a"), after=[5, 6])
    with pytest.raises(ParentNotFound, match="unknown parent job 6") as raised:
        plan(graph, {5: JobState.RUNNING})
    assert raised.value.field == "depends_on"


def test_a_chain_links_each_job_to_the_one_before() -> None:
    graph = chain(JobSpec("a"), JobSpec("b"), JobSpec("c"))
    assert [(e.parent_node, e.child) for e in graph.edges] == [(0, 1), (1, 2)]
