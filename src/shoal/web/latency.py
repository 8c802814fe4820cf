"""A histogram for the scheduling cycle's hot path: an observation is a `list.append`;
the lists are folded into bucket counts with numpy at scrape time, and by `fold_large`
(which the framework timer calls every few thousand cycles) once a series holds
`FOLD_EVERY` observations, so memory stays bounded when nobody scrapes.

Why not `prometheus_client.Histogram`: its `observe` takes a lock and walks the buckets
in Python, about 2 us per call on the benchmark machine; the scheduler makes ~11
extension point observations per pod, which cost 5-10% of pods/s at 300-1000 nodes
(bench/framework_metrics.py, numbers in docs/operations.md). An append is ~0.1 us. The
exposition is prometheus_client's own `HistogramMetricFamily`, so the text Prometheus
scrapes is the same as a `Histogram`'s. Everything runs on the scheduler's event loop
(scrapes render there too, `HealthServer.render_on`); a fold takes only the observations
it saw, so one from another thread is never lost.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import numpy as np
from numpy.typing import NDArray
from prometheus_client.core import HistogramMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector, CollectorRegistry

__all__ = ["FOLD_EVERY", "BufferedHistogram"]

FOLD_EVERY = 4096  # observations a series buffers before folding them into its buckets


class _Series:
    __slots__ = ("bounds", "count", "counts", "sum", "values")

    def __init__(self, bounds: NDArray[np.float64]) -> None:
        self.bounds = bounds
        self.values: list[float] = []
        self.counts = np.zeros(bounds.size + 1, dtype=np.int64)  # per bucket, +Inf last
        self.sum = 0.0
        self.count = 0

    def fold(self) -> None:
        values = self.values
        n = len(values)
        if not n:
            return
        # The first n only, each step one C call: observations appended meanwhile by
        # another thread (the core's, while a scrape renders elsewhere) stay for the next
        # fold. The same list stays: its `append` is the series' observer.
        observed = np.asarray(values[:n], dtype=np.float64)
        del values[:n]
        # Prometheus buckets are upper-inclusive (le): value v goes to the first bound >= v.
        index = np.searchsorted(self.bounds, observed, side="left")
        self.counts += np.bincount(index, minlength=self.counts.size)
        self.sum += float(observed.sum())
        self.count += int(observed.size)


class BufferedHistogram(Collector):
    """A labelled histogram family; `observer(*labels)` gives the series' `observe`."""

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str],
        buckets: Sequence[float],
        registry: CollectorRegistry | None = None,
    ) -> None:
        self.name = name
        self.documentation = documentation
        self.labelnames = list(labelnames)
        self.buckets = [float(b) for b in buckets]
        self._bounds = np.asarray(self.buckets, dtype=np.float64)
        self._series: dict[tuple[str, ...], _Series] = {}
        if registry is not None:
            registry.register(self)

    def observer(self, *labels: str) -> Callable[[float], None]:
        if len(labels) != len(self.labelnames):
            raise ValueError(f"{self.name}: expected labels {self.labelnames}, got {labels}")
        series = self._series.get(labels)
        if series is None:
            series = self._series[labels] = _Series(self._bounds)
        return series.values.append

    def observe(self, value: float, *labels: str) -> None:
        self.observer(*labels)(value)

    def fold_large(self) -> None:
        """Fold the series that buffer `FOLD_EVERY` observations or more (the driver calls
        this now and then, so memory stays bounded without a scrape)."""
        for series in self._series.values():
            if len(series.values) >= FOLD_EVERY:
                series.fold()

    def describe(self) -> Iterable[Metric]:
        return [HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)]

    def collect(self) -> Iterable[Metric]:
        family = HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)
        for labels, series in sorted(self._series.items()):
            series.fold()
            cumulative = np.cumsum(series.counts).tolist()
            buckets = [(_le(b), float(c)) for b, c in zip(self.buckets, cumulative, strict=False)]
            buckets.append(("+Inf", float(series.count)))
            family.add_metric(list(labels), buckets, series.sum)
        yield family


def _le(bound: float) -> str:
    # prometheus_client's own formatting of bucket bounds (floatToGoString).
    from prometheus_client.utils import floatToGoString

    return str(floatToGoString(bound))  # type: ignore[no-untyped-call]
