"""Priority preemption inside a queue that borrows, while another queue has pending pods
but is owed nothing (it is at its guarantee).

QueueCapacity's PreFilter refuses a borrowing pod when "queues below their guarantee are
waiting" for the capacity; with nobody owed anything it still refuses whenever the
cluster has no free room ("queue(s)  below their guarantee are waiting for 0 of it").
A PreFilter rejection makes every node unresolvable, so the pod cannot preempt its own
queue's lower-priority pods, and its message names a wait that does not exist.
"""

from __future__ import annotations

from shoal.api.manifests import decode
from shoal.api.queue import Queue
from shoal.testing import SchedulerHarness, make_node, make_pod
from shoal.testing.builders import PodBuilder

GPU = "nvidia.com/gpu"


def queue(name: str, guaranteed: int, maximum: int) -> Queue:
    spec = {"guaranteed": {GPU: guaranteed}, "max": {GPU: maximum}}
    return decode({"metadata": {"name": name}, "spec": spec}, Queue)


def gpu_pod(name: str, q: str, priority: int = 0) -> PodBuilder:
    return make_pod(name).labels({"shoal.dev/queue": q}).req({GPU: 1}, cpu="1").priority(priority)


def test_borrowing_queue_preempts_its_own_lower_priority_pod() -> None:
    h = SchedulerHarness()
    h.add_nodes(*(make_node(f"n{i}").capacity({GPU: 2}, cpu="16", memory="64Gi") for i in range(2)))
    assert h.scheduler.apply_queues([queue("a", 2, 4), queue("b", 1, 4)]) == []
    h.add_pods(*(gpu_pod(f"a-{i}", "a") for i in range(2)))
    h.add_pods(*(gpu_pod(f"b-{i}", "b") for i in range(2)))  # b borrows one GPU
    h.run()
    h.add_pods(gpu_pod("a-late", "a"))  # a is at its guarantee: owed nothing
    h.add_pods(gpu_pod("b-urgent", "b", priority=100))
    placements, messages = h.advance(60)
    assert len(h.evicted) == 1
    (victim, reason) = next(iter(h.evicted.items()))
    assert victim.startswith("default/b-")
    assert reason.startswith("preempted by default/b-urgent (priority 100 > 0)")
    assert placements["default/b-urgent"] is not None
    # a-late (priority 0) has nothing of lower priority to preempt: the filters say it all.
    assert messages["default/a-late"] == (
        "0/2 nodes are available: 2 Insufficient nvidia.com/gpu."
        " preemption: 0/2 nodes are available: 2 No preemption victims found for "
        "incoming pod."
    )
