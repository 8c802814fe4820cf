"""Consumable capacity (KEP-5075) and partitionable devices (KEP-4815) on the real API
server, given once to Shoal and once to the stock kube-scheduler (the kit's v1.36: both
features are beta and on by default there, in kube-apiserver and kube-scheduler alike,
so no feature gate is passed). Both sides must pass the same checks.

Each side gets a namespace, two nodes and a scheduler name of its own. Node `gpu`
publishes what two DRA drivers would, as the v1.36 API server takes it:

* two NICs that allow multiple allocations, `bandwidth` 10G each with a request policy
  (default 1G, valid range 1G..10G in steps of 1G);
* one partitionable GPU: a slice with the counter set `gpu-0` (`memory` 80Gi) and a
  slice with the devices taking from it (a slice may not hold both): the whole GPU
  (80Gi), two halves (40Gi) and four quarters (20Gi).

Node `plain` has no devices. Claims (by name, no resource-claim controller in the kit):
NIC shares of 1500M (rounded up to 2G), 4G, 4G and 6G, and GPU partitions: a half and
two quarters. Once those pods are bound, two more come whose claims cannot fit: 5G of
bandwidth (the shares leave 4G in all, however they are packed) and the whole GPU (its
counters are taken by the partitions): they stay pending, their claims unallocated.

Checked from the claims' status: every share on a NIC of the pod's node with a
`shareID` (a UUID) and `consumedCapacity` {bandwidth: the rounded request}, no NIC over
10G, partitions allocated whole (no shareID, no consumedCapacity), the counters of the
GPU not exceeded, no partition in two claims, node selectors naming the node,
reservedFor naming the pods.

Run with `pytest -m apiserver`; skipped when ../shared/k8s is absent (see conftest.py).
"""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
from apihelpers import Space, scheduling, space, wait_for
from kubehelpers import async_test

from shoal.api.quantity import parse_quantity
from shoal.drivers.kube.dra import DEVICE_CLASSES, FINALIZER, RESOURCE_CLAIMS, RESOURCE_SLICES
from shoal.drivers.kube.resources import PODS

JSON = dict[str, Any]
NIC = "nic.example.com"
GPU = "gpu.example.com"
BANDWIDTH = parse_quantity("10G")
GPU_MEMORY = parse_quantity("80Gi")
PARTS = {"whole": ("80Gi", 1), "half": ("40Gi", 2), "quarter": ("20Gi", 4)}

# claim -> bandwidth asked and what it consumes (rounded up to a step of 1G)
SHARES = {
    "nic-a": ("1500M", "2G"),
    "nic-b": ("4G", "4G"),
    "nic-c": ("4G", "4G"),
    "nic-d": ("6G", "6G"),
}
PARTITIONS = {"gpu-half": "half", "gpu-quarter-a": "quarter", "gpu-quarter-b": "quarter"}
# Pods that must wait: no NIC has 5G left, the whole GPU's counters are taken.
WAITING = {"nic-over": ("5G", ""), "gpu-whole": "whole"}


async def _slice(s: Space, name: str, spec: JSON) -> None:
    body = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": spec,
    }
    await s.create(RESOURCE_SLICES.path(), body)
    s.cluster_objects.append(RESOURCE_SLICES.path(name=name))


async def _class(s: Space, driver: str) -> str:
    name = f"{s.name}-{driver.partition('.')[0]}"
    await s.create(
        DEVICE_CLASSES.path(),
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": name},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{driver}"'}}]},
        },
    )
    s.cluster_objects.append(DEVICE_CLASSES.path(name=name))
    return name


async def _claim(s: Space, name: str, exactly: JSON) -> None:
    await s.create(
        RESOURCE_CLAIMS.path(s.name),
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": s.name},
            "spec": {"devices": {"requests": [{"name": "dev", "exactly": exactly}]}},
        },
    )


async def _pod(s: Space, name: str) -> None:
    body = s.pod(name, cpu="100m")
    body["spec"]["resourceClaims"] = [{"name": "dev", "resourceClaimName": name}]
    body["spec"]["containers"][0]["resources"]["claims"] = [{"name": "dev"}]
    await s.create(PODS.path(s.name), body)


async def create_objects(s: Space) -> tuple[str, str]:
    """Nodes, slices, classes and claims (no pods yet); the node names."""
    node = await s.add_node("gpu", cpu="8", memory="32Gi")
    plain = await s.add_node("plain", cpu="8", memory="32Gi")
    policy = {"default": "1G", "validRange": {"min": "1G", "max": "10G", "step": "1G"}}
    nics = [
        {
            "name": f"nic-{i}",
            "allowMultipleAllocations": True,
            "capacity": {"bandwidth": {"value": "10G", "requestPolicy": policy}},
        }
        for i in range(2)
    ]
    pool = {"name": node, "generation": 1, "resourceSliceCount": 1}
    await _slice(
        s, f"{node}-nics", {"driver": NIC, "nodeName": node, "pool": pool, "devices": nics}
    )
    gpu_pool = {"name": node, "generation": 1, "resourceSliceCount": 2}
    counters = [{"name": "gpu-0", "counters": {"memory": {"value": "80Gi"}}}]
    await _slice(
        s,
        f"{node}-gpu-counters",
        {"driver": GPU, "nodeName": node, "pool": gpu_pool, "sharedCounters": counters},
    )
    devices = []
    for size, (memory, n) in PARTS.items():
        for j in range(n):
            devices.append(
                {
                    "name": "gpu-0" if size == "whole" else f"gpu-0-{size}-{j}",
                    "attributes": {"size": {"string": size}},
                    "capacity": {"memory": {"value": memory}},
                    "consumesCounters": [
                        {"counterSet": "gpu-0", "counters": {"memory": {"value": memory}}}
                    ],
                }
            )
    await _slice(
        s, f"{node}-gpus", {"driver": GPU, "nodeName": node, "pool": gpu_pool, "devices": devices}
    )
    nic_class = await _class(s, NIC)
    gpu_class = await _class(s, GPU)
    for name, (asked, _) in {**SHARES, "nic-over": WAITING["nic-over"]}.items():
        await _claim(
            s,
            name,
            {"deviceClassName": nic_class, "capacity": {"requests": {"bandwidth": asked}}},
        )
    for name, size in {**PARTITIONS, "gpu-whole": "whole"}.items():
        selector = f'device.attributes["{GPU}"].size == "{size}"'
        await _claim(
            s,
            name,
            {"deviceClassName": gpu_class, "selectors": [{"cel": {"expression": selector}}]},
        )
    return node, plain


async def check_allocations(s: Space, node: str) -> None:
    """The same checks for either scheduler (see the module docstring)."""
    pods = await s.pods()
    found = await s.client.request("GET", RESOURCE_CLAIMS.path(s.name))
    claims = {c["metadata"]["name"]: c for c in found.get("items") or []}
    used: dict[str, Fraction] = {}
    parts: Counter[str] = Counter()
    for name in [*SHARES, *PARTITIONS]:
        assert pods[name]["spec"].get("nodeName") == node, f"{name} not bound to {node}"
        status = claims[name].get("status") or {}
        allocation = status.get("allocation")
        assert allocation, f"claim {name} not allocated"
        (result,) = allocation["devices"]["results"]
        assert result["request"] == "dev" and result["pool"] == node, result
        term = allocation["nodeSelector"]["nodeSelectorTerms"][0]
        assert term["matchFields"][0]["values"] == [node], term
        assert [r["name"] for r in status.get("reservedFor") or []] == [name]
        assert FINALIZER in claims[name]["metadata"].get("finalizers", []), name
        if name in SHARES:
            assert result["driver"] == NIC and result["device"] in ("nic-0", "nic-1"), result
            uuid.UUID(result["shareID"])
            consumed = {k: parse_quantity(v) for k, v in result["consumedCapacity"].items()}
            assert consumed == {"bandwidth": parse_quantity(SHARES[name][1])}, (name, result)
            used[result["device"]] = used.get(result["device"], Fraction(0)) + consumed["bandwidth"]
        else:
            size = PARTITIONS[name]
            assert result["driver"] == GPU and result["device"].startswith(f"gpu-0-{size}-")
            assert "shareID" not in result and "consumedCapacity" not in result, result
            parts[result["device"]] += 1
    assert all(v <= BANDWIDTH for v in used.values()), used
    assert sum(used.values()) == parse_quantity("16G"), used
    assert all(n == 1 for n in parts.values()), parts
    memory = sum(parse_quantity(PARTS[d.split("-")[2]][0]) for d in parts)
    assert memory <= GPU_MEMORY, memory
    for name in WAITING:
        assert not pods[name]["spec"].get("nodeName"), f"{name} was bound"
        assert not (claims[name].get("status") or {}).get("allocation"), f"{name} allocated"


async def _bound(s: Space, names: list[str]) -> bool:
    bound = await s.bound()
    return all(n in bound for n in names)


async def run_side(s: Space, node: str) -> None:
    """Pods that fit first (bound), then the ones that must wait; the checks."""
    for name in [*SHARES, *PARTITIONS]:
        await _pod(s, name)
    await wait_for(lambda: _bound(s, [*SHARES, *PARTITIONS]), timeout=60, what="pods bound")
    for name in WAITING:
        await _pod(s, name)
    await asyncio.sleep(4.0)  # room for a wrong allocation to show up
    await check_allocations(s, node)


@pytest.mark.parametrize("scheduler", ["shoal", "kube-scheduler"])
@async_test(timeout=150)
async def test_shares_and_partitions_pass_the_same_checks_with_shoal_and_kube_scheduler(
    control_plane: dict[str, str], tmp_path: Path, scheduler: str
) -> None:
    async with space(control_plane["KUBECONFIG"], "dracap") as s:
        node, _ = await create_objects(s)
        async with scheduling(control_plane, s, tmp_path, scheduler, "dracap"):
            await run_side(s, node)
