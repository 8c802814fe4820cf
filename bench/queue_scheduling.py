"""Scheduling with tenant queues vs without, at 5000 nodes and 50k pods.

Queues: a 3-level tree (8 orgs x 5 teams x 5 users = 200 leaves, 248 queues), weights,
guarantees and maxima on cpu; every pod belongs to a user queue (label shoal.dev/queue),
round-robin. Baseline: the same pods with no Queue objects (the default queue only).
Nodes 4 cpu / 32Gi / 110 pods, pods 100m / 500Mi (SchedulingBasic shapes).
Prints pods/s for both and the ratio.
  python bench/queue_scheduling.py [--nodes 5000] [--pods 50000]
"""

from __future__ import annotations

import argparse
import time

from shapes import default_node, default_pod

from shoal.api.manifests import decode
from shoal.api.objects import Node, Pod
from shoal.api.queue import Queue
from shoal.config import KubeSchedulerConfiguration
from shoal.drivers.loop import Driver
from shoal.drivers.memory import ManualClock, MemoryEffects
from shoal.scheduler import new_scheduler


def make_node(i: int) -> Node:
    return default_node(i)


def make_pod(i: int, queue: str | None) -> Pod:
    return default_pod(f"p-{i}", "bench", {"shoal.dev/queue": queue} if queue else None)


def queue_tree(total_cpu: int) -> tuple[list[Queue], list[str]]:
    queues, leaves = [], []
    per_org = total_cpu // 8
    for o in range(8):
        org = f"org-{o}"
        queues.append(q(org, "", 1 + o % 3, per_org // 2, per_org * 2))
        for t in range(5):
            team = f"{org}-team-{t}"
            queues.append(q(team, org, 1 + t % 2, per_org // 10, per_org))
            for u in range(5):
                user = f"{team}-user-{u}"
                queues.append(q(user, team, 1, per_org // 50, per_org // 2))
                leaves.append(user)
    return queues, leaves


def q(name: str, parent: str, weight: int, guaranteed: int, maximum: int) -> Queue:
    spec = {
        "parent": parent,
        "weight": weight,
        "guaranteed": {"cpu": guaranteed},
        "max": {"cpu": maximum},
    }
    return decode({"metadata": {"name": name}, "spec": spec}, Queue)


def run(nodes: int, pods: int, with_queues: bool) -> float:
    effects = MemoryEffects()
    sched = new_scheduler(KubeSchedulerConfiguration(), clock=ManualClock(), effects=effects)
    for i in range(nodes):
        sched.add_node(make_node(i))
    leaves: list[str] = []
    if with_queues:
        queues, leaves = queue_tree(total_cpu=nodes * 4)
        problems = sched.apply_queues(queues)
        if problems:
            raise SystemExit("\n".join(problems))
    for i in range(pods):
        sched.add_pod(make_pod(i, leaves[i % len(leaves)] if leaves else None))
    start = time.perf_counter()
    Driver(sched, inbox=effects).run()  # the one driver loop, binds echoed back
    elapsed = time.perf_counter() - start
    bound = len(effects.bound)
    if bound != pods:
        raise SystemExit(f"only {bound}/{pods} pods were scheduled")
    return pods / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=50000)
    parser.add_argument(
        "--repeat", type=int, default=1, help="alternate runs and keep each side's best"
    )
    args = parser.parse_args()
    base = with_q = 0.0
    for _ in range(args.repeat):  # alternating runs share the machine's noise
        base = max(base, run(args.nodes, args.pods, with_queues=False))
        with_q = max(with_q, run(args.nodes, args.pods, with_queues=True))
    print(f"Queues benchmark: {args.nodes} nodes, {args.pods} pods, 200 leaf queues (3 levels)")
    print(f"  queues disabled: {base:.0f} pods/s")
    print(f"  queues enabled:  {with_q:.0f} pods/s")
    print(f"  ratio enabled/disabled: {with_q / base:.2f} (target >= 0.75)")


if __name__ == "__main__":
    main()
