"""The kube backend reads Kueue's Topology objects (an optional CRD, in the newest of
Kueue's versions that is served): a Kueue gang preferring a rack that no rack holds
lands in one block; a malformed Topology is an InvalidObject naming the field, cleared
when fixed; without the CRD nothing waits for it.

The fabric: blocks b0 (racks r0, r1) and b1 (racks r2, r3), one 2-CPU node per rack;
r1 has 1 CPU free and r3 none. A gang of three 1-CPU pods fits in no rack; the fewest
racks are r0 and r2 (two blocks); the only block holding it is b0."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kubehelpers import async_test, bound_pods, config, events_for, eventually, node, pod
from kubehelpers import backend as running

from shoal.drivers.kube.resources import KUEUE_TOPOLOGIES
from shoal.testing.fake_apiserver import FakeApiServer

GROUP = "kueue.x-k8s.io"
RACKS = {"r0": "b0", "r1": "b0", "r2": "b1", "r3": "b1"}


def topology(name: str, *labels: str) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"levels": [{"nodeLabel": x} for x in labels]}}


def invalid(kube: Any) -> str:
    return next(c.detail for c in kube.readyz() if c.name == "invalidObjects")


def fabric(api: FakeApiServer) -> None:
    for rack, block in RACKS.items():
        labels = {"topo/block": block, "topo/rack": rack}
        api.create("v1", "nodes", node(rack, cpu="2", **labels))
    api.create("v1", "pods", pod("busy-r1", cpu="1", node_name="r1", scheduler="other"))
    api.create("v1", "pods", pod("busy-r3", cpu="2", node_name="r3", scheduler="other"))


def kueue_gang(api: FakeApiServer, size: int = 3) -> None:
    for i in range(size):
        api.create(
            "v1",
            "pods",
            pod(
                f"k{i}",
                cpu="1",
                labels={"kueue.x-k8s.io/pod-group-name": "k"},
                annotations={
                    "kueue.x-k8s.io/pod-group-total-count": str(size),
                    "kueue.x-k8s.io/podset-preferred-topology": "topo/rack",
                },
            ),
        )


def gang_blocks(api: FakeApiServer) -> set[str]:
    placed = {k: v for k, v in bound_pods(api).items() if k.startswith("default/k")}
    assert len(placed) == 3, placed
    return {RACKS[n] for n in placed.values()}


@async_test(timeout=60)
async def test_a_kueue_gang_climbs_the_topology_and_bad_topologies_are_reported(
    tmp_path: Path,
) -> None:
    async with FakeApiServer() as api:
        api.register(GROUP, "v1beta2", "topologies", "Topology", False, status=False)
        fabric(api)
        version = f"{GROUP}/v1beta2"
        api.create(version, "topologies", topology("fabric", "topo/block", "topo/rack"))
        api.create(version, "topologies", topology("a-empty"))
        api.create(version, "topologies", topology("a-twice", "topo/rack", "topo/rack"))
        kueue_gang(api)
        async with running(api, tmp_path) as (kube, _):
            await eventually(lambda: len(bound_pods(api)) == 5, what="the gang bound", timeout=15)
            assert gang_blocks(api) == {"b0"}
            assert kube.informers[KUEUE_TOPOLOGIES.name].served.version == "v1beta2"
            await eventually(lambda: "a-twice" in invalid(kube), what="a-twice named")
            detail = invalid(kube)
            assert f"{KUEUE_TOPOLOGIES.name} a-empty" in detail, detail
            (event,) = events_for(api, "a-twice", "InvalidObject")
            assert "field spec.levels[1].nodeLabel: 'topo/rack' is listed twice" in event["note"]
            assert event["regarding"]["apiVersion"] == version
            # Fixed, and the other deleted: nothing named any more.
            fixed = api.get(GROUP, "topologies", "", "a-twice")
            assert fixed is not None
            fixed["spec"] = topology("a-twice", "topo/rack")["spec"]
            api.update(GROUP, "topologies", fixed)
            api.delete(GROUP, "topologies", "", "a-empty")
            await eventually(lambda: invalid(kube) == "", what="no Topology named any more")
            topologies = kube.scheduler.cluster.kueue_topologies
            assert topologies.problems() == {}
            assert topologies.levels() == {
                "fabric": ("topo/block", "topo/rack"),
                "a-twice": ("topo/rack",),
            }
            # a-twice now lists topo/rack first by name, with nothing above it.
            assert topologies.coarser("topo/rack") == ()


@async_test(timeout=60)
async def test_an_older_kueue_serving_v1beta1_only_is_read_in_v1beta1(tmp_path: Path) -> None:
    async with FakeApiServer() as api:
        api.register(GROUP, "v1beta1", "topologies", "Topology", False, status=False)
        fabric(api)
        api.create(f"{GROUP}/v1beta1", "topologies", topology("fabric", "topo/block", "topo/rack"))
        kueue_gang(api)
        async with running(api, tmp_path) as (kube, _):
            await eventually(lambda: len(bound_pods(api)) == 5, what="the gang bound", timeout=15)
            assert gang_blocks(api) == {"b0"}
            informer = kube.informers[KUEUE_TOPOLOGIES.name]
            assert informer.served.version == "v1beta1" and not informer.absent
            # Watched in that version: a Topology created now is read.
            api.create(f"{GROUP}/v1beta1", "topologies", topology("later", "zone", "topo/rack"))
            await eventually(
                lambda: "later" in kube.scheduler.cluster.kueue_topologies.levels(),
                what="the new Topology read",
            )


@async_test(timeout=60)
async def test_without_the_topology_crd_a_kueue_gang_runs(tmp_path: Path) -> None:
    async with FakeApiServer() as api:
        fabric(api)
        kueue_gang(api)
        async with running(api, tmp_path) as (kube, _):
            await eventually(lambda: len(bound_pods(api)) == 5, what="the gang bound")
            assert gang_blocks(api) == {"b0", "b1"}  # the fewest racks: no block known
            assert kube.informers[KUEUE_TOPOLOGIES.name].absent


@async_test(timeout=60)
async def test_a_snapshot_carries_the_topologies_and_the_simulator_climbs_them(
    tmp_path: Path,
) -> None:
    import asyncio

    from shoal.commands.snapshot import read_documents
    from shoal.sim import SimOptions, simulate
    from shoal.sim.scenario import load_scenario

    async with FakeApiServer() as api:
        api.register(GROUP, "v1beta1", "topologies", "Topology", False, status=False)
        fabric(api)
        api.create(f"{GROUP}/v1beta1", "topologies", topology("fabric", "topo/block", "topo/rack"))
        kueue_gang(api)
        kubeconfig = api.kubeconfig(tmp_path / "kubeconfig")
        documents = await asyncio.to_thread(read_documents, kubeconfig, None)
    (written,) = [d for d in documents if d.get("kind") == "Topology"]
    assert written["apiVersion"] == f"{GROUP}/v1beta1"
    assert written["spec"] == topology("fabric", "topo/block", "topo/rack")["spec"]
    sc = load_scenario([], documents=[("cluster", documents)])
    assert not sc.errors, sc.errors
    assert [t.metadata.name for t in sc.kueue_topologies] == ["fabric"]
    result = simulate(sc, SimOptions(config=config()))
    placed = {r.name: r.node for r in result.records if r.name.startswith("k")}
    assert {RACKS[n] for n in placed.values() if n} == {"b0"} and all(placed.values())


@async_test(timeout=60)
async def test_a_kueue_upgrade_that_stops_serving_the_version_read_is_followed(
    tmp_path: Path,
) -> None:
    async with FakeApiServer() as api:
        api.register(GROUP, "v1beta1", "topologies", "Topology", False, status=False)
        api.create(f"{GROUP}/v1beta1", "topologies", topology("fabric", "topo/block", "topo/rack"))
        api.create("v1", "nodes", node("n0", cpu="1"))
        async with running(api, tmp_path) as (kube, _):
            informer = kube.informers[KUEUE_TOPOLOGIES.name]
            topologies = kube.scheduler.cluster.kueue_topologies
            await eventually(lambda: "fabric" in topologies.levels(), what="read in v1beta1")
            assert informer.served.version == "v1beta1"
            # Kueue upgraded: v1beta2 only (the objects are kept); the watch of v1beta1
            # ends (404 when resumed) and the relist finds v1beta2.
            api.register(GROUP, "v1beta2", "topologies", "Topology", False, status=False)
            api.drop_watches()  # as the API server ends them when a CRD's versions change
            api.create(f"{GROUP}/v1beta2", "topologies", topology("later", "zone", "topo/rack"))
            await eventually(
                lambda: informer.served.version == "v1beta2" and "later" in topologies.levels(),
                what="read in v1beta2",
                timeout=20,
            )
            assert "fabric" in topologies.levels() and not informer.down
