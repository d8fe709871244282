"""Statements that meet a job moved to another partition (019_finished_by_day).

A job that finishes, or is retried or re-run, moves between the partitions of rota_jobs:
PostgreSQL deletes the row and inserts it elsewhere. A statement that waited on the row's lock
while another transaction moved it does not re-read it, as it would a row updated in place: it
fails with a serialization error (40001) and changes nothing. Run again, on a fresh snapshot,
it finds the row where it is now (a fenced write then finds its lease lost, as it would have
on a row updated in place).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

import psycopg

T = TypeVar("T")

#: How many times a statement (or a transaction) that met a moved row runs in all.
ATTEMPTS = 5


async def again_if_moved(run: Callable[[], Awaitable[T]]) -> T:
    """``await run()``, again while it fails because a row it waited on moved; ``run`` must
    change nothing when it fails (one statement, a transaction, or a savepoint)."""
    for attempt in range(1, ATTEMPTS + 1):
        try:
            return await run()
        except psycopg.errors.SerializationFailure:
            if attempt == ATTEMPTS:
                raise
    raise AssertionError("unreachable")


def again_if_moved_sync(run: Callable[[], T]) -> T:
    """``again_if_moved`` for synchronous code."""
    for attempt in range(1, ATTEMPTS + 1):
        try:
            return run()
        except psycopg.errors.SerializationFailure:
            if attempt == ATTEMPTS:
                raise
    raise AssertionError("unreachable")
