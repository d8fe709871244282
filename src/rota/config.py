"""Configuration read at the edges: durations, instants, JSON, and the `--app module:attr` loader.

Nothing below the CLI reads the environment; the CLI reads flags and their ``ROTA_*`` twins
and passes plain values down.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import sys
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from rota.domain import names
from rota.domain.errors import InvalidInput

if TYPE_CHECKING:
    from rota.app import App

DEFAULT_DATABASE_URL = "sqlite:///rota.db"

_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_APP_REF = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*")


def parse_duration(text: str, *, what: str = "duration") -> timedelta:
    """``5``, ``2.5s``, ``250ms``, ``10m``, ``1h30m``, ``2d``: a non-negative timedelta."""
    value = text.strip().lower()
    if not value:
        raise InvalidInput(f"{what}: empty")
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
        position = 0
        total = 0.0
        for match in _DURATION_PART.finditer(value):
            if match.start() != position:
                break
            total += float(match.group(1)) * _UNITS[match.group(2)]
            position = match.end()
        if position == len(value):
            seconds = total
    if seconds != seconds or seconds < 0 or seconds > 100 * 365 * 86400:  # NaN, negative, huge
        raise InvalidInput(f"{what}: {text!r} is not a duration like 30s, 250ms, 5m or 1h30m")
    return timedelta(seconds=seconds)


def parse_retention(text: str, *, what: str = "--retention") -> timedelta | str:
    """A retention period, or the string "off" (keep for ever)."""
    if text.strip().lower() in ("off", "none", "never"):
        return "off"
    return parse_duration(text, what=what)


def parse_grace(text: str) -> timedelta | str:
    """The grace before a job no live worker runs ends, or "off" (it waits for ever)."""
    if text.strip().lower() in ("off", "none", "never"):
        return "off"
    return parse_duration(text, what="--unrunnable-grace")


def parse_instant(text: str, *, what: str = "time") -> datetime:
    """An ISO 8601 instant with a UTC offset (or Z), parsed as strictly as the API's run_at
    (``rota.domain.names.parse_instant``): naive times are refused, not guessed, and so is any
    other separator or character; InvalidInput naming ``what``."""
    return names.parse_instant(what, text.strip())


def parse_json(text: str, *, what: str = "--payload") -> Any:
    """A JSON value from the command line; InvalidInput naming ``what`` for anything else:
    malformed text, NaN or Infinity, or nesting too deep to parse."""
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except RecursionError:
        raise InvalidInput(f"{what}: JSON nested too deeply") from None
    except ValueError as error:
        if isinstance(error, InvalidInput):
            raise InvalidInput(f"{what}: {error}") from None
        raise InvalidInput(f"{what} is not valid JSON: {error}") from None


def _reject_constant(name: str) -> Any:
    raise InvalidInput(f"{name} is not valid JSON")


def load_app(reference: str) -> App:
    """The App named by ``module:attribute`` (the current directory is importable).

    The name comes from the operator's command line, never from job data.
    """
    from rota.app import App

    if not _APP_REF.fullmatch(reference):
        raise InvalidInput(f"--app must look like package.module:app, not {reference!r}")
    module_name, _, attribute = reference.partition(":")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise InvalidInput(f"cannot import {module_name!r}: {error}") from None
    target: object = module
    for part in attribute.split("."):
        target = getattr(target, part, None)
        if target is None:
            raise InvalidInput(f"{module_name!r} has no attribute {attribute!r}")
    if not isinstance(target, App):
        raise InvalidInput(f"{reference} is a {type(target).__name__}, not a rota.App")
    return target
