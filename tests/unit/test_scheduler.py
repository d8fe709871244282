"""The schedule firer (runtime/scheduler.py) driven tick by tick on a FakeClock, and schedules
defined in code with ``App.schedule``."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import rota
from rota.domain.errors import InvalidSchedule, StoreUnavailable
from rota.domain.job_state import JobState
from rota.domain.schedule import Misfire, Overlap, Rule, ScheduleSpec
from rota.domain.schedule_state import Schedule
from rota.observability.metrics import Metrics
from rota.runtime.scheduler import MAX_WAIT, MIN_WAIT, Scheduler
from rota.runtime.services import run_service
from rota.store import JobFilter
from rota.store.memory import MemoryStore
from rota.testing import FakeClock, drain

START = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
MINUTE = timedelta(minutes=1)


def every_minute(name: str = "tick", **fields: Any) -> ScheduleSpec:
    return ScheduleSpec(name=name, kind="report", rule=Rule.every(MINUTE), **fields)


def fired(metrics: Metrics, outcome: str) -> float:
    value = metrics.registry.get_sample_value(
        "rota_schedule_runs_total", {"schedule_outcome": outcome}
    )
    return value or 0.0


@pytest.fixture
def store(clock: FakeClock) -> MemoryStore:
    return MemoryStore(clock=clock)


# ---------------------------------------------------------------------- the firer


async def test_the_first_tick_upserts_the_code_schedules_and_fires_their_first_slot(
    store: MemoryStore,
) -> None:
    metrics = Metrics()
    scheduler = Scheduler(store, specs=[every_minute()], metrics=metrics)

    [firing] = await scheduler.tick()

    assert [result.job.slot_at for result in firing.jobs] == [START]
    assert (await store.get_schedule("tick")).next_run_at == START + MINUTE
    assert fired(metrics, "fired") == 1


async def test_a_restarted_firer_keeps_a_pause_set_at_run_time(
    store: MemoryStore, clock: FakeClock
) -> None:
    await Scheduler(store, specs=[every_minute()]).tick()
    await store.pause_schedule("tick")
    clock.advance(5 * MINUTE)

    assert await Scheduler(store, specs=[every_minute(priority=9)]).tick() == []

    schedule = await store.get_schedule("tick")
    assert schedule.paused and schedule.spec.priority == 9


async def test_the_firer_sleeps_until_the_next_schedule_is_due_within_bounds(
    store: MemoryStore, clock: FakeClock
) -> None:
    scheduler = Scheduler(store)
    assert scheduler.interval_s() == MIN_WAIT.total_seconds(), "before the first tick"

    await scheduler.tick()
    assert scheduler.interval_s() == MAX_WAIT.total_seconds(), "no schedules: look again in 1 s"

    await store.upsert_schedule(
        ScheduleSpec(name="soon", kind="k", rule=Rule.cron("1 12 * * *"), overlap="allow")
    )
    clock.set(START + MINUTE - timedelta(milliseconds=250))
    await scheduler.tick()
    assert scheduler.interval_s() == pytest.approx(0.25)

    clock.set(START + MINUTE - timedelta(milliseconds=2))
    await scheduler.tick()
    assert scheduler.interval_s() == MIN_WAIT.total_seconds()

    clock.set(START + MINUTE)
    [firing] = await scheduler.tick()
    assert firing.schedule == "soon"
    assert scheduler.interval_s() == MAX_WAIT.total_seconds(), "the next run is a day away"


async def test_a_full_batch_makes_the_firer_come_back_at_once(store: MemoryStore) -> None:
    specs = [every_minute(f"s{index}") for index in range(3)]
    scheduler = Scheduler(store, specs=specs, batch=2)

    assert len(await scheduler.tick()) == 2
    assert scheduler.interval_s() == 0
    assert len(await scheduler.tick()) == 1
    assert scheduler.interval_s() == MAX_WAIT.total_seconds()


async def test_every_code_schedule_is_defined_before_the_first_firing(
    store: MemoryStore, clock: FakeClock
) -> None:
    # Stored by an older deploy with version 1; the code, last of 250 definitions, says 2.
    # Its slot is due.
    await store.upsert_schedule(every_minute("s0", payload={"version": 1}))
    clock.advance(MINUTE)
    specs = [
        *(every_minute(f"s{index}") for index in range(1, 250)),
        every_minute("s0", payload={"version": 2}),
    ]
    upserts = 0
    upsert_schedules = store.upsert_schedules

    async def counted(specs: Sequence[ScheduleSpec], *, now: datetime | None = None) -> Any:
        nonlocal upserts
        upserts += 1
        return await upsert_schedules(specs, now=now)

    store.upsert_schedules = counted  # type: ignore[method-assign]
    scheduler = Scheduler(store, specs=specs, batch=1_000)

    firings = await scheduler.tick()

    # One call defined all 250 before anything fired: the due slot ran as the code says.
    assert upserts == 1 and len(await store.list_schedules()) == 250
    [mine] = [firing for firing in firings if firing.schedule == "s0"]
    assert [result.job.payload for result in mine.jobs] == [{"version": 2}]
    await scheduler.tick()
    assert upserts == 1


async def test_skips_are_counted_and_logged_at_debug(
    store: MemoryStore, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    metrics = Metrics()
    scheduler = Scheduler(store, specs=[every_minute()], metrics=metrics)
    await scheduler.tick()
    clock.advance(3 * MINUTE)

    with caplog.at_level(logging.DEBUG, logger="rota.scheduler"):
        [firing] = await scheduler.tick()

    assert firing.skipped_overlap == (START + 3 * MINUTE,) and firing.missed == 2
    assert fired(metrics, "skipped_overlap") == 1
    assert fired(metrics, "skipped_misfire") == 2
    assert fired(metrics, "fired") == 1
    levels = {record.levelno for record in caplog.records if "skipped" in record.getMessage()}
    assert levels == {logging.DEBUG}


async def test_fired_slots_are_logged_at_info(
    store: MemoryStore, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="rota.scheduler"):
        await Scheduler(store, specs=[every_minute()]).tick()

    [record] = caplog.records
    assert record.levelno == logging.INFO
    assert "schedule tick: slot 2026-01-01T12:00:00+00:00 enqueued as job 1" in record.getMessage()


async def test_a_failed_upsert_is_retried_before_anything_fires(store: MemoryStore) -> None:
    calls = 0
    upsert = store.upsert_schedules

    async def flaky(
        specs: Sequence[ScheduleSpec], *, now: datetime | None = None
    ) -> list[Schedule]:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise StoreUnavailable("down")
        return await upsert(specs, now=now)

    store.upsert_schedules = flaky  # type: ignore[method-assign]
    scheduler = Scheduler(store, specs=[every_minute()])

    with pytest.raises(StoreUnavailable):
        await scheduler.tick()
    assert await store.list_schedules() == []
    [firing] = await scheduler.tick()
    assert firing.schedule == "tick"
    await scheduler.tick()
    assert calls == 2, "upserted once it succeeded, not on every tick"


async def test_misfire_all_catch_up_is_counted_per_slot(
    store: MemoryStore, clock: FakeClock
) -> None:
    metrics = Metrics()
    spec = every_minute(misfire=Misfire.ALL, misfire_limit=3, overlap=Overlap.ALLOW)
    scheduler = Scheduler(store, specs=[spec], metrics=metrics)
    await scheduler.tick()
    clock.advance(5 * MINUTE)

    [firing] = await scheduler.tick()

    assert len(firing.inserted) == 3 and firing.missed == 2
    assert fired(metrics, "fired") == 4
    assert fired(metrics, "skipped_misfire") == 2


async def test_a_long_catch_up_is_logged_in_one_line(
    store: MemoryStore, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    spec = every_minute(misfire=Misfire.ALL, misfire_limit=50, overlap=Overlap.ALLOW)
    scheduler = Scheduler(store, specs=[spec])
    await scheduler.tick()
    clock.advance(20 * MINUTE)

    caplog.clear()
    with caplog.at_level(logging.INFO, logger="rota.scheduler"):
        [firing] = await scheduler.tick()

    assert len(firing.inserted) == 20
    [record] = [r for r in caplog.records if r.name == "rota.scheduler"]
    assert record.getMessage() == (
        "schedule tick: 20 slots from 2026-01-01T12:01:00+00:00 to 2026-01-01T12:20:00+00:00 "
        "enqueued as jobs 2 to 21"
    )


# ---------------------------------------------------------------------- App.schedule


def test_app_schedule_builds_a_spec_with_the_kind_defaults_registered_later() -> None:
    app = rota.App("memory://")
    app.schedule("digest", kind="email", cron="@daily", timezone="Europe/Berlin", jitter=300)

    @app.job("email", queue="mail", priority=5, max_attempts=7)
    async def send(ctx: rota.JobContext, payload: Any) -> None: ...

    [spec] = app.schedules
    assert spec.rule == Rule.cron("0 0 * * *", "Europe/Berlin")
    assert (spec.queue, spec.priority, spec.max_attempts) == ("mail", 5, 7)
    assert spec.jitter == timedelta(minutes=5)
    assert spec.payload == {}


def test_app_schedule_options_override_the_kind_defaults() -> None:
    app = rota.App("memory://")

    @app.job("email", queue="mail", priority=5)
    async def send(ctx: rota.JobContext, payload: Any) -> None: ...

    spec = app.schedule(
        "pulse",
        kind="email",
        every=timedelta(seconds=30),
        payload={"to": "ops"},
        queue="urgent",
        priority=-1,
        tenant="acme",
        max_attempts=2,
        misfire="all",
        misfire_limit=10,
        grace=5,
        overlap="allow",
    )

    assert spec.rule == Rule.every(timedelta(seconds=30))
    assert (spec.queue, spec.priority, spec.tenant, spec.max_attempts) == ("urgent", -1, "acme", 2)
    assert (spec.misfire, spec.misfire_limit, spec.overlap) == (Misfire.ALL, 10, Overlap.ALLOW)
    assert spec.grace == timedelta(seconds=5) and spec.payload == {"to": "ops"}
    assert list(app.schedules) == [spec]


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({}, "rule"),
        ({"cron": "* * * * *", "every": 60}, "rule"),
        ({"cron": "61 * * * *"}, "cron"),
        ({"cron": "@fortnightly"}, "cron"),
        ({"cron": "0 9 * * *", "timezone": "Mars/Olympus"}, "timezone"),
        ({"every": 60, "timezone": "Europe/Berlin"}, "timezone"),
        ({"every": -5}, "every"),
        ({"every": 0.5}, "every"),
        ({"every": "5m"}, "every"),
        ({"every": 60, "jitter": -1}, "jitter"),
        ({"every": 60, "misfire": "sometimes"}, "misfire"),
        ({"every": 60, "overlap": "queue"}, "overlap"),
        ({"every": 60, "misfire_limit": 0}, "misfire_limit"),
        ({"every": 60, "payload": {"x": float("nan")}}, "payload"),
        ({"every": 60, "queue": "no spaces"}, "queue"),
        ({"every": 60, "priority": 1000}, "priority"),
    ],
)
def test_app_schedule_is_validated_at_definition_naming_the_field(
    options: dict[str, Any], field: str
) -> None:
    app = rota.App("memory://")

    with pytest.raises(InvalidSchedule) as raised:
        app.schedule("s", kind="k", **options)

    assert raised.value.field == field
    assert list(app.schedules) == []


def test_a_schedule_name_is_defined_once() -> None:
    app = rota.App("memory://")
    app.schedule("s", kind="k", every=60)

    with pytest.raises(InvalidSchedule, match="already defined"):
        app.schedule("s", kind="k", cron="@hourly")
    with pytest.raises(InvalidSchedule) as bad_name:
        app.schedule("bad name", kind="k", every=60)
    assert bad_name.value.field == "name"


async def test_a_worker_upserts_the_app_schedules_and_runs_their_jobs(clock: FakeClock) -> None:
    app = rota.App("memory://", clock=clock)
    app.schedule("tick", kind="report", every=MINUTE, payload={"n": 1})
    seen: list[tuple[str | None, Any]] = []

    @app.job("report")
    async def report(ctx: rota.JobContext, payload: Any) -> None:
        seen.append((ctx.job.schedule, payload))

    async with app:
        await app.schedules.scheduler().tick()
        assert await drain(app) == 1
        page = await app.jobs.list(JobFilter(schedule="tick"))

    assert seen == [("tick", {"n": 1})]
    assert [(job.slot_at, job.state) for job in page.jobs] == [(START, JobState.SUCCEEDED)]


async def test_every_worker_runs_the_schedule_firer_as_a_service() -> None:
    app = rota.App("memory://")
    app.schedule("now", kind="report", every=3600)
    ran = asyncio.Event()

    @app.job("report")
    async def report(ctx: rota.JobContext, payload: Any) -> None:
        ran.set()

    async with app:
        worker = app.worker(poll=0.05)
        running = asyncio.create_task(worker.run())
        try:
            # A new interval schedule's first slot is its creation: the worker's firer fires it
            # on its first tick, and the worker runs the job.
            await asyncio.wait_for(ran.wait(), timeout=30)
        finally:
            worker.request_stop()
            await running
        schedule = await app.store.get_schedule("now")

    assert schedule.last_job_state is JobState.SUCCEEDED


async def test_a_nudge_makes_the_service_loop_tick_at_once(store: MemoryStore) -> None:
    # The firer would sleep its whole interval; a nudge (a schedule changed elsewhere) cuts
    # the wait short. The test never waits on time: a tick sets an event.
    firer = Scheduler(store, max_wait=timedelta(hours=1), min_wait=timedelta(hours=1))
    ticked = asyncio.Event()
    real_tick = firer.tick

    async def tick() -> list[Any]:
        ticked.set()
        return await real_tick()

    firer.tick = tick  # type: ignore[method-assign]
    stop = asyncio.Event()
    loop = asyncio.create_task(run_service(firer, stop, store._clock))
    try:
        await asyncio.wait_for(ticked.wait(), 10)  # the first tick
        ticked.clear()
        await asyncio.sleep(0)  # the loop is now waiting out its hour
        assert not ticked.is_set()
        firer.nudge()
        await asyncio.wait_for(ticked.wait(), 10)
    finally:
        stop.set()
        await asyncio.wait_for(loop, 10)


async def test_firers_sleep_long_only_where_schedule_changes_are_pushed() -> None:
    async with rota.App("memory://") as app:
        assert not app.store.pushes_schedule_changes
        assert app.schedules.scheduler().interval_s() <= MAX_WAIT.total_seconds()


# ---------------------------------------------------------------------- workflow schedules


async def test_a_workflow_schedule_runs_its_whole_graph_once_per_slot(clock: FakeClock) -> None:
    app = rota.App("memory://", clock=clock)
    totals: list[Any] = []

    @app.job("part")
    async def part(ctx: rota.JobContext, payload: Any) -> int:
        return int(payload["n"])

    @app.job("total")
    async def total(ctx: rota.JobContext, payload: Any) -> None:
        totals.append((payload["slot"], sorted(ctx.parent_results.values())))

    @app.workflow_schedule("nightly", every=MINUTE, payload={"parts": 3})
    def nightly(run: rota.ScheduledRun) -> rota.Workflow:
        slot = run.slot_at.isoformat()
        parts = [app.spec("part", {"n": n}) for n in range(run.payload["parts"])]
        return rota.chord(parts, app.spec("total", {"slot": slot}))

    assert [spec.workflow for spec in app.schedules] == [True]
    async with app:
        firer = app.schedules.scheduler()
        await firer.tick()
        await firer.tick()  # the same slot again: nothing new
        assert await drain(app) == 4
        clock.advance(MINUTE)
        await firer.tick()
        assert await drain(app) == 4
        schedule = await app.store.get_schedule("nightly")

    assert totals == [(START.isoformat(), [0, 1, 2]), ((START + MINUTE).isoformat(), [0, 1, 2])]
    assert schedule.last_job_state is JobState.SUCCEEDED


async def test_a_failing_workflow_builder_logs_the_slot_and_the_schedule_goes_on(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    app = rota.App("memory://", clock=clock)
    app.job("part")(lambda ctx, payload: None)
    calls: list[datetime] = []

    @app.workflow_schedule("nightly", every=MINUTE)
    def nightly(run: rota.ScheduledRun) -> rota.Workflow:
        calls.append(run.slot_at)
        if len(calls) == 1:
            return rota.chain(rota.JobSpec("prat"))  # a kind this App has no handler for
        return rota.chain(app.spec("part"))

    async with app:
        metrics = app.metrics
        firer = app.schedules.scheduler()
        with caplog.at_level(logging.ERROR, logger="rota.scheduler"):
            [firing] = await firer.tick()
        assert firing.jobs == ()
        assert "schedule nightly: slot 2026-01-01T12:00:00+00:00 got no workflow" in caplog.text
        assert "unknown kind 'prat'" in caplog.text
        assert fired(metrics, "failed") == 1
        clock.advance(MINUTE)
        [firing] = await firer.tick()
        assert [r.job.kind for r in firing.inserted] == ["part"]
    assert calls == [START, START + MINUTE]


def test_a_schedule_takes_exactly_one_of_kind_or_workflow() -> None:
    app = rota.App("memory://")
    with pytest.raises(InvalidSchedule, match="exactly one of kind or workflow"):
        app.schedule("both", kind="report", workflow=lambda run: rota.Workflow(), every=60)
    with pytest.raises(InvalidSchedule, match="exactly one of kind or workflow"):
        app.schedule("neither", every=60)
    with pytest.raises(InvalidSchedule, match="must be a function"):
        app.schedule("text", workflow="nightly", every=60)  # type: ignore[arg-type]
