"""The kube backend reads Volcano's HyperNodes (an optional CRD): a Volcano gang with a
hard networkTopology lands in one HyperNode; malformed HyperNodes are InvalidObjects
naming the field (once per problem), cleared when fixed; without the CRD nothing waits
for it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kubehelpers import async_test, bound_pods, events_for, eventually, node, pod
from kubehelpers import backend as running

from shoal.drivers.kube.resources import HYPERNODES, VOLCANO_PODGROUPS
from shoal.testing.fake_apiserver import FakeApiServer

TOPOLOGY = "topology.volcano.sh/v1alpha1"


def hypernode(name: str, tier: int, *members: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"tier": tier, "members": list(members)}}


def exact(kind: str, name: str) -> dict[str, Any]:
    return {"type": kind, "selector": {"exactMatch": {"name": name}}}


def regex(kind: str, pattern: str) -> dict[str, Any]:
    return {"type": kind, "selector": {"regexMatch": {"pattern": pattern}}}


def invalid(kube: Any) -> str:
    return next(c.detail for c in kube.readyz() if c.name == "invalidObjects")


@async_test(timeout=60)
async def test_a_volcano_gang_with_hard_network_topology_lands_in_one_hypernode(
    tmp_path: Path,
) -> None:
    async with FakeApiServer() as api:
        api.register("scheduling.volcano.sh", "v1beta1", "podgroups", "PodGroup", True)
        api.register("topology.volcano.sh", "v1alpha1", "hypernodes", "HyperNode", False)
        for leaf in ("a", "b"):
            for i in range(3):
                api.create("v1", "nodes", node(f"{leaf}{i}", cpu="1"))
        api.create(TOPOLOGY, "hypernodes", hypernode("leaf-a", 1, regex("Node", "^a")))
        api.create(TOPOLOGY, "hypernodes", hypernode("leaf-b", 1, regex("Node", "^b")))
        api.create(
            TOPOLOGY,
            "hypernodes",
            hypernode("spine", 2, exact("HyperNode", "leaf-a"), exact("HyperNode", "leaf-b")),
        )
        # Malformed: a regex that does not compile, and two that list each other.
        api.create(TOPOLOGY, "hypernodes", hypernode("broken", 1, regex("Node", "([")))
        api.create(TOPOLOGY, "hypernodes", hypernode("x", 3, exact("HyperNode", "y")))
        api.create(TOPOLOGY, "hypernodes", hypernode("y", 4, exact("HyperNode", "x")))
        # Leaf b is partly taken: the gang of 3 fits leaf a only.
        api.create("v1", "pods", pod("busy", cpu="1", node_name="b0", scheduler="other"))
        api.create(
            "scheduling.volcano.sh/v1beta1",
            "podgroups",
            {
                "metadata": {"name": "train"},
                "spec": {
                    "minMember": 3,
                    "networkTopology": {"mode": "hard", "highestTierAllowed": 1},
                },
            },
        )
        for i in range(3):
            api.create(
                "v1",
                "pods",
                pod(f"t{i}", cpu="1", annotations={"scheduling.k8s.io/group-name": "train"}),
            )
        async with running(api, tmp_path) as (kube, _):
            await eventually(lambda: len(bound_pods(api)) == 4, what="the gang bound", timeout=15)
            placed = {k: v for k, v in bound_pods(api).items() if "/t" in k}
            assert set(placed.values()) == {"a0", "a1", "a2"}, placed
            await eventually(lambda: "broken" in invalid(kube), what="broken named")
            detail = invalid(kube)
            assert f"{HYPERNODES.name} x" in detail and f"{HYPERNODES.name} y" in detail
            # Events are written after /readyz says it (the event writer's queue).
            await eventually(
                lambda: (
                    events_for(api, "broken", "InvalidObject")
                    and events_for(api, "x", "InvalidObject")
                ),
                what="the InvalidObject events written",
            )
            events = events_for(api, "broken", "InvalidObject")
            assert len(events) == 1
            assert "field spec.members[0].selector.regexMatch.pattern" in events[0]["note"]
            cycle = events_for(api, "x", "InvalidObject")[0]["note"]
            assert "x -> y -> x" in cycle, cycle

            # A status-only update (Volcano counts the nodes) says nothing new.
            raw = api.get("topology.volcano.sh", "hypernodes", "", "broken")
            assert raw is not None
            raw["status"] = {"nodeCount": 0}
            api.update("topology.volcano.sh", "hypernodes", raw)
            # Fixed: y no longer lists x (and sits below it); then broken is deleted.
            fixed = api.get("topology.volcano.sh", "hypernodes", "", "y")
            assert fixed is not None
            fixed["spec"] = {"tier": 2, "members": []}
            api.update("topology.volcano.sh", "hypernodes", fixed)
            api.delete("topology.volcano.sh", "hypernodes", "", "broken")
            await eventually(lambda: invalid(kube) == "", what="no HyperNode named any more")
            assert len(events_for(api, "broken", "InvalidObject")) == 1
            assert kube.scheduler.cluster.hypernodes.problems() == {}
            assert sorted(kube.scheduler.cluster.hypernodes.nodes_in("spine")) == [
                "a0",
                "a1",
                "a2",
                "b0",
                "b1",
                "b2",
            ]


@async_test(timeout=60)
async def test_without_the_hypernode_crd_a_soft_gang_runs(tmp_path: Path) -> None:
    async with FakeApiServer() as api:
        api.register("scheduling.volcano.sh", "v1beta1", "podgroups", "PodGroup", True)
        api.create("v1", "nodes", node("n0", cpu="2"))
        api.create(
            "scheduling.volcano.sh/v1beta1",
            "podgroups",
            {
                "metadata": {"name": "g"},
                "spec": {"minMember": 2, "networkTopology": {"mode": "soft"}},
            },
        )
        for i in range(2):
            api.create(
                "v1",
                "pods",
                pod(f"g{i}", cpu="1", annotations={"scheduling.k8s.io/group-name": "g"}),
            )
        async with running(api, tmp_path) as (kube, _):
            await eventually(lambda: len(bound_pods(api)) == 2, what="the soft gang bound")
            assert kube.informers[HYPERNODES.name].absent
            assert not kube.informers[VOLCANO_PODGROUPS.name].absent
