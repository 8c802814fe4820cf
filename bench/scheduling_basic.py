"""SchedulingBasic from kube-scheduler's scheduler_perf, run in memory.

Shapes (test/integration/scheduler_perf/config/performance-config.yaml):
  * 5000Nodes_10000Pods: 5000 nodes, 1000 init pods, 10000 measured pods
  * 5000Nodes_50000Pods: 5000 nodes, 1000 init pods, 50000 measured pods
Nodes: 4 cpu / 32Gi / 110 pods (node-default.yaml); pods: pod-default.yaml
(requests cpu 100m, memory 500Mi). Default plugins.

Prints throughput like scheduler_perf's SchedulingThroughput (average plus p50/p90/p99
of per-second samples) and the process's peak RSS. Usage:
  python bench/scheduling_basic.py [--nodes 5000] [--init-pods 1000] [--pods 10000]
"""

from __future__ import annotations

import argparse
import resource
import sys
import time

import numpy as np
from shapes import default_node, default_pod

from shoal.api.objects import Node, Pod
from shoal.config import KubeSchedulerConfiguration
from shoal.drivers.loop import Driver
from shoal.drivers.memory import ManualClock, MemoryEffects
from shoal.scheduler import CycleResult, new_scheduler


def make_node(i: int) -> Node:
    return default_node(
        i,
        {"kubernetes.io/hostname": f"node-{i}", "topology.kubernetes.io/zone": f"zone-{i % 3}"},
    )


def make_pod(prefix: str, i: int) -> Pod:
    return default_pod(f"{prefix}-{i}", "sched-test")


def run(nodes: int, init_pods: int, pods: int, seed: int = 0) -> dict[str, float]:
    clock = ManualClock()
    effects = MemoryEffects()
    sched = new_scheduler(KubeSchedulerConfiguration(), clock=clock, effects=effects, seed=seed)
    for i in range(nodes):
        sched.add_node(make_node(i))

    stamps: list[float] = []

    def note(result: CycleResult) -> None:
        if result.node is not None:
            stamps.append(time.perf_counter())

    # The one driver loop (as in the simulator and a cluster): binds go through the
    # in-memory effects port and come back as the watch would deliver them.
    driver = Driver(sched, inbox=effects, on_cycle=note)

    def drain() -> tuple[int, list[float]]:
        stamps.clear()
        driver.run()
        return len(stamps), list(stamps)

    for i in range(init_pods):
        sched.add_pod(make_pod("init", i))
    drain()
    for i in range(pods):
        sched.add_pod(make_pod("measured", i))
    start = time.perf_counter()
    cpu = time.process_time()
    scheduled, stamps = drain()
    elapsed = time.perf_counter() - start
    cpu = time.process_time() - cpu
    # Per-second throughput samples, as scheduler_perf's throughputCollector takes them.
    times = np.array(stamps) - start
    per_second = np.bincount(times.astype(int)) if len(times) else np.array([0])
    full = per_second[:-1] if len(per_second) > 1 else per_second
    peak_rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {
        "scheduled": scheduled,
        "seconds": elapsed,
        "cpu_seconds": cpu,
        "average": scheduled / elapsed,
        "p50": float(np.percentile(full, 50)),
        "p90": float(np.percentile(full, 90)),
        "p99": float(np.percentile(full, 99)),
        "peak_rss_mib": peak_rss_mib,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--init-pods", type=int, default=1000)
    parser.add_argument("--pods", type=int, default=10000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    r = run(args.nodes, args.init_pods, args.pods, args.seed)
    print(
        f"SchedulingBasic {args.nodes} nodes / {args.init_pods} init pods / "
        f"{args.pods} measured pods"
    )
    print(
        f"  scheduled {int(r['scheduled'])} pods in {r['seconds']:.2f} s "
        f"({r['cpu_seconds']:.2f} s of CPU: less distorted by other load than pods/s)"
    )
    print(
        f"  throughput: average {r['average']:.0f} pods/s, per-second p50 {r['p50']:.0f} "
        f"p90 {r['p90']:.0f} p99 {r['p99']:.0f} pods/s"
    )
    print(f"  peak RSS {r['peak_rss_mib']:.0f} MiB")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
