"""Per-queue gauges, extension point and plugin latency histograms: what /metrics
exports for a scheduler, with the time injected (a fake timer) and the sample drawn by
the driver's random source."""

from __future__ import annotations

import random
from typing import Any

from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from shoal.api.manifests import decode
from shoal.api.queue import Queue
from shoal.framework.timing import instrument
from shoal.testing import SchedulerHarness, make_node, make_pod
from shoal.web.latency import BufferedHistogram
from shoal.web.metrics import SchedulerMetrics, register_scheduler_collector


class _Ticks:
    """A clock that moves 1 ms per reading: each timed call lasts 1 ms."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        self.t += 0.001
        return self.t


def _queue(name: str, **spec: Any) -> Queue:
    return decode({"metadata": {"name": name}, "spec": spec}, Queue)


def _samples(registry: CollectorRegistry) -> dict[str, list[tuple[dict[str, str], float]]]:
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for s in family.samples:
            out.setdefault(s.name, []).append((dict(s.labels), s.value))
    return out


def _run(percent: float, pods: int = 20) -> tuple[SchedulerHarness, CollectorRegistry]:
    h = SchedulerHarness()
    metrics = SchedulerMetrics()
    timer = metrics.framework_timer(percent, clock=_Ticks(), rng=random.Random(1))
    for fwk in h.scheduler.profiles.values():
        instrument(fwk, timer)
    h.add_nodes(*(make_node(f"n{i}").capacity(cpu="4", memory="8Gi") for i in range(3)))
    h.add_pods(*(make_pod(f"p{i}").req(cpu="500m") for i in range(pods)))
    h.add_pods(make_pod("too-big").req(cpu="64"))
    h.run()
    return h, metrics.registry


def test_every_extension_point_is_timed_every_cycle_with_its_status() -> None:
    h, registry = _run(percent=0)
    counts = {
        (labels["extension_point"], labels["status"]): value
        for labels, value in _samples(registry)[
            "scheduler_framework_extension_point_duration_seconds_count"
        ]
    }
    placed = sum(1 for n in h.result().placements.values() if n)
    assert placed == 20
    # As in kube, Filter reports Success when no node fits (too-big: its diagnosis and
    # PostFilter say so); only an error would be another status.
    assert counts[("Filter", "Success")] == placed + 1
    assert counts[("PostFilter", "Unschedulable")] == 1  # no preemption helps too-big
    assert counts[("Bind", "Wait")] == placed  # handed over; the outcome is an event
    assert counts[("Reserve", "Success")] == placed
    assert counts[("PreFilter", "Success")] >= placed + 1
    sums = _samples(registry)["scheduler_framework_extension_point_duration_seconds_sum"]
    assert all(v > 0 for _, v in sums)  # measured with the injected clock
    # Not sampled (0%): no plugin series at all.
    assert "scheduler_plugin_execution_duration_seconds_count" not in _samples(registry)


def test_plugins_are_timed_in_the_sampled_cycles_only() -> None:
    _, all_cycles = _run(percent=100)
    counts: dict[tuple[str, str], float] = {}
    series = _samples(all_cycles)["scheduler_plugin_execution_duration_seconds_count"]
    for labels, value in series:
        key = (labels["plugin"], labels["extension_point"])
        counts[key] = counts.get(key, 0) + value
    assert counts[("NodeResourcesFit", "Filter")] == 21  # 20 pods + too-big, first attempt
    assert counts[("DefaultBinder", "Bind")] == 20
    assert ("NodeResourcesFit", "Score") in counts

    _, tenth = _run(percent=10, pods=200)
    sampled = {
        labels["plugin"]: value
        for labels, value in _samples(tenth)["scheduler_plugin_execution_duration_seconds_count"]
        if labels["extension_point"] == "Bind"
    }
    assert 5 <= sampled["DefaultBinder"] <= 40  # ~10% of 200 binds


def test_queue_gauges_follow_the_tenancy_manager_and_are_capped() -> None:
    h = SchedulerHarness()
    h.add_nodes(make_node("n0").capacity(cpu="8", memory="16Gi"))
    queues = [_queue("org", guaranteed={"cpu": "4"}, max={"cpu": "6"})]
    queues += [_queue(f"team-{i}", parent="org", guaranteed={"cpu": "1"}) for i in range(4)]
    assert h.scheduler.apply_queues(queues) == []
    h.add_pods(
        *(make_pod(f"p{i}").labels({"shoal.dev/queue": "team-0"}).req(cpu="1") for i in range(3))
    )
    h.run()
    registry = CollectorRegistry()
    register_scheduler_collector(registry, lambda: h.scheduler, max_queues=3)
    samples = _samples(registry)

    def gauge(name: str) -> dict[tuple[str, str], float]:
        return {(labels["queue"], labels["resource"]): v for labels, v in samples.get(name, [])}

    allocated = gauge("shoal_queue_allocated")
    assert allocated[("org", "cpu")] == 3.0  # cores, the subtree's usage
    assert allocated[("team-0", "cpu")] == 3.0
    assert gauge("shoal_queue_guaranteed")[("org", "cpu")] == 4.0
    assert gauge("shoal_queue_max")[("org", "cpu")] == 6.0
    assert ("org", "cpu") in gauge("shoal_queue_fair_share")
    # The cap: the shallowest queues first (default, org), then by name (team-0).
    exported = {q for q, _ in allocated} | {q for q, _ in gauge("shoal_queue_guaranteed")}
    assert exported == {"org", "team-0"} | ({"default"} & exported)
    assert "team-3" not in exported
    (omitted,) = samples["shoal_queue_series_omitted"]
    assert omitted[1] == 3.0  # 6 queues (default included), 3 exported


def test_pending_pods_per_queue_have_a_bounded_label_set() -> None:
    """Pods name whatever queue they like: 300 made-up names make one `<unknown>` series,
    not 300; existing queues past the cap are folded into `<other>`."""
    h = SchedulerHarness()
    queues = [_queue(f"team-{i}") for i in range(4)]
    assert h.scheduler.apply_queues(queues) == []
    h.add_pods(
        *(make_pod(f"lost-{i}").labels({"shoal.dev/queue": f"made-up-{i}"}) for i in range(300))
    )
    h.add_pods(
        *(
            make_pod(f"t{i}-{j}").labels({"shoal.dev/queue": f"team-{i}"})
            for i in range(4)
            for j in range(i + 1)
        )
    )
    h.run()  # no nodes: everything stays pending
    registry = CollectorRegistry()
    register_scheduler_collector(registry, lambda: h.scheduler, max_queues=2)
    pending = {labels["queue"]: v for labels, v in _samples(registry)["shoal_queue_pending_pods"]}
    # The two queues with most pending pods keep their own series.
    assert pending == {"<unknown>": 300.0, "team-3": 4.0, "team-2": 3.0, "<other>": 3.0}


def test_buffered_histogram_exposes_what_a_prometheus_histogram_would() -> None:
    buckets = (0.001, 0.01, 0.1)
    observations = [0.0005, 0.001, 0.002, 0.05, 0.1, 0.3, 7.0] * 700
    reference = CollectorRegistry()
    histogram = Histogram("lat", "Latency.", ["point"], buckets=buckets, registry=reference)
    buffered_registry = CollectorRegistry()
    buffered = BufferedHistogram(
        "lat", "Latency.", ["point"], buckets=buckets, registry=buffered_registry
    )
    observe = buffered.observer("Filter")
    for i, value in enumerate(observations):
        histogram.labels("Filter").observe(value)
        observe(value)
        if i == 4500:
            buffered.fold_large()  # as the framework timer does every 1024 cycles
            assert not buffered._series[("Filter",)].values

    def series(registry: CollectorRegistry) -> dict[tuple[str, str], float]:
        return {
            (name, labels.get("le", "")): round(value, 6)
            for name, samples in _samples(registry).items()
            if not name.endswith("_created")
            for labels, value in samples
        }

    assert series(buffered_registry) == series(reference)
    assert series(buffered_registry)[("lat_bucket", "0.001")] == 1400  # le is inclusive


def test_preemptions_what_if_passes_are_not_counted_as_cycles() -> None:
    h = SchedulerHarness()
    metrics = SchedulerMetrics()
    timer = metrics.framework_timer(100, clock=_Ticks(), rng=random.Random(1))
    for fwk in h.scheduler.profiles.values():
        instrument(fwk, timer)
    h.add_nodes(make_node("n0").capacity(cpu="2", memory="8Gi"))
    h.add_pods(make_pod("low").priority(0).req(cpu="2"))
    h.run()
    h.add_pods(make_pod("high").priority(100).req(cpu="2"))
    h.advance(30)
    assert h.node_of("high") == "n0" and "low" in {k.split("/")[-1] for k in h.evicted}
    samples = _samples(metrics.registry)
    filters = sum(
        v
        for labels, v in samples["scheduler_framework_extension_point_duration_seconds_count"]
        if labels["extension_point"] == "Filter"
    )
    post_filters = sum(
        v
        for labels, v in samples["scheduler_framework_extension_point_duration_seconds_count"]
        if labels["extension_point"] == "PostFilter"
    )
    # One Filter pass per scheduling cycle: the victim search's passes are not counted.
    assert filters == len(h.cycles)
    assert post_filters >= 1


def test_series_sampled_on_the_schedulers_thread_are_read_at_scrape() -> None:
    """In a cluster the core runs on its own thread: a scrape must not iterate its
    dictionaries while it decides. `SchedulerSeries` takes the series in a driver-loop
    sampler; the scrape returns the latest sample, at most `interval` seconds old."""
    from shoal.web.metrics import SchedulerSeries

    h = SchedulerHarness()
    h.add_nodes(make_node("n").capacity(cpu="1", memory="1Gi"))
    series = SchedulerSeries(h.scheduler, interval=10)
    h.driver.samplers.append(series.maybe_sample)
    registry = CollectorRegistry()
    register_scheduler_collector(registry, lambda: None, series=series)

    def pending() -> float:
        rows = _samples(registry)["scheduler_pending_pods"]
        return sum(v for labels, v in rows if labels["queue"] == "unschedulable")

    h.run()  # the first sample, at t=0
    h.add_pods(make_pod("big").req(cpu="2"))
    h.run()
    assert pending() == 0.0  # not sampled since: the scrape did not read the scheduler
    h.advance(10)
    assert pending() == 1.0
