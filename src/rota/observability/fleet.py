"""One /metrics for a supervised fleet (``rota worker --processes N``): the sum of what its
worker processes did, beside the supervisor's own count of processes and restarts.

Each child serves its process metrics on a loopback port it reports to the supervisor; a scrape
of the supervisor reads them all (each within a second) and adds them up, sample by sample, so
counters and histograms read as those of one big worker. A gauge that is each process's own
reading (the store clock rate) shows the highest instead. A child that does not answer is left
out of that scrape.
"""

from __future__ import annotations

import logging
import urllib.request
from collections.abc import Iterable, Iterator
from typing import Any, Protocol

from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families

from rota.observability.metrics import MetricsServer

log = logging.getLogger("rota.metrics")

#: Seconds a scrape waits for each child.
CHILD_TIMEOUT_S = 1.0
#: Process metrics that are each process's own reading: the highest is shown, never a sum.
NOT_SUMMED = frozenset({"rota_store_clock_rate_ratio"})


class Fleet(Protocol):
    restarts: int

    def metrics_ports(self) -> Iterator[int]: ...


def merge(texts: Iterable[str]) -> list[Metric]:
    """The metric families of several processes' expositions, summed sample by sample."""
    families: dict[str, Metric] = {}
    values: dict[str, dict[tuple[str, tuple[tuple[str, str], ...]], float]] = {}
    for text in texts:
        for family in text_string_to_metric_families(text):
            if family.type == "gauge" and family.name.endswith("_created"):
                continue  # a counter's creation time: no sum of those means anything
            merged = families.setdefault(
                family.name, Metric(family.name, family.documentation, family.type)
            )
            sums = values.setdefault(merged.name, {})
            for sample in family.samples:
                if sample.name.endswith("_created"):
                    continue
                key = (sample.name, tuple(sorted(sample.labels.items())))
                if family.name in NOT_SUMMED:
                    sums[key] = max(sums.get(key, sample.value), sample.value)
                else:
                    sums[key] = sums.get(key, 0.0) + sample.value
    for name, metric in families.items():
        for (sample_name, labels), value in values[name].items():
            metric.add_sample(sample_name, dict(labels), value)
    return list(families.values())


class FleetCollector:
    """Collects the fleet's metrics at scrape time (in the metrics server's thread)."""

    def __init__(self, fleet: Fleet) -> None:
        self._fleet = fleet

    def collect(self) -> Iterator[Any]:
        texts = []
        ports = list(self._fleet.metrics_ports())
        for port in ports:
            try:
                with urllib.request.urlopen(
                    f"http://127.0.0.1:{port}/metrics", timeout=CHILD_TIMEOUT_S
                ) as response:
                    texts.append(response.read().decode())
            except OSError as error:
                log.debug("worker process metrics on port %d unread: %s", port, error)
        yield from merge(texts)
        yield GaugeMetricFamily(
            "rota_worker_processes",
            "Worker processes of this supervisor that are running and ready.",
            value=len(ports),
        )
        restarts = Metric(
            "rota_worker_process_restarts",
            "Worker processes this supervisor restarted after they died.",
            "counter",
        )
        restarts.add_sample("rota_worker_process_restarts_total", {}, self._fleet.restarts)
        yield restarts


def serve_fleet_metrics(
    fleet: Fleet, *, port: int, host: str, allowed_hosts: Iterable[str] = ()
) -> MetricsServer:
    """Serve the fleet's metrics on http://host:port/metrics until ``close()``, to requests
    whose Host is an IP address, localhost or one of ``allowed_hosts``."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(FleetCollector(fleet))
    return MetricsServer(registry, host=host, port=port, allowed_hosts=allowed_hosts)
