"""What the latency metrics cost: pods per CPU second with the extension point and plugin
histograms on vs off, in the same run.

Four schedulers over the same nodes (SchedulingBasic's shapes, default plugins) take
turns scheduling batches of pods, so that they see the same machine load:

* off: no timing;
* off again: identical to off; its ratio to off is the noise floor of this machine;
* on: instrumented as `shoal run` instruments it (`shoal.framework.timing.instrument`
  with `SchedulerMetrics.framework_timer`: every extension point timed, plugins in
  `--sample-percent`% of cycles);
* prometheus_client Histogram: the same timing recorded into prometheus_client
  Histograms, what `shoal.web.latency.BufferedHistogram` replaces.

Rates are pods per CPU second of this process (other processes on a loaded machine
count less than in wall time); ratios are per round, against off, and their median is
printed. Then the time to render /metrics once with `--queues` queues (the per-queue
gauges are capped at `MAX_QUEUE_SERIES`).

Usage:
  python bench/framework_metrics.py [--nodes 1000] [--batch 1000] [--rounds 6]
                                    [--sample-percent 10] [--queues 300]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from prometheus_client import CollectorRegistry, Histogram, generate_latest
from shapes import default_node, default_pod

from shoal.api.manifests import decode
from shoal.api.queue import Queue
from shoal.config import KubeSchedulerConfiguration
from shoal.drivers.loop import Driver
from shoal.drivers.memory import ManualClock, MemoryEffects
from shoal.framework.timing import instrument
from shoal.scheduler import Scheduler, new_scheduler
from shoal.web.metrics import FrameworkTimer, SchedulerMetrics, register_scheduler_collector

BUCKETS = tuple(0.0001 * 2**i for i in range(12))


def _scheduler(nodes: int) -> tuple[Scheduler, Driver]:
    effects = MemoryEffects()
    sched = new_scheduler(KubeSchedulerConfiguration(), clock=ManualClock(), effects=effects)
    for i in range(nodes):
        sched.add_node(default_node(i, {"kubernetes.io/hostname": f"node-{i}"}))
    return sched, Driver(sched, inbox=effects)


def _batch(sched: Scheduler, driver: Driver, start: int, count: int) -> float:
    for i in range(start, start + count):
        sched.add_pod(default_pod(f"p-{i}", "bench"))
    # CPU time of this process: other processes on a loaded machine count less than in
    # wall time (they still share caches and cores).
    began = time.process_time()
    driver.run()
    return count / (time.process_time() - began)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--sample-percent", type=float, default=10.0)
    parser.add_argument("--queues", type=int, default=300)
    args = parser.parse_args()

    off, off_driver = _scheduler(args.nodes)
    control, control_driver = _scheduler(args.nodes)
    on, on_driver = _scheduler(args.nodes)
    classic, classic_driver = _scheduler(args.nodes)
    metrics = SchedulerMetrics()
    timer = metrics.framework_timer(args.sample_percent, rng=random.Random(0))
    for fwk in on.profiles.values():
        instrument(fwk, timer)
    # The same timing recorded into prometheus_client Histograms (what BufferedHistogram
    # replaces), for the comparison in docs/operations.md.
    registry = CollectorRegistry()
    points = Histogram(
        "points", "", ["extension_point", "status", "profile"], buckets=BUCKETS, registry=registry
    )
    plugins = Histogram(
        "plugins", "", ["plugin", "extension_point", "status"], buckets=BUCKETS, registry=registry
    )
    classic_timer = FrameworkTimer(
        lambda *labels: points.labels(*labels).observe,
        lambda *labels: plugins.labels(*labels).observe,
        args.sample_percent,
        time.perf_counter,
        random.Random(0),
    )
    for fwk in classic.profiles.values():
        instrument(fwk, classic_timer)
    runs: dict[str, tuple[Scheduler, Driver, list[float]]] = {
        "off": (off, off_driver, []),
        "off again (the noise floor)": (control, control_driver, []),
        "on": (on, on_driver, []),
        "prometheus_client Histogram": (classic, classic_driver, []),
    }
    # Warm up (first-touch allocations, caches), untimed.
    for sched, driver, _ in runs.values():
        _batch(sched, driver, 0, args.batch // 4)
    order = list(runs.values())
    for r in range(args.rounds):
        start = args.batch // 4 + r * args.batch
        # Rotate who goes first, so a drift in machine load hits all alike.
        k = r % len(order)
        for sched, driver, rates in order[k:] + order[:k]:
            rates.append(_batch(sched, driver, start, args.batch))
    rates_off = runs["off"][2]
    print(f"nodes {args.nodes}, {args.rounds} rounds of {args.batch} pods each")
    print(f"off: {statistics.median(rates_off):8.0f} pods per CPU second (median of rounds)")
    for name in ("off again (the noise floor)", "on", "prometheus_client Histogram"):
        rates = runs[name][2]
        ratios = [a / b for a, b in zip(rates, rates_off, strict=True)]
        print(
            f"{name}: {statistics.median(rates):8.0f} pods per CPU second; ratio to off: median "
            f"{statistics.median(ratios):.3f} (min {min(ratios):.3f}, max {max(ratios):.3f})"
        )
    print(f"(extension points timed every cycle, plugins in {args.sample_percent:g}% of cycles)")

    # /metrics with many queues: the per-queue gauges are computed at scrape time.
    queues = [decode({"metadata": {"name": "org"}, "spec": {}}, Queue)]
    queues += [
        decode(
            {"metadata": {"name": f"team-{i:04d}"}, "spec": {"parent": "org", "weight": 1}},
            Queue,
        )
        for i in range(args.queues - 1)
    ]
    problems = on.apply_queues(queues)
    assert not problems, problems[:3]
    register_scheduler_collector(metrics.registry, lambda: on)
    renders = []
    for _ in range(5):
        began = time.perf_counter()
        text = generate_latest(metrics.registry)
        renders.append(time.perf_counter() - began)
    series = sum(1 for line in text.decode().splitlines() if line and not line.startswith("#"))
    print(
        f"/metrics render with {args.queues} queues: {statistics.median(renders) * 1000:.1f} ms "
        f"(median of 5), {series} series, {len(text)} bytes"
    )


if __name__ == "__main__":
    main()
