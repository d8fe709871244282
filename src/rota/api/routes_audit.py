"""The /api/audit route: the audit log of operator actions, newest first, filtered."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Query
from pydantic import BaseModel

from rota.api.context import ApiContext
from rota.api.filters import UNMATCHABLE
from rota.api.paging import IdCursor, PageLimit
from rota.api.schemas import SEARCH_PATTERN, errors
from rota.domain.audit import (
    MAX_IDENTITY_LENGTH,
    MAX_TARGET_LENGTH,
    AuditAction,
    AuditEntry,
    AuditFilter,
)
from rota.domain.names import INSTANT_PATTERN, MAX_INSTANT_LENGTH, SAFE_YEARS_PATTERN, parse_instant

_INSTANT_SCHEMA = {
    "format": "date-time",
    "pattern": "^" + SAFE_YEARS_PATTERN + INSTANT_PATTERN.pattern[len("[0-9]{4}") :] + "$",
}


class AuditEntryOut(BaseModel):
    """One operator action: who, when (the store's clock), what, on which target or job
    filter, with which parameters, and how many jobs it touched (null: it touched none)."""

    id: int
    at: datetime
    identity: str
    action: str
    target: str | None
    filter: dict[str, Any] | None
    detail: dict[str, Any] | None
    count: int | None


class AuditList(BaseModel):
    """One page of the audit log, newest first; pass ``next_cursor`` back for the next."""

    now: datetime
    entries: list[AuditEntryOut]
    next_cursor: str | None


def entry_out(entry: AuditEntry) -> AuditEntryOut:
    return AuditEntryOut(
        id=entry.id,
        at=entry.at,
        identity=entry.identity,
        action=entry.action,
        target=entry.target,
        filter=entry.filter,
        detail=entry.detail,
        count=entry.count,
    )


def _exact(text: str | None) -> str | None:
    """A filter value as the store compares it; text no entry can hold (control characters,
    lone surrogates) matches nothing, and is not sent on (PostgreSQL refuses NUL)."""
    if not text:
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return UNMATCHABLE
    return UNMATCHABLE if any(ord(c) < 0x20 or ord(c) == 0x7F for c in text) else text


def audit_router(ctx: ApiContext) -> APIRouter:
    router = APIRouter(tags=["audit"])

    @router.get("/api/audit", response_model=AuditList, responses=errors(400, 401, 503))
    async def list_audit(
        action: Annotated[AuditAction | None, Query(description="One action.")] = None,
        identity: Annotated[
            str | None,
            Query(
                max_length=MAX_IDENTITY_LENGTH,
                json_schema_extra={"pattern": SEARCH_PATTERN},
                description="Who acted, exactly (token:admin, basic:alice, cli:deploy...).",
            ),
        ] = None,
        target: Annotated[
            str | None,
            Query(
                max_length=MAX_TARGET_LENGTH,
                json_schema_extra={"pattern": SEARCH_PATTERN},
                description="What was acted on, exactly (job:42, queue:emails...).",
            ),
        ] = None,
        since: Annotated[
            str | None,
            Query(
                max_length=MAX_INSTANT_LENGTH,
                json_schema_extra=_INSTANT_SCHEMA,
                description="Entries at or after this ISO 8601 instant (with a UTC offset).",
            ),
        ] = None,
        until: Annotated[
            str | None,
            Query(
                max_length=MAX_INSTANT_LENGTH,
                json_schema_extra=_INSTANT_SCHEMA,
                description="Entries before this ISO 8601 instant (with a UTC offset).",
            ),
        ] = None,
        cursor: IdCursor = None,
        limit: PageLimit = 50,
    ) -> AuditList:
        """Operator actions (retry, cancel, delete, purge, reschedule, pause and resume,
        limits, schedule changes, bulk actions) from the API, the dashboard and the CLI,
        newest first, one keyset page at a time."""
        audit_filter = AuditFilter(
            action=None if action is None else action.value,
            identity=_exact(identity),
            target=_exact(target),
            since=None if since is None else parse_instant("since", since),
            until=None if until is None else parse_instant("until", until),
        )
        page = await ctx.reads.store.list_audit(audit_filter, cursor=cursor or None, limit=limit)
        return AuditList(
            now=await ctx.now(),
            entries=[entry_out(entry) for entry in page.entries],
            next_cursor=page.next_cursor,
        )

    return router
