"""Completer: successful completions batched into one fenced statement per round trip."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from rota.domain.errors import StoreUnavailable
from rota.domain.lease import Lease
from rota.runtime.services import bounded
from rota.store.base import Store


class Completer:
    """Collects leases of succeeded jobs and completes them with ``complete_many``.

    The first completion is sent at once; those that arrive while a batch is in flight ride
    the next one, so batches grow exactly when the store is the bottleneck. Every row is still
    fenced on its own token; each caller learns whether its lease was accepted.

    No caller waits longer than ``timeout_s`` for an answer, without a timer of its own: each
    batch is bounded by ``timeout_s``, and when one gets no answer (StoreUnavailable) the
    completions queued behind it fail with it, since they would be sent on to the same
    unreachable store; their callers retry as after any failed write.
    """

    def __init__(self, store: Store, *, max_batch: int = 500, timeout_s: float = 30.0) -> None:
        self._store = store
        self._max_batch = max_batch
        self._timeout_s = timeout_s
        self._waiting: list[tuple[Lease, str | None, asyncio.Future[bool]]] = []
        self._flusher: asyncio.Task[None] | None = None

    async def complete(self, lease: Lease, result: str | None = None) -> bool:
        """True if the job is now succeeded (with ``result``, its JSON text, stored in the
        same fenced statement), False if the lease was lost (fenced out)."""
        return await self.submit(lease, result)

    def submit(self, lease: Lease, result: str | None = None) -> asyncio.Future[bool]:
        """``complete`` as the future it awaits: a job's task awaits it directly, with no
        coroutine of its own in between (one per job on the hot path)."""
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._waiting.append((lease, result, future))
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._flush(), name="rota-completer")
        return future

    async def _flush(self) -> None:
        # Let every job finishing in this turn of the loop join the first batch.
        await asyncio.sleep(0)
        while self._waiting:
            batch = self._waiting[: self._max_batch]
            del self._waiting[: self._max_batch]
            try:
                lost = await bounded(
                    self._store.complete_many(
                        [lease for lease, _, _ in batch],
                        results=[result for _, result, _ in batch],
                    ),
                    self._timeout_s,
                    "completing jobs",
                )
            except asyncio.CancelledError:
                for _, _, future in batch:
                    future.cancel()
                raise
            except Exception as error:  # every waiter gets the error and decides what to do
                if isinstance(error, StoreUnavailable):
                    batch += self._waiting
                    self._waiting = []
                for _, _, future in batch:
                    if not future.done():
                        future.set_exception(error)
                continue
            _settle(batch, lost)


def _settle(
    batch: Sequence[tuple[Lease, str | None, asyncio.Future[bool]]], lost: Sequence[Lease]
) -> None:
    rejected = {(lease.job_id, lease.token) for lease in lost}
    for lease, _, future in batch:
        if not future.done():
            future.set_result((lease.job_id, lease.token) not in rejected)
