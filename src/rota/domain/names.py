"""The names and fields jobs are made of: kinds, queues and tenants, text fields, instants
read from text, and trace context."""

from __future__ import annotations

import functools
import re
from collections.abc import Collection, Mapping
from datetime import UTC, datetime

from rota.domain.errors import InvalidJob
from rota.domain.wording import plural

MAX_NAME_LENGTH = 128
#: A job's trace context: a few propagation headers (W3C traceparent and tracestate, or what
#: the configured propagator writes), small enough to travel with every claim.
MAX_TRACE_CONTEXT_ENTRIES = 8
MAX_TRACE_CONTEXT_BYTES = 4096
#: The earliest and latest instants a job may be scheduled for.
EARLIEST_RUN_AT = datetime(1970, 1, 1, tzinfo=UTC)
LATEST_RUN_AT = datetime(9999, 1, 1, tzinfo=UTC)

#: Kinds, queues and tenants: letters, digits and ``_ . : -``; they appear in URLs, metrics
#: labels and logs, so the grammar is deliberately narrow.
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:\-]*")
CONTROL = re.compile(r"[\x00-\x1f\x7f]")
#: The instants rota reads from text: RFC 3339 (``T`` or a space between date and time,
#: seconds and fraction optional, ``Z`` or ``+HH:MM``), ASCII digits only. Python's own
#: ``fromisoformat`` takes any character as the separator (NUL included) and other scripts'
#: digits, so the shape is checked first and the calendar by ``fromisoformat`` after.
INSTANT_PATTERN = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ][0-9]{2}:[0-9]{2}(?::[0-9]{2}(?:\.[0-9]{1,9})?)?"
    r"(?:[Zz]|[+-][0-9]{2}:[0-9]{2})"
)
#: The years INSTANT_PATTERN's instants may name whatever their offset (1971-9998), so a
#: schema can describe exactly the text that lies between EARLIEST_RUN_AT and LATEST_RUN_AT.
SAFE_YEARS_PATTERN = r"(?:197[1-9]|19[89][0-9]|[2-8][0-9]{3}|9[0-8][0-9]{2}|99[0-8][0-9]|999[0-8])"
_NAIVE_INSTANT = re.compile(INSTANT_PATTERN.pattern.split("(?:[Zz]")[0])
MAX_INSTANT_LENGTH = 64
#: Trace context entries are HTTP header fields: a token name, a printable ASCII value.
_HEADER_NAME = re.compile(r"[a-z0-9!#$%&'*+.^_`|~-]{1,64}")
_HEADER_VALUE = re.compile(r"[\x20-\x7e]*")


@functools.lru_cache(maxsize=4096)
def is_valid_name(value: str) -> bool:
    """Kinds, queues and tenants repeat endlessly: remember the ones already checked."""
    return len(value) <= MAX_NAME_LENGTH and NAME_PATTERN.fullmatch(value) is not None


def validate_name(field_name: str, value: object, *, required: bool = True) -> str | None:
    """Check a kind, queue or tenant against NAME_PATTERN; raise InvalidJob naming the field."""
    if value is None:
        if required:
            raise InvalidJob(field_name, "is required")
        return None
    if type(value) is str and is_valid_name(value):
        return value
    if not isinstance(value, str):
        raise InvalidJob(field_name, "must be a string")
    if not value:
        raise InvalidJob(field_name, "must not be empty")
    if len(value) > MAX_NAME_LENGTH:
        raise InvalidJob(field_name, f"must be at most {MAX_NAME_LENGTH} characters")
    if not NAME_PATTERN.fullmatch(value):
        raise InvalidJob(
            field_name,
            "may contain only letters, digits and _ . : - and must start with a letter or digit",
        )
    return value


#: How many known kinds an "unknown kind" message lists before it says how many more there are.
_KINDS_LISTED = 20


def check_known_kind(kind: str, known: Collection[str] | None) -> str:
    """``kind``, if jobs of it can be enqueued where handlers exist for the ``known`` kinds.

    ``None`` accepts every kind: nothing is known about the handlers (code that only enqueues,
    its workers elsewhere). Otherwise raises InvalidJob("kind") listing the known kinds, so a
    mistyped kind is refused at the enqueue instead of going dead at the first worker.
    """
    if known is None or kind in known:
        return kind
    names = sorted(known)
    if not names:
        raise InvalidJob("kind", f"unknown kind {kind!r} (no kind is known)")
    listed = ", ".join(names[:_KINDS_LISTED])
    if len(names) > _KINDS_LISTED:
        listed += f" and {len(names) - _KINDS_LISTED} more"
    raise InvalidJob(
        "kind", f"unknown kind {kind!r} ({plural('known kind', len(names))}: {listed})"
    )


def check_text(field_name: str, text: str) -> None:
    if "\x00" in text:
        raise InvalidJob(field_name, "must not contain NUL characters")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidJob(field_name, "must be valid Unicode (no lone surrogates)") from None


def optional_text(field_name: str, value: object, max_length: int) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidJob(field_name, "must be a string")
    if not value:
        raise InvalidJob(field_name, "must not be empty")
    if len(value) > max_length:
        raise InvalidJob(field_name, f"must be at most {max_length} characters")
    if CONTROL.search(value):
        raise InvalidJob(field_name, "must not contain control characters")
    check_text(field_name, value)
    return value


def int_in_range(field_name: str, value: object, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidJob(field_name, "must be an integer")
    if not low <= value <= high:
        raise InvalidJob(field_name, f"must be between {low} and {high}")
    return value


def valid_trace_context(carrier: object) -> dict[str, str]:
    """A plain copy of ``carrier``: at most MAX_TRACE_CONTEXT_ENTRIES header fields (lowercase
    token names, printable ASCII values), MAX_TRACE_CONTEXT_BYTES in all; else InvalidJob."""
    if not isinstance(carrier, Mapping):
        raise InvalidJob("trace_context", "must be a mapping of header names to values")
    if len(carrier) > MAX_TRACE_CONTEXT_ENTRIES:
        raise InvalidJob("trace_context", f"has more than {MAX_TRACE_CONTEXT_ENTRIES} entries")
    size = 0
    plain: dict[str, str] = {}
    for name, value in carrier.items():
        if not (isinstance(name, str) and _HEADER_NAME.fullmatch(name)):
            raise InvalidJob("trace_context", "names must be lowercase header names")
        if not (isinstance(value, str) and _HEADER_VALUE.fullmatch(value)):
            raise InvalidJob("trace_context", "values must be printable ASCII text")
        size += len(name) + len(value)
        plain[name] = value
    if size > MAX_TRACE_CONTEXT_BYTES:
        raise InvalidJob("trace_context", f"is larger than {MAX_TRACE_CONTEXT_BYTES} bytes")
    return plain


def valid_instant(field_name: str, value: object) -> datetime:
    if not isinstance(value, datetime):
        raise InvalidJob(field_name, "must be a datetime")
    if value.tzinfo is None or value.utcoffset() is None:
        raise InvalidJob(field_name, "must be timezone-aware")
    try:
        instant = value.astimezone(UTC)
    except OverflowError:  # an offset that pushes year 1 or 9999 past the calendar
        raise InvalidJob(field_name, "must be between 1970 and 9999") from None
    if not EARLIEST_RUN_AT <= instant < LATEST_RUN_AT:
        raise InvalidJob(field_name, "must be between 1970 and 9999")
    return instant


def parse_instant(field_name: str, text: str) -> datetime:
    """The aware UTC instant ``text`` names (see INSTANT_PATTERN); InvalidJob naming
    ``field_name`` for any other text, an impossible date or an instant outside 1970-9999."""
    if len(text) > MAX_INSTANT_LENGTH or INSTANT_PATTERN.fullmatch(text) is None:
        if _NAIVE_INSTANT.fullmatch(text):
            raise InvalidJob(field_name, "needs a UTC offset such as Z or +02:00")
        raise InvalidJob(
            field_name, "must be an ISO 8601 date and time such as 2026-05-01T09:30:00Z"
        )
    try:
        value = datetime.fromisoformat(text[:-1] + "+00:00" if text[-1] in "Zz" else text)
    except ValueError:
        raise InvalidJob(field_name, "is not a valid date and time") from None
    return valid_instant(field_name, value)
