"""Storage capacity tracking beside the kit's kube-scheduler on the real API server.

A CSI driver with `storageCapacity: true` has published room for 5Gi on n0 and 20Gi on
n1, nothing for n2. A pod whose WaitForFirstConsumer claim asks 10Gi must have its claim
provisioned on n1 (`volume.kubernetes.io/selected-node`); a pod asking 50Gi fits
nowhere, "did not have enough free storage". Both schedulers decide alike. (The kit has
no provisioner: kube-scheduler then waits in PreBind for the volume, Shoal binds the
pod; the claim's annotation is what both write.)

Run with `pytest -m apiserver`; skipped when ../shared/k8s is absent (see conftest.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from apihelpers import MERGE, Space, scheduling, space, wait_for
from kubehelpers import async_test
from test_volumes import claim, message_of, pod_with_claims

from shoal.api.volumes import ANNOTATION_SELECTED_NODE
from shoal.drivers.kube.resources import NODES
from shoal.drivers.kube.volumes import CSI_DRIVERS, CSI_STORAGE_CAPACITIES, PVCS, STORAGE_CLASSES

NODE_KEY = "topology.lvm.example.com/node"


async def _objects(s: Space) -> list[str]:
    nodes = []
    for i in range(3):
        node = await s.add_node(f"n{i}", cpu="4")
        await s.client.request(
            "PATCH",
            NODES.path(name=node),
            body={"metadata": {"labels": {NODE_KEY: node}}},
            content_type=MERGE,
        )
        nodes.append(node)
    driver = f"{s.name}.lvm.example.com"
    await s.create(
        CSI_DRIVERS.path(),
        {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "CSIDriver",
            "metadata": {"name": driver},
            "spec": {"storageCapacity": True},
        },
    )
    s.cluster_objects.append(CSI_DRIVERS.path(name=driver))
    lvm = f"{s.name}-lvm"
    await s.create(
        STORAGE_CLASSES.path(),
        {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "StorageClass",
            "metadata": {"name": lvm},
            "provisioner": driver,
            "volumeBindingMode": "WaitForFirstConsumer",
        },
    )
    s.cluster_objects.append(STORAGE_CLASSES.path(name=lvm))
    for node, amount in ((nodes[0], "5Gi"), (nodes[1], "20Gi")):
        await s.create(
            CSI_STORAGE_CAPACITIES.path(s.name),
            {
                "apiVersion": "storage.k8s.io/v1",
                "kind": "CSIStorageCapacity",
                "metadata": {"name": f"cap-{node}", "namespace": s.name},
                "storageClassName": lvm,
                "capacity": amount,
                "nodeTopology": {"matchLabels": {NODE_KEY: node}},
            },
        )
    await claim(s, "data", lvm, size="10Gi")
    await claim(s, "huge", lvm, size="50Gi")
    return nodes


@pytest.mark.parametrize("scheduler", ["shoal", "kube-scheduler"])
@async_test(timeout=110)
async def test_claims_are_provisioned_where_capacity_is_by_shoal_and_kube_scheduler(
    control_plane: dict[str, str], tmp_path: Path, scheduler: str
) -> None:
    async with space(control_plane["KUBECONFIG"], "capacity") as s:
        nodes = await _objects(s)

        async def selected() -> str:
            found = await s.get(PVCS.path(s.name, "data"))
            annotations = ((found or {}).get("metadata") or {}).get("annotations") or {}
            return str(annotations.get(ANNOTATION_SELECTED_NODE, ""))

        async def refused() -> bool:
            return "did not have enough free storage" in await message_of(s, "big")

        async with scheduling(control_plane, s, tmp_path, scheduler, "capacity"):
            await pod_with_claims(s, "db", "data")
            await pod_with_claims(s, "big", "huge")
            await wait_for(selected, timeout=60, what="the claim's node selected")
            await wait_for(refused, timeout=60, what="the 50Gi claim refused")
            assert await selected() == nodes[1]
            message = await message_of(s, "big")
            assert "0/3 nodes are available: 3 node(s) did not have enough free storage" in (
                message
            ), message
