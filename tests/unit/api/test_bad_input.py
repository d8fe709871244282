"""Bad input at the API: every refusal is a 4xx JSON error naming the problem, and nothing is
written (TESTPLAN T33). A 5xx would raise out of the ASGI transport and fail the test."""

from __future__ import annotations

import gzip
import json

import httpx
import pytest

from rota.api.body import parse_json
from rota.api.errors import ApiError
from rota.domain.payload import MAX_PAYLOAD_DEPTH
from rota.store.memory import MemoryStore
from tests.unit.api.conftest import dead_job, total_jobs

JSON = {"content-type": "application/json"}


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


BAD_BODIES: list[tuple[str, bytes, str]] = [
    ("missing kind", b"{}", "kind: is required"),
    ("invalid kind", b'{"kind": "no spaces"}', "kind:"),
    ("kind with script", b'{"kind": "<script>alert(1)</script>"}', "kind:"),
    ("kind too long", json.dumps({"kind": "k" * 129}).encode(), "kind:"),
    ("kind wrong type", b'{"kind": 5}', "kind:"),
    ("negative delay", b'{"kind": "email", "delay_seconds": -1}', "delay_seconds:"),
    (
        "a negative delay that rounds to zero",
        b'{"kind": "email", "delay_seconds": -1e-83}',
        "delay_seconds:",
    ),
    ("huge delay", b'{"kind": "email", "delay_seconds": 1e300}', "delay_seconds:"),
    (
        "an expiry that rounds down to the maximum",
        b'{"kind": "email", "expire_after_seconds": 3153600000.0000005}',
        "expire_after_seconds:",
    ),
    ("delay as string", b'{"kind": "email", "delay_seconds": "5"}', "delay_seconds:"),
    ("priority as string", b'{"kind": "email", "priority": "5"}', "priority:"),
    # 5.0 is an integer in JSON Schema, and accepted; a fraction is not.
    ("priority with a fraction", b'{"kind": "email", "priority": 5.5}', "priority:"),
    ("priority as bool", b'{"kind": "email", "priority": true}', "priority:"),
    ("priority out of range", b'{"kind": "email", "priority": 101}', "priority:"),
    ("max_attempts -1", b'{"kind": "email", "max_attempts": -1}', "max_attempts:"),
    ("max_attempts 0", b'{"kind": "email", "max_attempts": 0}', "max_attempts:"),
    ("max_attempts 10^9", b'{"kind": "email", "max_attempts": 1000000000}', "max_attempts:"),
    (
        "max_attempts 2^63",
        b'{"kind": "email", "max_attempts": 9223372036854775808}',
        "max_attempts:",
    ),
    ("zero timeout", b'{"kind": "email", "timeout_seconds": 0}', "timeout_seconds:"),
    ("unknown field", b'{"kind": "email", "colour": "red"}', "colour: unknown field"),
    ("duplicate keys", b'{"kind": "email", "kind": "report"}', "duplicate key"),
    ("NaN", b'{"kind": "email", "payload": NaN}', "NaN"),
    ("Infinity", b'{"kind": "email", "payload": {"x": -Infinity}}', "Infinity"),
    ("1e400", b'{"kind": "email", "payload": 1e400}', "out of range"),
    ("NUL in payload value", b'{"kind": "email", "payload": {"a": "x\\u0000y"}}', "payload:"),
    ("NUL in payload key", b'{"kind": "email", "payload": {"a\\u0000": 1}}', "payload:"),
    ("lone surrogate", b'{"kind": "email", "payload": "\\ud800"}', "payload:"),
    ("lone surrogate in key", b'{"kind": "email", "payload": {"\\udfff": 1}}', "payload:"),
    ("surrogate in unique key", b'{"kind": "email", "unique_key": "\\ud800"}', "unique_key:"),
    ("control char in unique key", b'{"kind": "email", "unique_key": "a\\nb"}', "unique_key:"),
    (
        "unique key 3 KB",
        json.dumps({"kind": "email", "unique_key": "k" * 3000}).encode(),
        "unique_key:",
    ),
    ("queue with control chars", b'{"kind": "email", "queue": "a\\tb"}', "queue:"),
    ("queue injection", b'{"kind": "email", "queue": "x\'; DROP TABLE jobs; --"}', "queue:"),
    ("queue with RTL override", '{"kind": "email", "queue": "a\u202eb"}'.encode(), "queue:"),
    ("queue 1 KB", json.dumps({"kind": "email", "queue": "q" * 1024}).encode(), "queue:"),
    (
        "payload too deep",
        json.dumps(
            {"kind": "email", "payload": json.loads(nested(MAX_PAYLOAD_DEPTH + 1))}
        ).encode(),
        "payload:",
    ),
    (
        "body 10,000 deep",
        b'{"kind": "email", "payload": ' + nested(10_000).encode() + b"}",
        "nested",
    ),
    ("array root", b'[{"kind": "email"}]', "JSON object"),
    ("string root", b'"email"', "JSON object"),
    ("empty body", b"", "empty"),
    ("truncated", b'{"kind": "email"', "not valid JSON"),
    ("invalid UTF-8", b'{"kind": "email", "payload": "\xff\xfe"}', "UTF-8"),
    ("BOM", b'\xef\xbb\xbf{"kind": "email"}', "byte order mark"),
    ("huge integer", b'{"kind": "email", "payload": ' + b"9" * 5000 + b"}", "not valid JSON"),
    (
        "naive run_at",
        b'{"kind": "email", "run_at": "2026-03-01T10:00:00"}',
        "run_at: needs a UTC offset",
    ),
    ("impossible date", b'{"kind": "email", "run_at": "2026-02-30T10:00:00Z"}', "run_at:"),
    ("year 0", b'{"kind": "email", "run_at": "0000-01-01T00:00:00Z"}', "run_at:"),
    ("year 10000", b'{"kind": "email", "run_at": "10000-01-01T00:00:00Z"}', "run_at:"),
    ("year 1", b'{"kind": "email", "run_at": "0001-01-01T00:30:00+01:00"}', "run_at:"),
    ("year 9999", b'{"kind": "email", "run_at": "9999-12-31T23:00:00-05:00"}', "run_at:"),
    ("leap second", b'{"kind": "email", "run_at": "2016-12-31T23:59:60Z"}', "run_at:"),
    (
        "run_at and delay",
        b'{"kind": "email", "run_at": "2026-03-01T10:00:00Z", "delay_seconds": 1}',
        "run_at:",
    ),
    ("run_at as number", b'{"kind": "email", "run_at": 1767225600}', "run_at:"),
    ("run_at NUL separator", b'{"kind": "email", "run_at": "2026-03-01\\u000010:00Z"}', "run_at:"),
    ("run_at X separator", b'{"kind": "email", "run_at": "2026-03-01X10:00:00Z"}', "run_at:"),
    ("run_at hour only", b'{"kind": "email", "run_at": "2026-03-01T10Z"}', "run_at:"),
    (
        "run_at offset seconds",
        b'{"kind": "email", "run_at": "2026-03-01T10:00+01:00:30"}',
        "run_at:",
    ),
    (
        "run_at Arabic-Indic digits",
        '{"kind": "email", "run_at": "\u0662\u0660\u0662\u0666-03-01T10:00:00Z"}'.encode(),
        "run_at:",
    ),
]


@pytest.mark.parametrize(
    ("body", "expected"), [(b, e) for _, b, e in BAD_BODIES], ids=[n for n, _, _ in BAD_BODIES]
)
async def test_bad_job_bodies_are_refused_with_400_and_nothing_written(
    api: httpx.AsyncClient, store: MemoryStore, body: bytes, expected: str
) -> None:
    response = await api.post("/api/jobs", content=body, headers=JSON)
    assert response.status_code == 400, response.text
    assert response.headers["content-type"] == "application/json"
    assert set(response.json()) == {"error"}
    assert expected in response.json()["error"]
    assert await total_jobs(store) == 0


async def test_ten_megabyte_body_is_413(api: httpx.AsyncClient, store: MemoryStore) -> None:
    payload = b'{"kind": "email", "payload": "' + b"x" * (10 * 1024 * 1024) + b'"}'
    response = await api.post("/api/jobs", content=payload, headers=JSON)
    assert response.status_code == 413
    assert "larger than" in response.json()["error"]
    assert await total_jobs(store) == 0


async def test_streamed_body_without_length_is_cut_off_at_the_limit(
    api: httpx.AsyncClient, store: MemoryStore
) -> None:
    async def chunks() -> object:
        yield b'{"kind": "email", "payload": "'
        for _ in range(40):
            yield b"x" * 65536
        yield b'"}'

    response = await api.post("/api/jobs", content=chunks(), headers=JSON)  # type: ignore[arg-type]
    assert response.status_code == 413
    assert await total_jobs(store) == 0


@pytest.mark.parametrize(
    "content_type",
    [None, "text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x",
     "application/json; charset=latin-1", "application/jsonx"],
)  # fmt: skip
async def test_wrong_content_type_is_415(
    api: httpx.AsyncClient, store: MemoryStore, content_type: str | None
) -> None:
    headers = {"content-type": content_type} if content_type else {}
    response = await api.post("/api/jobs", content=b'{"kind": "email"}', headers=headers)
    assert response.status_code == 415
    assert "application/json" in response.json()["error"] or "UTF-8" in response.json()["error"]
    assert await total_jobs(store) == 0


async def test_compressed_bodies_are_refused(api: httpx.AsyncClient, store: MemoryStore) -> None:
    bomb = gzip.compress(b'{"kind": "email", "payload": "' + b"0" * 5_000_000 + b'"}')
    response = await api.post(
        "/api/jobs", content=bomb, headers={**JSON, "content-encoding": "gzip"}
    )
    assert response.status_code == 415
    assert response.json() == {"error": "compressed request bodies are not accepted"}
    assert await total_jobs(store) == 0


async def test_json_with_charset_utf8_is_accepted(api: httpx.AsyncClient) -> None:
    response = await api.post(
        "/api/jobs",
        content=b'{"kind": "email"}',
        headers={"content-type": "application/json; charset=UTF-8"},
    )
    assert response.status_code == 201


@pytest.mark.parametrize(
    ("path", "status"),
    [
        ("/api/jobs/999", 404),
        ("/api/jobs/0", 400),
        ("/api/jobs/-1", 400),
        ("/api/jobs/9223372036854775807", 404),
        ("/api/jobs/9223372036854775808", 400),
        (f"/api/jobs/{2**70}", 400),
        ("/api/jobs/abc", 400),
        ("/api/jobs/1.5", 400),
        ("/api/jobs/%00", 400),
        ("/api/jobs/\uff11", 400),  # a fullwidth digit one
        ("/api/nothing", 404),
        ("/nothing", 404),
    ],
)
async def test_bad_ids_and_paths(api: httpx.AsyncClient, path: str, status: int) -> None:
    response = await api.get(path)
    assert response.status_code == status
    assert set(response.json()) == {"error"}


@pytest.mark.parametrize(
    "params",
    [
        {"cursor": "nonsense"},
        {"cursor": "ZZZZ"},
        {"cursor": "x" * 100},
        {"limit": "0"},
        {"limit": "501"},
        {"limit": "ten"},
        {"state": "sleeping"},
        {"state": "pending,,bogus"},
        {"state": ""},
        {"state": "pending,"},
        {"kind": "<script>"},
        {"queue": "' OR 1=1 --"},
        {"tenant": "a b"},
        {"q": "k" * 300},
    ],
)
async def test_bad_list_parameters_are_400(api: httpx.AsyncClient, params: dict[str, str]) -> None:
    response = await api.get("/api/jobs", params=params)
    assert response.status_code == 400, response.text
    assert set(response.json()) == {"error"}
    count = await api.get("/api/jobs/count", params=params)
    assert count.status_code in (200, 400)  # count takes no cursor or limit


async def test_bad_bulk_bodies_change_nothing(api: httpx.AsyncClient, store: MemoryStore) -> None:
    job = await dead_job(store)
    for body in (
        b'{"state": ["zombie"]}',
        b'{"kind": 5}',
        b'{"x": 1}',
        b"[]",
        b'{"state": "dead"}',
    ):
        response = await api.post("/api/jobs/bulk/retry", content=body, headers=JSON)
        assert response.status_code == 400, body
    assert (
        await api.post(
            "/api/jobs/bulk/retry", content=b"{}", headers={"content-type": "text/plain"}
        )
    ).status_code == 415
    assert (await store.get(job.id)).state.value == "dead"


async def test_error_messages_stay_encodable_for_hostile_keys(api: httpx.AsyncClient) -> None:
    response = await api.post("/api/jobs", content=b'{"kind": "email", "\\ud800": 1}', headers=JSON)
    assert response.status_code == 400
    assert response.json() == {"error": "request body keys must be valid Unicode"}


def test_parser_depth_scan_ignores_brackets_inside_strings() -> None:
    assert parse_json(b'{"a": "[[[[[[[[[[[[", "b": "\\"[[[["}', max_depth=2) == {
        "a": "[[[[[[[[[[[[",
        "b": '"[[[[',
    }
    with pytest.raises(ApiError):
        parse_json(nested(3).encode(), max_depth=2)


@pytest.mark.parametrize("term", ["²", "\u0661", "\uff11"])
async def test_search_with_non_ascii_digits_is_a_key_never_a_500(
    api: httpx.AsyncClient, store: MemoryStore, term: str
) -> None:
    job = await dead_job(store)
    assert job.id == 1  # what Arabic-Indic or full-width one would wrongly name
    listed = await api.get("/api/jobs", params={"q": term})
    assert listed.status_code == 200 and listed.json()["jobs"] == []
    counted = await api.get("/api/jobs/count", params={"q": term})
    assert counted.status_code == 200 and counted.json()["count"] == 0
    for action in ("retry", "cancel"):
        response = await api.post(f"/api/jobs/bulk/{action}", json={"q": term})
        assert response.status_code == 200 and response.json() == {"count": 0}
    assert (await store.get(job.id)).state.value == "dead"


@pytest.mark.parametrize(
    "run_at", ["2026-03-01T10:00:00Z", "2026-03-01 10:00:00.5+02:00", "2026-03-01t10:00z"]
)
async def test_run_at_in_rfc_3339_is_accepted(api: httpx.AsyncClient, run_at: str) -> None:
    response = await api.post("/api/jobs", json={"kind": "email", "run_at": run_at})
    assert response.status_code == 201, response.text


@pytest.mark.parametrize("term", ["a\x00b", "\x7f", "tab\there"])
async def test_a_search_no_key_could_hold_finds_nothing(
    api: httpx.AsyncClient, store: MemoryStore, term: str
) -> None:
    """Unique keys never hold control characters or lone surrogates: such a search is valid
    and matches nothing (it never reaches the database as it is)."""
    await dead_job(store)
    listed = await api.get("/api/jobs", params={"q": term})
    assert listed.status_code == 200 and listed.json()["jobs"] == []
    body = json.dumps({"q": term}).encode()
    bulk = await api.post("/api/jobs/bulk/retry", content=body, headers=JSON)
    assert bulk.status_code == 200 and bulk.json() == {"count": 0}
    surrogate = await api.post("/api/jobs/bulk/retry", content=b'{"q": "\\ud800"}', headers=JSON)
    assert surrogate.status_code == 200 and surrogate.json() == {"count": 0}
