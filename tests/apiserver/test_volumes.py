"""Volumes against a real kube-apiserver: VolumeBinding's selected-node annotation and
static binding, its wait for the claims to be bound, VolumeZone, NodeVolumeLimits.

The kit has no controller manager, so no PersistentVolume controller and no
provisioner: the tests set what they would (a volume's Available phase, a claim's
volumeName) themselves, or run `shoal.testing.volume_controller`'s stand-in.
"""

from __future__ import annotations

from typing import Any

from apihelpers import MERGE, Space, space, wait_for
from kubehelpers import async_test

from shoal.api.volumes import ANNOTATION_SELECTED_NODE
from shoal.drivers.kube.resources import NODES
from shoal.drivers.kube.volumes import CSI_NODES, PVCS, PVS, STORAGE_CLASSES
from shoal.testing.volume_controller import volume_controller

JSON = dict[str, Any]
ZONE = "topology.kubernetes.io/zone"


async def zoned_node(s: Space, name: str, zone: str) -> str:
    node = await s.add_node(name, cpu="4")
    await s.client.request(
        "PATCH",
        NODES.path(name=node),
        body={"metadata": {"labels": {ZONE: zone}}},
        content_type=MERGE,
    )
    return node


async def storage_class(s: Space, name: str, provisioner: str) -> str:
    name = f"{s.name}-{name}"
    body = {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": name},
        "provisioner": provisioner,
        "volumeBindingMode": "WaitForFirstConsumer",
    }
    await s.create(STORAGE_CLASSES.path(), body)
    s.cluster_objects.append(STORAGE_CLASSES.path(name=name))
    return name


async def claim(
    s: Space, name: str, storage_class: str = "", volume: str = "", size: str = "1Gi"
) -> JSON:
    spec: JSON = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": size}}}
    spec["storageClassName"] = storage_class
    if volume:
        spec["volumeName"] = volume
    body = {"apiVersion": "v1", "kind": "PersistentVolumeClaim"}
    body |= {"metadata": {"name": name, "namespace": s.name}, "spec": spec}
    return await s.create(PVCS.path(s.name), body)


async def volume(s: Space, name: str, spec: JSON, labels: dict[str, str] | None = None) -> str:
    """A PersistentVolume, made Available as the PV controller would."""
    name = f"{s.name}-{name}"
    body = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"]} | spec,
    }
    await s.create(PVS.path(), body)
    s.cluster_objects.append(PVS.path(name=name))
    await s.client.request(
        "PATCH",
        PVS.path(name=name, subresource="status"),
        body={"status": {"phase": "Bound" if "claimRef" in spec else "Available"}},
        content_type=MERGE,
    )
    return name


async def pod_with_claims(s: Space, name: str, *claims: str) -> None:
    body = s.pod(name, "100m")
    body["spec"]["volumes"] = [
        {"name": c, "persistentVolumeClaim": {"claimName": c}} for c in claims
    ]
    await s.create(f"/api/v1/namespaces/{s.name}/pods", body)


async def message_of(s: Space, pod: str) -> str:
    conditions = ((await s.pods())[pod].get("status") or {}).get("conditions") or []
    found = [c for c in conditions if c.get("type") == "PodScheduled"]
    return str(found[0].get("message", "")) if found else ""


@async_test(timeout=90)
async def test_wait_for_first_consumer_writes_the_chosen_node_on_the_claim(
    control_plane: dict[str, str],
) -> None:
    async with space(control_plane["KUBECONFIG"], "wffc") as s:
        nodes = [await s.add_node(f"n{i}", cpu="2") for i in range(3)]
        dynamic = await storage_class(s, "dynamic", "csi.example.com")
        await claim(s, "data", dynamic)
        await pod_with_claims(s, "db", "data")
        # A static local volume on one node, of a class nothing provisions.
        local = await storage_class(s, "local", "kubernetes.io/no-provisioner")
        hostname = {"key": "kubernetes.io/hostname", "operator": "In", "values": [nodes[2]]}
        affinity = {"required": {"nodeSelectorTerms": [{"matchExpressions": [hostname]}]}}
        pv = await volume(
            s,
            "local",
            {"storageClassName": local, "local": {"path": "/d"}, "nodeAffinity": affinity},
        )
        await claim(s, "cache", local)
        await pod_with_claims(s, "web", "cache")
        async with (
            volume_controller(control_plane["KUBECONFIG"], s.name) as stand_in,
            s.shoal(s.options("wffc")),
        ):

            async def bound() -> bool:
                return len(await s.bound()) == 2

            await wait_for(bound, what="both pods bound")
            placements = await s.bound()
            data = await s.get(PVCS.path(s.name, "data"))
            assert data is not None
            # Bound only once its claim was provisioned there.
            assert stand_in.provisioned == {"data": placements["db"]}
            assert data["spec"]["volumeName"].startswith("pvc-")
            # The provisioner's cue: the node the pod went to.
            annotations = data["metadata"].get("annotations") or {}
            assert annotations[ANNOTATION_SELECTED_NODE] == placements["db"]
            # The static volume's claimRef names the claim; the pod is on its node.
            assert placements["web"] == nodes[2]
            local_pv = await s.get(PVS.path(name=pv))
            assert local_pv is not None
            ref = local_pv["spec"]["claimRef"]
            assert (ref["namespace"], ref["name"]) == (s.name, "cache")
            cache = await s.get(PVCS.path(s.name, "cache"))
            assert cache is not None
            assert ref["uid"] == cache["metadata"]["uid"]


@async_test(timeout=90)
async def test_a_volume_in_zone_a_keeps_the_pod_in_zone_a_or_pending(
    control_plane: dict[str, str],
) -> None:
    async with space(control_plane["KUBECONFIG"], "zone") as s:
        in_a = await zoned_node(s, "a1", "a")
        for name in ("b1", "b2"):
            await zoned_node(s, name, "b")
        for name, zone in (("in-a", "a"), ("in-c", "c")):
            ref = {"kind": "PersistentVolumeClaim", "namespace": s.name, "name": f"claim-{zone}"}
            pv = await volume(
                s,
                name,
                {"claimRef": ref, "csi": {"driver": "d", "volumeHandle": name}},
                {ZONE: zone},
            )
            await claim(s, f"claim-{zone}", volume=pv)
        for i in range(3):
            await pod_with_claims(s, f"a{i}", "claim-a")
        await pod_with_claims(s, "c0", "claim-c")
        async with s.shoal(s.options("zone")):

            async def placed() -> bool:
                return len(await s.bound()) == 3 and "volume zone" in await message_of(s, "c0")

            await wait_for(placed, what="zone a pods bound and the zone c pod reported")
            assert set((await s.bound()).values()) == {in_a}
            assert await message_of(s, "c0") == (
                "0/3 nodes are available: 3 node(s) had no available volume zone."
                " preemption: 0/3 nodes are available: 3 Preemption is not helpful for "
                "scheduling."
            )


@async_test(timeout=90)
async def test_a_full_attach_limit_sends_the_pod_elsewhere_then_keeps_it_pending(
    control_plane: dict[str, str],
) -> None:
    async with space(control_plane["KUBECONFIG"], "attach") as s:
        nodes = [await s.add_node(f"n{i}", cpu="4") for i in range(2)]
        driver = "ebs.csi.aws.com"
        for node in nodes:
            body = {
                "apiVersion": "storage.k8s.io/v1",
                "kind": "CSINode",
                "metadata": {"name": node},
                "spec": {
                    "drivers": [{"name": driver, "nodeID": node, "allocatable": {"count": 1}}]
                },
            }
            await s.create(CSI_NODES.path(), body)
            s.cluster_objects.append(CSI_NODES.path(name=node))
        ebs = await storage_class(s, "ebs", driver)
        for i in range(3):
            await claim(s, f"d{i}", ebs)
        async with (
            volume_controller(control_plane["KUBECONFIG"], s.name),
            s.shoal(s.options("attach")),
        ):
            for i in range(3):
                await pod_with_claims(s, f"p{i}", f"d{i}")

            async def settled() -> bool:
                bound = await s.bound()
                pending = [p for p in ("p0", "p1", "p2") if p not in bound]
                return len(bound) == 2 and "max volume count" in await message_of(s, pending[0])

            await wait_for(settled, what="two pods bound, one reported")
            bound = await s.bound()
            assert sorted(bound.values()) == sorted(nodes)  # one volume per node
            [pending] = [p for p in ("p0", "p1", "p2") if p not in bound]
            assert (await message_of(s, pending)).startswith(
                "0/2 nodes are available: 2 node(s) exceed max volume count."
            )


@async_test(timeout=90)
async def test_a_pod_waiting_for_its_claim_to_be_bound_is_placed_once_it_is(
    control_plane: dict[str, str],
) -> None:
    async with space(control_plane["KUBECONFIG"], "imm") as s:
        nodes = [await s.add_node(f"n{i}", cpu="2") for i in range(2)]
        name = f"{s.name}-immediate"
        body = {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "StorageClass",
            "metadata": {"name": name},
            "provisioner": "csi.example.com",
        }
        await s.create(STORAGE_CLASSES.path(), body)
        s.cluster_objects.append(STORAGE_CLASSES.path(name=name))
        await claim(s, "data", name)
        await pod_with_claims(s, "db", "data")
        async with s.shoal(s.options("imm")):

            async def reported() -> bool:
                return "unbound immediate" in await message_of(s, "db")

            await wait_for(reported, what="the pod reported waiting for its claim")
            # What the PersistentVolume controller would do: a volume on one node,
            # bound to the claim both ways.
            hostname = {"key": "kubernetes.io/hostname", "operator": "In", "values": [nodes[1]]}
            affinity = {"required": {"nodeSelectorTerms": [{"matchExpressions": [hostname]}]}}
            ref = {"kind": "PersistentVolumeClaim", "namespace": s.name, "name": "data"}
            pv = await volume(
                s,
                "pv",
                {
                    "storageClassName": name,
                    "claimRef": ref,
                    "csi": {"driver": "csi.example.com", "volumeHandle": "h"},
                    "nodeAffinity": affinity,
                },
            )
            await s.client.request(
                "PATCH",
                PVCS.path(s.name, "data"),
                body={"spec": {"volumeName": pv}},
                content_type=MERGE,
            )

            async def placed() -> bool:
                return (await s.bound()).get("db") == nodes[1]

            await wait_for(placed, what="the pod bound to the volume's node")
