"""ApiContext: what every route of one app shares (client, settings, metrics, kind list)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TypeVar

from starlette.requests import Request

from rota.api.credentials import Role
from rota.api.errors import ApiError
from rota.api.security import Authenticator, principal_of
from rota.api.settings import ApiSettings
from rota.client import Client
from rota.domain.errors import JobNotFound, ScheduleNotFound
from rota.domain.workflow import WorkflowBuilder
from rota.observability.metrics import Metrics
from rota.operator import Operator
from rota.store.replica import ReadReplica
from rota.verbs.enqueue import Enqueuer

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class ApiContext:
    """``client`` is the primary: every write, and every read whose answer must include this
    request's own writes (a POST's response, a retry's 409). ``reads`` serves the GET routes'
    lists, counts and details: the read replica's store when one is configured (a moment
    stale), else the primary too."""

    client: Client
    settings: ApiSettings
    metrics: Metrics
    #: The kinds POST /api/jobs accepts; None accepts any valid kind name.
    kinds: frozenset[str] | None
    demo: bool
    authenticator: Authenticator
    reads: Client
    replica: ReadReplica | None = None
    #: The serving App's workflow schedule builders, by schedule name: what "run now" on a
    #: workflow schedule writes (without them it answers 409).
    workflows: Mapping[str, WorkflowBuilder] = field(default_factory=dict)
    #: The serving App's enqueue path (its hooks included); None enqueues on ``client``.
    enqueuer: Enqueuer | None = None

    async def read_one(self, read: Callable[[Client], Awaitable[T]]) -> T:
        """``read(reads)``; when it finds no such job or schedule on a replica, which may not
        have replayed its creation yet, ``read(client)``: a 404 comes from the primary only."""
        try:
            return await read(self.reads)
        except (JobNotFound, ScheduleNotFound):
            if self.reads is self.client:
                raise
        return await read(self.client)

    def operator(self, request: Request) -> Operator:
        """The operator verbs on the primary, recorded in the audit log as this request's
        authenticated identity."""
        return Operator(self.client, principal_of(request.scope).identity, workflows=self.workflows)

    def require_admin(self, request: Request, what: str) -> None:
        """Refuse (403) ``what`` to an operator: the admin-only changes the front door cannot
        tell from the path alone (a repeating job creates a schedule)."""
        principal = principal_of(request.scope)
        if principal.role is Role.OPERATOR:
            raise ApiError(
                403, f"operator identity: {principal.identity} may not {what} (admin only)"
            )

    async def now(self) -> datetime:
        """The store's clock: the API's only source of "now"."""
        return await self.client.store.now()

    @property
    def heartbeat(self) -> timedelta:
        """The workers' heartbeat interval, which says who is alive (WorkerInfo.is_alive)."""
        return timedelta(seconds=self.settings.heartbeat_interval_seconds)
