"""The Rescheduler's metrics (docs/rescheduler.md), read from its holds registry at
scrape time; zeros while no profile has a Rescheduler.

* `shoal_rescheduler_plans_total`, `shoal_rescheduler_moves_total`: migration plans
  committed (their evictions sent) and the pods they moved;
* `shoal_rescheduler_holds_total{outcome}`: holds for moved pods that ended, `claimed`
  by the re-created pod or `expired`;
* `shoal_rescheduler_holds_live`: nodes held for moved pods not yet re-created.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from shoal.rescheduler.holds import MigrationHolds

if TYPE_CHECKING:
    from shoal.scheduler import Scheduler

__all__ = ["register_rescheduler_collector"]


class _ReschedulerCollector(Collector):
    def __init__(self, scheduler: Callable[[], Scheduler | None]) -> None:
        self._scheduler = scheduler

    def collect(self) -> Iterable[Metric]:
        scheduler = self._scheduler()
        holds = None if scheduler is None else MigrationHolds.find(scheduler.handle.services)
        plans = CounterMetricFamily(
            "shoal_rescheduler_plans", "Migration plans committed (their evictions sent)."
        )
        moves = CounterMetricFamily("shoal_rescheduler_moves", "Pods moved by migration plans.")
        ended = CounterMetricFamily(
            "shoal_rescheduler_holds",
            "Holds for moved pods that ended: claimed by the re-created pod, or expired.",
            labels=["outcome"],
        )
        live = GaugeMetricFamily(
            "shoal_rescheduler_holds_live", "Nodes held for moved pods not yet re-created."
        )
        plans.add_metric([], holds.committed_plans if holds else 0)
        moves.add_metric([], holds.committed_moves if holds else 0)
        ended.add_metric(["claimed"], holds.claimed if holds else 0)
        ended.add_metric(["expired"], holds.expired if holds else 0)
        # list() copies the values in one step (the core may change the dict meanwhile,
        # from its own thread); the counters are plain ints, read atomically.
        live.add_metric([], sum(1 for h in list(holds.holds.values()) if h.live) if holds else 0)
        yield plans
        yield moves
        yield ended
        yield live


def register_rescheduler_collector(
    registry: CollectorRegistry, scheduler: Callable[[], Scheduler | None]
) -> None:
    """Export the Rescheduler's plans, moves and holds from `registry`."""
    registry.register(_ReschedulerCollector(scheduler))
