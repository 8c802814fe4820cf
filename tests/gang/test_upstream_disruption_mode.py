"""A Kubernetes PodGroup's `spec.disruptionMode` (KEP-5832, v1.36): `Pod`, the API's
default, lets preemption take its running members one by one like any pods; `PodGroup`
takes all of them together. Gangs of the other APIs keep Shoal's rule: one by one while
minMember stay running, else all together."""

from __future__ import annotations

from typing import Any

from shoal.api.manifests import decode
from shoal.api.objects import Pod, PodSchedulingGroup
from shoal.api.podgroup import UpstreamPodGroup
from shoal.testing import SchedulerHarness, make_node, make_pod


def podgroup(name: str, min_count: int, mode: str = "") -> UpstreamPodGroup:
    spec: dict[str, Any] = {"schedulingPolicy": {"gang": {"minCount": min_count}}}
    if mode:
        spec["disruptionMode"] = mode
    doc = {
        "apiVersion": "scheduling.k8s.io/v1alpha2",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "default"},
        "spec": spec,
    }
    return decode(doc, UpstreamPodGroup)


def member(name: str, node: str) -> Pod:
    pod = make_pod(name).req(cpu="2").priority(0).node(node).obj()
    pod.spec.scheduling_group = PodSchedulingGroup(pod_group_name="train")
    return pod


def _evicted_for_one_urgent_pod(group: UpstreamPodGroup) -> set[str]:
    """Four running members of 2 cpu fill two 4-cpu nodes; an urgent pod needs 2 cpu."""
    h = SchedulerHarness()
    h.add_nodes(*(make_node(n).capacity(cpu="4", memory="16Gi") for n in ("n1", "n2")))
    h.scheduler.add_pod_group(group)
    h.add_pods(*(member(f"w{i}", "n1" if i < 2 else "n2") for i in range(4)))
    h.add_pods(make_pod("urgent").req(cpu="2").priority(100))
    h.advance(30)
    assert h.node_of("default/urgent") is not None
    return {key.partition("/")[2] for key in h.evicted}


def test_pod_mode_takes_one_member_even_below_min_count() -> None:
    assert len(_evicted_for_one_urgent_pod(podgroup("train", 4, "Pod"))) == 1


def test_the_default_is_pod_mode() -> None:
    assert len(_evicted_for_one_urgent_pod(podgroup("train", 4))) == 1


def test_podgroup_mode_takes_every_running_member_together() -> None:
    # minCount 2 would let two members go one by one; PodGroup says all together.
    assert _evicted_for_one_urgent_pod(podgroup("train", 2, "PodGroup")) == {
        "w0",
        "w1",
        "w2",
        "w3",
    }
