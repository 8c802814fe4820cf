"""Kubernetes' own gangs (v1.36, GenericWorkload): a pod names a
`scheduling.k8s.io/v1alpha2` PodGroup in `spec.schedulingGroup.podGroupName`; the group's
`schedulingPolicy.gang.minCount` members are placed all-or-nothing, its
`schedulingConstraints.topology` key keeps them in one domain, and a pod whose PodGroup
does not exist yet waits for it."""

from __future__ import annotations

from typing import Any

import pytest

from shoal.api.errors import ManifestError
from shoal.api.manifests import decode, kind_class
from shoal.api.objects import Pod, PodSchedulingGroup
from shoal.api.podgroup import UpstreamPodGroup, group_of
from shoal.testing import SchedulerHarness, make_node, make_pod


def podgroup(name: str, min_count: int, topology: str = "") -> UpstreamPodGroup:
    spec: dict[str, Any] = {"schedulingPolicy": {"gang": {"minCount": min_count}}}
    if topology:
        spec["schedulingConstraints"] = {"topology": [{"key": topology}]}
    doc = {
        "apiVersion": "scheduling.k8s.io/v1alpha2",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "default"},
        "spec": spec,
    }
    assert kind_class(doc) is UpstreamPodGroup
    return decode(doc, UpstreamPodGroup)


def member(name: str, group: str, cpu: str = "1") -> Pod:
    pod = make_pod(name).req(cpu=cpu).obj()
    pod.spec.scheduling_group = PodSchedulingGroup(pod_group_name=group)
    return pod


def test_the_pod_names_its_group_and_the_group_its_minimum() -> None:
    ref = group_of(member("w0", "train"))
    assert ref is not None and (ref.key, ref.min_member, ref.source) == (
        "default/train",
        None,
        "kubernetes",
    )
    assert podgroup("train", 8).min_member == 8


def test_a_gang_of_eight_is_placed_whole_or_not_at_all() -> None:
    h = SchedulerHarness()
    h.add_nodes(*(make_node(f"n{i}").capacity(cpu="1", memory="4Gi") for i in range(6)))
    h.scheduler.add_pod_group(podgroup("train", 8))
    h.add_pods(*(member(f"w{i}", "train") for i in range(8)))
    result = h.advance(5)
    assert not any(result.placements.values())  # room for 6 of 8: nobody
    assert "train" in result.messages["default/w0"]
    h.add_nodes(*(make_node(f"m{i}").capacity(cpu="1", memory="4Gi") for i in range(2)))
    result = h.advance(30)
    assert all(result.placements.values())


def test_the_topology_constraint_keeps_the_gang_in_one_domain() -> None:
    h = SchedulerHarness()
    for rack, count in (("a", 3), ("b", 4)):
        h.add_nodes(
            *(
                make_node(f"{rack}{i}").capacity(cpu="1", memory="4Gi").labels(rack=rack)
                for i in range(count)
            )
        )
    h.scheduler.add_pod_group(podgroup("ring", 4, topology="rack"))
    h.add_pods(*(member(f"r{i}", "ring") for i in range(4)))
    result = h.advance(10)
    nodes = [n for n in result.placements.values() if n]
    assert len(nodes) == 4 and all(n.startswith("b") for n in nodes)


def test_members_wait_for_their_podgroup() -> None:
    h = SchedulerHarness()
    h.add_nodes(make_node("n0").capacity(cpu="4", memory="4Gi"))
    h.add_pods(*(member(f"w{i}", "late") for i in range(2)))
    result = h.advance(5)
    assert not any(result.placements.values())
    h.scheduler.add_pod_group(podgroup("late", 2))
    result = h.advance(5)
    assert all(result.placements.values())


def test_a_policy_with_both_or_neither_is_refused_naming_the_field() -> None:
    doc: dict[str, Any] = {
        "apiVersion": "scheduling.k8s.io/v1alpha2",
        "kind": "PodGroup",
        "metadata": {"name": "bad", "namespace": "default"},
        "spec": {"schedulingPolicy": {"basic": {}, "gang": {"minCount": 2}}},
    }
    with pytest.raises(ManifestError, match="exactly one of basic and gang"):
        decode(doc, UpstreamPodGroup)
    doc["spec"]["schedulingPolicy"] = {"gang": {"minCount": 0}}
    with pytest.raises(ManifestError, match="minCount 0 must be at least 1"):
        decode(doc, UpstreamPodGroup)
