"""What the per-node adapter costs: the same Filter, vectorised and through the adapter.

The rule: the pod's `example.com/tier` label must equal the node's label (nodes without
the label fail). The vectorised plugin reads the integer-coded label column for all
candidates at once; the per-node version is a plain function of one `NodeView`,
wrapped with `shoal.framework.per_node_filter`. Both run on the same 5000-node snapshot
(a third of the nodes reject the pod, so the failure grouping is exercised too), and
the results are checked to be identical before timing.

A second pair does the same for Score (a node-label lookup returning 0..100) over the
500 feasible nodes that percentageOfNodesToScore keeps at 5000 nodes. Finally both
Filters run inside whole scheduling cycles (default profile plus the plugin enabled
through multiPoint) to show what the adapter does to throughput.

Usage: python bench/per_node_adapter.py [--nodes 5000] [--cycles 50] [--pods 300]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np
from numpy.typing import NDArray

from shoal.api.objects import (
    Container,
    Node,
    NodeStatus,
    ObjectMeta,
    Pod,
    PodSpec,
    ResourceRequirements,
)
from shoal.api.podinfo import PodInfo
from shoal.cache.cluster import ClusterState
from shoal.cache.snapshot import Snapshot
from shoal.config import KubeSchedulerConfiguration
from shoal.drivers.loop import Driver
from shoal.drivers.memory import ManualClock, MemoryEffects
from shoal.framework import (
    Candidates,
    Code,
    CycleState,
    FilterResult,
    Handle,
    NodeView,
    PluginSpec,
    Status,
    per_node_filter,
    per_node_score,
)
from shoal.scheduler import default_registry, new_scheduler

KEY = "example.com/tier"
REASON = "node(s) had a different tier"
RANK_KEY = "example.com/rank"


class VectorTier:
    """The vectorised plugin: one numpy comparison over the label-code column."""

    name = "VectorTier"

    def __init__(self, handle: Handle) -> None:
        self.handle = handle

    def filter(self, state: CycleState, pod: PodInfo, nodes: Candidates) -> FilterResult:
        labels = self.handle.snapshot.labels
        want = labels.value_codes(KEY, [pod.labels.get(KEY, "")])
        codes = labels.column(KEY, nodes.index)
        passed = codes == want[0] if want else np.zeros(nodes.size, dtype=bool)
        return FilterResult.from_mask(passed, REASON, Code.UNSCHEDULABLE_AND_UNRESOLVABLE)

    def score(self, state: CycleState, pod: PodInfo, nodes: Candidates) -> NDArray[np.int64]:
        ranks = self.handle.snapshot.labels.numeric(RANK_KEY, nodes.index)
        return np.nan_to_num(ranks, nan=0.0).astype(np.int64)


def tier_matches(state: CycleState, pod: PodInfo, node: NodeView) -> Status:
    if node.labels.get(KEY) == pod.labels.get(KEY, ""):
        return Status()
    return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, REASON)


def rank(state: CycleState, pod: PodInfo, node: NodeView) -> int:
    return int(node.labels.get(RANK_KEY, "0"))


def make_handle(num_nodes: int) -> Handle:
    cluster = ClusterState()
    for i in range(num_nodes):
        cluster.add_node(
            Node(
                metadata=ObjectMeta(
                    name=f"node-{i}",
                    labels={
                        "kubernetes.io/hostname": f"node-{i}",
                        KEY: ["gold", "gold", "silver"][i % 3],
                        RANK_KEY: str(i % 101),
                    },
                ),
                status=NodeStatus(allocatable={"cpu": "4", "memory": "32Gi", "pods": "110"}),
            )
        )
    return Handle(
        cluster, Snapshot(cluster), ManualClock(), np.random.default_rng(0), MemoryEffects()
    )


def per_cycle(fn: Callable[[], object], cycles: int) -> float:
    """Best of three runs of `cycles` calls, in seconds per call."""
    fn()  # warm up
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(cycles):
            fn()
        best = min(best, (time.perf_counter() - start) / cycles)
    return best


def fmt(seconds: float) -> str:
    return f"{seconds * 1e3:8.3f} ms" if seconds >= 1e-3 else f"{seconds * 1e6:8.1f} us"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--cycles", type=int, default=50)
    parser.add_argument("--scored", type=int, default=500, help="feasible nodes scored")
    parser.add_argument("--pods", type=int, default=300, help="pods for the end-to-end run")
    args = parser.parse_args()

    handle = make_handle(args.nodes)
    pod = PodInfo(Pod(metadata=ObjectMeta(name="p", labels={KEY: "gold"})))
    state = CycleState()
    vector = VectorTier(handle)
    adapted_filter = per_node_filter("PerNodeTier", tier_matches).with_handle(handle)
    adapted_score = per_node_score("PerNodeRank", rank).with_handle(handle)
    everything = Candidates.all(handle.snapshot.n)
    scored = Candidates.of(np.arange(0, handle.snapshot.n, 3)[: args.scored])

    a, b = vector.filter(state, pod, everything), adapted_filter.filter(state, pod, everything)
    assert np.array_equal(a.passed, b.passed)
    assert [(f.reason, int(f.nodes.sum()), f.code) for f in a.failures] == [
        (f.reason, int(f.nodes.sum()), f.code) for f in b.failures
    ]
    assert np.array_equal(vector.score(state, pod, scored), adapted_score.score(state, pod, scored))

    rows = [
        (
            f"Filter over {everything.size} nodes",
            everything.size,
            per_cycle(lambda: vector.filter(state, pod, everything), args.cycles),
            per_cycle(lambda: adapted_filter.filter(state, pod, everything), args.cycles),
        ),
        (
            f"Score over {scored.size} feasible nodes",
            scored.size,
            per_cycle(lambda: vector.score(state, pod, scored), args.cycles),
            per_cycle(lambda: adapted_score.score(state, pod, scored), args.cycles),
        ),
    ]
    print(f"per-node adapter vs vectorised, {args.nodes} nodes (best of 3 x {args.cycles} cycles)")
    for label, count, vec, per_node in rows:
        print(
            f"  {label:30s} vectorised {fmt(vec)}/cycle   per-node {fmt(per_node)}/cycle   "
            f"ratio {per_node / vec:5.0f}x   ({per_node * 1e6 / count:.2f} us per node)"
        )
    if args.pods:
        print(f"whole scheduling cycles, default profile + the Filter, {args.pods} pods:")
        for plugin in (VECTOR_SPEC, PER_NODE_SPEC):
            rate = throughput(args.nodes, args.pods, plugin)
            print(f"  {plugin[0]:30s} {rate:6.0f} pods/s   ({1e3 / rate:.2f} ms per pod)")


VECTOR_SPEC = ("VectorTier", PluginSpec(lambda args, handle: VectorTier(handle)))
PER_NODE_SPEC = ("PerNodeTier", per_node_filter("PerNodeTier", tier_matches).spec())


def throughput(num_nodes: int, num_pods: int, plugin: tuple[str, PluginSpec]) -> float:
    """Pods per second through full cycles with `plugin` added as a multiPoint Filter."""
    name, spec = plugin
    registry = default_registry(include_entry_points=False)
    registry.register(name, spec)
    config = KubeSchedulerConfiguration.model_validate(
        {"profiles": [{"plugins": {"multiPoint": {"enabled": [{"name": name}]}}}]}
    )
    effects = MemoryEffects()
    sched = new_scheduler(config, clock=ManualClock(), effects=effects, registry=registry)
    cluster = make_handle(num_nodes).cluster
    for node in cluster.table.nodes:
        sched.add_node(node)
    for i in range(num_pods):
        sched.add_pod(
            Pod(
                metadata=ObjectMeta(name=f"p{i}", uid=f"p{i}", labels={KEY: "gold"}),
                spec=PodSpec(
                    containers=[Container(resources=ResourceRequirements(requests={"cpu": "100m"}))]
                ),
            )
        )
    start = time.perf_counter()
    Driver(sched, inbox=effects).run()  # the one driver loop, binds echoed back
    placed = len(effects.bound)
    assert placed == num_pods, placed
    return num_pods / (time.perf_counter() - start)


if __name__ == "__main__":
    main()
