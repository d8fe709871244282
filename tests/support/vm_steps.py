"""How much work SQLite does for a call: its virtual machine's instructions, counted."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def vm_steps(conn: sqlite3.Connection, body: Callable[[], T]) -> tuple[int, T]:
    """How many SQLite virtual machine instructions (in tens) ``body`` runs on ``conn``, and
    what it returned."""
    steps = 0

    def tick() -> int:
        nonlocal steps
        steps += 1
        return 0

    conn.set_progress_handler(tick, 10)
    try:
        result = body()
    finally:
        conn.set_progress_handler(None, 10)
    return steps, result
