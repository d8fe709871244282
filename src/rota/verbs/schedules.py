"""``app.schedules``: the schedules defined in code, and the firer every worker runs."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

from rota import workflows
from rota.domain.errors import InvalidSchedule
from rota.domain.job import DEFAULT_MAX_ATTEMPTS, DEFAULT_QUEUE
from rota.domain.schedule import Rule, ScheduleSpec
from rota.domain.workflow import WorkflowBuilder
from rota.observability.metrics import Metrics
from rota.runtime.scheduler import MAX_WAIT, PUSHED_MAX_WAIT, Scheduler
from rota.store import Store
from rota.verbs.binding import Binding

log = logging.getLogger("rota")


class Schedules:
    """The schedules defined in code (``App.schedule``, ``App.workflow_schedule``), by name.

    Iterating gives their specs with the kinds' defaults as registered now, so a kind
    registered after its schedule still lends it its defaults when a worker starts."""

    def __init__(self, binding: Binding, metrics: Metrics) -> None:
        self._binding = binding
        self._registry = binding.registry
        self._metrics = metrics
        #: Each schedule's options as given.
        self._options: dict[str, dict[str, Any]] = {}

    def define(self, name: str, options: dict[str, Any]) -> ScheduleSpec:
        """Add schedule ``name`` (``App.schedule``'s options); its spec, validated now
        (InvalidSchedule names the field)."""
        if name in self._options:
            raise InvalidSchedule("name", f"schedule {name!r} is already defined")
        kind, workflow = options["kind"], options["workflow"]
        if (kind is None) == (workflow is None):
            raise InvalidSchedule("kind", "give exactly one of kind or workflow")
        if workflow is not None and not callable(workflow):
            raise InvalidSchedule("workflow", "must be a function returning a rota.Workflow")
        options = {**options, "name": name, "kind": name if workflow is not None else kind}
        spec = self._spec(options)
        self._options[name] = options
        return spec

    def __iter__(self) -> Iterator[ScheduleSpec]:
        return (self._spec(options) for options in self._options.values())

    def __len__(self) -> int:
        return len(self._options)

    def workflow_builders(self) -> dict[str, WorkflowBuilder]:
        """The builders of the workflow schedules, by schedule name, each checking the kinds
        of the graph it returns against the App's handlers."""
        accepted = self._registry.accepted_kinds()
        return {
            name: workflows.checking_kinds(options["workflow"], accepted)
            for name, options in self._options.items()
            if options.get("workflow") is not None
        }

    def scheduler(self, store: Store | None = None) -> Scheduler:
        """The schedule firer a worker runs (on the App's store, which must be open, or on
        ``store``): it upserts the schedules defined in code on its first tick, then fires
        every due slot. A test ticks it to turn due slots into jobs."""
        store = store or self._binding.store
        specs = list(self)
        kinds = {spec.kind for spec in specs if not spec.workflow}
        unknown = sorted(kinds - set(self._registry.kinds()))
        if unknown:
            log.warning(
                "schedules enqueue kinds with no handler in this app: %s", ", ".join(unknown)
            )
        return Scheduler(
            store,
            specs=specs,
            workflows=self.workflow_builders(),
            metrics=self._metrics,
            max_wait=PUSHED_MAX_WAIT if store.pushes_schedule_changes else MAX_WAIT,
        )

    def _spec(self, options: dict[str, Any]) -> ScheduleSpec:
        every, cron = options["every"], options["cron"]
        if (every is None) == (cron is None):
            raise InvalidSchedule("rule", "give exactly one of every or cron")
        if every is not None:
            rule = Rule.every(duration("every", every))
            if options["timezone"] != "UTC":
                raise InvalidSchedule("timezone", "applies only to cron schedules")
        else:
            rule = Rule.cron(cron, options["timezone"])
        kind_config = (
            self._registry.get(options["kind"]) if isinstance(options["kind"], str) else None
        )
        fields: dict[str, Any] = {
            "queue": kind_config.queue if kind_config else DEFAULT_QUEUE,
            "priority": kind_config.priority if kind_config else 0,
            "max_attempts": kind_config.max_attempts if kind_config else DEFAULT_MAX_ATTEMPTS,
        }
        fields.update({key: options[key] for key in fields if options[key] is not None})
        for key in ("jitter", "grace"):
            if options[key] is not None:
                fields[key] = duration(key, options[key])
        return ScheduleSpec(
            name=options["name"],
            kind=options["kind"],
            rule=rule,
            payload={} if options["payload"] is None else options["payload"],
            tenant=options["tenant"],
            misfire=options["misfire"],
            misfire_limit=options["misfire_limit"],
            overlap=options["overlap"],
            workflow=options.get("workflow") is not None,
            **fields,
        )


def duration(field: str, value: object) -> timedelta:
    """A schedule duration given as a timedelta or seconds; InvalidSchedule naming ``field``."""
    if isinstance(value, timedelta):
        return value
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidSchedule(field, "must be a timedelta or a number of seconds")
    try:
        return timedelta(seconds=value)
    except (OverflowError, ValueError):
        raise InvalidSchedule(field, "is out of range") from None
