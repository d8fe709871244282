"""The per-(queue, state) counts and the per-second tally of finished jobs, as the hot
statements keep them on SQLite.

Row triggers keep ``rota_counts`` and ``rota_finished_per_second`` for every change of a job's
state but three, which the statements making them count themselves, once per statement
(019_hot_writes_count_themselves): an insert (enqueue, workflows), a claim (pending to
running) and a success (running to succeeded). Any trigger fired by an INSERT makes SQLite
insert each index entry with a fresh descent of its B-tree, and the triggers' own statements
ran once per row; those three are most of the writes a queue makes.
"""

from __future__ import annotations

import sqlite3
from collections import Counter
from collections.abc import Iterable, Sequence

from rota.domain.job import Job

_ADD = (
    "INSERT INTO rota_counts (queue, state, n) VALUES (?, ?, ?) "
    "ON CONFLICT (queue, state) DO UPDATE SET n = n + excluded.n"
)
_TAKE = "UPDATE rota_counts SET n = n - ? WHERE queue = ? AND state = ?"
_TALLY = (
    "INSERT INTO rota_finished_per_second (second, state, n) VALUES (?, ?, ?) "
    "ON CONFLICT (second, state) DO UPDATE SET n = n + excluded.n"
)


def count_inserted(conn: sqlite3.Connection, jobs: Sequence[Job]) -> None:
    """Add jobs just inserted to the counts of their queue and state."""
    added = Counter((job.queue, str(job.state)) for job in jobs)
    conn.executemany(_ADD, [(queue, state, n) for (queue, state), n in added.items()])


def count_moved(
    conn: sqlite3.Connection, queues: Iterable[str], old_state: str, new_state: str
) -> None:
    """Move one job of each queue named (a queue once per job) from ``old_state`` to
    ``new_state`` in the counts."""
    moved = Counter(queues)
    conn.executemany(_TAKE, [(n, queue, old_state) for queue, n in moved.items()])
    conn.executemany(_ADD, [(queue, new_state, n) for queue, n in moved.items()])


def tally_finished(conn: sqlite3.Connection, finished_at_us: int, state: str, n: int) -> None:
    """Add ``n`` jobs that reached ``state`` at ``finished_at_us`` to its second's tally."""
    if n:
        conn.execute(_TALLY, (finished_at_us - finished_at_us % 1_000_000, state, n))
