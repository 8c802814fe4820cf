"""Prometheus metrics, with kube-scheduler's names where a counterpart exists.

kube-scheduler names (same meaning, same labels):

* `scheduler_schedule_attempts_total{result, profile}`: result is `scheduled`,
  `unschedulable` or `error`.
* `scheduler_scheduling_attempt_duration_seconds{result, profile}`.
* `scheduler_pod_scheduling_attempts`: attempts a pod needed until it was scheduled.
* `scheduler_pending_pods{queue}`: `active`, `backoff`, `unschedulable`, `gated`.
* `leader_election_master_status{name}`: 1 while this replica holds the lease.
* `scheduler_framework_extension_point_duration_seconds{extension_point, status, profile}`
  (every cycle) and `scheduler_plugin_execution_duration_seconds{plugin,
  extension_point, status}` (in `plugin_sample_percent`% of cycles, 10 as in kube), timed
  by `FrameworkTimer` (shoal.framework.timing: the core reads no clock).
* `rest_client_requests_total{code, method, host}`,
  `rest_client_request_duration_seconds{verb, host}` and
  `rest_client_rate_limiter_duration_seconds{verb, host}` (`host` is the client's name:
  `scheduler`, `events`, `leader-election`).

Shoal's own:

* `shoal_binds_total{result}` (`bound`, `conflict`, `gone`, `error`, and `skipped`:
  the informer already showed the pod bound or gone) and
  `shoal_binding_duration_seconds{result}`.
* `shoal_evictions_total{result}` (`evicted`, `blocked`, `gone`, `error`).
* `shoal_gang_groups{phase}` and `shoal_gang_pods{state}` (`members`, `bound`, `running`).
* `shoal_queue_pending_pods{queue}`: pending pods per tenancy queue.
* `shoal_queue_allocated{queue, resource}`, `shoal_queue_guaranteed{queue, resource}`,
  `shoal_queue_max{queue, resource}` (limited resources only) and
  `shoal_queue_fair_share{queue, resource}` (HDRF, as on Queue status): cpu in cores,
  memory in bytes, other resources in their units; the tenancy manager's numbers.
  At most `max_queues` queues (the shallowest first, then by name) carry these series;
  `shoal_queue_series_omitted` counts the queues left out, so label cardinality stays
  bounded (queues x resources) however many queues exist.
* GPUs, per node pool and GPU model (`pool` "" for nodes in no NodePool, `model` "" for
  nodes without a model label), in GPUs, from the latest `GpuCensus` (taken on the
  scheduler's thread every few seconds; see `shoal.web.gpu_census`):
  `shoal_gpu_devices{pool, model}`, `shoal_gpu_allocated{pool, model, kind}` (`whole`:
  pods asking for whole GPUs, `shared`: GPU shares), `shoal_gpu_unallocated{pool, model}`,
  `shoal_gpu_shared_devices{pool, model}` (devices holding at least one share),
  `shoal_gpu_blocked_devices{pool, model}` (devices that take no more pods: unhealthy,
  or at their HAMi/Volcano split count) and
  `shoal_gpu_fragmentation{pool, model}` (the free GPU today's GPU workload could not
  use, the FGD measure: the dashboard's "fragment"). With the same census,
  `shoal_dra_devices{driver, state}`: devices published in ResourceSlices, by state
  (allocated, shared, free; at most 32 drivers, the rest as "(other)"; see
  `shoal.web.dra_census`).
* `shoal_invalid_objects_total{resource}`: objects from the API that could not be read.
* `shoal_informer_operations_total{resource, operation}`: list, relist, watch,
  watch_silent (no line within the progress deadline: the watch is renewed, not a
  failure), expired, list_error, watch_error, informer_error (an unexpected exception:
  the informer relists after a backoff and /readyz fails until it recovers).
* `shoal_events_dropped_total`: events not written because the recorder fell behind.
* `shoal_foreign_binds_total{profile}`: pending pods of our profiles that someone else
  bound (two active schedulers for one schedulerName; see docs/kubernetes.md).
"""

from __future__ import annotations

import random
import time
from collections import Counter as Tally
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from shoal.api.gpu import GPU_MILLI
from shoal.api.resources import quota_value
from shoal.tenancy.tree import UNLIMITED
from shoal.web.latency import BufferedHistogram

if TYPE_CHECKING:
    from shoal.scheduler import Scheduler
    from shoal.web.gpu_census import GpuCensus

__all__ = [
    "MAX_QUEUE_SERIES",
    "PLUGIN_SAMPLE_PERCENT",
    "FrameworkTimer",
    "SchedulerMetrics",
    "SchedulerSeries",
    "register_gpu_collector",
    "register_scheduler_collector",
]

_ATTEMPT_BUCKETS = (0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064, 0.128, 0.256, 0.512, 1.0)
_REQUEST_BUCKETS = (0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0)
# kube-scheduler's: ExponentialBuckets(0.0001, 2, 12) and ExponentialBuckets(0.00001, 1.5, 20).
_EXTENSION_POINT_BUCKETS = tuple(0.0001 * 2**i for i in range(12))
_PLUGIN_BUCKETS = tuple(0.00001 * 1.5**i for i in range(20))
PLUGIN_SAMPLE_PERCENT = 10  # kube-scheduler's pluginMetricsSamplePercent
FOLD_CYCLES = 1024  # cycles between checks of the latency buffers' size
MAX_QUEUE_SERIES = 200  # queues with per-queue resource series (see the module docstring)
# Label values for pending pods in queues that do not exist, and beyond the cap.
UNKNOWN_QUEUE = "<unknown>"
OTHER_QUEUES = "<other>"


class SchedulerMetrics:
    """The metric objects, registered in their own registry (one per scheduler)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.schedule_attempts = Counter(
            "scheduler_schedule_attempts",
            "Number of attempts to schedule pods, by the result.",
            ["result", "profile"],
            registry=r,
        )
        self.attempt_duration = Histogram(
            "scheduler_scheduling_attempt_duration_seconds",
            "Scheduling attempt latency in seconds (scheduling algorithm + binding start).",
            ["result", "profile"],
            buckets=_ATTEMPT_BUCKETS,
            registry=r,
        )
        self.pod_scheduling_attempts = Histogram(
            "scheduler_pod_scheduling_attempts",
            "Number of attempts to successfully schedule a pod.",
            buckets=(1, 2, 4, 8, 16),
            registry=r,
        )
        self.binds = Counter("shoal_binds", "Bind requests, by the result.", ["result"], registry=r)
        self.bind_duration = Histogram(
            "shoal_binding_duration_seconds",
            "Time from the start of a binding cycle to its end, rate limiting included.",
            ["result"],
            buckets=_REQUEST_BUCKETS,
            registry=r,
        )
        self.evictions = Counter(
            "shoal_evictions", "Eviction requests, by the result.", ["result"], registry=r
        )
        self.invalid_objects = Counter(
            "shoal_invalid_objects",
            "Objects from the API that could not be read.",
            ["resource"],
            registry=r,
        )
        self.informer_operations = Counter(
            "shoal_informer_operations",
            "Informer lists, relists, watches and failures.",
            ["resource", "operation"],
            registry=r,
        )
        self.foreign_binds = Counter(
            "shoal_foreign_binds",
            "Pods of this scheduler's profiles bound by someone else (another scheduler "
            "with the same schedulerName).",
            ["profile"],
            registry=r,
        )
        self.events_dropped = Counter(
            "shoal_events_dropped", "Events not written: the recorder fell behind.", registry=r
        )
        self.leader = Gauge(
            "leader_election_master_status",
            "1 while this replica is the leader, 0 otherwise.",
            ["name"],
            registry=r,
        )
        self.node_shards = Gauge(
            "shoal_node_shards",
            "Node shards: held by this replica, usable by it now (held, settled and not "
            "being given back), the total in the cluster's shard map, and in a standing "
            "loan: asked by this replica (borrowing), of those usable here (borrowed), and "
            "asked of it and still held here (lending).",
            ["state"],
            registry=r,
        )
        self.rest_requests = Counter(
            "rest_client_requests",
            "Number of HTTP requests, partitioned by status code, method, and host.",
            ["code", "method", "host"],
            registry=r,
        )
        self.rest_latency = Histogram(
            "rest_client_request_duration_seconds",
            "Request latency in seconds, by verb and host.",
            ["verb", "host"],
            buckets=_REQUEST_BUCKETS,
            registry=r,
        )
        self.rate_limiter_latency = Histogram(
            "rest_client_rate_limiter_duration_seconds",
            "Client-side rate limiter latency in seconds, by verb and host.",
            ["verb", "host"],
            buckets=_REQUEST_BUCKETS,
            registry=r,
        )

        # Observed ~11 times per pod: a cheaper histogram than prometheus_client's
        # (see shoal.web.latency), with the same exposition.
        self.extension_point_duration = BufferedHistogram(
            "scheduler_framework_extension_point_duration_seconds",
            "Latency for running all plugins of a specific extension point.",
            ["extension_point", "status", "profile"],
            buckets=_EXTENSION_POINT_BUCKETS,
            registry=r,
        )
        self.plugin_duration = BufferedHistogram(
            "scheduler_plugin_execution_duration_seconds",
            "Duration for running a plugin at a specific extension point (sampled cycles).",
            ["plugin", "extension_point", "status"],
            buckets=_PLUGIN_BUCKETS,
            registry=r,
        )

    def framework_timer(
        self,
        sample_percent: float = PLUGIN_SAMPLE_PERCENT,
        clock: Callable[[], float] = time.perf_counter,
        rng: random.Random | None = None,
    ) -> FrameworkTimer:
        """A timer for `shoal.framework.timing.instrument`, recording here."""
        return FrameworkTimer(
            self.extension_point_duration.observer,
            self.plugin_duration.observer,
            sample_percent,
            clock,
            rng or random.Random(),
            fold=self._fold_latency,
        )

    def _fold_latency(self) -> None:
        self.extension_point_duration.fold_large()
        self.plugin_duration.fold_large()

    # ---- hooks (KubeClient's RequestObserver, the informers' observer) --------------

    def request_done(self, client: str, method: str, code: int, seconds: float) -> None:
        self.rest_requests.labels(str(code) if code else "<error>", method, client).inc()
        self.rest_latency.labels(method, client).observe(seconds)

    def rate_limited(self, client: str, seconds: float) -> None:
        self.rate_limiter_latency.labels("any", client).observe(seconds)

    def informer_event(self, resource: str, what: str) -> None:
        if what != "bookmark":
            self.informer_operations.labels(resource, what).inc()


Observers = Callable[..., Callable[[float], None]]
"""labels -> that series' observe function (`BufferedHistogram.observer`, or
`lambda *labels: histogram.labels(*labels).observe` for a prometheus_client Histogram)."""


class FrameworkTimer:
    """The driver's side of `shoal.framework.timing.ExecutionTimer`: the clock, the
    sample draw, and where each series goes (the framework caches the observe function
    per label values: a label lookup per observation would cost more than it)."""

    def __init__(
        self,
        points: Observers,
        plugins: Observers,
        sample_percent: float,
        clock: Callable[[], float],
        rng: random.Random,
        fold: Callable[[], None] | None = None,
    ) -> None:
        self.now = clock
        self._fraction = sample_percent / 100.0
        self._random = rng.random
        self._points = points
        self._plugins = plugins
        self._fold = fold  # bounds the buffered histograms' memory (shoal.web.latency)
        self._cycles = 0

    def sample(self) -> bool:
        """Once per cycle: whether its plugins are timed."""
        self._cycles += 1
        if self._cycles >= FOLD_CYCLES and self._fold is not None:
            self._cycles = 0
            self._fold()
        return self._random() < self._fraction

    def extension_point(self, profile: str, point: str, status: str) -> Callable[[float], None]:
        return self._points(point, status, profile)

    def plugin(self, plugin: str, point: str, status: str) -> Callable[[float], None]:
        return self._plugins(plugin, point, status)


def _unit(resource: str, amount: int) -> float:
    """Prometheus base units: cores for cpu, GPUs for nvidia.com/gpu (queues count
    both in thousandths)."""
    return quota_value(resource, amount)


class _SchedulerCollector(Collector):
    """Reads queue and gang state when collected: at scrape time where the scheduler
    runs on the same thread, else by `SchedulerSeries` on the scheduler's thread."""

    def __init__(
        self, scheduler: Callable[[], Scheduler | None], max_queues: int = MAX_QUEUE_SERIES
    ) -> None:
        self._scheduler = scheduler
        self._max_queues = max_queues

    def collect(self) -> Iterable[Metric]:
        scheduler = self._scheduler()
        pending = GaugeMetricFamily(
            "scheduler_pending_pods",
            "Number of pending pods, by the queue type.",
            labels=["queue"],
        )
        groups = GaugeMetricFamily(
            "shoal_gang_groups", "Pod groups (gangs), by phase.", labels=["phase"]
        )
        gang_pods = GaugeMetricFamily(
            "shoal_gang_pods", "Pods in gangs: members known, members running.", labels=["state"]
        )
        per_queue = GaugeMetricFamily(
            "shoal_queue_pending_pods",
            "Pending pods per tenancy queue (pods naming no queue are under '', pods "
            f"naming a queue that does not exist under {UNKNOWN_QUEUE!r}).",
            labels=["queue"],
        )
        if scheduler is not None:
            for queue, count in scheduler.scheduling_queue.counts().items():
                pending.add_metric([queue], count)
            phases: Tally[str] = Tally()
            members = bound = running = 0
            for status in scheduler.gangs.status().values():
                phases[str(status["phase"])] += 1
                members += int(str(status["members"]))
                bound += int(str(status["bound"]))
                running += int(str(status["running"]))
            for phase in ("Pending", "Scheduling", "Scheduled", "Running", "Finished", "Failed"):
                groups.add_metric([phase], phases.get(phase, 0))
            gang_pods.add_metric(["members"], members)
            gang_pods.add_metric(["bound"], bound)
            gang_pods.add_metric(["running"], running)
            # The queue each pod is in by the scheduler's own precedence (labels,
            # Volcano annotations and PodGroups, bindings), as admission sees it.
            named = scheduler.tenant_queues.named_queue
            queues: Tally[str] = Tally(named(e.pod) for e in scheduler.scheduling_queue.pending())
            for queue, count in sorted(self._bounded(queues, scheduler).items()):
                per_queue.add_metric([queue], count)
        yield pending
        yield groups
        yield gang_pods
        yield per_queue
        yield from self._queue_resources(scheduler)

    def _bounded(self, queues: Tally[str], scheduler: Scheduler) -> Tally[str]:
        """Label values a user cannot multiply: a queue name no Queue object has (pods
        name whatever they like) counts under UNKNOWN_QUEUE; past `max_queues` existing
        queues, the ones with fewest pending pods count under OTHER_QUEUES."""
        tree = scheduler.tenant_queues.tree
        out: Tally[str] = Tally()
        for queue, count in queues.items():
            out[queue if queue == "" or queue in tree.index else UNKNOWN_QUEUE] += count
        named = [q for q in out if q not in ("", UNKNOWN_QUEUE)]
        if len(named) > self._max_queues:
            named.sort(key=lambda q: (-out[q], q))
            for queue in named[self._max_queues :]:
                out[OTHER_QUEUES] += out.pop(queue)
        return out

    def _queue_resources(self, scheduler: Scheduler | None) -> Iterable[Metric]:
        labels = ["queue", "resource"]
        families = {
            "allocated": GaugeMetricFamily(
                "shoal_queue_allocated",
                "Resources requested by the pods placed in the queue's subtree.",
                labels=labels,
            ),
            "guaranteed": GaugeMetricFamily(
                "shoal_queue_guaranteed", "The queue's guaranteed resources.", labels=labels
            ),
            "max": GaugeMetricFamily(
                "shoal_queue_max", "The queue's maximum (limited resources only).", labels=labels
            ),
            "fair": GaugeMetricFamily(
                "shoal_queue_fair_share",
                "The queue's HDRF fair share of the cluster, as on its status.",
                labels=labels,
            ),
        }
        omitted = GaugeMetricFamily(
            "shoal_queue_series_omitted",
            "Queues without per-queue resource series (over the cap on label cardinality).",
        )
        left_out = 0
        if scheduler is not None and len(scheduler.tenant_queues.tree.names) > 1:
            manager = scheduler.tenant_queues
            tree = manager.tree
            observed = manager.observed(scheduler.cluster.table)
            depth = {name: len(tree.path_lists[tree.index[name]]) for name, *_ in observed}
            observed.sort(key=lambda o: (depth[o[0]], o[0]))
            left_out = max(len(observed) - self._max_queues, 0)
            for name, allocated, guaranteed, fair, _, _ in observed[: self._max_queues]:
                q = tree.index[name]
                maximum = {
                    r: int(v)
                    for r, v in zip(tree.resources, tree.maximum_lists[q], strict=True)
                    if v < UNLIMITED
                }
                for key, amounts in (
                    ("allocated", allocated),
                    ("guaranteed", guaranteed),
                    ("max", maximum),
                    ("fair", fair),
                ):
                    family = families[key]
                    for resource, amount in amounts.items():
                        family.add_metric([name, resource], _unit(resource, amount))
        omitted.add_metric([], left_out)
        yield from families.values()
        yield omitted


class _GpuCollector(Collector):
    """The latest GPU census (computed on the scheduler's thread; read-only here)."""

    def __init__(self, census: Callable[[], GpuCensus | None]) -> None:
        self._census = census

    def collect(self) -> Iterable[Metric]:
        labels = ["pool", "model"]
        devices = GaugeMetricFamily(
            "shoal_gpu_devices", "GPU devices of the pool's nodes of the model.", labels=labels
        )
        allocated = GaugeMetricFamily(
            "shoal_gpu_allocated",
            "GPUs allocated: kind=whole to pods asking for whole GPUs, kind=shared to GPU shares.",
            labels=[*labels, "kind"],
        )
        unallocated = GaugeMetricFamily(
            "shoal_gpu_unallocated", "GPUs not allocated to any pod.", labels=labels
        )
        shared = GaugeMetricFamily(
            "shoal_gpu_shared_devices", "GPU devices holding at least one share.", labels=labels
        )
        blocked = GaugeMetricFamily(
            "shoal_gpu_blocked_devices",
            "GPU devices that take no more pods: registered unhealthy by their device "
            "plugin, or running as many pods as its split count allows (HAMi, Volcano).",
            labels=labels,
        )
        frag = GaugeMetricFamily(
            "shoal_gpu_fragmentation",
            "Unallocated GPUs that the current GPU workload could not use (FGD's "
            "fragmentation measure).",
            labels=labels,
        )
        census = self._census()
        for group in census.latest if census is not None else ():
            key = [group.pool, group.model]
            devices.add_metric(key, group.devices)
            allocated.add_metric([*key, "whole"], group.whole_milli / GPU_MILLI)
            allocated.add_metric([*key, "shared"], group.shared_milli / GPU_MILLI)
            unallocated.add_metric(key, group.free_milli / GPU_MILLI)
            shared.add_metric(key, group.shared_devices)
            blocked.add_metric(key, group.blocked_devices)
            frag.add_metric(key, group.frag_milli / GPU_MILLI)
        yield from (devices, allocated, unallocated, shared, blocked, frag)
        dra = GaugeMetricFamily(
            "shoal_dra_devices",
            "Devices published in ResourceSlices that nodes in the cache reach, per driver: "
            "state=allocated (taken whole by a claim), shared (allowing multiple "
            "allocations, holding at least one share) or free.",
            labels=["driver", "state"],
        )
        for devices_of in census.dra if census is not None else ():
            dra.add_metric([devices_of.driver, "allocated"], devices_of.allocated)
            dra.add_metric([devices_of.driver, "shared"], devices_of.shared)
            dra.add_metric([devices_of.driver, "free"], devices_of.free)
        yield dra


def register_gpu_collector(
    registry: CollectorRegistry, census: Callable[[], GpuCensus | None]
) -> None:
    """Export the latest GPU census from `registry` (`shoal_gpu_*`)."""
    registry.register(_GpuCollector(census))


class SchedulerSeries:
    """The queue and gang series, computed where the scheduler runs: a driver-loop
    sampler (`maybe_sample`, on the core's thread in a cluster) takes them at most every
    `interval` seconds, so a scrape on the I/O thread never iterates the scheduler's
    dictionaries while the core changes them; it only reads the latest families."""

    def __init__(
        self, scheduler: Scheduler, interval: float = 1.0, max_queues: int = MAX_QUEUE_SERIES
    ) -> None:
        self._collector = _SchedulerCollector(lambda: scheduler, max_queues)
        self.interval = interval
        self._next = 0.0
        # Taken once now (before the core's thread starts), so a first scrape has them.
        self.latest: tuple[Metric, ...] = tuple(self._collector.collect())

    def maybe_sample(self, now: float) -> None:
        if now >= self._next:
            self.latest = tuple(self._collector.collect())
            self._next = now + self.interval


class _SampledCollector(Collector):
    def __init__(self, series: SchedulerSeries) -> None:
        self._series = series

    def collect(self) -> Iterable[Metric]:
        return self._series.latest


def register_scheduler_collector(
    registry: CollectorRegistry,
    scheduler: Callable[[], Scheduler | None],
    max_queues: int = MAX_QUEUE_SERIES,
    series: SchedulerSeries | None = None,
) -> None:
    """Export the scheduler's queue and gang state from `registry` (per-queue resource
    series for at most `max_queues` queues): as sampled by `series` when given (a
    scheduler on another thread), else read at scrape time."""
    if series is not None:
        registry.register(_SampledCollector(series))
    else:
        registry.register(_SchedulerCollector(scheduler, max_queues))
