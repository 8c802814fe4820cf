"""Job-level preemption for a plain gang (no sub-groups) with a required topology.

A high-priority gang of eight, required inside one rack (`shoal.dev/topology-required`,
or the topology key of a `scheduling.k8s.io/v1alpha2` PodGroup), arrives on a cluster of
two racks whose every GPU is held by a low-priority pod. No rack holds it as things are;
with lower-priority pods preempted either would, so the gang preempts: the rack with
the fewest members to make room for, victims for all members in one decision, all
inside that rack, exactly as many as the members need, and the gang then binds whole
there. When even preempting cannot give it one rack (a gang larger than any rack, or
room held by pods of equal or higher priority), nothing is evicted and the message
says so. A gang that fits as things are preempts nothing.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from shoal.api.manifests import decode
from shoal.api.objects import ObjectMeta, PodSchedulingGroup
from shoal.api.podgroup import TOPOLOGY_REQUIRED, PodGroup, PodGroupSpec, UpstreamPodGroup
from shoal.scheduler.gang_cycle import GangCycle
from shoal.testing import SchedulerHarness, make_node, make_pod
from shoal.testing.builders import PodBuilder, label_selector

GPU = "nvidia.com/gpu"
RACK = "topo/rack"
GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
RACKS = ("r0", "r1")


def rack_of(node: str) -> str:
    return node.split("-")[0]


def cluster(per_rack: int = 2, gpus: int = 4) -> SchedulerHarness:
    """Two racks (r0, r1) of `per_rack` nodes of `gpus` GPUs, no pods yet."""
    h = SchedulerHarness()
    for rack in RACKS:
        for i in range(per_rack):
            h.add_nodes(
                make_node(f"{rack}-{i}")
                .capacity({GPU: gpus}, cpu="32", memory="128Gi")
                .labels({RACK: rack})
            )
    return h


def fill(h: SchedulerHarness, node: str, count: int, priority: int, prefix: str = "low") -> None:
    """`count` 1-GPU pods of `priority` bound to `node`."""
    h.add_pods(
        *(
            make_pod(f"{prefix}-{node}-{k}").req({GPU: 1}, cpu="1").priority(priority).node(node)
            for k in range(count)
        )
    )


def full_cluster(per_rack: int = 2, gpus: int = 4) -> SchedulerHarness:
    """Every GPU of both racks held by a 1-GPU pod of priority 0."""
    h = cluster(per_rack, gpus)
    for rack in RACKS:
        for i in range(per_rack):
            fill(h, f"{rack}-{i}", gpus, 0)
    placements, _ = h.run()
    assert all(placements.values())
    return h


def gang(min_member: int = 8, topology: str = RACK) -> PodGroup:
    annotations = {TOPOLOGY_REQUIRED: topology} if topology else {}
    return PodGroup(
        metadata=ObjectMeta(name="train", namespace="ml", annotations=annotations),
        spec=PodGroupSpec(min_member=min_member),
    )


def member(i: int, gpus: int = 1, priority: int = 100) -> PodBuilder:
    return (
        make_pod(f"train-{i}")
        .namespace("ml")
        .labels({GROUP_LABEL: "train"})
        .req({GPU: gpus}, cpu="1")
        .priority(priority)
    )


def gang_nodes(placements: dict[str, str | None]) -> dict[str, str | None]:
    return {k: v for k, v in placements.items() if k.startswith("ml/")}


def gpus_on(h: SchedulerHarness, node: str) -> int:
    return sum(p.requests.get(GPU, 0) for p in h.scheduler.cluster.pods_on(node))


def test_a_gang_required_in_one_rack_preempts_exactly_its_room_inside_one_rack() -> None:
    # Racks of 3 nodes x 4 GPUs (12 GPUs each), all full: eight 1-GPU members need
    # eight victims, all in one rack.
    h = full_cluster(per_rack=3)
    h.scheduler.add_pod_group(gang())
    h.add_pods(*(member(i) for i in range(8)))
    h.run()

    # One decision: exactly eight victims, evicted at the same instant, before any
    # member binds, each naming a member of the gang.
    evictions = [e for e in h.events if e.kind == "evicted"]
    assert len(evictions) == 8 == len(h.evicted)
    assert len({e.time for e in evictions}) == 1
    assert all(
        reason.startswith("preempted by ml/train-") and "(priority 100 > 0)" in reason
        for reason in h.evicted.values()
    )
    events = h.events
    first_bound = next(
        (i for i, e in enumerate(events) if e.kind == "bound" and e.pod.startswith("ml/")),
        len(events),
    )
    assert max(i for i, e in enumerate(events) if e.kind == "evicted") < first_bound
    racks = {rack_of(e.node) for e in evictions}
    assert len(racks) == 1, evictions
    rack = racks.pop()

    placements, messages = h.advance(30)
    nodes = gang_nodes(placements)
    assert len(nodes) == 8 and all(nodes.values()), messages  # bound whole
    assert {rack_of(node or "") for node in nodes.values()} == {rack}
    # Each member landed where a victim left: per node, as many members as victims.
    assert Counter(nodes.values()) == Counter(e.node for e in evictions)
    # Nothing more was evicted; the other rack keeps all its pods; no overcommit.
    assert len(h.evicted) == 8
    other = ({"r0", "r1"} - {rack}).pop()
    assert all(len(h.pods_on(f"{other}-{i}")) == 4 for i in range(3))
    for node in (f"{r}-{i}" for r in RACKS for i in range(3)):
        assert gpus_on(h, node) <= 4, node
    status = h.effects.group_status["ml/train"]
    assert status.phase == "Running"


def test_the_rack_with_the_fewest_victims_is_chosen() -> None:
    # r0: full (8 low pods); r1: 5 low pods, 3 GPUs free. Eight members: r1 needs 5
    # victims, r0 would need 8. r1 is chosen and exactly its 5 pods go.
    h = cluster()
    fill(h, "r0-0", 4, 0)
    fill(h, "r0-1", 4, 0)
    fill(h, "r1-0", 4, 0)
    fill(h, "r1-1", 1, 0)
    h.run()
    h.scheduler.add_pod_group(gang())
    h.add_pods(*(member(i) for i in range(8)))
    h.run()
    evictions = [e for e in h.events if e.kind == "evicted"]
    assert len(evictions) == 5
    assert {rack_of(e.node) for e in evictions} == {"r1"}
    placements, messages = h.advance(30)
    nodes = gang_nodes(placements)
    assert all(nodes.values()), messages
    assert {rack_of(node or "") for node in nodes.values()} == {"r1"}
    assert len(h.evicted) == 5
    assert all(len(h.pods_on(f"r0-{i}")) == 4 for i in range(2))


def test_victims_of_equal_or_higher_priority_are_never_taken() -> None:
    # r0: one node of priority-100 pods (the gang's own priority), one of priority-0;
    # r1: one node of priority-1000 pods, one of priority-0. Six members: preempting
    # can give at most 4 in either rack, so nothing is evicted.
    h = cluster()
    fill(h, "r0-0", 4, 100, prefix="peer")
    fill(h, "r0-1", 4, 0)
    fill(h, "r1-0", 4, 1000, prefix="vip")
    fill(h, "r1-1", 4, 0)
    h.run()
    h.scheduler.add_pod_group(gang(min_member=6))
    h.add_pods(*(member(i) for i in range(6)))
    placements, messages = h.advance(120)
    assert h.evicted == {}
    assert not [e for e in h.events if e.kind == "evicted"]
    assert not any(gang_nodes(placements).values())
    message = messages["ml/train-0"]
    assert message.startswith("gang ml/train: "), message
    assert message.endswith(
        "preempting lower-priority pods would not make room either: the largest "
        "topo/rack domain would hold 4 members"
    ), message

    # With four members, r0's low node (or r1's) is room enough: only priority-0 pods
    # go, never a peer or a vip.
    h2 = cluster()
    fill(h2, "r0-0", 4, 100, prefix="peer")
    fill(h2, "r0-1", 4, 0)
    fill(h2, "r1-0", 4, 1000, prefix="vip")
    fill(h2, "r1-1", 4, 0)
    h2.run()
    h2.scheduler.add_pod_group(gang(min_member=4))
    h2.add_pods(*(member(i) for i in range(4)))
    placements, messages = h2.advance(30)
    assert len(h2.evicted) == 4
    assert all(key.split("/")[1].startswith("low-") for key in h2.evicted), h2.evicted
    nodes = gang_nodes(placements)
    assert all(nodes.values()), messages
    assert len({rack_of(node or "") for node in nodes.values()}) == 1


def test_a_gang_larger_than_any_rack_evicts_nothing_and_says_why() -> None:
    # Ten members need 10 GPUs in one rack; a rack has 8 even if emptied.
    h = full_cluster()
    h.scheduler.add_pod_group(gang(min_member=10))
    h.add_pods(*(member(i) for i in range(10)))
    placements, messages = h.advance(120)
    assert h.evicted == {}
    assert not [e for e in h.events if e.kind == "evicted"]
    assert not any(gang_nodes(placements).values())
    assert all(node for key, node in placements.items() if key.startswith("default/"))
    message = messages["ml/train-0"]
    assert message == (
        "gang ml/train: no node with label topo/rack can hold a member; preempting "
        "lower-priority pods would not make room either: the largest topo/rack domain "
        "would hold 8 members"
    ), message


def test_a_gang_that_fits_in_a_rack_preempts_nothing() -> None:
    # r1 has four free GPUs: a gang of four fits there as things are.
    h = cluster()
    fill(h, "r0-0", 4, 0)
    fill(h, "r0-1", 4, 0)
    fill(h, "r1-0", 4, 0)
    h.run()
    h.scheduler.add_pod_group(gang(min_member=4))
    h.add_pods(*(member(i) for i in range(4)))
    placements, messages = h.advance(30)
    assert h.evicted == {}
    nodes = gang_nodes(placements)
    assert all(node == "r1-1" for node in nodes.values()), messages


def test_a_gang_without_topology_still_preempts_across_racks() -> None:
    # Unchanged: without a required level the victims may be anywhere (here the gang
    # of 12 needs more than a rack, so they cannot all be in one).
    h = full_cluster()
    h.scheduler.add_pod_group(gang(min_member=12, topology=""))
    h.add_pods(*(member(i) for i in range(12)))
    h.run()
    evictions = [e for e in h.events if e.kind == "evicted"]
    assert len(evictions) == 12
    assert {rack_of(e.node) for e in evictions} == {"r0", "r1"}
    placements, messages = h.advance(30)
    assert all(gang_nodes(placements).values()), messages


def upstream_podgroup(name: str, min_count: int, topology: str) -> UpstreamPodGroup:
    spec: dict[str, Any] = {
        "schedulingPolicy": {"gang": {"minCount": min_count}},
        "schedulingConstraints": {"topology": [{"key": topology}]},
    }
    doc = {
        "apiVersion": "scheduling.k8s.io/v1alpha2",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "ml"},
        "spec": spec,
    }
    return decode(doc, UpstreamPodGroup)


def test_a_kubernetes_podgroup_with_a_topology_key_preempts_inside_one_domain() -> None:
    h = full_cluster(per_rack=3)
    h.scheduler.add_pod_group(upstream_podgroup("ring", 8, RACK))
    pods = []
    for i in range(8):
        pod = make_pod(f"ring-{i}").namespace("ml").req({GPU: 1}, cpu="1").priority(100).obj()
        pod.spec.scheduling_group = PodSchedulingGroup(pod_group_name="ring")
        pods.append(pod)
    h.add_pods(*pods)
    h.run()
    evictions = [e for e in h.events if e.kind == "evicted"]
    assert len(evictions) == 8
    assert len({rack_of(e.node) for e in evictions}) == 1
    placements, messages = h.advance(30)
    nodes = gang_nodes(placements)
    assert len(nodes) == 8 and all(nodes.values()), messages
    assert {rack_of(node or "") for node in nodes.values()} == {rack_of(evictions[0].node)}
    assert len(h.evicted) == 8


def test_the_next_rack_is_tried_when_the_victim_search_cannot_make_room_in_the_first() -> None:
    """The estimate counts every lower-priority pod; the search also honours what stays.
    r1 looks best (fewest members to make room for, then the smallest), but a pod of
    priority 1000 there repels the gang's pods from the whole rack (required
    anti-affinity), and no victim search can remove it: r1 gives nothing, r0 is tried
    next, and every victim is in r0."""
    h = cluster()
    fill(h, "r0-0", 4, 0)
    fill(h, "r0-1", 4, 0)
    fill(h, "r1-0", 3, 0)
    fill(h, "r1-1", 1, 0)
    selector = label_selector(expressions=[("team", "In", ["ml"])])
    h.add_pods(
        make_pod("guard")
        .req({GPU: 1}, cpu="1")
        .priority(1000)
        .node("r1-0")
        .pod_anti_affinity(RACK, selector, namespaces=["ml"])
    )
    h.run()
    h.scheduler.add_pod_group(gang(min_member=6))
    h.add_pods(*(member(i).label("team", "ml") for i in range(6)))
    h.run()
    evictions = [e for e in h.events if e.kind == "evicted"]
    assert len(evictions) == 6
    assert {rack_of(e.node) for e in evictions} == {"r0"}
    placements, messages = h.advance(30)
    nodes = gang_nodes(placements)
    assert all(nodes.values()), messages
    assert {rack_of(node or "") for node in nodes.values()} == {"r0"}
    assert len(h.evicted) == 6
    assert placements["default/guard"] == "r1-0"


def test_the_estimate_runs_only_when_no_rack_holds_the_gang(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What preemption could make room for is estimated once, when the gang first finds
    no rack; not for a gang that fits, and not when the members come back once their
    victims are gone: the rack is then judged without the members' own nominations,
    which hold the room made for them against everyone else."""
    calls: list[str] = []
    estimate = GangCycle._preemptible_capacity

    def counted(self: GangCycle, *args: Any) -> Any:
        calls.append(args[3].key)
        return estimate(self, *args)

    monkeypatch.setattr(GangCycle, "_preemptible_capacity", counted)
    h = full_cluster()
    h.scheduler.add_pod_group(gang(min_member=4))
    h.add_pods(*(member(i) for i in range(4)))
    placements, messages = h.advance(30)
    assert all(gang_nodes(placements).values()), messages
    assert len(h.evicted) == 4
    assert calls == ["ml/train"]

    # A second gang that fits in the room left: no estimate at all.
    calls.clear()
    h.delete_pod("default/low-r1-0-0")
    h.delete_pod("default/low-r1-0-1")
    h.scheduler.add_pod_group(
        PodGroup(
            metadata=ObjectMeta(
                name="small", namespace="ml", annotations={TOPOLOGY_REQUIRED: RACK}
            ),
            spec=PodGroupSpec(min_member=2),
        )
    )
    h.add_pods(
        *(
            make_pod(f"small-{i}")
            .namespace("ml")
            .labels({GROUP_LABEL: "small"})
            .req({GPU: 1}, cpu="1")
            .priority(100)
            for i in range(2)
        )
    )
    placements, messages = h.advance(30)
    assert placements["ml/small-0"] == placements["ml/small-1"] == "r1-0", messages
    assert calls == []
    assert len(h.evicted) == 4
