"""Attempts that fail: the cost of telling a pod why it cannot run, in memory.

Two shapes on default nodes (4 cpu / 32Gi / 110 pods):

* `--shape no-victims` (default): the nodes are filled to 3.6 of 4 cpu by init pods of
  priority 0, then measured pods of the same priority ask 1 cpu. Each fits nowhere and
  has nothing of lower priority to take: every attempt runs the filters, then
  DefaultPreemption's PostFilter, which says node by node why preemption cannot help.
* `--shape futile`: every node runs a priority-100 pod of 2 cpu and a priority-0 pod of
  1 cpu; measured pods of priority 10 ask 3 cpu. Each may take the priority-0 pods, but
  taking them never makes room: the victim search fails everywhere, and the message
  says why on each node (kube's SelectVictimsOnNode verdicts).

kube-scheduler's scheduler_perf has such pending pods in its Unschedulable workloads;
this measures the attempts alone. pods/s is failed attempts per second of wall time
inside the scheduler (each measured pod's first attempt: nothing happens after it that
would retry one). It checks that no measured pod was bound and that every one has a
message; exits 1 otherwise.
  python bench/unschedulable.py [--shape no-victims|futile] [--nodes 5000] [--pods 2000]
"""

from __future__ import annotations

import argparse
import sys
import time

from shapes import default_node

from shoal.api.objects import Pod
from shoal.testing.builders import make_pod
from shoal.testing.harness import SchedulerHarness

NAMESPACE = "sched-test"


def running_pods(shape: str, nodes: int) -> list[Pod]:
    if shape == "no-victims":
        return [
            make_pod(f"init-{i}", NAMESPACE).req(cpu="900m", memory="500Mi").obj()
            for i in range(4 * nodes)
        ]
    pods = []
    for i in range(nodes):
        for name, cpu, priority in (("high", "2", 100), ("low", "1", 0)):
            pod = make_pod(f"{name}-{i}", NAMESPACE).req(cpu=cpu, memory="500Mi")
            pods.append(pod.priority(priority).node(f"node-{i}").obj())
    return pods


def measured_pod(shape: str, i: int) -> Pod:
    if shape == "no-victims":
        return make_pod(f"big-{i}", NAMESPACE).req(cpu="1", memory="500Mi").obj()
    return make_pod(f"big-{i}", NAMESPACE).req(cpu="3", memory="500Mi").priority(10).obj()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--shape", choices=("no-victims", "futile"), default="no-victims")
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=2000)
    args = parser.parse_args()
    h = SchedulerHarness(seed=0)
    h.add_nodes(
        *(default_node(i, {"kubernetes.io/hostname": f"node-{i}"}) for i in range(args.nodes))
    )
    h.add_pods(*running_pods(args.shape, args.nodes))
    h.run()
    measured = [measured_pod(args.shape, i) for i in range(args.pods)]
    keys = [f"{NAMESPACE}/{pod.metadata.name}" for pod in measured]
    events_before = len(h.events)
    start = time.perf_counter()
    h.add_pods(*measured)
    messages = h.run().messages
    seconds = time.perf_counter() - start
    attempts = sum(1 for e in h.events[events_before:] if e.kind == "unschedulable")
    print(f"Unschedulable ({args.shape}) {args.nodes} nodes / {args.pods} pods that fit nowhere")
    print(f"  {attempts} failed attempts in {seconds:.2f} s wall")
    print(f"  failed attempts: {attempts / seconds:.1f} pods/s")
    print(f"  e.g. {messages.get(keys[0], '')[:200]}")
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
