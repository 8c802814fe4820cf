"""The cost of one dashboard snapshot (what the scheduling loop waits while it is built).

Cluster: 5000 nodes (4000 with 8 GPUs of two models, 1000 CPU-only), 20 leaf queues under
4 parents, 12000 running GPU pods (shares of 250m/500m and whole 1/2 GPUs) placed by
spec.nodeName; 10000 pending pods: 2000 tried and unschedulable (a node selector nothing
matches, or too large), 1000 gated by a scheduling gate, 800 members of 200 gangs and
6200 not tried yet. Prints the build time of `DashboardSource.build()` (cold: every pod's
GPU shape parsed; warm: cached, as at every later refresh), the JSON encoding of the
largest responses, and the size of the node heat map. Usage:
  python bench/dashboard_snapshot.py [--nodes 5000] [--pending 10000] [--repeat 10]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time

import msgspec

from shoal.api.manifests import decode
from shoal.api.queue import Queue
from shoal.testing import SchedulerHarness, make_node, make_pod
from shoal.web.dashboard import DashboardSource

GPU = "nvidia.com/gpu"
QUEUE = "shoal.dev/queue"
GROUP = "pod-group.scheduling.sigs.k8s.io/name"
MIN = "pod-group.scheduling.sigs.k8s.io/min-available"


def queues() -> list[Queue]:
    out = []
    for p in range(4):
        out.append(decode({"metadata": {"name": f"org-{p}"}, "spec": {}}, Queue))
        for c in range(5):
            spec = {"parent": f"org-{p}", "weight": 1 + c % 3}
            out.append(decode({"metadata": {"name": f"team-{p}-{c}"}, "spec": spec}, Queue))
    return out


def build(nodes: int, pending: int) -> SchedulerHarness:
    h = SchedulerHarness()
    assert h.scheduler.apply_queues(queues()) == []
    gpu_nodes = nodes * 4 // 5
    for i in range(nodes):
        node = make_node(f"node-{i}").capacity(cpu="64", memory="512Gi", pods="110")
        if i < gpu_nodes:
            model = "A100" if i % 2 else "V100"
            node = node.capacity({GPU: 8}, cpu="64", memory="512Gi", pods="110").labels(
                {"nvidia.com/gpu.product": model}
            )
        h.add_nodes(node)
    for i in range(12_000):
        pod = (
            make_pod(f"run-{i}", "work")
            .labels({QUEUE: f"team-{i % 4}-{i % 5}"})
            .node(f"node-{i % gpu_nodes}")
        )
        if i % 4 < 2:
            milli = "250" if i % 4 else "500"
            pod = pod.annotations({"alibabacloud.com/gpu-milli": milli}).req(cpu="2")
        else:
            pod = pod.req({GPU: 1 + i % 4 // 3}, cpu="4")
        h.add_pods(pod)
    tried = pending // 5
    for i in range(tried):
        pod = make_pod(f"stuck-{i}", "work").labels({QUEUE: f"team-{i % 4}-{i % 5}"})
        if i % 2:
            pod = pod.node_selector(zone="nowhere").req(cpu="1")
        else:
            pod = pod.req({GPU: 16}, cpu="1")
        h.add_pods(pod)
    h.run()
    gated = pending // 10
    for i in range(gated):
        h.add_pods(make_pod(f"held-{i}", "work").scheduling_gates("example.com/ok").req(cpu="1"))
    gangs = min(200, pending // 50)
    for g in range(gangs):
        labels = {GROUP: f"job-{g}", MIN: "4", QUEUE: f"team-{g % 4}-{g % 5}"}
        for m in range(4):
            h.add_pods(make_pod(f"job-{g}-{m}", "work").labels(labels).req({GPU: 8}, cpu="8"))
    rest = pending - tried - gated - 4 * gangs
    for i in range(rest):
        # Added after the run: still in the active queue, not tried yet.
        h.add_pods(
            make_pod(f"new-{i}", "work").labels({QUEUE: f"team-{i % 4}-{i % 5}"}).req(cpu="1")
        )
    return h


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pending", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=10)
    args = parser.parse_args()
    started = time.perf_counter()
    h = build(args.nodes, args.pending)
    sched = h.scheduler
    pending = len(list(sched.scheduling_queue.pending()))
    print(
        f"setup {time.perf_counter() - started:.1f}s: {sched.cluster.table.n} nodes, "
        f"{len(sched.cluster.placed)} placed pods, {pending} pending "
        f"{sched.scheduling_queue.counts()}, {len(sched.gangs.groups)} gangs"
    )
    source = DashboardSource(sched)
    t0 = time.perf_counter()
    frame = source.build()
    cold = time.perf_counter() - t0
    # The first build allocates enough to trigger a full collection of this heap; how
    # much of "cold" that is: the same build with the collector off, and one collection.
    gc.disable()
    t0 = time.perf_counter()
    DashboardSource(sched).build()
    cold_no_gc = time.perf_counter() - t0
    gc.enable()
    t0 = time.perf_counter()
    gc.collect()
    collect = time.perf_counter() - t0
    warm = []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        frame = source.build()
        warm.append(time.perf_counter() - t0)
    ms = [w * 1000 for w in warm]
    print(
        f"snapshot build: cold {cold * 1000:.1f} ms, warm median {statistics.median(ms):.1f} ms "
        f"(min {min(ms):.1f}, max {max(ms):.1f}, n={len(ms)}); cold without the garbage "
        f"collector {cold_no_gc * 1000:.1f} ms, one full gc.collect() {collect * 1000:.1f} ms"
    )
    print(f"pending groups: {[(g['reason'], g['count']) for g in frame.pending['groups']]}")
    gpus = frame.node_summary
    print(f"fragment: {gpus['fragMilli']:.0f} milli of {gpus['gpuMilli']['free']} free")
    nodes = frame.nodes
    t0 = time.perf_counter()
    rows = nodes.order("frag", True)
    page = msgspec.json.encode([nodes.item(r) for r in rows[:500].tolist()])
    heat_rows = nodes.order("name", True)
    heat = msgspec.json.encode(
        {
            "names": [nodes.names[r] for r in heat_rows.tolist()],
            "use": nodes.gpu_used[heat_rows].tolist(),
        }
    )
    encoded = msgspec.json.encode(frame.pending) + msgspec.json.encode(frame.gangs)
    encoded += msgspec.json.encode(frame.queues)
    took = time.perf_counter() - t0
    print(
        f"JSON: 500-node page {len(page) / 1024:.0f} KiB, heat map of {len(heat_rows)} GPU nodes "
        f"{len(heat) / 1024:.0f} KiB, pending+gangs+queues {len(encoded) / 1024:.0f} KiB; "
        f"sorting and encoding all of them {took * 1000:.1f} ms"
    )


if __name__ == "__main__":
    main()
