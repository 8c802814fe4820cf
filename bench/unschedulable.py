"""Attempts that fail: the cost of telling a pod why it cannot run, in memory.

A cluster of default nodes (4 cpu / 32Gi / 110 pods) filled to 3.6 of 4 cpu by init pods
of priority 0, then measured pods of the same priority asking 1 cpu: each fits nowhere,
and with nothing of lower priority to take, every attempt runs the filters, then
DefaultPreemption's PostFilter (which says, node by node, why preemption cannot help),
and writes the message. kube-scheduler's scheduler_perf has such pending pods in its
Unschedulable workloads; this measures the attempts alone.

pods/s is failed attempts per second of wall time inside the scheduler (each measured
pod's first attempt: nothing happens after it that would retry one). It checks that no
measured pod was bound and that every one has a message; exits 1 otherwise.
  python bench/unschedulable.py [--nodes 5000] [--init-pods 20000] [--pods 2000]
"""

from __future__ import annotations

import argparse
import sys
import time

from shapes import default_node

from shoal.testing.builders import make_pod
from shoal.testing.harness import SchedulerHarness

NAMESPACE = "sched-test"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--init-pods", type=int, default=20000)
    parser.add_argument("--pods", type=int, default=2000)
    args = parser.parse_args()
    h = SchedulerHarness(seed=0)
    h.add_nodes(
        *(default_node(i, {"kubernetes.io/hostname": f"node-{i}"}) for i in range(args.nodes))
    )
    h.add_pods(
        *(
            make_pod(f"init-{i}", NAMESPACE).req(cpu="900m", memory="500Mi").obj()
            for i in range(args.init_pods)
        )
    )
    h.run()
    measured = [
        make_pod(f"big-{i}", NAMESPACE).req(cpu="1", memory="500Mi").obj() for i in range(args.pods)
    ]
    keys = [f"{NAMESPACE}/{pod.metadata.name}" for pod in measured]
    events_before = len(h.events)
    start = time.perf_counter()
    h.add_pods(*measured)
    messages = h.run().messages
    seconds = time.perf_counter() - start
    attempts = sum(1 for e in h.events[events_before:] if e.kind == "unschedulable")
    print(
        f"Unschedulable {args.nodes} nodes / {args.init_pods} init pods / {args.pods} pods "
        "that fit nowhere"
    )
    print(f"  {attempts} failed attempts in {seconds:.2f} s wall")
    print(f"  failed attempts: {attempts / seconds:.1f} pods/s")
    failures = []
    if any(h.node_of(key) is not None for key in keys):
        failures.append("a measured pod was bound")
    if not all(messages.get(key, "").startswith("0/") for key in keys):
        failures.append("a measured pod has no message saying why it is pending")
    for failure in failures:
        print(f"  CHECK FAILED: {failure}")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
