"""The metrics a worker updates once or more per job, kept as plain numbers.

prometheus-client guards every value with a lock, so a histogram observation costs about
1.2 µs and a gauge step 0.5 µs: four of them per no-op job were about 7% of the worker's CPU
for it. These families are updated only by the event loop that runs the jobs and exported
through the registry like any other collector (``collect`` runs on the metrics server's
thread and reads a snapshot: a scrape may see an observation's count before its sum, never a
value that goes back). Names, labels, buckets and the exposition are those of
prometheus-client's Histogram, Gauge and Counter (without their ``_created`` samples).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Generic, TypeVar

if (
    TYPE_CHECKING
):  # prometheus-client is imported when a scrape first collects, not by `import rota`
    from prometheus_client.metrics_core import Metric

_Labels = tuple[str, ...]
C = TypeVar("C")


class _Family(Generic[C]):
    """A family's children by label values, each made on first use by ``make_child``."""

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str],
        make_child: Callable[[], C],
    ) -> None:
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self._make_child = make_child
        self._children: dict[_Labels, C] = {}

    def labels(self, *values: str) -> C:
        if len(values) != len(self.labelnames):
            raise ValueError(f"{self.name} takes labels {self.labelnames}, got {values}")
        key = tuple(str(value) for value in values)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = self._make_child()
        return child

    def _snapshot(self) -> list[tuple[_Labels, C]]:
        return list(self._children.items())

    def describe(self) -> list[Metric]:
        return list(self.collect())

    def collect(self) -> Iterator[Metric]:  # pragma: no cover - every family defines it
        raise NotImplementedError


class HistogramChild:
    __slots__ = ("_bounds", "counts", "total")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self._bounds = bounds
        self.counts = [0] * len(bounds)
        self.total = 0.0

    def observe(self, amount: float) -> None:
        self.counts[bisect_left(self._bounds, amount)] += 1
        self.total += amount


class Histograms(_Family[HistogramChild]):
    """A histogram family: ``labels(...).observe(seconds)``."""

    def __init__(
        self, name: str, documentation: str, labelnames: Sequence[str], buckets: Sequence[float]
    ) -> None:
        bounds = (*sorted(float(bound) for bound in buckets), float("inf"))
        super().__init__(name, documentation, labelnames, lambda: HistogramChild(bounds))
        self._bounds = bounds

    def collect(self) -> Iterator[Metric]:
        from prometheus_client.metrics_core import HistogramMetricFamily

        family = HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)
        for key, child in self._snapshot():
            counts, total = list(child.counts), child.total
            cumulative, buckets = 0, []
            for bound, count in zip(self._bounds, counts, strict=True):
                cumulative += count
                buckets.append(("+Inf" if bound == float("inf") else repr(bound), cumulative))
            family.add_metric(list(key), buckets, total)
        yield family


class ValueChild:
    """One gauge's or counter's number."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0.0

    def inc(self, amount: float = 1) -> None:
        self.value += amount

    def dec(self, amount: float = 1) -> None:
        self.value -= amount


class CounterChild(ValueChild):
    __slots__ = ()

    def inc(self, amount: float = 1) -> None:
        if amount < 0:
            raise ValueError("counters only go up")
        self.value += amount


class _Values(_Family[ValueChild]):
    #: The prometheus-client family the values are exported as: "gauge" or "counter".
    _kind: str
    _child: type[ValueChild] = ValueChild

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str]) -> None:
        super().__init__(name, documentation, labelnames, self._child)

    def collect(self) -> Iterator[Metric]:
        from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily

        kind = GaugeMetricFamily if self._kind == "gauge" else CounterMetricFamily
        family = kind(self.name, self.documentation, labels=self.labelnames)
        for key, child in self._snapshot():
            family.add_metric(list(key), child.value)
        yield family


class Gauges(_Values):
    """A gauge family: ``labels(...).inc()`` and ``.dec()``."""

    _kind = "gauge"


class Counters(_Values):
    """A counter family (``name`` without ``_total``): ``labels(...).inc()``."""

    _kind = "counter"
    _child = CounterChild
