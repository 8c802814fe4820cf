"""Kueue's Topology objects: a gang whose members ask
`kueue.x-k8s.io/podset-preferred-topology: L` prefers L, then each coarser level a
Topology lists above L (as Kueue's TAS tries them); a required level stays required.

The fabric: blocks b0 and b1 (label `topo/block`), two racks each (`topo/rack`), two
4-GPU nodes per rack (`kubernetes.io/hostname` is the lowest level). Some GPUs are
taken: rack r0 has 8 free, r1 4 (block b0: 12), r2 8 and r3 2 (block b1: 10). A gang of
12 fits in no rack; the fewest racks holding it are r0 and r2, in two blocks; the only
block holding it is b0."""

from __future__ import annotations

from shoal.api.hypernode import KUEUE_PREFERRED, KUEUE_REQUIRED, Topology
from shoal.api.manifests import decode
from shoal.testing import SchedulerHarness, make_node, make_pod

GPU = "nvidia.com/gpu"
HOST = "kubernetes.io/hostname"
BLOCK, RACK = "topo/block", "topo/rack"
RACKS = {"r0": "b0", "r1": "b0", "r2": "b1", "r3": "b1"}
TAKEN = {"r1-n0": 4, "r3-n0": 4, "r3-n1": 2}  # GPUs in use per node


def topology(name: str, *labels: str, version: str = "v1beta2") -> Topology:
    return decode(
        {
            "apiVersion": f"kueue.x-k8s.io/{version}",
            "kind": "Topology",
            "metadata": {"name": name},
            "spec": {"levels": [{"nodeLabel": label} for label in labels]},
        },
        Topology,
    )


def fabric(h: SchedulerHarness) -> None:
    for rack, block in RACKS.items():
        for i in range(2):
            name = f"{rack}-n{i}"
            h.add_nodes(
                make_node(name)
                .capacity({GPU: 4}, cpu="64", memory="256Gi")
                .labels({BLOCK: block, RACK: rack, HOST: name})
            )
    for name, gpus in TAKEN.items():
        h.add_pods(make_pod(f"busy-{name}").req({GPU: gpus}).node(name))


def gang(
    h: SchedulerHarness, size: int, annotations: dict[str, str], only: range | None = None
) -> list[str]:
    """A Kueue pod group of `size` members (the pods of `only`, by default all)."""
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
            for i in only or range(size)
        )
    )
    return [f"ml/k-{i}" for i in range(size)]


def blocks(h: SchedulerHarness, pods: list[str]) -> set[str]:
    nodes = [h.node_of(p) for p in pods]
    assert all(nodes), nodes
    return {RACKS[n.split("-")[0]] for n in nodes if n}


def test_without_a_topology_a_preferred_rack_spreads_over_blocks() -> None:
    """What Shoal did before it read Topologies (and still does without one): the
    fewest racks, r0 and r2, in two blocks."""
    h = SchedulerHarness()
    fabric(h)
    pods = gang(h, 12, {KUEUE_PREFERRED: RACK})
    h.advance(5)
    assert blocks(h, pods) == {"b0", "b1"}


def test_a_preferred_rack_that_no_rack_holds_lands_in_one_block() -> None:
    h = SchedulerHarness()
    fabric(h)
    assert h.scheduler.upsert_kueue_topology(topology("fabric", BLOCK, RACK, HOST)) == ""
    pods = gang(h, 12, {KUEUE_PREFERRED: RACK})
    h.advance(5)
    assert blocks(h, pods) == {"b0"}
    # A gang that fits a rack still gets one rack.
    h2 = SchedulerHarness()
    fabric(h2)
    h2.scheduler.upsert_kueue_topology(topology("fabric", BLOCK, RACK, HOST))
    pods = gang(h2, 6, {KUEUE_PREFERRED: RACK})
    h2.advance(5)
    assert {h2.node_of(p).split("-")[0] for p in pods} in ({"r0"}, {"r2"})  # type: ignore[union-attr]


def test_a_preferred_level_too_big_for_every_block_still_runs() -> None:
    """Kueue admits it over several domains of the highest level: so does Shoal."""
    h = SchedulerHarness()
    fabric(h)
    h.scheduler.upsert_kueue_topology(topology("fabric", BLOCK, RACK, HOST))
    pods = gang(h, 20, {KUEUE_PREFERRED: RACK})
    h.advance(5)
    assert blocks(h, pods) == {"b0", "b1"}


def test_a_required_level_does_not_fall_back() -> None:
    h = SchedulerHarness()
    fabric(h)
    h.scheduler.upsert_kueue_topology(topology("fabric", BLOCK, RACK, HOST))
    pods = gang(h, 12, {KUEUE_REQUIRED: RACK})
    h.advance(5)
    assert not any(h.node_of(p) for p in pods)
    assert "no single topo/rack domain can hold 12 members" in h.message(pods[0])
    group = h.scheduler.gangs.groups["ml/k"]
    topologies = h.scheduler.cluster.kueue_topologies
    assert group.levels(h.scheduler.cluster.hypernodes, topologies).preferred == ()


def test_levels_follow_the_topology_listing_the_label() -> None:
    h = SchedulerHarness()
    fabric(h)
    s = h.scheduler
    s.upsert_kueue_topology(topology("zones", "zone", BLOCK, RACK, HOST))
    s.upsert_kueue_topology(topology("other", "region", RACK))  # first by name: wins
    gang(h, 3, {KUEUE_PREFERRED: RACK})
    group = s.gangs.groups["ml/k"]
    topologies = s.cluster.kueue_topologies
    assert group.levels(s.cluster.hypernodes, topologies).preferred == (RACK, "region")
    s.delete_kueue_topology("other")
    assert group.levels(s.cluster.hypernodes, topologies).preferred == (RACK, BLOCK, "zone")
    # A label no Topology lists: that level alone; the highest level: itself.
    assert topologies.coarser("unlisted") == () and topologies.coarser("zone") == ()


def test_malformed_topologies_are_reported_and_ignored() -> None:
    h = SchedulerHarness()
    fabric(h)
    s = h.scheduler
    empty = s.upsert_kueue_topology(topology("a-empty"))
    assert empty == (
        "Topology a-empty: field spec.levels: lists no levels (give one nodeLabel per level, "
        "highest first); the Topology is skipped"
    )
    twice = s.upsert_kueue_topology(topology("a-twice", "zone", RACK, "zone"))
    assert twice == (
        "Topology a-twice: field spec.levels[2].nodeLabel: 'zone' is listed twice (also "
        "spec.levels[0].nodeLabel); each level is a different node label; the Topology is "
        "skipped"
    )
    blank = s.upsert_kueue_topology(topology("a-blank", "zone", " ", RACK))
    assert blank.startswith("Topology a-blank: field spec.levels[1].nodeLabel: is empty")
    assert s.upsert_kueue_topology(topology("fabric", BLOCK, RACK, HOST)) == ""
    topologies = s.cluster.kueue_topologies
    assert set(topologies.problems()) == {"a-empty", "a-twice", "a-blank"}
    assert topologies.levels() == {"fabric": (BLOCK, RACK, HOST)}
    # The malformed ones (first by name) are ignored: the gang climbs fabric's levels.
    pods = gang(h, 12, {KUEUE_PREFERRED: RACK})
    h.advance(5)
    assert blocks(h, pods) == {"b0"}
    # A malformed change of a good one takes its levels away; fixed, they are back.
    assert s.upsert_kueue_topology(topology("fabric", RACK, RACK)) != ""
    assert topologies.coarser(RACK) == ()
    assert s.upsert_kueue_topology(topology("fabric", BLOCK, RACK)) == ""
    assert "fabric" not in topologies.problems() and topologies.coarser(RACK) == (BLOCK,)


def test_a_topology_created_after_the_pods_applies_when_they_are_next_tried() -> None:
    h = SchedulerHarness()
    fabric(h)
    pods = gang(h, 12, {KUEUE_PREFERRED: RACK}, range(11))[:11]  # 11 of 12: it waits
    h.advance(5)
    assert not any(h.node_of(p) for p in pods)
    h.scheduler.upsert_kueue_topology(topology("fabric", BLOCK, RACK, HOST))
    gang(h, 12, {KUEUE_PREFERRED: RACK}, range(11, 12))
    h.advance(5)
    assert blocks(h, [*pods, "ml/k-11"]) == {"b0"}
