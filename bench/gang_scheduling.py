"""Gang scheduling throughput at 5000 nodes (scheduler_perf-style shapes, in memory).

Shapes: 1000 gangs x 3 pods, 10 gangs x 1000 pods, 1 gang x 5000 pods; minMember = gang
size (all-or-nothing); nodes 4 cpu / 32Gi / 110 pods; pods 100m / 500Mi; default plugins.
Prints pods/s per shape and how long the largest gang's decision took.
With --tiers, nodes carry a 3-tier fabric (block > spine > leaf: 16 nodes per leaf, 8
leaves per spine, 4 spines per block) and every gang prefers `leaf,spine,block`
(`shoal.dev/topology-preferred`): topology-aware decisions.
  python bench/gang_scheduling.py [--nodes 5000] [--tiers]
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

LEAF, SPINE, BLOCK = 16, 16 * 8, 16 * 8 * 4  # nodes per domain of each tier


def make_node(i: int, tiers: bool) -> Node:
    labels = {"kubernetes.io/hostname": f"node-{i}"}
    if tiers:
        labels.update(leaf=f"leaf-{i // LEAF}", spine=f"spine-{i // SPINE}")
        labels["block"] = f"block-{i // BLOCK}"
    return default_node(i, labels)


def make_pod(gang: str, i: int, size: int, tiers: bool) -> Pod:
    labels = {
        "pod-group.scheduling.sigs.k8s.io/name": gang,
        "pod-group.scheduling.sigs.k8s.io/min-available": str(size),
    }
    pod = default_pod(f"{gang}-{i}", "gangs", labels)
    if tiers:
        pod.metadata.annotations["shoal.dev/topology-preferred"] = "leaf,spine,block"
    return pod


def run_shape(nodes: int, gangs: int, size: int, tiers: bool) -> tuple[float, float, int]:
    """Returns (pods/s, slowest single gang decision in s, pods bound)."""
    effects = MemoryEffects()
    sched = new_scheduler(KubeSchedulerConfiguration(), clock=ManualClock(), effects=effects)
    for i in range(nodes):
        sched.add_node(make_node(i, tiers))
    for g in range(gangs):
        for i in range(size):
            sched.add_pod(make_pod(f"g{g}", i, size, tiers))
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
    parser.add_argument("--tiers", action="store_true", help="3-tier topology preferences")
    args = parser.parse_args()
    where = ", 3 topology tiers preferred" if args.tiers else ""
    print(f"Gang scheduling, {args.nodes} nodes, default plugins, all-or-nothing gangs{where}")
    for gangs, size in ((1000, 3), (10, 1000), (1, 5000)):
        rate, slowest, bound = run_shape(args.nodes, gangs, size, args.tiers)
        print(
            f"  {gangs} gangs x {size} pods: {bound} bound, {rate:.0f} pods/s, "
            f"slowest gang decision {slowest:.2f} s"
        )
    print(f"  peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")


if __name__ == "__main__":
    main()
