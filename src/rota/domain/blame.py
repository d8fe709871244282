"""Blame (C9): what a lease expiry costs its job, and which attempts run alone.

A lease that expires means its worker died, hung or was cut off while holding the job. When the
worker held other jobs too, nobody can tell which of them killed it. So the rule charges a
shared crash to every job it touched, as any of them could have caused it, but lets no shared
crash make a job dead; a job is dead of crashes only once its worker died while it ran alone:

- The job becomes a **crash suspect**: ``crashes`` counts the expired leases under which its
  handler had started (an ordinary attempt's handler is taken to start when its claim is
  answered; an attempt that runs alone starts when its worker says so with ``Store.begin``).
- An expired lease counts as an attempt, except that **a shared crash never uses up the last
  attempt**: an ordinary lease that expires on the last attempt gives the attempt back.
- A suspect's **last attempt runs alone**, and so does every attempt of a job whose worker
  died twice while running it (``rota.domain.job_state.runs_alone``): a claim that reaches such a
  job takes it alone (first in line it is the batch; further back the batch ends before it),
  and its worker starts the handler only once it holds nothing else, and claims nothing more
  until it finishes. A crash then can only be its own doing (or the machine's).
- **An attempt whose handler never started is given back**: an attempt that runs alone, still
  waiting for its worker to empty (or whose start was never recorded).
- A lone attempt that expires on the last attempt makes the job dead, its reason saying how
  many times its worker died during it.

So a poison pill with ``max_attempts`` n >= 2 kills workers exactly n times (with n = 1, twice),
whatever batches it was claimed in; a job claimed beside it loses at most two attempts to it,
never its last, and then runs alone, where it succeeds. Only a job that crashed twice, or a
suspect's last attempt, costs its worker the other slots. These functions are pure: every
backend applies them (the SQL stores spell the same rule in their statements; the contract
suite checks that they agree).
"""

from __future__ import annotations

from dataclasses import dataclass

from rota.domain.job import Job
from rota.domain.job_state import JobState, runs_alone

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


def alone_after(expiry: Expiry, max_attempts: int) -> bool:
    """Whether the attempt that follows ``expiry`` runs alone."""
    return runs_alone(expiry.crashes, expiry.attempt + 1, max_attempts)


def quarantine(job: Job) -> str | None:
    """Why the job is watched, in words for people; None for a job no crash has touched."""
    if job.crashes <= 0:
        return None
    times = "once" if job.crashes == 1 else f"{job.crashes} times"
    running = job.state is JobState.RUNNING
    alone = runs_alone(job.crashes, job.attempt if running else job.attempt + 1, job.max_attempts)
    when = "so it runs alone" if alone else "so its last attempt runs alone"
    return (
        f"crash suspect: its lease ran out {times} while its handler ran (its worker died, "
        f"hung or lost the store), {when}"
    )
