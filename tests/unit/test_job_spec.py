"""JobSpec validation: every bad field raises InvalidJob naming it, before anything is written."""

from __future__ import annotations

import dataclasses
import inspect
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rota.domain.errors import InvalidJob
from rota.domain.job import JobSpec
from rota.domain.payload import MAX_PAYLOAD_BYTES, MAX_PAYLOAD_DEPTH, encode_payload
from rota.domain.retry import RetryPolicy


def nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"kind": ""}, "kind"),
        ({"kind": "x" * 129}, "kind"),
        ({"kind": "has space"}, "kind"),
        ({"kind": "-leading"}, "kind"),
        ({"kind": "<script>"}, "kind"),
        ({"kind": "tab\there"}, "kind"),
        ({"kind": None}, "kind"),
        ({"kind": 5}, "kind"),
        ({"queue": ""}, "queue"),
        ({"queue": "'; DROP TABLE rota_jobs; --"}, "queue"),
        ({"queue": "\u202eevil"}, "queue"),
        ({"tenant": "a/b"}, "tenant"),
        ({"payload": float("nan")}, "payload"),
        ({"payload": {"x": float("inf")}}, "payload"),
        ({"payload": "nul\x00here"}, "payload"),
        ({"payload": {"nul\x00key": 1}}, "payload"),
        ({"payload": "lone \ud800 surrogate"}, "payload"),
        ({"payload": {1: "int key"}}, "payload"),
        ({"payload": {"set": {1, 2}}}, "payload"),
        ({"payload": b"bytes"}, "payload"),
        ({"payload": object()}, "payload"),
        ({"payload": nested(MAX_PAYLOAD_DEPTH + 1)}, "payload"),
        ({"payload": "x" * (MAX_PAYLOAD_BYTES + 1)}, "payload"),
        ({"delay": timedelta(seconds=-1)}, "delay"),
        ({"delay": 5}, "delay"),
        ({"run_at": datetime(2026, 1, 1)}, "run_at"),  # noqa: DTZ001 (naive on purpose)
        ({"run_at": datetime(1, 1, 1, tzinfo=UTC)}, "run_at"),
        ({"run_at": "2026-01-01"}, "run_at"),
        (
            {"run_at": datetime(2026, 1, 1, tzinfo=UTC), "delay": timedelta(seconds=1)},
            "run_at",
        ),
        ({"max_attempts": 0}, "max_attempts"),
        ({"max_attempts": -1}, "max_attempts"),
        ({"max_attempts": 10**9}, "max_attempts"),
        ({"max_attempts": True}, "max_attempts"),
        ({"max_attempts": 2.5}, "max_attempts"),
        ({"priority": 101}, "priority"),
        ({"priority": -101}, "priority"),
        ({"priority": "high"}, "priority"),
        ({"unique_key": "k" * 256}, "unique_key"),
        ({"unique_key": ""}, "unique_key"),
        ({"unique_key": "line\nbreak"}, "unique_key"),
        ({"unique_key": 42}, "unique_key"),
        ({"timeout": timedelta(0)}, "timeout"),
        ({"timeout": timedelta(seconds=-5)}, "timeout"),
        ({"trace_context": "00-abc"}, "trace_context"),
        ({"trace_context": {"Traceparent": "00-abc"}}, "trace_context"),
        ({"trace_context": {"traceparent": 7}}, "trace_context"),
        ({"trace_context": {"traceparent": "line\nbreak"}}, "trace_context"),
        ({"trace_context": {"traceparent": "ü"}}, "trace_context"),
        ({"trace_context": {f"h{i}": "v" for i in range(9)}}, "trace_context"),
        ({"trace_context": {"tracestate": "x" * 5000}}, "trace_context"),
    ],
)
def test_bad_field_raises_invalid_job_naming_it(fields: dict[str, Any], field: str) -> None:
    values: dict[str, Any] = {"kind": "email"}
    values.update(fields)
    with pytest.raises(InvalidJob) as raised:
        JobSpec(**values)
    assert raised.value.field == field
    assert str(raised.value).startswith(f"{field}: ")


def test_a_trace_context_is_kept_as_a_plain_copy_without_checking_the_rest_again() -> None:
    carrier = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
    spec = JobSpec(kind="email", payload={"to": "ada@example.com"})
    traced = spec.with_trace_context(carrier)
    carrier["traceparent"] = "changed"
    assert traced.trace_context == {
        "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    }
    assert spec.trace_context is None  # the original is untouched
    assert traced.payload_json == spec.payload_json and traced.kind == "email"
    with pytest.raises(InvalidJob):
        spec.with_trace_context({"traceparent": "\x00"})


def test_a_valid_spec_keeps_its_payload_text_canonical() -> None:
    spec = JobSpec(kind="email.send", payload={"b": 1, "a": ["ü", None, 2.5]})
    assert spec.payload_json == '{"b":1,"a":["ü",null,2.5]}'


def test_the_written_constructor_takes_the_fields_in_their_order_with_their_defaults() -> None:
    """JobSpec's __init__ is written out (it sets each slot through its own setter): it takes
    every init field of the dataclass, in order, with the same defaults, as @dataclass
    would; a field added to one and not the other fails here."""
    parameters = list(inspect.signature(JobSpec.__init__).parameters.values())[1:]
    init_fields = [f for f in dataclasses.fields(JobSpec) if f.init]
    assert [p.name for p in parameters] == [f.name for f in init_fields]
    for parameter, spec_field in zip(parameters, init_fields, strict=True):
        if spec_field.name == "payload":  # default_factory=dict: a new {} for each spec
            continue
        expected = inspect.Parameter.empty
        if spec_field.default is not dataclasses.MISSING:
            expected = spec_field.default
        assert parameter.default == expected, spec_field.name
    first, second = JobSpec("k"), JobSpec("k")
    assert first.payload == {} and first.payload is not second.payload
    assert JobSpec("k", None).payload is None  # JSON null, not the default
    every = {f.name: getattr(first, f.name) for f in init_fields}
    assert JobSpec(**every) == first
    assert dataclasses.replace(first, priority=3) == JobSpec("k", priority=3)
    with pytest.raises(dataclasses.FrozenInstanceError):
        first.priority = 1  # type: ignore[misc]


def test_run_at_is_normalised_to_utc() -> None:
    from zoneinfo import ZoneInfo

    local = datetime(2026, 7, 1, 12, 0, tzinfo=ZoneInfo("Europe/Berlin"))
    spec = JobSpec(kind="k", run_at=local)
    assert spec.run_at == local
    assert spec.run_at is not None
    assert spec.run_at.tzinfo is UTC


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\x00")),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(
            st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\x00")),
            children,
            max_size=4,
        )
    ),
    max_leaves=20,
)


@given(json_values)
def test_any_plain_json_value_is_accepted_and_round_trips(value: Any) -> None:
    import json

    assert json.loads(encode_payload(value)) == value


class _Text(str):
    pass


_plain_text = st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\x00"))


@given(json_values | st.builds(_Text, _plain_text) | st.tuples(st.integers(), _plain_text))
def test_the_payload_text_is_json_s_letter_for_letter(value: Any) -> None:
    import json

    written = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    assert encode_payload(value) == written


@given(st.integers(1, 10_000))
def test_retry_delay_grows_then_stays_capped(attempt: int) -> None:
    policy = RetryPolicy(base=timedelta(seconds=1), cap=timedelta(minutes=10), jitter=0.1)
    low, high = policy.bounds(attempt)
    exact = min(600.0, 2.0 ** (attempt - 1)) if attempt < 64 else 600.0
    assert low <= policy.delay(attempt) <= high
    assert high <= timedelta(minutes=10)
    assert low.total_seconds() == pytest.approx(min(600, exact * 0.9))
