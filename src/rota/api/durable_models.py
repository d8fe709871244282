"""The API's models of durable jobs: a job's steps and why it sleeps or waits (in
``GET /api/jobs/{id}``), and what ``POST /api/signals`` did."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

from rota.domain.durable import SignalResult, Step, StepKind, StepState, Suspension
from rota.domain.payload import payload_text, preview


class StepOut(BaseModel):
    """One record of a durable job: a step, a sleep or a wait, in the order they began."""

    name: str
    kind: StepKind
    state: StepState
    attempts: int = Field(description="A step's runs that failed, plus one once it succeeded.")
    started_at: datetime | None
    finished_at: datetime | None
    duration_seconds: float | None = Field(description="How long a step's last run took.")
    wake_at: datetime | None = Field(description="A sleep's wake time; a wait's deadline.")
    key: str | None = Field(description="The signal key a wait waits for.")
    error: str | None = Field(description="A step's last error.")
    result_preview: str | None = Field(
        description="The first 300 bytes of a step's result (or a received signal's data) "
        "as JSON text; null when it stored none."
    )
    result_truncated: bool


class SuspensionOut(BaseModel):
    """Why a pending durable job is not running: asleep until ``until``, or waiting for a
    signal to ``key`` until ``until`` (its deadline)."""

    kind: StepKind = Field(description="sleep or wait.")
    step: str
    until: datetime | None
    key: str | None


def step_out(step: Step) -> StepOut:
    text = None if step.result is None else payload_text(step.result)
    shown, cut = preview(text)
    duration = step.duration
    return StepOut(
        name=step.name,
        kind=step.kind,
        state=step.state,
        attempts=step.attempts,
        started_at=step.started_at,
        finished_at=step.finished_at,
        duration_seconds=None if duration is None else duration.total_seconds(),
        wake_at=step.wake_at,
        key=step.key,
        error=step.error,
        result_preview=shown,
        result_truncated=cut,
    )


def suspension_out(found: Suspension | None) -> SuspensionOut | None:
    if found is None:
        return None
    return SuspensionOut(kind=found.kind, step=found.step, until=found.until, key=found.key)


class SignalOut(BaseModel):
    """What the signal did: delivered to the job ``delivered_to`` (due at once), or kept
    until ``expires_at`` for a wait to come."""

    key: str
    delivered_to: int | None
    expires_at: datetime | None


def signal_out(result: SignalResult) -> SignalOut:
    return SignalOut(key=result.key, delivered_to=result.delivered_to, expires_at=result.expires_at)
