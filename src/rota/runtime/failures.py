"""How a handler's (or a step's) exception is recorded: a one-line description and its
traceback, whatever the exception does when printed."""

from __future__ import annotations

import contextlib
import traceback as tb

#: What a failure records when the handler's exception cannot be turned into text.
UNPRINTABLE = "unprintable error"


def describe(error: BaseException) -> str:
    """``Type: message`` of a handler's exception; ``Type: unprintable error`` when its
    ``__str__`` raises, so the failure is still recorded like any other."""
    name = type(error).__name__
    try:
        text = str(error)
    except Exception:
        return f"{name}: {UNPRINTABLE}"
    return f"{name}: {text}" if text else name


def trace(error: BaseException) -> str | None:
    """The exception's traceback; its frames alone (or None) when formatting it fails, as a
    raising ``__notes__`` property makes it."""
    with contextlib.suppress(Exception):
        return "".join(tb.format_exception(error))
    with contextlib.suppress(Exception):
        frames = "".join(tb.format_tb(error.__traceback__))
        return (
            f"Traceback (most recent call last):\n{frames}{type(error).__name__}: {UNPRINTABLE}\n"
        )
    return None
