"""Priority preemption inside a queue held at its max.

A pod refused because its queue is at its max (QueueCapacity's PreFilter) may preempt
lower-priority pods of its own queue, as scheduler-plugins' CapacityScheduling does over
its quota and Kueue's `withinClusterQueue: LowerPriority`: the PreFilter's Unschedulable
applies to every node (kube's SetAbsentNodesStatus), and the victim search re-runs it
with the victims gone. The quota the preemptor will use is then held for it, so the
room its victims free is not taken by a lower-priority pod of the queue first.
"""

from __future__ import annotations

from shoal.api.manifests import decode
from shoal.api.queue import Queue
from shoal.testing import SchedulerHarness, make_node, make_pod

GPU = "nvidia.com/gpu"


def capped(name: str, gpus: int) -> Queue:
    return decode({"metadata": {"name": name}, "spec": {"max": {GPU: gpus}}}, Queue)


def pod(name: str, queue: str, priority: int):
    return (
        make_pod(name).labels({"shoal.dev/queue": queue}).req({GPU: 1}, cpu="1").priority(priority)
    )


def cluster() -> SchedulerHarness:
    h = SchedulerHarness(seed=1)
    h.add_nodes(*(make_node(f"n{i}").capacity({GPU: 4}, cpu="16", memory="64Gi") for i in range(2)))
    assert h.scheduler.apply_queues([capped("team", 2), capped("other", 4)]) == []
    return h


def placed(h: SchedulerHarness) -> set[str]:
    return {rec.pod.name for rec in h.scheduler.cluster.placed.values()}


def settle(h: SchedulerHarness, rounds: int = 20) -> None:
    for _ in range(rounds):
        h.run()
        h.advance(3)


def test_a_pod_at_its_queue_max_preempts_one_lower_priority_pod_of_its_own_queue() -> None:
    h = cluster()
    h.add_pods(pod("low-0", "team", 0), pod("low-1", "team", 0))
    # Lower priority still, but in another queue: taking it frees nothing of team's max.
    h.add_pods(pod("other-0", "other", -10), pod("other-1", "other", -10))
    h.run()
    h.advance(5)
    h.add_pods(pod("high", "team", 100))
    settle(h)
    evicted = [e.pod for e in h.effects.evictions]
    assert len(evicted) == 1 and evicted[0] in {"default/low-0", "default/low-1"}
    assert "preempted by default/high (priority 100 > 0)" in h.effects.evictions[0].reason
    assert {"high", "other-0", "other-1"} <= placed(h)


def test_the_quota_freed_for_a_preemptor_is_held_against_lower_priority_pods() -> None:
    h = cluster()
    h.add_pods(pod("low-0", "team", 0), pod("low-1", "team", 0))
    h.run()
    h.advance(5)
    h.add_pods(*(pod(f"wait-{i}", "team", 0) for i in range(3)))
    h.run()
    h.advance(5)  # past their backoff: they retry as soon as quota seems free
    h.add_pods(pod("high", "team", 100))
    said = set()
    for _ in range(20):
        h.run()
        said.add(h.scheduler.explain("default/wait-0"))
        h.advance(1)
    # Once the victim is gone, a waiting pod of the queue is told the room is held.
    assert any("(+1 held for nominated pods of higher or equal priority)" in m for m in said)
    # One eviction: the waiting pods did not take the victim's quota (each would have
    # been preempted in turn, a livelock with a controller re-creating them).
    assert len(h.effects.evictions) == 1
    assert "high" in placed(h)
    assert not {"wait-0", "wait-1", "wait-2"} & placed(h)


def test_pods_of_equal_priority_do_not_preempt_each_other_at_the_max() -> None:
    h = cluster()
    h.add_pods(pod("a", "team", 5), pod("b", "team", 5))
    h.run()
    h.advance(5)
    h.add_pods(pod("c", "team", 5))
    settle(h)
    assert h.effects.evictions == []
    assert placed(h) == {"a", "b"}
    assert "queue team would exceed its max nvidia.com/gpu" in h.scheduler.explain("default/c")
