"""Network topology from Volcano HyperNodes and Kueue's topology annotations.

The fabric: block `b0` (tier 3) over spines `s0`, `s1` (tier 2), each over two leaves
(tier 1) of four 4-GPU nodes. Every selector kind is used: leaf l0 by exact names, l1
and l3 by regexes, l2 by a label selector; the spines name their leaves exactly, the
block by a regex over HyperNode names. No node carries a topology label: the levels
come from the HyperNodes alone."""

from __future__ import annotations

import json
from typing import Any

import pytest

from shoal.api.hypernode import (
    KUEUE_PREFERRED,
    KUEUE_REQUIRED,
    KUEUE_UNCONSTRAINED,
    HyperNode,
    tier_key,
)
from shoal.api.manifests import decode
from shoal.api.objects import ObjectMeta
from shoal.api.podgroup import (
    SUB_GROUP_LABEL,
    SUB_GROUPS,
    TOPOLOGY_PREFERRED,
    TOPOLOGY_REQUIRED,
    VolcanoNetworkTopology,
    VolcanoPodGroup,
    VolcanoPodGroupSpec,
)
from shoal.testing import SchedulerHarness, make_node, make_pod

GPU = "nvidia.com/gpu"
LEAVES = {"l0": "s0", "l1": "s0", "l2": "s1", "l3": "s1"}


def member(kind: str, **selector: Any) -> dict[str, Any]:
    return {"type": kind, "selector": selector}


def hypernode(name: str, tier: int | str, *members: dict[str, Any]) -> HyperNode:
    return decode(
        {
            "apiVersion": "topology.volcano.sh/v1alpha1",
            "kind": "HyperNode",
            "metadata": {"name": name},
            "spec": {"tier": tier, "members": list(members)},
        },
        HyperNode,
    )


def fabric_objects() -> list[HyperNode]:
    return [
        hypernode("l0", 1, *(member("Node", exactMatch={"name": f"l0-n{i}"}) for i in range(4))),
        hypernode("l1", 1, member("Node", regexMatch={"pattern": "^l1-"})),
        hypernode("l2", 1, member("Node", labelMatch={"matchLabels": {"rack": "r2"}})),
        hypernode("l3", 1, member("Node", regexMatch={"pattern": "^l3-n[0-9]$"})),
        hypernode(
            "s0",
            2,
            member("HyperNode", exactMatch={"name": "l0"}),
            member("HyperNode", exactMatch={"name": "l1"}),
        ),
        hypernode(
            "s1",
            2,
            member("HyperNode", exactMatch={"name": "l2"}),
            member("HyperNode", exactMatch={"name": "l3"}),
        ),
        hypernode("b0", 3, member("HyperNode", regexMatch={"pattern": "^s[0-9]$"})),
    ]


def fabric(h: SchedulerHarness, hypernodes: bool = True) -> None:
    for leaf in LEAVES:
        for i in range(4):
            node = make_node(f"{leaf}-n{i}").capacity({GPU: 4}, cpu="64", memory="256Gi")
            if leaf == "l2":
                node = node.labels({"rack": "r2"})
            h.add_nodes(node)
    if hypernodes:
        for obj in fabric_objects():
            h.scheduler.upsert_hypernode(obj)
        assert h.scheduler.hypernode_problems() == {}


def volcano_gang(
    h: SchedulerHarness, name: str, size: int, topology: dict[str, Any] | None = None
) -> list[str]:
    spec = VolcanoPodGroupSpec(
        min_member=size,
        network_topology=VolcanoNetworkTopology(**topology) if topology is not None else None,
    )
    h.scheduler.add_pod_group(
        VolcanoPodGroup(metadata=ObjectMeta(name=name, namespace="ml"), spec=spec)
    )
    pods = [
        make_pod(f"{name}-{i}")
        .namespace("ml")
        .annotations({"scheduling.k8s.io/group-name": name})
        .req({GPU: 1}, cpu="1")
        for i in range(size)
    ]
    h.add_pods(*pods)
    return [f"ml/{name}-{i}" for i in range(size)]


def leaf(node: str | None) -> str:
    assert node is not None
    return node.split("-")[0]


def hard(tier: int) -> dict[str, Any]:
    return {"mode": "hard", "highest_tier_allowed": tier}


def test_the_fabric_resolves_every_selector_kind() -> None:
    h = SchedulerHarness()
    fabric(h)
    topo = h.scheduler.cluster.hypernodes
    assert topo.tiers() == (1, 2, 3)
    for name in LEAVES:
        assert sorted(topo.nodes_in(name)) == [f"{name}-n{i}" for i in range(4)]
    assert sorted(topo.nodes_in("s1")) == sorted(topo.nodes_in("l2") + topo.nodes_in("l3"))
    assert len(topo.nodes_in("b0")) == 16


def test_hard_tier_2_gang_lands_in_one_leaf_when_it_fits() -> None:
    h = SchedulerHarness()
    fabric(h)
    # l0 has half its GPUs taken: the 12-member gang fits a whole leaf elsewhere.
    for i in range(4):
        h.add_pods(make_pod(f"busy-{i}").req({GPU: 2}).node(f"l0-n{i}"))
    pods = volcano_gang(h, "train", 12, hard(2))
    h.advance(5)
    nodes = [h.node_of(p) for p in pods]
    assert all(nodes), [h.message(p) for p in pods]
    assert len({leaf(n) for n in nodes}) == 1, nodes
    assert leaf(nodes[0]) != "l0"


def test_hard_tier_2_gang_too_big_for_a_leaf_stays_in_one_spine() -> None:
    h = SchedulerHarness()
    fabric(h)
    pods = volcano_gang(h, "train", 24, hard(2))
    h.advance(5)
    nodes = [h.node_of(p) for p in pods]
    assert all(nodes), [h.message(p) for p in pods]
    assert len({LEAVES[leaf(n)] for n in nodes}) == 1, nodes  # one spine
    assert len({leaf(n) for n in nodes}) == 2  # its two leaves, no more


def test_without_hypernodes_a_hard_gang_waits() -> None:
    # The placement above is the HyperNodes' doing: on the same nodes without them,
    # Volcano's networkTopology finds no HyperNode of tier <= 2 and the gang waits.
    h = SchedulerHarness()
    fabric(h, hypernodes=False)
    pods = volcano_gang(h, "train", 24, hard(2))
    h.advance(5)
    assert not any(h.node_of(p) for p in pods)
    assert "no node in a HyperNode of tier <= 2 can hold a member" in h.message(pods[0])


def test_a_gang_too_big_for_tier_2_waits_naming_the_tier_and_fits_tier_3() -> None:
    h = SchedulerHarness()
    fabric(h)
    pods = volcano_gang(h, "big", 40, hard(2))
    h.advance(5)
    assert not any(h.node_of(p) for p in pods)
    message = h.message(pods[0])
    assert (
        "gang ml/big: no single HyperNode of tier <= 2 can hold 40 members "
        "(the largest, s0, holds 32)" in message
    ), message
    assert "ml/big" in h.scheduler.gangs.groups["ml/big"].reason
    # Allowed up to the block (tier 3), it fits.
    h2 = SchedulerHarness()
    fabric(h2)
    pods = volcano_gang(h2, "big", 40, hard(3))
    h2.advance(5)
    assert all(h2.node_of(p) for p in pods), h2.message(pods[0])


def test_highest_tier_allowed_defaults_to_1() -> None:
    h = SchedulerHarness()
    fabric(h)
    pods = volcano_gang(h, "small", 16, {"mode": "hard"})
    h.advance(5)
    nodes = [h.node_of(p) for p in pods]
    assert all(nodes) and len({leaf(n) for n in nodes}) == 1
    h2 = SchedulerHarness()
    fabric(h2)
    pods = volcano_gang(h2, "small", 17, {"mode": "hard"})
    h2.advance(5)
    assert not any(h2.node_of(p) for p in pods)
    assert "no single HyperNode of tier <= 1 can hold 17 members" in h2.message(pods[0])


@pytest.mark.parametrize("size, spines, leaves", [(12, 1, 1), (24, 1, 2), (40, 2, None)])
def test_soft_mode_prefers_the_lowest_tier_and_never_blocks(
    size: int, spines: int, leaves: int | None
) -> None:
    # One leaf, else one spine (two leaves), else the block (the usual scores choose
    # the nodes inside it).
    h = SchedulerHarness()
    fabric(h)
    pods = volcano_gang(h, "soft", size, {"mode": "soft"})
    h.advance(5)
    nodes = [h.node_of(p) for p in pods]
    assert all(nodes), h.message(pods[0])
    assert len({LEAVES[leaf(n)] for n in nodes}) == spines
    if leaves is not None:
        assert len({leaf(n) for n in nodes}) == leaves


def test_soft_mode_places_a_gang_larger_than_the_whole_fabric_allows() -> None:
    # 8 nodes outside every HyperNode: a soft gang of 70 uses them too.
    h = SchedulerHarness()
    fabric(h)
    for i in range(2):
        h.add_nodes(make_node(f"loose-{i}").capacity({GPU: 4}, cpu="64", memory="256Gi"))
    pods = volcano_gang(h, "huge", 70, {"mode": "soft"})
    h.advance(5)
    assert all(h.node_of(p) for p in pods), h.message(pods[0])


def test_highest_tier_name_names_the_tier() -> None:
    h = SchedulerHarness()
    fabric(h)
    spines = [o for o in fabric_objects() if o.metadata.name.startswith("s")]
    for obj in spines:
        obj.spec.tier_name = "spine"
        h.scheduler.upsert_hypernode(obj)
    pods = volcano_gang(h, "named", 24, {"mode": "hard", "highest_tier_name": "spine"})
    pods2 = volcano_gang(h, "unknown", 2, {"mode": "hard", "highest_tier_name": "pod"})
    h.advance(5)
    nodes = [h.node_of(p) for p in pods]
    assert all(nodes) and len({LEAVES[leaf(n)] for n in nodes}) == 1
    assert not any(h.node_of(p) for p in pods2)
    assert "highestTierName 'pod': no HyperNode has that spec.tierName" in h.message(pods2[0])


def test_hypernode_tiers_are_not_node_labels() -> None:
    h = SchedulerHarness()
    fabric(h)
    h.add_pods(make_pod("picky").node_selector({tier_key(1): "l0"}))
    h.advance(1)
    assert h.node_of("default/picky") is None
    # ...but the tier can be named as a level in Shoal's own annotations.
    pods = [
        make_pod(f"w-{i}")
        .labels({"pod-group.scheduling.sigs.k8s.io/name": "w"})
        .labels({"pod-group.scheduling.sigs.k8s.io/min-available": "3"})
        .annotations({TOPOLOGY_REQUIRED: tier_key(1)})
        .req({GPU: 4})
        for i in range(3)
    ]
    h.add_pods(*pods)
    h.advance(5)
    nodes = [h.node_of(f"default/w-{i}") for i in range(3)]
    assert all(nodes) and len({leaf(n) for n in nodes}) == 1


def test_nodes_joining_and_leaving_follow_their_hypernodes() -> None:
    h = SchedulerHarness()
    fabric(h)
    topo = h.scheduler.cluster.hypernodes
    assert topo.column(1, 16).tolist()  # columns built
    h.add_nodes(make_node("l1-n9").capacity({GPU: 4}, cpu="64", memory="256Gi"))  # regex
    h.add_nodes(
        make_node("extra").capacity({GPU: 4}, cpu="64", memory="256Gi").labels({"rack": "r2"})
    )
    assert "l1-n9" in topo.nodes_in("l1") and "l1-n9" in topo.nodes_in("s0")
    assert "extra" in topo.nodes_in("l2") and "extra" in topo.nodes_in("b0")
    h.update_node(make_node("extra").capacity({GPU: 4}, cpu="64", memory="256Gi"))  # unlabelled
    assert "extra" not in topo.nodes_in("l2") and "extra" not in topo.nodes_in("b0")
    h.delete_node("l0-n0")  # the last row moves into its place
    assert sorted(topo.nodes_in("l0")) == ["l0-n1", "l0-n2", "l0-n3"]
    assert "l1-n9" in topo.nodes_in("l1")
    # A 20-member gang now fits spine s0 (l0 3 nodes, l1 5 nodes = 32 GPUs).
    pods = volcano_gang(h, "grown", 20, hard(2))
    h.advance(5)
    nodes = [h.node_of(p) for p in pods]
    assert all(nodes) and {LEAVES[leaf(n)] for n in nodes} == {"s0"}


def test_a_hypernode_change_moves_its_nodes() -> None:
    h = SchedulerHarness()
    fabric(h)
    topo = h.scheduler.cluster.hypernodes
    assert len(topo.nodes_in("s0")) == 8
    h.scheduler.upsert_hypernode(
        hypernode("s0", 2, *(member("HyperNode", exactMatch={"name": n}) for n in LEAVES))
    )
    h.scheduler.upsert_hypernode(hypernode("s1", 2))
    assert len(topo.nodes_in("s0")) == 16 and topo.nodes_in("s1") == []
    h.scheduler.delete_hypernode("l3")
    assert len(topo.nodes_in("s0")) == 12 and len(topo.nodes_in("b0")) == 12


def test_malformed_hypernodes_are_reported_and_skipped() -> None:
    h = SchedulerHarness()
    fabric(h)
    s = h.scheduler

    def problems_after(obj: HyperNode) -> dict[str, str]:
        s.upsert_hypernode(obj)
        return s.hypernode_problems()

    problems = problems_after(
        hypernode("bad-regex", 1, member("Node", regexMatch={"pattern": "(["}))
    )
    assert problems["bad-regex"].startswith(
        "HyperNode bad-regex: field spec.members[0].selector.regexMatch.pattern: '([' is not a "
        "valid regex"
    )
    s.upsert_hypernode(hypernode("loop-a", 4, member("HyperNode", exactMatch={"name": "loop-b"})))
    problems = problems_after(
        hypernode("loop-b", 5, member("HyperNode", exactMatch={"name": "loop-a"}))
    )
    assert "loop-a -> loop-b -> loop-a" in problems["loop-a"]
    assert "field spec.members[0].selector.exactMatch.name" in problems["loop-b"]
    problems = problems_after(
        hypernode("upside-down", 1, member("HyperNode", exactMatch={"name": "s0"}))
    )
    assert problems["upside-down"] == (
        "HyperNode upside-down: field spec.members[0].selector.exactMatch.name: member "
        "HyperNode s0 has tier 2, not lower than this one's tier 1; the HyperNode is skipped"
    )
    problems = problems_after(
        hypernode("labels", 2, member("HyperNode", labelMatch={"matchLabels": {"a": "b"}}))
    )
    assert "spec.members[0].selector.labelMatch: selects nodes only" in problems["labels"]
    problems = problems_after(hypernode("tierless", "high"))
    assert (
        "HyperNode tierless: field spec.tier: 'high' is not an integer tier" in problems["tierless"]
    )
    problems = problems_after(
        hypernode("two", 1, member("Node", exactMatch={"name": "x"}, regexMatch={"pattern": "x"}))
    )
    assert "needs exactly one of exactMatch, regexMatch and labelMatch" in problems["two"]
    # The rest of the fabric still works: the skipped ones hold nothing.
    topo = s.cluster.hypernodes
    assert topo.tiers() == (1, 2, 3) and len(topo.nodes_in("b0")) == 16
    assert topo.nodes_in("loop-a") == [] and topo.nodes_in("upside-down") == []
    pods = volcano_gang(h, "ok", 24, hard(2))
    h.advance(5)
    assert all(h.node_of(p) for p in pods)
    # Fixed: no longer reported.
    assert "loop-a" not in problems_after(hypernode("loop-b", 3))


def test_a_replacement_member_stays_in_its_gangs_hypernode() -> None:
    h = SchedulerHarness()
    fabric(h)
    pods = volcano_gang(h, "train", 4, hard(1))
    h.advance(5)
    nodes = {h.node_of(p) for p in pods}
    (home,) = {leaf(n) for n in nodes}
    h.delete_pod(pods[0])
    # Its leaf fills up meanwhile (every node's cpu); the other leaves are empty.
    for i in range(4):
        node = f"{home}-n{i}"
        used = len(h.pods_on(node))
        h.add_pods(make_pod(f"squat-{i}").req(cpu=str(64 - used)).node(node))
    h.add_pods(
        make_pod("train-0-new")
        .namespace("ml")
        .annotations({"scheduling.k8s.io/group-name": "train"})
        .req({GPU: 1}, cpu="1")
    )
    h.advance(5)
    assert h.node_of("ml/train-0-new") is None
    assert f"HyperNode {home}" in h.message("ml/train-0-new")


def test_sub_groups_can_name_hypernode_tiers() -> None:
    h = SchedulerHarness()
    fabric(h)
    role = {"minMember": 8, "topologyRequired": tier_key(1)}
    h.scheduler.add_pod_group(
        VolcanoPodGroup(
            metadata=ObjectMeta(
                name="pipe",
                namespace="ml",
                annotations={SUB_GROUPS: json.dumps({"a": role, "b": role})},
            ),
            spec=VolcanoPodGroupSpec(
                min_member=16, network_topology=VolcanoNetworkTopology(highest_tier_allowed=2)
            ),
        )
    )
    h.add_pods(
        *(
            make_pod(f"{role}-{i}")
            .namespace("ml")
            .annotations({"scheduling.k8s.io/group-name": "pipe"})
            .labels({SUB_GROUP_LABEL: role})
            .req({GPU: 2}, cpu="1")
            for role in "ab"
            for i in range(8)
        )
    )
    h.advance(5)
    placed = {role: {leaf(h.node_of(f"ml/{role}-{i}")) for i in range(8)} for role in "ab"}
    assert all(len(leaves) == 1 for leaves in placed.values()), placed
    assert placed["a"] != placed["b"]
    assert {LEAVES[next(iter(v))] for v in placed.values()} == {"s0"} or {
        LEAVES[next(iter(v))] for v in placed.values()
    } == {"s1"}


# ---- Kueue ---------------------------------------------------------------------------


def labelled_fabric(h: SchedulerHarness) -> None:
    """The same nodes, with the levels as node labels (what Kueue's Topology names)."""
    for name, spine in LEAVES.items():
        for i in range(4):
            h.add_nodes(
                make_node(f"{name}-n{i}")
                .capacity({GPU: 4}, cpu="64", memory="256Gi")
                .labels({"topo/leaf": name, "topo/spine": spine})
            )
    h.add_pods(make_pod("busy").req({GPU: 3}).node("l2-n0"))


def kueue_gang(h: SchedulerHarness, size: int, annotations: dict[str, str]) -> list[str]:
    h.add_pods(
        *(
            make_pod(f"k-{i}")
            .namespace("ml")
            .labels(
                {
                    "kueue.x-k8s.io/pod-group-name": "k",
                    "kueue.x-k8s.io/pod-group-total-count": str(size),
                }
            )
            .annotations(annotations)
            .req({GPU: 1}, cpu="1")
            for i in range(size)
        )
    )
    return [f"ml/k-{i}" for i in range(size)]


@pytest.mark.parametrize(
    "kueue, shoal",
    [
        ({KUEUE_REQUIRED: "topo/spine"}, {TOPOLOGY_REQUIRED: "topo/spine"}),
        ({KUEUE_PREFERRED: "topo/leaf"}, {TOPOLOGY_PREFERRED: "topo/leaf"}),
        ({KUEUE_REQUIRED: "topo/leaf"}, {TOPOLOGY_REQUIRED: "topo/leaf"}),
        ({KUEUE_UNCONSTRAINED: "true"}, {}),
    ],
)
@pytest.mark.parametrize("size", [6, 20, 40])
def test_kueue_annotations_place_as_the_equivalent_shoal_annotations(
    kueue: dict[str, str], shoal: dict[str, str], size: int
) -> None:
    placements = []
    messages = []
    for asked in (kueue, shoal):
        h = SchedulerHarness()
        labelled_fabric(h)
        pods = kueue_gang(h, size, asked)
        h.advance(5)
        placements.append([h.node_of(p) for p in pods])
        messages.append(h.message(pods[0]))
    assert placements[0] == placements[1]
    assert messages[0] == messages[1]


def test_kueue_required_topology_keeps_the_gang_in_one_spine() -> None:
    h = SchedulerHarness()
    labelled_fabric(h)
    pods = kueue_gang(h, 20, {KUEUE_REQUIRED: "topo/spine"})
    h.advance(5)
    nodes = [h.node_of(p) for p in pods]
    assert all(nodes) and len({LEAVES[leaf(n)] for n in nodes}) == 1
    h2 = SchedulerHarness()
    labelled_fabric(h2)
    pods = kueue_gang(h2, 40, {KUEUE_REQUIRED: "topo/spine"})
    h2.advance(5)
    assert not any(h2.node_of(p) for p in pods)
    assert "no single topo/spine domain can hold 40 members" in h2.message(pods[0])


def test_members_disagreeing_on_kueue_topology_are_refused_naming_the_pods() -> None:
    h = SchedulerHarness()
    labelled_fabric(h)
    pods = kueue_gang(h, 3, {KUEUE_REQUIRED: "topo/spine"})
    h.add_pods(
        make_pod("k-odd")
        .namespace("ml")
        .labels({"kueue.x-k8s.io/pod-group-name": "k", "kueue.x-k8s.io/pod-group-total-count": "3"})
        .annotations({KUEUE_REQUIRED: "topo/leaf"})
        .req({GPU: 1}, cpu="1")
    )
    h.advance(5)
    assert not any(h.node_of(p) for p in [*pods, "ml/k-odd"])
    message = h.message("ml/k-0")
    assert message == (
        "pod is gated by Coscheduling: gang ml/k: its members ask for different topologies "
        f"({KUEUE_REQUIRED}, {KUEUE_PREFERRED}, {KUEUE_UNCONSTRAINED}): pod ml/k-0 asks "
        "required topo/spine; pod ml/k-odd asks required topo/leaf; a gang is placed as "
        "one, so give all its pods the same annotations"
    ), message
    assert h.scheduler.gangs.groups["ml/k"].reason in message
    # The odd one goes: the others agree and the gang runs.
    h.delete_pod("ml/k-odd")
    h.advance(5)
    nodes = [h.node_of(p) for p in pods]
    assert all(nodes) and len({LEAVES[leaf(n)] for n in nodes}) == 1
