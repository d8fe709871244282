"""Job filters from the outside world: query strings and bulk bodies become a JobFilter."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import replace

from rota.api.errors import ApiError, quote_input
from rota.api.schemas import MAX_SEARCH_LENGTH, JobFilterBody
from rota.domain.job_state import JobState
from rota.domain.names import validate_name
from rota.store.records import JobFilter

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
#: A search term no job matches: unique keys never contain control characters.
UNMATCHABLE = "\x01"


def parse_states(values: Iterable[str] | None) -> frozenset[JobState] | None:
    """States from repeated and/or comma-separated values; None when none were given."""
    if values is None:
        return None
    states: set[JobState] = set()
    for value in values:
        for name in value.split(","):
            if not name:
                raise ApiError(400, "state: must not be empty")
            try:
                states.add(JobState(name))
            except ValueError:
                allowed = ", ".join(state.value for state in JobState)
                raise ApiError(
                    400, f"state: unknown state {quote_input(name)!r} (use {allowed})"
                ) from None
    return frozenset(states)


def parse_search(q: str | None) -> str | None:
    """A search term (job id or unique key); refuses text no id or key could contain."""
    if not q:
        return None
    if len(q) > MAX_SEARCH_LENGTH:
        raise ApiError(400, f"q: must be at most {MAX_SEARCH_LENGTH} characters")
    if _CONTROL.search(q) or not _encodable(q):
        # No unique key holds such text and it is no id: the search finds nothing. (It is not
        # sent on as it is: PostgreSQL refuses NUL characters, drivers lone surrogates.)
        return UNMATCHABLE
    return q


def build_filter(
    *,
    states: Iterable[str] | None,
    kind: str | None,
    queue: str | None,
    tenant: str | None,
    q: str | None,
    schedule: str | None = None,
    workflow: int | None = None,
) -> JobFilter:
    """A JobFilter; ApiError / InvalidJob (400) naming the field for a malformed value."""
    return JobFilter(
        states=parse_states(states),
        kind=validate_name("kind", kind, required=False),
        queue=validate_name("queue", queue, required=False),
        tenant=validate_name("tenant", tenant, required=False),
        schedule=validate_name("schedule", schedule, required=False),
        workflow=workflow,
        search=parse_search(q),
    )


def filter_from_query(
    *,
    states: Iterable[str] | None,
    kind: str | None,
    queue: str | None,
    tenant: str | None,
    q: str | None,
    schedule: str | None = None,
    workflow: int | None = None,
) -> JobFilter:
    """Like build_filter, but an empty parameter (``?kind=``, as forms send) does not filter."""
    return build_filter(
        states=states,
        kind=kind or None,
        queue=queue or None,
        tenant=tenant or None,
        q=q,
        schedule=schedule or None,
        workflow=workflow,
    )


def filter_from_body(body: JobFilterBody) -> JobFilter:
    return build_filter(
        states=body.state,
        kind=body.kind,
        queue=body.queue,
        tenant=body.tenant,
        q=body.q,
        schedule=body.schedule,
        workflow=body.workflow,
    )


def restrict(job_filter: JobFilter, allowed: frozenset[JobState]) -> JobFilter:
    """``job_filter`` narrowed to the states a bulk verb acts on."""
    states = allowed if job_filter.states is None else job_filter.states & allowed
    return replace(job_filter, states=states)


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
