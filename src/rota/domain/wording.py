"""How a count reads in a message: "1 held job", "3 held jobs", "0 jobs", never "job(s)"."""

from __future__ import annotations


def plural(noun: str, count: int = 2) -> str:
    """``noun`` as it reads after ``count``: unchanged for exactly one, else with an ``s``
    (every noun rota counts takes a plain ``s``). Without a count, the plural."""
    return noun if count == 1 else f"{noun}s"


def counted(count: int, noun: str) -> str:
    """``count`` and ``noun`` in agreement: ``counted(1, "held job") == "1 held job"``,
    ``counted(3, "held job") == "3 held jobs"``, ``counted(0, "job") == "0 jobs"``."""
    return f"{count} {plural(noun, count)}"
