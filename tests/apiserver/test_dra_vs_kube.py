"""The same Dynamic Resource Allocation objects given once to Shoal and once to the stock
kube-scheduler (the kit's v1.36 binary, its DynamicResources plugin; resource.k8s.io/v1
is GA there), on the real API server: both sides' allocations must pass the same checks.

Each side gets a namespace, four nodes and a scheduler name of its own (so the two
never see each other's pods): one DeviceClass, four ResourceSlices of 8 GPUs each (as a
DRA driver would publish them: one pool per node, capacity `memory` 80Gi on two nodes
and 24Gi on the other two, attribute `nvlinkDomain` 0 for GPUs 0-3 and 1 for GPUs 4-7),
and pods with claims:

* two pods with a claim for exactly 2 GPUs;
* four pods with a one-GPU claim whose CEL selector asks for at least 40Gi of memory;
* two pods with a claim for 3 GPUs constrained to one NVLink domain (matchAttribute);
* one claim shared by two pods.

Checked from the claims' status and the pods: every pod bound, every claim allocated
with its count of devices from slices of the pod's node (and a node selector naming
it), the selector held for every device, one NVLink domain per constrained claim, the
shared claim allocated once and reserved for both of its pods (on one node), every pod
in its claim's reservedFor, kube's delete-protection finalizer on every allocated claim,
and no device in two claims.

The kit runs no kube-controller-manager, hence no resource-claim controller: claims are
created directly and named by the pods (`resourceClaimName`).

Run with `pytest -m apiserver`; skipped when ../shared/k8s is absent (see conftest.py).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from apihelpers import Space, scheduling, space, wait_for
from kubehelpers import async_test

from shoal.api.quantity import parse_quantity
from shoal.drivers.kube.dra import DEVICE_CLASSES, FINALIZER, RESOURCE_CLAIMS, RESOURCE_SLICES
from shoal.drivers.kube.resources import PODS

JSON = dict[str, Any]
DRIVER = "gpu.example.com"
GPUS = 8
DOMAIN = f"{DRIVER}/nvlinkDomain"
MEMORY_SELECTOR = f'device.capacity["{DRIVER}"].memory.compareTo(quantity("40Gi")) >= 0'
NODES = {"n0": "80Gi", "n1": "80Gi", "n2": "24Gi", "n3": "24Gi"}

# claim -> (count, CEL selector, matchAttribute) and the pods that use it
CLAIMS: dict[str, tuple[int, str, str]] = {
    "pair-0": (2, "", ""),
    "pair-1": (2, "", ""),
    **{f"big-{i}": (1, MEMORY_SELECTOR, "") for i in range(4)},
    "linked-0": (3, "", DOMAIN),
    "linked-1": (3, "", DOMAIN),
    "shared": (1, "", ""),
}
PODS_CLAIMS: dict[str, str] = {
    **{name: name for name in CLAIMS if name != "shared"},
    "shared-a": "shared",
    "shared-b": "shared",
}


async def create_objects(s: Space) -> None:
    """The DeviceClass, the slices and the claims, then the pods."""
    gpu_class = f"{s.name}-gpu"
    await s.create(
        DEVICE_CLASSES.path(),
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": gpu_class},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]},
        },
    )
    s.cluster_objects.append(DEVICE_CLASSES.path(name=gpu_class))
    for short, memory in NODES.items():
        node = await s.add_node(short, cpu="8", memory="32Gi")
        devices = [
            {
                "name": f"gpu-{i}",
                "attributes": {"index": {"int": i}, "nvlinkDomain": {"int": i // 4}},
                "capacity": {"memory": {"value": memory}},
            }
            for i in range(GPUS)
        ]
        name = f"{node}-gpus"
        await s.create(
            RESOURCE_SLICES.path(),
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": {"name": name},
                "spec": {
                    "driver": DRIVER,
                    "nodeName": node,
                    "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                    "devices": devices,
                },
            },
        )
        s.cluster_objects.append(RESOURCE_SLICES.path(name=name))
    for name, (count, cel, match) in CLAIMS.items():
        exactly: JSON = {"deviceClassName": gpu_class, "allocationMode": "ExactCount"}
        exactly["count"] = count
        if cel:
            exactly["selectors"] = [{"cel": {"expression": cel}}]
        devices_spec: JSON = {"requests": [{"name": "gpus", "exactly": exactly}]}
        if match:
            devices_spec["constraints"] = [{"requests": ["gpus"], "matchAttribute": match}]
        await s.create(
            RESOURCE_CLAIMS.path(s.name),
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": {"name": name, "namespace": s.name},
                "spec": {"devices": devices_spec},
            },
        )
    for pod, claim in PODS_CLAIMS.items():
        body = s.pod(pod, cpu="100m")
        body["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimName": claim}]
        body["spec"]["containers"][0]["resources"]["claims"] = [{"name": "gpus"}]
        await s.create(PODS.path(s.name), body)


async def check_allocations(s: Space) -> None:
    """The same checks for either scheduler (see the module docstring)."""
    pods = await s.pods()
    bound = {name: p["spec"].get("nodeName") or "" for name, p in pods.items()}
    assert all(bound.values()), f"not bound: {sorted(n for n, node in bound.items() if not node)}"
    found = await s.client.request("GET", RESOURCE_CLAIMS.path(s.name))
    claims = {c["metadata"]["name"]: c for c in found.get("items") or []}
    assert sorted(claims) == sorted(CLAIMS)
    slices = await s.client.request("GET", RESOURCE_SLICES.path())
    devices: dict[tuple[str, str, str], JSON] = {}
    for obj in slices.get("items") or []:
        spec = obj["spec"]
        if spec.get("nodeName") in s.nodes:
            for d in spec.get("devices") or []:
                devices[(spec["driver"], spec["pool"]["name"], d["name"])] = d
    given: Counter[tuple[str, str, str]] = Counter()
    for name, (count, cel, match) in CLAIMS.items():
        obj = claims[name]
        status = obj.get("status") or {}
        allocation = status.get("allocation")
        assert allocation, f"claim {name} not allocated"
        users = sorted(p for p, c in PODS_CLAIMS.items() if c == name)
        nodes = {bound[p] for p in users}
        assert len(nodes) == 1, f"the pods of claim {name} are on {sorted(nodes)}"
        (node,) = nodes
        results = allocation["devices"]["results"]
        keys = [(r["driver"], r["pool"], r["device"]) for r in results]
        assert len(keys) == count == len(set(keys)), f"claim {name}: {keys}"
        assert all(r["request"] == "gpus" for r in results), results
        for key in keys:
            assert key in devices, f"claim {name}: {key} is no published device of this test"
            assert key[0] == DRIVER and key[1] == node, f"claim {name} on {node} got {key}"
        term = allocation["nodeSelector"]["nodeSelectorTerms"][0]
        assert term["matchFields"][0]["values"] == [node], term
        if cel:
            memory = [parse_quantity(devices[k]["capacity"]["memory"]["value"]) for k in keys]
            assert all(m >= parse_quantity("40Gi") for m in memory), f"claim {name}: {memory}"
        if match:
            domains = {devices[k]["attributes"]["nvlinkDomain"]["int"] for k in keys}
            assert len(domains) == 1, f"claim {name} spans NVLink domains {domains}"
        reserved = sorted(r["name"] for r in status.get("reservedFor") or [])
        assert reserved == users, f"claim {name} reserved for {reserved}, used by {users}"
        uids = {r["uid"] for r in status["reservedFor"]}
        assert uids == {pods[p]["metadata"]["uid"] for p in users}
        assert FINALIZER in obj["metadata"].get("finalizers", []), name
        given.update(keys)
    twice = sorted(k for k, n in given.items() if n > 1)
    assert not twice, f"devices in two claims: {twice}"
    assert sum(given.values()) == sum(count for count, _, _ in CLAIMS.values())


async def all_bound(s: Space) -> bool:
    return len(await s.bound()) == len(PODS_CLAIMS)


@pytest.mark.parametrize("scheduler", ["shoal", "kube-scheduler"])
@async_test(timeout=110)
async def test_the_same_claims_pass_the_same_checks_with_shoal_and_kube_scheduler(
    control_plane: dict[str, str], tmp_path: Path, scheduler: str
) -> None:
    async with space(control_plane["KUBECONFIG"], "dravs") as s:
        await create_objects(s)
        async with scheduling(control_plane, s, tmp_path, scheduler, "dravs"):
            await wait_for(lambda: all_bound(s), timeout=60, what="every pod bound")
        await check_allocations(s)
