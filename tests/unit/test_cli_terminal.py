"""What the CLI prints from job data: never a raw control sequence (ESC, OSC, BEL, C1, bidi),
never read as rich markup; tables piped to a file keep one row per line; `rota workers` says
who is alive by the store's clock, with the rule the API uses."""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from rota import App, JobContext, Permanent
from rota.api import ApiSettings, create_app
from rota.client import Client
from rota.store import WorkerInfo, open_store
from rota.store.records import ALIVE_BEATS
from rota.testing import drain
from tests.support.cli import invoke, rota, sqlite_url

#: Retitles the terminal (OSC ... BEL), clears it (CSI), a C1 CSI, a right-to-left override,
#: a carriage return, and rich markup, one of them unbalanced.
HOSTILE = "\x1b]0;pwned\x07\x1b[2J\x9b31m\u202eevil\r[bold]x[/] [/nope] :smile:"
RAW = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\u2028\u2029]")


def assert_printable(text: str) -> None:
    assert text, "something was printed"
    raw = RAW.findall(text)
    assert not raw, f"raw control characters reached the terminal: {raw!r}"


async def seed(url: str) -> int:
    """A dead job whose payload, error and traceback carry HOSTILE, a schedule whose payload
    does, and a worker whose name does (written straight to the store, as an older version
    or other code could have)."""
    app = App(url)

    @app.job("hostile")
    def fail(ctx: JobContext, payload: object) -> None:
        raise Permanent(HOSTILE)

    app.schedule("hostile-every-hour", kind="hostile", every=3600, payload={"note": HOSTILE})
    try:
        job = (await app.enqueue("hostile", {"note": HOSTILE}, max_attempts=1)).job
        await drain(app)
        await app.store.register_worker(
            WorkerInfo(
                name=f"w{HOSTILE}", host=f"h{HOSTILE}", pid=1, queues=("default",), concurrency=1
            )
        )
        await app.schedules.scheduler().tick()
        return job.id
    finally:
        await app.close()


@pytest.fixture
def hostile_db(tmp_path: Path) -> tuple[str, int]:
    url = sqlite_url(tmp_path / "hostile.db")
    return url, asyncio.run(seed(url))


@pytest.mark.parametrize(
    "args",
    [
        ["jobs", "show", "{id}"],
        ["jobs", "list"],
        ["schedules", "list"],
        ["schedules", "show", "hostile-every-hour"],
        ["workers"],
    ],
)
def test_job_and_schedule_data_is_escaped_and_never_markup(
    hostile_db: tuple[str, int], args: list[str]
) -> None:
    url, job_id = hostile_db
    ran = invoke(*(arg.format(id=job_id) for arg in args), env={"ROTA_DATABASE_URL": url})
    assert ran.code == 0, ran.err
    assert_printable(ran.out)


def test_jobs_show_prints_the_escapes_and_the_markup_literally(
    hostile_db: tuple[str, int],
) -> None:
    url, job_id = hostile_db
    out = invoke("jobs", "show", str(job_id), env={"ROTA_DATABASE_URL": url}).out
    assert "\\x1b]0;pwned\\x07" in out and "\\u202eevil\\r[bold]x[/] [/nope] :smile:" in out
    assert "  error: Permanent: \\x1b]0;pwned" in out
    assert "Traceback (most recent call last):" in out, "the traceback keeps its lines"
    listed = invoke("jobs", "list", env={"ROTA_DATABASE_URL": url}).out
    assert "[bold]x[/] [/nope]" in listed, "markup in data is printed as it is"


def test_json_output_stays_exact_and_escaped(hostile_db: tuple[str, int]) -> None:
    url, job_id = hostile_db
    out = invoke("jobs", "show", str(job_id), "--json", env={"ROTA_DATABASE_URL": url}).out
    assert_printable(out)
    assert json.loads(out)["payload"] == {"note": HOSTILE}


def test_the_error_line_escapes_what_it_quotes(tmp_path: Path) -> None:
    ran = rota("schedules", "pause", "x\x1b[2J", url=sqlite_url(tmp_path / "e.db"))
    assert ran.code == 2 and len(ran.err_lines) == 1
    assert_printable(ran.err)


@pytest.mark.postgres
def test_hostile_data_is_escaped_on_postgresql(pg_url: str) -> None:
    job_id = asyncio.run(seed(pg_url))
    for args in (["jobs", "show", str(job_id)], ["jobs", "list"], ["workers"]):
        ran = rota(*args, url=pg_url)
        assert ran.code == 0, ran.err
        assert_printable(ran.out)


# ---------------------------------------------------------------------- tables in files


def test_tables_piped_to_a_file_keep_one_row_per_line(tmp_path: Path) -> None:
    url = sqlite_url(tmp_path / "wide.db")
    kinds = [f"{'k' * 100}{n}" for n in range(3)]
    for kind in kinds:
        invoke(
            "enqueue",
            kind,
            "--queue",
            "q" * 90,
            "--tenant",
            "t" * 90,
            env={"ROTA_DATABASE_URL": url},
        )
    for args in (["jobs", "list"], ["queues", "list"]):
        ran = invoke(*args, env={"ROTA_DATABASE_URL": url})
        lines = ran.out.splitlines()
        assert len(lines) == 1 + (len(kinds) if args[0] == "jobs" else 1), ran.out
        assert max(len(line) for line in lines) > 120, "nothing was folded at 80 columns"
    rows = invoke("jobs", "list", env={"ROTA_DATABASE_URL": url}).out.splitlines()[1:]
    assert [next(k for k in kinds if k in row) for row in rows] == kinds[::-1]


# ---------------------------------------------------------------------- workers alive


async def register(url: str, ages: dict[str, timedelta]) -> None:
    """Workers whose last beat was ``age`` ago by the store's clock."""
    store = open_store(url)
    try:
        await store.migrate()
        now = await store.now()
        for name, age in ages.items():
            info = WorkerInfo(name=name, host="h", pid=1, queues=("default",), concurrency=4)
            await store.register_worker(info, now=now - age)
    finally:
        await store.close()


AGES = {
    "fresh": timedelta(seconds=1),
    "late": timedelta(seconds=25),
    "gone": timedelta(minutes=10),
}


def test_workers_shows_who_is_alive(tmp_path: Path) -> None:
    url = sqlite_url(tmp_path / "workers.db")
    asyncio.run(register(url, AGES))
    listed = json.loads(invoke("workers", "--json", env={"ROTA_DATABASE_URL": url}).out)
    alive = {w["name"]: w["alive"] for w in listed["workers"]}
    assert alive == {"fresh": True, "late": True, "gone": False}
    assert all(w["heartbeat_age_seconds"] > 0 for w in listed["workers"])
    quick = invoke("workers", "--heartbeat-seconds", "2", "--json", env={"ROTA_DATABASE_URL": url})
    assert {w["name"]: w["alive"] for w in json.loads(quick.out)["workers"]} == {
        "fresh": True,
        "late": False,
        "gone": False,
    }
    table = invoke("workers", env={"ROTA_DATABASE_URL": url}).out
    states = {line.split()[0]: line.split()[1] for line in table.splitlines()[1:]}
    assert states == {"fresh": "alive", "late": "alive", "gone": "silent"}


async def register_beating_every(url: str, intervals: dict[str, float | None]) -> None:
    """Workers beating every ``interval`` seconds (None: one that did not say), each last
    seen 5 s ago by the store's clock."""
    store = open_store(url)
    try:
        await store.migrate()
        now = await store.now()
        for name, interval in intervals.items():
            info = WorkerInfo(
                name=name,
                host="h",
                pid=1,
                queues=("default",),
                concurrency=4,
                heartbeat=None if interval is None else timedelta(seconds=interval),
            )
            await store.register_worker(info, now=now - timedelta(seconds=5))
    finally:
        await store.close()


def test_workers_judges_each_worker_by_its_own_heartbeat_interval(tmp_path: Path) -> None:
    """A worker beating every second, silent for 5 s, is gone, even though the workers of the
    default 10 s interval are alive after the same silence."""
    url = sqlite_url(tmp_path / "workers.db")
    asyncio.run(register_beating_every(url, {"quick": 1.0, "slow": 10.0, "unsaid": None}))
    listed = json.loads(invoke("workers", "--json", env={"ROTA_DATABASE_URL": url}).out)
    by_name = {w["name"]: w for w in listed["workers"]}
    assert {name: w["alive"] for name, w in by_name.items()} == {
        "quick": False,
        "slow": True,
        "unsaid": True,  # judged by --heartbeat-seconds (10 s), as before
    }
    assert by_name["quick"]["heartbeat_seconds"] == 1.0
    assert by_name["unsaid"]["heartbeat_seconds"] is None
    table = invoke("workers", env={"ROTA_DATABASE_URL": url}).out
    states = {line.split()[0]: line.split()[1] for line in table.splitlines()[1:]}
    assert states == {"quick": "silent", "slow": "alive", "unsaid": "alive"}


async def api_workers(url: str, heartbeat_seconds: float) -> list[dict[str, object]]:
    store = open_store(url)
    try:
        api = create_app(
            Client(store), settings=ApiSettings(heartbeat_interval_seconds=heartbeat_seconds)
        )
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=api), base_url="http://127.0.0.1"
        ) as client:
            workers: list[dict[str, object]] = (await client.get("/api/workers")).json()["workers"]
        return workers
    finally:
        await store.close()


def judged(workers: list[dict[str, object]], heartbeat_s: float) -> dict[str, tuple[bool, bool]]:
    """Each worker's verdict beside the rule applied to the age the same answer reports."""
    return {
        str(w["name"]): (
            bool(w["alive"]),
            float(w["heartbeat_age_seconds"]) <= ALIVE_BEATS * heartbeat_s,  # type: ignore[arg-type]
        )
        for w in workers
    }


@pytest.mark.parametrize("heartbeat", ["2", "10"])
def test_the_cli_and_the_api_agree_on_who_is_alive(tmp_path: Path, heartbeat: str) -> None:
    """Both judge a worker by the same rule on the store's clock. Compared verdict by verdict,
    not with each other: the two answers are read a moment apart, and a worker may cross
    the line between them on a busy machine."""
    url = sqlite_url(tmp_path / "agree.db")
    asyncio.run(register(url, AGES))
    cli = invoke(
        "workers", "--heartbeat-seconds", heartbeat, "--json", env={"ROTA_DATABASE_URL": url}
    )
    by_cli = judged(json.loads(cli.out)["workers"], float(heartbeat))
    by_api = judged(asyncio.run(api_workers(url, float(heartbeat))), float(heartbeat))
    assert by_cli.keys() == by_api.keys() == AGES.keys()
    for verdicts in (by_cli, by_api):
        assert all(alive == by_rule for alive, by_rule in verdicts.values()), verdicts
    assert by_cli["gone"] == by_api["gone"] == (False, False)


def test_alive_means_a_beat_within_three_heartbeats() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    heartbeat = timedelta(seconds=10)
    never = WorkerInfo(name="w", host="h", pid=1, queues=(), concurrency=1)
    assert ALIVE_BEATS == 3
    assert not never.is_alive(now, heartbeat), "never beat"
    assert replace(never, beat_at=now - 3 * heartbeat).is_alive(now, heartbeat)
    late = replace(never, beat_at=now - 3 * heartbeat - timedelta(milliseconds=1))
    assert not late.is_alive(now, heartbeat)


@pytest.mark.postgres
def test_workers_alive_by_postgresqls_clock(pg_url: str) -> None:
    asyncio.run(register(pg_url, AGES))
    ran = rota("workers", "--json", url=pg_url)
    assert ran.code == 0, ran.err
    workers = json.loads(ran.out)["workers"]
    # Verdict by verdict on the age the answer reports: the command may take seconds to start
    # on a busy machine, and "late" may cross the line meanwhile.
    verdicts = judged(workers, 10.0)
    assert all(alive == by_rule for alive, by_rule in verdicts.values()), verdicts
    assert verdicts["fresh"] == (True, True) and verdicts["gone"] == (False, False)
    ages = {w["name"]: w["heartbeat_age_seconds"] for w in workers}
    assert ages["late"] >= AGES["late"].total_seconds(), ages  # the database's clock
