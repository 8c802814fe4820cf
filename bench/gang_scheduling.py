"""Gang scheduling throughput at 5000 nodes (scheduler_perf-style shapes, in memory).

Shapes: 1000 gangs x 3 pods, 10 gangs x 1000 pods, 1 gang x 5000 pods; minMember = gang
size (all-or-nothing); nodes 4 cpu / 32Gi / 110 pods; pods 100m / 500Mi; default plugins.
Prints pods/s per shape and how long the largest gang's decision took.
  python bench/gang_scheduling.py [--nodes 5000]
"""

from __future__ import annotations

import argparse
import resource
import time

from shapes import default_node, default_pod

from shoal.api.objects import Node, Pod
from shoal.config import KubeSchedulerConfiguration
from shoal.drivers.loop import Driver
from shoal.drivers.memory import ManualClock, MemoryEffects
from shoal.scheduler import new_scheduler


def make_node(i: int) -> Node:
    return default_node(i, {"kubernetes.io/hostname": f"node-{i}"})


def make_pod(gang: str, i: int, size: int) -> Pod:
    labels = {
        "pod-group.scheduling.sigs.k8s.io/name": gang,
        "pod-group.scheduling.sigs.k8s.io/min-available": str(size),
    }
    return default_pod(f"{gang}-{i}", "gangs", labels)


def run_shape(nodes: int, gangs: int, size: int) -> tuple[float, float, int]:
    """Returns (pods/s, slowest single gang decision in s, pods bound)."""
    effects = MemoryEffects()
    sched = new_scheduler(KubeSchedulerConfiguration(), clock=ManualClock(), effects=effects)
    for i in range(nodes):
        sched.add_node(make_node(i))
    for g in range(gangs):
        for i in range(size):
            sched.add_pod(make_pod(f"g{g}", i, size))
    # The one driver loop; a cycle is timed from its start to the end of the binding
    # cycles (and watch echoes) it made ready.
    driver = Driver(sched, inbox=effects)
    slowest = 0.0
    start = time.perf_counter()
    driver.tick()
    while sched.has_work():
        t0 = time.perf_counter()
        driver.cycle()
        slowest = max(slowest, time.perf_counter() - t0)
    driver.run()
    elapsed = time.perf_counter() - start
    return len(effects.bound) / elapsed, slowest, len(effects.bound)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, default=5000)
    args = parser.parse_args()
    print(f"Gang scheduling, {args.nodes} nodes, default plugins, all-or-nothing gangs")
    for gangs, size in ((1000, 3), (10, 1000), (1, 5000)):
        rate, slowest, bound = run_shape(args.nodes, gangs, size)
        print(
            f"  {gangs} gangs x {size} pods: {bound} bound, {rate:.0f} pods/s, "
            f"slowest gang decision {slowest:.2f} s"
        )
    print(f"  peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")


if __name__ == "__main__":
    main()
