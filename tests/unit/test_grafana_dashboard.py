"""docs/grafana-dashboard.json queries only metrics and labels rota exports, and aggregates
each family as docs/operations.md says: process metrics summed over processes, database
gauges taken once (max), never summed."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from rota.observability.metrics import Metrics

DASHBOARD = Path(__file__).resolve().parents[2] / "docs" / "grafana-dashboard.json"
METRIC = re.compile(r"\brota_[a-z0-9_]+\b")
#: ``{label="value", ...}`` selectors and ``by (a, b)`` clauses.
SELECTOR = re.compile(r"(rota_[a-z0-9_]+)\{([^}]*)\}")
BY = re.compile(r"\bby \(([^)]*)\)")
SUFFIXES = {"counter": ("_total",), "gauge": ("",), "histogram": ("_bucket", "_count", "_sum")}


def expressions() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    assert exprs
    return exprs


def exported() -> dict[str, tuple[set[str], bool]]:
    """Every sample name rota exports: its label names, and whether it is a database gauge."""
    metrics = Metrics()
    store = {id(gauge) for gauge in metrics.store_gauges}
    samples: dict[str, tuple[set[str], bool]] = {}
    for collector in (*metrics.process_metrics, *metrics.store_gauges):
        collector_any: Any = collector
        [family] = collector.describe()
        # rota's per-job families say their labels; prometheus-client's keep them private.
        labels = set(getattr(collector_any, "labelnames", None) or collector_any._labelnames)
        for suffix in SUFFIXES[family.type]:
            extra = {"le"} if suffix == "_bucket" else set()
            samples[family.name + suffix] = (labels | extra, id(collector) in store)
    return samples


def test_every_metric_the_dashboard_queries_is_exported() -> None:
    samples = exported()
    used = {name for expr in expressions() for name in METRIC.findall(expr)}
    assert used - samples.keys() == set()
    # The panels the dashboard promises.
    for name in (
        "rota_jobs_finished_total",
        "rota_job_start_lag_seconds_bucket",
        "rota_oldest_due_job_age_seconds",
        "rota_queue_jobs",
        "rota_workers_alive",
        "rota_leases_lost_total",
    ):
        assert name in used


def test_every_label_the_dashboard_names_exists_on_its_metric() -> None:
    samples = exported()
    for expr in expressions():
        for name, matchers in SELECTOR.findall(expr):
            for matcher in filter(None, (m.strip() for m in matchers.split(","))):
                label = re.split(r"[=!~]", matcher, maxsplit=1)[0].strip()
                assert label in samples[name][0], (expr, label)
        metric_labels = set().union(*(samples[n][0] for n in METRIC.findall(expr)))
        for clause in BY.findall(expr):
            for label in (part.strip() for part in clause.split(",")):
                assert label in metric_labels, (expr, label)


def test_database_gauges_are_never_summed_and_process_metrics_always_are() -> None:
    samples = exported()
    for expr in expressions():
        names = METRIC.findall(expr)
        if any(samples[name][1] for name in names):
            assert "sum" not in expr and expr.startswith("max"), expr
        else:
            assert "sum" in expr, expr
