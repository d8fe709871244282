"""Request bodies: read within a byte limit, require JSON, and parse it strictly.

The standard ``json`` module is lenient in ways an API must not be: it accepts NaN and
Infinity, keeps the last of duplicate keys, turns ``1e400`` into infinity and recurses once
per nesting level. Everything here refuses those with an ApiError (4xx) before any model is
built, so hostile bodies cost a bounded amount of memory and time.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from starlette.requests import ClientDisconnect, Request

from rota.api.errors import ApiError, quote_input

JSON_MEDIA_TYPE = "application/json"


class BodyTooLarge(ApiError):
    """The body passed the configured byte limit (raised while reading, so nothing more is read)."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, f"request body is larger than {limit} bytes")


def media_type(content_type: str | None) -> tuple[str, dict[str, str]]:
    """The lower-cased media type of a Content-Type header and its parameters."""
    if not content_type:
        return "", {}
    main, *params = content_type.split(";")
    parsed: dict[str, str] = {}
    for param in params:
        name, _, value = param.partition("=")
        parsed[name.strip().lower()] = value.strip().strip('"').lower()
    return main.strip().lower(), parsed


def require_json_content_type(content_type: str | None) -> None:
    """415 unless the Content-Type is application/json (in UTF-8, if a charset is named)."""
    main, params = media_type(content_type)
    if main != JSON_MEDIA_TYPE:
        raise ApiError(415, "Content-Type must be application/json")
    if params.get("charset", "utf-8") not in ("utf-8", "utf8"):
        raise ApiError(415, "JSON bodies must be UTF-8")


async def read_body(request: Request, limit: int) -> bytes:
    """The whole body, refusing (413) as soon as it passes ``limit`` bytes."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isascii() and declared.isdigit() and int(declared) > limit:
        raise BodyTooLarge(limit)
    chunks: list[bytes] = []
    size = 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise BodyTooLarge(limit)
            chunks.append(chunk)
    except ClientDisconnect:
        # The client went away (or its connection was closed for sending too slowly): an
        # answer no one reads, and no traceback in the log.
        raise ApiError(400, "the request body did not arrive") from None
    return b"".join(chunks)


async def read_json_object(request: Request, *, max_bytes: int, max_depth: int) -> dict[str, Any]:
    """The request's JSON object body; ApiError (400, 413, 415) for anything else."""
    require_json_content_type(request.headers.get("content-type"))
    # A compressed body could expand far past the size limit (a gzip bomb): refuse, never inflate.
    if request.headers.get("content-encoding", "identity").strip().lower() != "identity":
        raise ApiError(415, "compressed request bodies are not accepted")
    return parse_json_object(await read_body(request, max_bytes), max_depth=max_depth)


def parse_json_object(raw: bytes, *, max_depth: int) -> dict[str, Any]:
    """Strictly parsed JSON whose root is an object; ApiError(400) naming what is wrong."""
    value = parse_json(raw, max_depth=max_depth)
    if not isinstance(value, dict):
        raise ApiError(400, "request body must be a JSON object")
    for key in value:
        try:
            key.encode("utf-8")
        except UnicodeEncodeError:
            raise ApiError(400, "request body keys must be valid Unicode") from None
    return value


def parse_json(raw: bytes, *, max_depth: int) -> Any:
    if not raw.strip():
        raise ApiError(400, "request body is empty: send a JSON object")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ApiError(400, "request body is not valid UTF-8") from None
    if text.startswith("\ufeff"):
        raise ApiError(400, "request body must not start with a byte order mark")
    # Nesting is bounded before parsing: the parser recurses per level.
    if _nesting_exceeds(text, max_depth):
        raise ApiError(400, f"request body is nested deeper than {max_depth} levels")
    try:
        return json.loads(
            text,
            object_pairs_hook=_unique_keys,
            parse_constant=_refuse_constant,
            parse_float=_finite_float,
        )
    except _Refused as refused:
        raise ApiError(400, str(refused)) from None
    except RecursionError:
        raise ApiError(400, "request body is nested too deeply") from None
    except ValueError as error:
        # JSONDecodeError, and int() refusing numbers with thousands of digits.
        position = f" at character {error.pos}" if isinstance(error, json.JSONDecodeError) else ""
        raise ApiError(400, f"request body is not valid JSON{position}") from None


class _Refused(ValueError):
    pass


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise _Refused(f"duplicate key in JSON object: {quote_input(key)!r}")
        result[key] = value
    return result


def _refuse_constant(name: str) -> Any:
    raise _Refused(f"JSON must not contain {name}")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _Refused("JSON number out of range")
    return value


def _nesting_exceeds(text: str, max_depth: int) -> bool:
    """Whether arrays/objects nest deeper than ``max_depth``, ignoring brackets inside strings.

    Strings are removed by one regex pass and everything but brackets by ``translate`` (both
    in C); only the brackets are then walked, so a 1 MB body costs milliseconds.
    """
    if text.count("[") + text.count("{") <= max_depth:
        return False
    brackets = _STRING.sub("", text).translate(_KEEP_BRACKETS)
    depth = 0
    for char in brackets:
        depth += 1 if char in "[{" else -1
        if depth > max_depth:
            return True
    return False


#: A JSON string literal, written as an unrolled loop so long strings match in linear time.
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)


class _KeepBrackets(dict[int, int | None]):
    """A translate table that deletes every character except JSON's four brackets."""

    def __missing__(self, key: int) -> int | None:
        kept = key if chr(key) in "[]{}" else None
        self[key] = kept
        return kept


_KEEP_BRACKETS = _KeepBrackets()
