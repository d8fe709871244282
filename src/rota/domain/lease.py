"""Lease: proof that a worker holds a running job, checked by every write after the claim."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True, slots=True)
class Lease:
    """A claim on one job: its id and the fencing token the claim issued.

    Tokens strictly increase across all claims in a store, so a newer claim always carries a
    larger token. The store accepts a write for the job only while ``state = running`` and its
    ``lease_token`` equals this ``token``; anything else is ``LeaseLost``. ``lease_until`` is the
    store-clock expiry as of the claim or last heartbeat, for display; the store decides expiry.
    """

    job_id: int
    token: int
    attempt: int
    worker: str
    lease_until: datetime | None = None
