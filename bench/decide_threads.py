"""Why optimistic workers are processes: decisions on threads, measured.

Two independent replicas of a SchedulingBasic cluster in one process; each thread
decides pods on its own replica with `Replica.decide` (the optimistic worker's decision:
PreFilter, Filter, Score, select host, assume in the replica; nothing is committed).
One thread deciding 2M pods is compared with two threads deciding M each, at the same
time. If the numpy work released the GIL for long enough, two threads would take about
half the time. Usage:
  python bench/decide_threads.py [--nodes 5000] [--pods 4000]
"""

from __future__ import annotations

import argparse
import threading
import time

from shapes import default_node, default_pod

from shoal.config import KubeSchedulerConfiguration
from shoal.drivers.memory import ManualClock, MemoryEffects
from shoal.scheduler import new_scheduler
from shoal.scheduler.optimistic import Replica


def replica(nodes: int, pods: int, prefix: str) -> tuple[Replica, list[str]]:
    sched = new_scheduler(
        KubeSchedulerConfiguration(), clock=ManualClock(), effects=MemoryEffects()
    )
    for i in range(nodes):
        sched.add_node(default_node(i, {"topology.kubernetes.io/zone": f"zone-{i % 3}"}))
    uids = []
    for i in range(pods):
        info = sched.add_pod(default_pod(f"{prefix}-{i}", "sched-test"))
        uids.append(info.uid)
    return Replica(sched), uids


def decide(rep: Replica, uids: list[str]) -> None:
    for i in range(0, len(uids), 16):
        rep.decide(tuple(uids[i : i + 16]))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=4000, help="per thread (M)")
    args = parser.parse_args()
    m = args.pods
    a, ua = replica(args.nodes, 2 * m, "a")
    b, ub = replica(args.nodes, m, "b")
    start = time.perf_counter()
    decide(a, ua[:m])
    decide(a, ua[m:])
    one = time.perf_counter() - start
    a2, ua2 = replica(args.nodes, m, "c")
    threads = [
        threading.Thread(target=decide, args=(a2, ua2)),
        threading.Thread(target=decide, args=(b, ub)),
    ]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    two = time.perf_counter() - start
    print(f"{args.nodes} nodes, {2 * m} decisions")
    print(f"  one thread: {2 * m / one:.0f} pods/s")
    print(f"  two threads: {2 * m / two:.0f} pods/s ({one / two:.2f}x)")


if __name__ == "__main__":
    main()
