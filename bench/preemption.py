"""PreemptionBasic from kube-scheduler's scheduler_perf, run in memory.

Shape (scheduler_perf's PreemptionBasic/500Nodes; misc/performance-config.yaml, formerly
config/performance-config.yaml):
  * 500 nodes, node-default.yaml: 4 cpu / 32Gi / 110 pods
  * 2000 init pods, pod-low-priority.yaml: no priority (0), requests 900m / 500Mi, so
    every node ends up with 4 of them (3.6 of 4 cpu)
  * 500 measured pods, pod-high-priority.yaml: priority 10, requests 3000m / 500Mi; each
    fits nowhere and must preempt 3 of the 4 low-priority pods on some node
Default plugins, through the stable harness API only (`SchedulerHarness`, the builders),
so the same script runs against any version of the core.

A preemptor is nominated and its victims evicted in one attempt; it is bound when it is
retried, after its backoff, so virtual time is advanced until every measured pod is bound.
pods/s is measured pods over the wall time spent inside the scheduler (adding the
measured pods, scheduling, preempting, binding), not virtual time. At the end it checks
that every measured pod is bound, that no node is overcommitted, and that every evicted
pod had a lower priority than the measured pods; it exits 1 if any check fails.
  python bench/preemption.py [--nodes 500] [--init-pods 2000] [--pods 500] [--seed 0]
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from collections import Counter
from collections.abc import Callable
from typing import TypeVar

from shapes import default_node

from shoal.api.objects import Pod
from shoal.testing.builders import make_pod
from shoal.testing.harness import SchedulerHarness

NAMESPACE = "sched-test"
LOW_PRIORITY = 0
HIGH_PRIORITY = 10
# (milli-cpu, memory bytes) per pod, from the templates.
LOW_REQUEST = (900, 500 * 2**20)
HIGH_REQUEST = (3000, 500 * 2**20)
# node-default.yaml's capacity.
NODE_CPU_MILLI = 4000
NODE_MEMORY = 32 * 2**30
NODE_PODS = 110
# Retries wait out a backoff of at most 10 s (podMaxBackoffSeconds), so a pod that can be
# bound is bound long before this much virtual time has passed.
VIRTUAL_TIME_LIMIT = 3600.0
ADVANCE_STEP = 10.0

T = TypeVar("T")


def low_pod(i: int) -> Pod:
    return (
        make_pod(f"low-{i}", NAMESPACE)
        .req(cpu=f"{LOW_REQUEST[0]}m", memory="500Mi")
        .priority(LOW_PRIORITY)
        .obj()
    )


def high_pod(i: int) -> Pod:
    return (
        make_pod(f"high-{i}", NAMESPACE)
        .req(cpu=f"{HIGH_REQUEST[0]}m", memory="500Mi")
        .priority(HIGH_PRIORITY)
        .obj()
    )


class Timer:
    """Sums the wall time of the harness calls it wraps."""

    def __init__(self) -> None:
        self.seconds = 0.0

    def __call__(self, fn: Callable[[], T]) -> T:
        start = time.perf_counter()
        try:
            return fn()
        finally:
            self.seconds += time.perf_counter() - start


def run(nodes: int, init_pods: int, pods: int, seed: int) -> tuple[dict[str, float], list[str]]:
    """Returns the measurements and the failed checks (empty when all pass)."""
    h = SchedulerHarness(seed=seed)
    h.add_nodes(*(default_node(i, {"kubernetes.io/hostname": f"node-{i}"}) for i in range(nodes)))
    lows = [low_pod(i) for i in range(init_pods)]
    highs = [high_pod(i) for i in range(pods)]
    requests: dict[str, tuple[int, int]] = {}
    priorities: dict[str, int] = {}
    for pod in lows:
        key = f"{NAMESPACE}/{pod.metadata.name}"
        requests[key], priorities[key] = LOW_REQUEST, LOW_PRIORITY
    high_keys = [f"{NAMESPACE}/{pod.metadata.name}" for pod in highs]
    for key in high_keys:
        requests[key], priorities[key] = HIGH_REQUEST, HIGH_PRIORITY

    # scheduler_perf waits for the init pods to be scheduled before it creates the
    # measured ones.
    h.add_pods(*lows)
    h.run()
    init_bound = sum(1 for pod in lows if h.node_of(f"{NAMESPACE}/{pod.metadata.name}"))
    events_before = len(h.events)
    evicted_before = set(h.evicted)

    timer = Timer()
    timer(lambda: h.add_pods(*highs))
    timer(h.run)
    virtual = 0.0
    while virtual < VIRTUAL_TIME_LIMIT and any(h.node_of(key) is None for key in high_keys):
        timer(lambda: h.advance(ADVANCE_STEP))
        virtual += ADVANCE_STEP

    bound_high = sum(1 for key in high_keys if h.node_of(key) is not None)
    evicted = [key for key in h.evicted if key not in evicted_before]
    measured_events = h.events[events_before:]
    kinds = Counter(e.kind for e in measured_events)
    high_set = set(high_keys)
    bind_times = [e.time for e in measured_events if e.kind == "bound" and e.pod in high_set]
    # Virtual time from the first measured attempt to the last preemptor's bind.
    span = max(bind_times) - measured_events[0].time if bind_times else virtual
    failures = check(h, nodes, high_keys, requests, priorities, evicted)
    if kinds["evicted"] != len(evicted):
        failures.append(f"{kinds['evicted']} eviction events but {len(evicted)} evicted pods")
    if init_bound != init_pods:
        failures.append(f"only {init_bound} of {init_pods} init pods were bound")
    return {
        "bound": bound_high,
        "seconds": timer.seconds,
        "rate": bound_high / timer.seconds if timer.seconds else 0.0,
        "evictions": len(evicted),
        "unschedulable_events": kinds["unschedulable"],
        "virtual": span,
        "init_bound": init_bound,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }, failures


def check(
    h: SchedulerHarness,
    nodes: int,
    high_keys: list[str],
    requests: dict[str, tuple[int, int]],
    priorities: dict[str, int],
    evicted: list[str],
) -> list[str]:
    failures = []
    pending = [key for key in high_keys if h.node_of(key) is None]
    if pending:
        failures.append(f"{len(pending)} high-priority pods not bound, e.g. {pending[:3]}")
    # Recount every node from the pods the harness reports bound, independently of the
    # scheduler's own accounting.
    cpu: Counter[str] = Counter()
    memory: Counter[str] = Counter()
    count: Counter[str] = Counter()
    for key, (milli, mem) in requests.items():
        node = h.node_of(key)
        if node is None:
            continue
        if key in h.evicted:
            failures.append(f"{key} was evicted but is still reported bound to {node}")
        cpu[node] += milli
        memory[node] += mem
        count[node] += 1
    over = [
        node
        for node in count
        if cpu[node] > NODE_CPU_MILLI or memory[node] > NODE_MEMORY or count[node] > NODE_PODS
    ]
    if over:
        node = over[0]
        failures.append(
            f"{len(over)} nodes overcommitted, e.g. {node}: {cpu[node]}m cpu, "
            f"{memory[node]} bytes memory, {count[node]} pods"
        )
    unknown = sorted(set(count) - {f"node-{i}" for i in range(nodes)})
    if unknown:
        failures.append(f"pods bound to nodes that do not exist: {unknown[:3]}")
    wrong = [key for key in evicted if priorities.get(key, HIGH_PRIORITY) >= HIGH_PRIORITY]
    if wrong:
        failures.append(
            f"{len(wrong)} evictions of pods not lower than the preemptors: {wrong[:3]}"
        )
    return failures


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--init-pods", type=int, default=2000)
    parser.add_argument("--pods", type=int, default=500)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    r, failures = run(args.nodes, args.init_pods, args.pods, args.seed)
    print(
        f"PreemptionBasic {args.nodes} nodes / {args.init_pods} low-priority init pods / "
        f"{args.pods} high-priority measured pods (seed {args.seed})"
    )
    print(f"  init pods bound: {int(r['init_bound'])}")
    print(
        f"  bound {int(r['bound'])} of {args.pods} preemptors in {r['seconds']:.2f} s wall "
        f"({r['virtual']:.1f} s virtual), {int(r['unschedulable_events'])} unschedulable attempts"
    )
    print(f"  evictions: {int(r['evictions'])}")
    print(f"  throughput: {r['rate']:.1f} pods/s")
    print(f"  peak RSS {r['peak_rss_mib']:.0f} MiB")
    if failures:
        for failure in failures:
            print(f"  CHECK FAILED: {failure}")
    else:
        print("  checks: all preemptors bound, no node overcommitted, only lower-priority evicted")
    sys.stdout.flush()
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
