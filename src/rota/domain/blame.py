"""Blame (C9): what a lease expiry costs its job, and which jobs run alone.

A lease that expires means its worker died, hung or was cut off while holding the job. When the
worker held other jobs too, nobody can tell which of them killed it; so the rule never makes a
job dead for a crash it may merely have shared, and isolates every job a crash touched:

- The job becomes a **crash suspect**: ``crashes`` counts the expired leases under which its
  handler had started (an ordinary job's handler is taken to start when its claim is answered,
  a suspect's only when its worker says so with ``Store.begin``).
- A suspect **runs alone**: a claim that takes one takes no other job; its worker starts its
  handler only once it holds nothing else, and claims nothing more until it finishes. So a
  crash while a suspect's handler runs can only be the suspect's doing (or the machine's).
- An expired lease whose handler never started gives its attempt back (a suspect still
  waiting for its worker to empty, a claim whose answer was lost).
- An expired ordinary lease (claimed before the job was a suspect, maybe beside other jobs)
  counts as an attempt, except on the job's last attempt: then the attempt is given back and
  the job runs again, alone. A crash it shared never makes a job dead.
- An expired suspect lease counts; on the last attempt the job is dead, its reason saying how
  many times its worker died during it.

So a poison pill with ``max_attempts`` n >= 2 kills workers at most n times (the first crash,
in whatever batch, counts); an innocent batch-mate loses at most the attempt of that one crash
and then runs alone. These functions are pure: every backend applies them (the SQL stores
spell the same rule in their statements, the contract suite checks they agree).
"""

from __future__ import annotations

from dataclasses import dataclass

from rota.domain.job import Job, JobState

#: An expired lease that counted as an attempt, with attempts left.
LEASE_EXPIRED = "lease expired"
#: An expired lease whose handler never started: the attempt is given back.
NOT_STARTED = "lease expired before its handler started: the attempt is given back"
#: An ordinary lease expired on the job's last attempt: given back, and the job runs alone.
LAST_SHARED = (
    "lease expired on the last attempt, not yet running alone: "
    "the attempt is given back and the job runs alone next"
)


#: The reason of a job dead because its worker kept dying while it ran alone.
DIED = "worker died during this job {crashes} times (lease expired on the last attempt)"


def died(crashes: int) -> str:
    return DIED.format(crashes=crashes)


@dataclass(frozen=True, slots=True)
class Expiry:
    """What an expired lease does to its job: its attempt and crash count afterwards, whether
    it is dead (else pending again, due now), and the error its history records."""

    attempt: int
    crashes: int
    dead: bool
    error: str


def expire(*, attempt: int, max_attempts: int, crashes: int, started: bool) -> Expiry:
    """Apply the rule to a lease of attempt ``attempt`` that expired; ``crashes`` is the job's
    count before it, ``started`` whether the lease's handler started."""
    if not started:
        return Expiry(attempt - 1, crashes, dead=False, error=NOT_STARTED)
    if crashes == 0 and attempt >= max_attempts:
        return Expiry(attempt - 1, 1, dead=False, error=LAST_SHARED)
    if attempt >= max_attempts:
        return Expiry(attempt, crashes + 1, dead=True, error=died(crashes + 1))
    return Expiry(attempt, crashes + 1, dead=False, error=LEASE_EXPIRED)


def runs_alone(candidate: Job) -> bool:
    """Whether a claim candidate must be claimed alone: a suspect, or an expired lease (whose
    job becomes a suspect as the claim takes it over)."""
    return candidate.crashes > 0 or candidate.state is JobState.RUNNING


def quarantine(job: Job) -> str | None:
    """Why the job runs alone, in words for people; None for a job no crash has touched."""
    if job.crashes <= 0:
        return None
    times = "once" if job.crashes == 1 else f"{job.crashes} times"
    return f"crash suspect: its worker died {times} while running it, so it runs alone"
