"""Optimistic workers in memory: throughput and conflict rate for 1, 2, 4 workers.

SchedulingBasic's shapes (bench/scheduling_basic.py: 4 cpu / 32Gi / 110-pod nodes,
100m / 500Mi pods, default plugins, 1000 init pods) run by the plain driver loop
(`serial`) and by `shoal.drivers.optimistic.OptimisticDriver` with N worker processes
(each decides on a forked replica; the committer checks row generations). The cluster
is built once per shape; every configuration then runs in a process forked from it, so
all start from the same state. The clock starts before the workers are forked.

Every run is checked: each measured pod bound exactly once (one Bind effect), and no
node holds more than its allocatable (recomputed from the binds). Prints, per shape and
configuration, the median pods/s over --repeat runs (configurations interleaved), the
conflicts (proposals the committer rejected / proposals) and the pods the committer
decided itself (nothing fitted in a worker's view, or too many conflicts). Usage:
  python bench/optimistic_workers.py [--shapes 5000:10000,50000:100000] [--workers 1,2,4]
      [--batch 16] [--repeat 1]
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import sys
import time
from collections import Counter
from multiprocessing.connection import Connection

from shapes import default_node, default_pod

from shoal.config import KubeSchedulerConfiguration
from shoal.drivers.loop import Driver
from shoal.drivers.memory import ManualClock, MemoryEffects
from shoal.drivers.optimistic import OptimisticDriver
from shoal.framework.effects import Bind, Effect
from shoal.scheduler import new_scheduler
from shoal.scheduler.scheduler import Scheduler

PODS_PER_NODE = 40  # 4 cpu / 100m (memory allows 65, the pod slots 110)


class Binds:
    def __init__(self) -> None:
        self.count: Counter[str] = Counter()

    def __call__(self, effect: Effect) -> None:
        if isinstance(effect, Bind):
            self.count[effect.pod.uid] += 1


def build(nodes: int, init_pods: int, pods: int) -> tuple[Scheduler, MemoryEffects, Binds]:
    effects = MemoryEffects()
    binds = Binds()
    effects.listeners.append(binds)
    sched = new_scheduler(KubeSchedulerConfiguration(), clock=ManualClock(), effects=effects)
    for i in range(nodes):
        sched.add_node(
            default_node(
                i,
                {
                    "kubernetes.io/hostname": f"node-{i}",
                    "topology.kubernetes.io/zone": f"zone-{i % 3}",
                },
            )
        )
    for i in range(init_pods):
        sched.add_pod(default_pod(f"init-{i}", "sched-test"))
    Driver(sched, inbox=effects).run()
    for i in range(pods):
        sched.add_pod(default_pod(f"measured-{i}", "sched-test"))
    return sched, effects, binds


def measure(
    sched: Scheduler, effects: MemoryEffects, binds: Binds, workers: int, batch: int
) -> dict[str, float]:
    """One configuration (0 workers: the plain driver loop), in a forked process."""
    before = len(binds.count)
    stats: dict[str, int] = {}
    worker_cpu: list[float] = []
    start = time.perf_counter()
    cpu = time.process_time()
    if workers == 0:
        Driver(sched, inbox=effects).run()
    else:
        with OptimisticDriver(sched, effects, workers=workers, batch=batch) as driver:
            driver.run()
            stats = driver.stats()
        worker_cpu = driver.worker_cpu
    elapsed = time.perf_counter() - start
    cpu = time.process_time() - cpu
    placed = len(binds.count) - before
    # The invariants, from the binds (not the cache).
    twice = [uid for uid, n in binds.count.items() if n != 1]
    if twice:
        raise AssertionError(f"bound more than once: {twice[:5]}")
    per_node = Counter(effects.bound.values())
    over = {node: n for node, n in per_node.items() if n > PODS_PER_NODE}
    if over:
        raise AssertionError(f"overcommitted nodes: {list(over.items())[:5]}")
    table = sched.cluster.table
    if (table.free[: table.n] < 0).any():
        raise AssertionError("the cache shows a node overcommitted")
    return {
        "placed": placed,
        "seconds": elapsed,
        "pods_per_s": placed / elapsed,
        "proposed": stats.get("proposed", 0),
        "conflicts": stats.get("conflicts", 0),
        "serial": stats.get("serial", 0),
        # CPU seconds: the committer (or the plain loop), the busiest worker, all workers.
        "cpu": cpu,
        "worker_cpu_max": max(worker_cpu, default=0.0),
        "worker_cpu": sum(worker_cpu),
    }


def _child(
    conn: Connection,
    state: tuple[Scheduler, MemoryEffects, Binds],
    workers: int,
    batch: int,
) -> None:
    conn.send(measure(*state, workers, batch))
    conn.close()


def run_forked(
    state: tuple[Scheduler, MemoryEffects, Binds], workers: int, batch: int
) -> dict[str, float]:
    ctx = multiprocessing.get_context("fork")
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(child, state, workers, batch))
    proc.start()
    child.close()
    try:
        result: dict[str, float] = parent.recv()
    except EOFError:
        proc.join()
        raise SystemExit(f"the {workers}-worker run failed (exit code {proc.exitcode})") from None
    proc.join()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--shapes", default="5000:10000,50000:100000", help="nodes:pods,...")
    parser.add_argument("--init-pods", type=int, default=1000)
    parser.add_argument("--workers", default="1,2,4")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    configs = [0, *(int(w) for w in args.workers.split(","))]
    for shape in args.shapes.split(","):
        nodes, pods = (int(x) for x in shape.split(":"))
        t = time.perf_counter()
        state = build(nodes, args.init_pods, pods)
        print(
            f"{nodes} nodes / {args.init_pods} init pods / {pods} pods "
            f"(built in {time.perf_counter() - t:.0f} s), batch {args.batch}, "
            f"{args.repeat} run(s) each"
        )
        sys.stdout.flush()
        results: dict[int, list[dict[str, float]]] = {c: [] for c in configs}
        for r in range(args.repeat):
            order = configs if r % 2 == 0 else configs[::-1]
            for workers in order:
                results[workers].append(run_forked(state, workers, args.batch))
        serial = statistics.median(x["pods_per_s"] for x in results[0])
        for workers in configs:
            runs = results[workers]
            rate = statistics.median(x["pods_per_s"] for x in runs)
            label = "serial (Driver)" if workers == 0 else f"{workers} worker(s)"
            line = f"  {label}: {rate:.0f} pods/s ({rate / serial:.2f}x serial)"
            if workers:
                proposed = sum(x["proposed"] for x in runs)
                conflicts = sum(x["conflicts"] for x in runs)
                lane = sum(x["serial"] for x in runs) / len(runs)
                line += (
                    f", conflicts {conflicts / len(runs):.0f} / {proposed / len(runs):.0f} "
                    f"proposals ({100 * conflicts / max(proposed, 1):.1f}%), "
                    f"decided by the committer {lane:.0f}"
                )
            cpu = statistics.median(x["cpu"] for x in runs)
            line += f"\n    CPU s: {'committer' if workers else 'loop'} {cpu:.2f}"
            if workers:
                busiest = statistics.median(x["worker_cpu_max"] for x in runs)
                total = statistics.median(x["worker_cpu"] for x in runs)
                placed = statistics.median(x["placed"] for x in runs)
                bound = placed / max(cpu, busiest)
                line += (
                    f", busiest worker {busiest:.2f}, all workers {total:.2f}; "
                    f"with a core each: {bound:.0f} pods/s"
                )
            print(line)
            sys.stdout.flush()


if __name__ == "__main__":
    main()
