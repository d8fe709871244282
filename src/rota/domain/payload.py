"""What jobs carry as JSON: payload and result encoding, stored JSON decoding, progress
reports, and the previews lists show."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

import msgspec

from rota.domain.errors import InvalidInput, InvalidJob
from rota.domain.names import CONTROL

MAX_PAYLOAD_BYTES = 1024 * 1024
#: The largest result kept in its job's row, as JSON text (and the largest signal payload):
#: rows are read by lists and claims, so they stay small. A larger result is stored apart, in
#: a results table read only for that job, up to the worker's cap.
MAX_RESULT_BYTES = 64 * 1024
#: The worker's default cap on a result (``WorkerSettings.max_result_bytes``): a handler that
#: returns more fails its attempt, permanently, saying so.
DEFAULT_MAX_RESULT_BYTES = 16 * 1024 * 1024
#: The highest cap a worker may set: a result travels whole in one statement.
MAX_RESULT_CAP = 256 * 1024 * 1024
#: The longest message a handler's progress report may carry.
MAX_PROGRESS_MESSAGE_LENGTH = 200
MAX_PAYLOAD_DEPTH = 64


def encode_payload(
    payload: object, field_name: str = "payload", *, max_bytes: int = MAX_PAYLOAD_BYTES
) -> str:
    """The canonical JSON text of ``payload``; raises InvalidJob unless it is plain, finite JSON.

    Refused: non-JSON types, NaN and infinities, NUL characters and lone surrogates (neither
    survives a round trip through PostgreSQL), non-string keys, nesting deeper than
    MAX_PAYLOAD_DEPTH and text longer than ``max_bytes`` (MAX_PAYLOAD_BYTES).
    """
    # One walk checks types, keys, NUL characters and depth; exact type checks keep it cheap
    # for the plain dicts most payloads are (enqueue_many builds one spec per job). A dict of
    # names to strings, integers, booleans and None (most payloads) is checked in one loop,
    # with nothing left to walk.
    flat = type(payload) is dict and _flat(payload)
    stack: list[tuple[object, int]] = [] if flat else [(payload, 1)]
    # Whether the payload holds only the exact types msgspec writes as json does, letter for
    # letter (a float's exponent, e.g. 1e+16, and subclasses are left to json).
    exact = True
    while stack:
        value, depth = stack.pop()
        kind = type(value)
        if kind is str:
            if "\x00" in value:  # type: ignore[operator]
                raise InvalidJob(field_name, "must not contain NUL characters")
        elif kind is int or kind is bool or value is None:
            continue
        elif kind is float:
            exact = False
            if not math.isfinite(value):  # type: ignore[arg-type]
                raise InvalidJob(field_name, "must not contain NaN or Infinity")
        elif depth >= MAX_PAYLOAD_DEPTH and isinstance(value, dict | list | tuple):
            raise InvalidJob(field_name, f"is nested deeper than {MAX_PAYLOAD_DEPTH} levels")
        elif isinstance(value, dict):
            exact = exact and kind is dict
            for key, item in value.items():
                if type(key) is not str:
                    raise InvalidJob(field_name, "object keys must be strings")
                if "\x00" in key:
                    raise InvalidJob(field_name, "must not contain NUL characters")
                stack.append((item, depth + 1))
        elif isinstance(value, list | tuple):
            exact = exact and (kind is list or kind is tuple)
            stack.extend((item, depth + 1) for item in value)
        elif isinstance(value, str | int | float):  # subclasses: check as their base type
            exact = False
            stack.append((_plain(value), depth))
        else:
            raise InvalidJob(field_name, f"is not JSON: {type(value).__name__} is not allowed")
    try:
        # msgspec writes the UTF-8 bytes in a tenth of json's time.
        encoded = _encode_exact(payload) if exact else _encode(payload).encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidJob(field_name, "must be valid Unicode (no lone surrogates)") from None
    except (ValueError, OverflowError, RecursionError) as error:
        # What the walk cannot see coming: an integer past Python's int-to-str digit limit
        # (ValueError), one msgspec cannot write, a structure too deep for the encoder.
        raise InvalidJob(field_name, f"cannot be written as JSON: {error}") from None
    if len(encoded) > max_bytes:
        raise InvalidJob(field_name, f"is larger than {max_bytes} bytes as JSON")
    return encoded.decode("utf-8")


def _flat(payload: dict[Any, Any]) -> bool:
    """Whether every key of ``payload`` is a str and every value a str, int, bool or None
    (exact types), none of the strings holding a NUL character."""
    for key, value in payload.items():
        if type(key) is not str or "\x00" in key:
            return False
        kind = type(value)
        if kind is str:
            if "\x00" in value:
                return False
        elif not (kind is int or kind is bool or value is None):
            return False
    return True


def encode_result(value: object, max_bytes: int = DEFAULT_MAX_RESULT_BYTES) -> str | None:
    """The JSON text a handler's return value is stored as, None for None (nothing stored).

    Raises InvalidJob("result") for anything ``encode_payload`` refuses and for text longer
    than ``max_bytes``: the worker then fails the attempt permanently with that message.
    """
    if value is None:
        return None
    return encode_payload(value, "result", max_bytes=max_bytes)


def stored_apart(text: str | None) -> bool:
    """Whether a result's JSON text is too long for its job's row (MAX_RESULT_BYTES in
    UTF-8): stores keep it in their results table instead."""
    if text is None or len(text) * 4 <= MAX_RESULT_BYTES:  # at most 4 bytes a character
        return False
    return len(text) > MAX_RESULT_BYTES or len(text.encode("utf-8")) > MAX_RESULT_BYTES


@dataclass(frozen=True, slots=True)
class Progress:
    """How far a running handler says it is: a fraction in [0, 1] and an optional message.

    Construction raises InvalidInput (a ValueError) for a fraction out of range, not a
    number, or a message that is not text of at most MAX_PROGRESS_MESSAGE_LENGTH characters
    without control characters.
    """

    fraction: float
    message: str | None = None

    def __post_init__(self) -> None:
        fraction = self.fraction
        if isinstance(fraction, bool) or not isinstance(fraction, int | float):
            raise InvalidInput("progress must be a number between 0 and 1")
        if not (math.isfinite(fraction) and 0 <= fraction <= 1):
            raise InvalidInput("progress must be between 0 and 1")
        object.__setattr__(self, "fraction", float(fraction))
        message = self.message
        if message is None:
            return
        if not isinstance(message, str):
            raise InvalidInput("progress message must be a string")
        if len(message) > MAX_PROGRESS_MESSAGE_LENGTH:
            raise InvalidInput(
                f"progress message must be at most {MAX_PROGRESS_MESSAGE_LENGTH} characters"
            )
        if CONTROL.search(message):
            raise InvalidInput("progress message must not contain control characters")
        try:
            message.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidInput("progress message must be valid Unicode") from None


_encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode
_encode_exact = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder().decode


def decode_json(text: bytes | memoryview | str) -> Any:
    """The value of stored JSON text (a payload, a result, a trace context), as ``json.loads``
    reads it: dicts, lists, exact integers of any size, floats, strings, booleans, None.

    The fast decoder refuses a few texts ``json.loads`` accepts (a number beyond a float's
    range, an escaped lone surrogate); those, never written by rota, are read as before.
    """
    try:
        return _decode(text)
    except msgspec.DecodeError:
        return json.loads(bytes(text) if isinstance(text, memoryview) else text)


def _plain(value: str | int | float) -> str | int | float:
    for base in (bool, int, float, str):
        if isinstance(value, base):
            return base(value)
    return value


#: How much of a payload, error or result a list shows: enough to recognise a job.
PREVIEW_BYTES = 300


def preview(text: str | None, limit: int = PREVIEW_BYTES) -> tuple[str | None, bool]:
    """At most ``limit`` bytes of ``text`` as UTF-8 (never a split character), and whether it
    was cut. Lists show these; a job's detail carries the whole value."""
    if text is None:
        return None, False
    data = text.encode("utf-8", "replace")
    if len(data) <= limit:
        return text, False
    return data[:limit].decode("utf-8", "ignore"), True


#: How many characters of a payload's or result's JSON a list reads (a character more than
#: the preview holds, so that a longer text shows as cut): stores cut them as they read.
PREVIEW_CHARS = PREVIEW_BYTES + 1


@dataclass(frozen=True, slots=True)
class Preview:
    """The first characters of a stored JSON value's text, as the store read them: PREVIEW_CHARS
    (at most) for a list, so that a list page never holds whole payloads or results whatever
    they weigh; a job's own answer reads more (``Store.get_preview``)."""

    text: str

    @classmethod
    def of(cls, value: object, chars: int = PREVIEW_CHARS) -> Preview:
        """The preview of a whole value (stores that hold values in memory)."""
        return cls(payload_text(value)[:chars])


def payload_text(payload: object) -> str:
    """The canonical JSON text of a stored (hence valid) payload; a Preview's text as read."""
    if isinstance(payload, Preview):
        return payload.text
    return _encode(payload)


def truncate(text: str | None, limit: int) -> str | None:
    """``text`` cut to ``limit`` characters with a marker saying so; NULs become U+FFFD."""
    if text is None:
        return None
    text = text.replace("\x00", "\ufffd").encode("utf-8", "replace").decode("utf-8")
    if len(text) <= limit:
        return text
    marker = "... [truncated]"
    return text[: limit - len(marker)] + marker
