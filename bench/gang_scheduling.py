"""Gang scheduling throughput at 5000 nodes (scheduler_perf-style shapes, in memory).

Shapes: 1000 gangs x 3 pods, 10 gangs x 1000 pods, 1 gang x 5000 pods; minMember = gang
size (all-or-nothing); nodes 4 cpu / 32Gi / 110 pods; pods 100m / 500Mi; default plugins.
Prints pods/s per shape and how long the largest gang's decision took.
With --tiers, nodes carry a 3-tier fabric (block > spine > leaf: 16 nodes per leaf, 8
leaves per spine, 4 spines per block) and every gang prefers `leaf,spine,block`
(`shoal.dev/topology-preferred`): topology-aware decisions. With --hypernodes, the same
fabric is Volcano HyperNodes instead of node labels (leaves list their nodes by exact
name, spines their leaves, blocks their spines by regex) and every gang prefers the
three HyperNode tiers, lowest first (Volcano's `networkTopology: {mode: soft}`); it
also times resolving the HyperNodes and adding nodes to the fabric afterwards. With
--tiers --required spine (or block), every gang must fit in one domain of that level and
prefers the levels below it (issue 27's required spine + preferred leaf).
Each shape's pods/s is wall-clock; the second rate divides by the process's CPU time
instead, the third is the gang size over the median gang cycle (both steadier than
wall-clock when other work shares the machine's cores: a burst of load slows some cycles,
not the median one; with one or ten gangs there are only one or ten cycles).
  python bench/gang_scheduling.py [--nodes 5000] [--tiers [--required LEVEL] | --hypernodes]
"""

from __future__ import annotations

import argparse
import resource
import statistics
import time

from shapes import default_node, default_pod

from shoal.api.hypernode import HyperNode, tier_key
from shoal.api.manifests import decode
from shoal.api.objects import Node, Pod
from shoal.config import KubeSchedulerConfiguration
from shoal.drivers.loop import Driver
from shoal.drivers.memory import ManualClock, MemoryEffects
from shoal.scheduler import Scheduler, new_scheduler

LEAF, SPINE, BLOCK = 16, 16 * 8, 16 * 8 * 4  # nodes per domain of each tier
HYPERNODE_LEVELS = ",".join(tier_key(t) for t in (1, 2, 3))


def hypernodes(nodes: int) -> list[HyperNode]:
    """The --tiers fabric as HyperNodes."""

    def obj(name: str, tier: int, members: list[dict[str, object]]) -> HyperNode:
        raw = {"metadata": {"name": name}, "spec": {"tier": tier, "members": members}}
        return decode(raw, HyperNode)

    out = []
    for leaf in range(-(-nodes // LEAF)):
        names = range(leaf * LEAF, min(nodes, (leaf + 1) * LEAF))
        members = [
            {"type": "Node", "selector": {"exactMatch": {"name": f"node-{i}"}}} for i in names
        ]
        out.append(obj(f"leaf-{leaf}", 1, members))
    per_spine = SPINE // LEAF
    for spine in range(-(-nodes // SPINE)):
        leaves = range(spine * per_spine, (spine + 1) * per_spine)
        members = [
            {"type": "HyperNode", "selector": {"exactMatch": {"name": f"leaf-{k}"}}} for k in leaves
        ]
        out.append(obj(f"spine-{spine}", 2, members))
    per_block = BLOCK // SPINE
    for block in range(-(-nodes // BLOCK)):
        spines = "|".join(str(k) for k in range(block * per_block, (block + 1) * per_block))
        pattern = {"regexMatch": {"pattern": f"^spine-({spines})$"}}
        out.append(obj(f"block-{block}", 3, [{"type": "HyperNode", "selector": pattern}]))
    return out


def make_node(i: int, tiers: bool) -> Node:
    labels = {"kubernetes.io/hostname": f"node-{i}"}
    if tiers:
        labels.update(leaf=f"leaf-{i // LEAF}", spine=f"spine-{i // SPINE}")
        labels["block"] = f"block-{i // BLOCK}"
    return default_node(i, labels)


def make_pod(gang: str, i: int, size: int, levels: str, required: str = "") -> Pod:
    labels = {
        "pod-group.scheduling.sigs.k8s.io/name": gang,
        "pod-group.scheduling.sigs.k8s.io/min-available": str(size),
    }
    pod = default_pod(f"{gang}-{i}", "gangs", labels)
    if levels:
        pod.metadata.annotations["shoal.dev/topology-preferred"] = levels
    if required:
        pod.metadata.annotations["shoal.dev/topology-required"] = required
    return pod


def run_shape(
    nodes: int, gangs: int, size: int, tiers: bool, fabric: bool = False, required: str = ""
) -> tuple[float, float, int, float, float]:
    """Returns (pods/s, slowest single gang decision in s, pods bound, pods per CPU
    second, the median gang cycle in s)."""
    effects = MemoryEffects()
    sched = new_scheduler(KubeSchedulerConfiguration(), clock=ManualClock(), effects=effects)
    for i in range(nodes):
        sched.add_node(make_node(i, tiers and not fabric))
    if fabric:
        for obj in hypernodes(nodes):
            sched.upsert_hypernode(obj)
    levels = HYPERNODE_LEVELS if fabric else "leaf,spine,block" if tiers else ""
    if required:
        levels = ",".join(levels.split(",")[: levels.split(",").index(required)])
    for g in range(gangs):
        for i in range(size):
            sched.add_pod(make_pod(f"g{g}", i, size, levels, required))
    # The one driver loop; a cycle is timed from its start to the end of the binding
    # cycles (and watch echoes) it made ready.
    driver = Driver(sched, inbox=effects)
    cycles: list[float] = []
    start, cpu = time.perf_counter(), time.process_time()
    driver.tick()
    while sched.has_work():
        t0 = time.perf_counter()
        driver.cycle()
        cycles.append(time.perf_counter() - t0)
    driver.run()
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    bound = len(effects.bound)
    slowest = max(cycles, default=0.0)
    return bound / elapsed, slowest, bound, bound / cpu, statistics.median(cycles or [0.0])


def _node_adds(sched: Scheduler, first: int, count: int, rounds: int = 3) -> float:
    """Seconds per node added (the best of `rounds`: each round adds the same nodes
    again after removing them)."""
    batch = [make_node(i, False) for i in range(first, first + count)]
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        for node in batch:
            sched.add_node(node)
        best = min(best, (time.perf_counter() - t0) / count)
        for node in batch:
            sched.delete_node(node.metadata.name)
    for node in batch:
        sched.add_node(node)
    return best


def resolution_costs(nodes: int, added: int = 500) -> None:
    """Seconds to take the fabric's HyperNodes in and build the tier columns, then per
    node added to it afterwards (node churn: that node alone is matched)."""
    sched = new_scheduler(
        KubeSchedulerConfiguration(), clock=ManualClock(), effects=MemoryEffects()
    )
    for i in range(nodes):
        sched.add_node(make_node(i, False))
    objects = hypernodes(nodes + added)
    t0 = time.perf_counter()
    for obj in objects:
        sched.upsert_hypernode(obj)
    topology = sched.cluster.hypernodes
    problems = topology.problems()
    topology.column(3, nodes)
    resolved = time.perf_counter() - t0
    per_node = _node_adds(sched, nodes, added)
    assert not problems and len(topology.nodes_in("block-0")) == min(BLOCK, nodes + added)
    plain = new_scheduler(
        KubeSchedulerConfiguration(), clock=ManualClock(), effects=MemoryEffects()
    )
    for i in range(nodes):
        plain.add_node(make_node(i, False))
    without = _node_adds(plain, nodes, added)
    print(
        f"  {len(objects)} HyperNodes resolved over {nodes} nodes in {resolved:.3f} s; "
        f"a node added afterwards {per_node * 1e6:.0f} us ({without * 1e6:.0f} us without "
        "HyperNodes)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--tiers", action="store_true", help="3-tier topology preferences")
    parser.add_argument(
        "--hypernodes", action="store_true", help="the 3 tiers as Volcano HyperNodes"
    )
    parser.add_argument(
        "--required",
        choices=("spine", "block"),
        default="",
        help="with --tiers: every gang requires this level, prefers the ones below it",
    )
    args = parser.parse_args()
    if args.required and not args.tiers:
        parser.error("--required needs --tiers")
    tiers = args.tiers or args.hypernodes
    where = ", 3 topology tiers preferred" if tiers else ""
    if args.required:
        where = f", 3 topology tiers: {args.required} required, the ones below preferred"
    where += " (HyperNodes)" if args.hypernodes else ""
    print(f"Gang scheduling, {args.nodes} nodes, default plugins, all-or-nothing gangs{where}")
    if args.hypernodes:
        resolution_costs(args.nodes)
    for gangs, size in ((1000, 3), (10, 1000), (1, 5000)):
        rate, slowest, bound, per_cpu, median = run_shape(
            args.nodes, gangs, size, tiers, args.hypernodes, args.required
        )
        print(
            f"  {gangs} gangs x {size} pods: {bound} bound, {rate:.0f} pods/s, "
            f"slowest gang decision {slowest:.2f} s; per CPU second {per_cpu:.0f} pods/s; "
            f"median gang cycle {median * 1e3:.2f} ms, "
            f"per median cycle {size / max(median, 1e-9):.0f} pods/s"
        )
    print(f"  peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")


if __name__ == "__main__":
    main()
