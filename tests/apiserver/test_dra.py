"""Dynamic Resource Allocation against a real kube-apiserver (resource.k8s.io/v1):
Shoal reads DeviceClasses, ResourceSlices and ResourceClaims, allocates devices, writes
each claim's status (allocation and reservedFor) and binds the pods to the right nodes,
never giving one device to two claims.

The kit runs no DRA driver and no resource-claim controller: the test publishes the
slices a driver would, and uses claims by name.

Run with `pytest -m apiserver`; skipped when ../shared/k8s is absent (see conftest.py).
"""

from __future__ import annotations

from typing import Any

from apihelpers import Space, space, wait_for
from kubehelpers import async_test

from shoal.drivers.kube.dra import DEVICE_CLASSES, FINALIZER, RESOURCE_CLAIMS, RESOURCE_SLICES
from shoal.drivers.kube.resources import PODS

JSON = dict[str, Any]
DRIVER = "gpu.example.com"


async def device_class(s: Space) -> str:
    name = f"{s.name}-gpu"
    body = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]},
    }
    await s.create(DEVICE_CLASSES.path(), body)
    s.cluster_objects.append(DEVICE_CLASSES.path(name=name))
    return name


async def gpu_slice(s: Space, node: str, count: int, memory: str) -> None:
    """What a DRA driver on `node` would publish: its GPUs, one pool per node."""
    devices = [
        {
            "name": f"gpu-{i}",
            "attributes": {"index": {"int": i}, "model": {"string": "test-gpu"}},
            "capacity": {"memory": {"value": memory}},
        }
        for i in range(count)
    ]
    name = f"{node}-gpus"
    body = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        },
    }
    await s.create(RESOURCE_SLICES.path(), body)
    s.cluster_objects.append(RESOURCE_SLICES.path(name=name))


async def claim(s: Space, name: str, device_class: str, count: int = 1, cel: str = "") -> None:
    exactly: JSON = {"deviceClassName": device_class, "allocationMode": "ExactCount"}
    exactly["count"] = count
    if cel:
        exactly["selectors"] = [{"cel": {"expression": cel}}]
    body = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": s.name},
        "spec": {"devices": {"requests": [{"name": "gpus", "exactly": exactly}]}},
    }
    await s.create(RESOURCE_CLAIMS.path(s.name), body)


async def pod_with_claim(s: Space, name: str, claim_name: str) -> None:
    body = s.pod(name, cpu="100m")
    body["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimName": claim_name}]
    body["spec"]["containers"][0]["resources"]["claims"] = [{"name": "gpus"}]
    await s.create(PODS.path(s.name), body)


async def status_of(s: Space, name: str) -> JSON:
    found = await s.get(RESOURCE_CLAIMS.path(s.name, name))
    assert found is not None
    return found


@async_test(timeout=120)
async def test_claims_are_allocated_written_and_bound(control_plane: dict[str, str]) -> None:
    async with space(control_plane["KUBECONFIG"], "dra") as s:
        big = await s.add_node("big", cpu="8")  # 2 GPUs of 80Gi
        small = await s.add_node("small", cpu="8")  # 4 GPUs of 24Gi
        await s.add_node("none", cpu="8")  # no driver
        await gpu_slice(s, big, 2, "80Gi")
        await gpu_slice(s, small, 4, "24Gi")
        gpu = await device_class(s)
        memory = f'device.capacity["{DRIVER}"].memory.compareTo(quantity("40Gi")) >= 0'
        await claim(s, "big-one", gpu, cel=memory)
        await claim(s, "pair", gpu, count=2)
        await claim(s, "shared", gpu)
        await claim(s, "too-many", gpu, count=5)
        async with s.shoal(s.options("dra")):
            await pod_with_claim(s, "large-memory", "big-one")
            await wait_for(
                lambda: _bound(s, "large-memory"), what="the large-memory pod bound", timeout=30
            )
            await pod_with_claim(s, "two-gpus", "pair")
            await wait_for(lambda: _bound(s, "two-gpus"), what="the two-GPU pod bound")
            await pod_with_claim(s, "user-a", "shared")
            await pod_with_claim(s, "user-b", "shared")
            await pod_with_claim(s, "greedy", "too-many")
            for name in ("user-a", "user-b"):
                await wait_for(lambda name=name: _bound(s, name), what=f"{name} bound")

            bound = await s.bound()
            assert bound["large-memory"] == big  # the only 80Gi GPUs
            assert bound["two-gpus"] == small  # one 80Gi GPU left on big: not two
            assert bound["user-a"] == bound["user-b"]
            assert "greedy" not in bound

            owners: dict[tuple[str, str, str], str] = {}
            for name, node, users in (
                ("big-one", big, ["large-memory"]),
                ("pair", small, ["two-gpus"]),
                ("shared", bound["user-a"], ["user-a", "user-b"]),
            ):
                obj = await status_of(s, name)
                status = obj.get("status") or {}
                allocation = status["allocation"]
                results = allocation["devices"]["results"]
                assert all(r["driver"] == DRIVER and r["pool"] == node for r in results)
                assert len(results) == (2 if name == "pair" else 1)
                term = allocation["nodeSelector"]["nodeSelectorTerms"][0]
                assert term["matchFields"][0]["values"] == [node]
                assert sorted(r["name"] for r in status["reservedFor"]) == users
                assert FINALIZER in obj["metadata"].get("finalizers", [])
                for r in results:
                    device = (r["driver"], r["pool"], r["device"])
                    assert device not in owners, f"{device} given to {owners[device]} and {name}"
                    owners[device] = name
            greedy = await status_of(s, "too-many")
            assert not (greedy.get("status") or {}).get("allocation")


async def _bound(s: Space, name: str) -> bool:
    return name in await s.bound()
