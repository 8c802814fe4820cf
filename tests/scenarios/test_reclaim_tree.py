"""Reclaim in a queue tree: victims come only from leaves whose every queue (off the
preemptor's path) is above its guarantee.

Team "org" (guarantee 1 GPU) has two leaves: "org-x" (guarantee 0) and "org-y"
(guarantee 1); "solo" is a top-level queue with guarantee 1. On 2 GPUs, org-x and org-y
run one pod each: org borrows one GPU, and it is org-x's (org-y is at its guarantee).
When solo asks for its guaranteed GPU, org-x's pod goes, never org-y's.

Before, the candidate pool held every leaf under an over-guarantee queue, org-y
included; the minimal victim set on the node (the more important org-x pod put back
first) was then org-y's pod, which the budget refused, and solo never got its GPU
(found by tests/tenancy/test_queue_properties.py).
"""

from __future__ import annotations

from shoal.api.manifests import decode
from shoal.api.queue import Queue
from shoal.testing import SchedulerHarness, make_node, make_pod
from shoal.testing.builders import PodBuilder

GPU = "nvidia.com/gpu"


def queue(name: str, guaranteed: int, parent: str = "") -> Queue:
    spec = {"parent": parent, "guaranteed": {GPU: guaranteed}}
    return decode({"metadata": {"name": name}, "spec": spec}, Queue)


def gpu_pod(name: str, q: str) -> PodBuilder:
    return make_pod(name).labels({"shoal.dev/queue": q}).req({GPU: 1}, cpu="1")


def test_reclaim_takes_from_the_leaf_above_its_guarantee_not_its_sibling() -> None:
    config = {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "profiles": [
            {
                "schedulerName": "default-scheduler",
                "pluginConfig": [{"name": "QueueCapacity", "args": {"reclaimDelaySeconds": 0}}],
            }
        ],
    }
    h = SchedulerHarness(config)
    h.add_nodes(make_node("n0").capacity({GPU: 2}, cpu="16", memory="64Gi"))
    queues = [queue("org", 1), queue("org-x", 0, "org"), queue("org-y", 1, "org"), queue("solo", 1)]
    assert h.scheduler.apply_queues(queues) == []
    h.add_pods(gpu_pod("x", "org-x"))  # older, so more important than y for the reprieve
    h.advance(1)
    h.add_pods(gpu_pod("y", "org-y"))
    h.advance(10)
    h.add_pods(gpu_pod("s", "solo"))
    placements, messages = h.advance(60)
    assert h.evicted == {
        "default/x": "reclaimed: queue org-x is above its guarantee and queue solo (below "
        "its guarantee) needs the capacity for pod default/s"
    }
    assert placements == {"default/y": "n0", "default/s": "n0"}, messages


def test_reclaim_makes_room_under_a_parent_max_held_by_a_sibling() -> None:
    # org (max 3) holds team-a (guarantee 1) and team-b (guarantee 1); team-b borrows up
    # to org's max. team-a's pod is refused by org's max, not by node room: the refusal
    # is one removing pods may resolve (QueueCapacity flags it), so reclaim searches
    # every node and takes one of team-b's pods (above its guarantee). Before, a
    # PreFilter refusal left reclaim no candidate node and team-a's guarantee was
    # never met.
    config = {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "profiles": [
            {
                "schedulerName": "default-scheduler",
                "pluginConfig": [{"name": "QueueCapacity", "args": {"reclaimDelaySeconds": 0}}],
            }
        ],
    }
    h = SchedulerHarness(config)
    h.add_nodes(*(make_node(f"n{i}").capacity({GPU: 4}, cpu="16", memory="64Gi") for i in range(2)))
    org = decode({"metadata": {"name": "org"}, "spec": {"max": {GPU: 3}}}, Queue)
    assert (
        h.scheduler.apply_queues([org, queue("team-a", 1, "org"), queue("team-b", 1, "org")]) == []
    )
    h.add_pods(*(gpu_pod(f"b-{i}", "team-b") for i in range(3)))
    h.run()
    h.add_pods(gpu_pod("a", "team-a"))
    placements, messages = h.advance(60)
    assert len(h.evicted) == 1
    (victim, reason) = next(iter(h.evicted.items()))
    assert victim.startswith("default/b-")
    assert reason.startswith("reclaimed: queue team-b is above its guarantee")
    assert placements["default/a"] is not None, messages
