"""Kueue's Topology objects on a real kube-apiserver: a minimal CRD for
topology.kueue.x-k8s.io serving v1beta1 and v1beta2 (the storage version, as Kueue 0.16
on), installed here, and a Kueue pod group preferring a rack.

Blocks b0 (racks r0, r1) and b1 (racks r2, r3), one 2-cpu node per rack, labelled with
its block and rack; r1 has 1 cpu taken and r3 both. A gang of three 1-cpu pods fits in
no rack: without a Topology it takes the fewest racks, r0 and r2, in two blocks. A
Topology written in v1beta1 (read by Shoal in v1beta2) lists block above rack: the gang
then lands in b0, the one block holding it. A Topology listing a label twice is an
InvalidObject naming the field."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
import yaml
from apihelpers import Space, space, wait_for
from kubehelpers import async_test

from shoal.drivers.kube.resources import EVENTS, KUEUE_TOPOLOGIES, NODES

TOPOLOGY_CRD = "topologies.kueue.x-k8s.io"
BLOCK, RACK = "shoal.test/block", "shoal.test/rack"
RACKS = {"r0": "b0", "r1": "b0", "r2": "b1", "r3": "b1"}


def _version(name: str, storage: bool) -> dict[str, Any]:
    level = {"type": "object", "properties": {"nodeLabel": {"type": "string"}}}
    spec = {"type": "object", "properties": {"levels": {"type": "array", "items": level}}}
    return {
        "name": name,
        "served": True,
        "storage": storage,
        "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": spec}}},
    }


# The fields Shoal reads (Kueue's own CRD validates them; this one lets bad ones in).
MINIMAL_TOPOLOGY_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": TOPOLOGY_CRD},
    "spec": {
        "group": "kueue.x-k8s.io",
        "names": {
            "kind": "Topology",
            "listKind": "TopologyList",
            "plural": "topologies",
            "singular": "topology",
        },
        "scope": "Cluster",
        "versions": [_version("v1beta1", False), _version("v1beta2", True)],
    },
}


@pytest.fixture(scope="module")
def topology_crd(
    kubectl: Callable[..., str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[None]:
    existed = bool(kubectl("get", "crd", TOPOLOGY_CRD, "--ignore-not-found"))
    path = tmp_path_factory.mktemp("topologies") / "crd.yaml"
    path.write_text(yaml.safe_dump(MINIMAL_TOPOLOGY_CRD))
    kubectl("apply", "-f", str(path))
    kubectl(
        "wait", "--for=condition=Established", f"crd/{TOPOLOGY_CRD}", "--timeout=60s", timeout=90
    )
    try:
        yield
    finally:
        if not existed:
            kubectl(
                "delete",
                "crd",
                TOPOLOGY_CRD,
                "--wait=true",
                "--timeout=60s",
                timeout=90,
                check=False,
            )


async def add_topology(s: Space, name: str, *labels: str) -> str:
    name = f"{s.name}-{name}"
    body = {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "Topology",
        "metadata": {"name": name},
        "spec": {"levels": [{"nodeLabel": label} for label in labels]},
    }
    await s.create("/apis/kueue.x-k8s.io/v1beta1/topologies", body)
    s.cluster_objects.append(KUEUE_TOPOLOGIES.path(name=name))
    return name


async def fabric(s: Space) -> dict[str, str]:
    """Node name -> block."""
    blocks = {}
    for rack, block in RACKS.items():
        name = await s.add_node(rack, cpu="2")
        await s.client.request(
            "PATCH",
            NODES.path(name=name),
            body={"metadata": {"labels": {BLOCK: f"{s.name}-{block}", RACK: f"{s.name}-{rack}"}}},
            content_type="application/merge-patch+json",
        )
        blocks[name] = block
    await s.create_pod("busy-r1", "1", node_name=f"{s.name}-r1", scheduler="nobody")
    await s.create_pod("busy-r3", "2", node_name=f"{s.name}-r3", scheduler="nobody")
    return blocks


async def kueue_gang(s: Space, name: str) -> list[str]:
    names = [f"{name}-{i}" for i in range(3)]
    for pod in names:
        await s.create_pod(
            pod,
            "1",
            annotations={
                "kueue.x-k8s.io/pod-group-total-count": "3",
                "kueue.x-k8s.io/podset-preferred-topology": RACK,
            },
            labels={"kueue.x-k8s.io/pod-group-name": name},
        )
    return names


@async_test(timeout=180)
async def test_a_kueue_gang_climbs_a_topology_read_from_the_api_server(
    control_plane: dict[str, str], topology_crd: None
) -> None:
    async with space(control_plane["KUBECONFIG"], "kueue-topology") as s:
        blocks = await fabric(s)
        async with s.shoal(s.options("kueue-topology")) as running:
            scheduler = running.kube.scheduler

            async def placed(gang: list[str]) -> set[str] | None:
                bound = await s.bound()
                if not all(p in bound for p in gang):
                    return None
                return {blocks[bound[p]] for p in gang}

            # No Topology yet: the fewest racks, in two blocks.
            spread = await kueue_gang(s, "spread")

            async def spread_bound() -> bool:
                return await placed(spread) is not None

            await wait_for(spread_bound, what="the first gang bound", timeout=60)
            assert await placed(spread) == {"b0", "b1"}
            for p in spread:  # no kubelet: gone at once
                await s.client.request(
                    "DELETE",
                    f"/api/v1/namespaces/{s.name}/pods/{p}",
                    query={"gracePeriodSeconds": "0"},
                )

            fabric_name = await add_topology(s, "fabric", BLOCK, RACK, "kubernetes.io/hostname")
            twice = await add_topology(s, "twice", RACK, RACK)

            async def read() -> bool:
                return fabric_name in scheduler.cluster.kueue_topologies.levels()

            await wait_for(read, what="the Topology read")
            assert running.kube.informers[KUEUE_TOPOLOGIES.name].served.version == "v1beta2"

            async def freed() -> bool:
                pods = await s.pods()
                return not any(p in pods for p in spread)

            await wait_for(freed, what="the first gang gone")
            together = await kueue_gang(s, "together")

            async def together_bound() -> bool:
                return await placed(together) is not None

            await wait_for(together_bound, what="the second gang bound", timeout=60)
            assert await placed(together) == {"b0"}

            async def reported() -> list[dict[str, Any]]:
                found = await s.client.request("GET", EVENTS.path("default"))
                return [
                    e
                    for e in found.get("items") or []
                    if (e.get("regarding") or {}).get("name") == twice
                    and e.get("reason") == "InvalidObject"
                ]

            async def any_reported() -> bool:
                return bool(await reported())

            await wait_for(any_reported, what="an InvalidObject event on the bad Topology")
            (event,) = await reported()
            assert event["regarding"]["kind"] == "Topology"
            assert "field spec.levels[1].nodeLabel" in event["note"], event["note"]
            assert running.failed_binds() == 0
