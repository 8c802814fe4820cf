"""Dynamic Resource Allocation against a real kube-apiserver (resource.k8s.io/v1):
Shoal reads DeviceClasses, ResourceSlices and ResourceClaims, allocates devices, writes
each claim's status (allocation and reservedFor) and binds the pods to the right nodes,
never giving one device to two claims; a pod of high priority preempts a pod holding
the device it needs and gets that device.

The kit runs no DRA driver and no resource-claim controller: the test publishes the
slices a driver would, uses claims by name, and plays the controller's part in
releasing the claims of deleted pods where it matters.

Run with `pytest -m apiserver`; skipped when ../shared/k8s is absent (see conftest.py).
"""

from __future__ import annotations

import asyncio
import contextlib
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


async def pod_with_claim(s: Space, name: str, claim_name: str, priority_class: str = "") -> None:
    body = s.pod(name, cpu="100m", priority_class=priority_class)
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


async def release_claims_of_deleted_pods(s: Space) -> list[str]:
    """The resource-claim controller's part: deleted pods leave status.reservedFor, and
    a claim reserved for nobody is deallocated. Returns the claims deallocated."""
    pods = {p["metadata"]["uid"] for p in (await s.pods()).values()}
    found = await s.client.request("GET", RESOURCE_CLAIMS.path(s.name))
    released = []
    for obj in found.get("items") or []:
        status = obj.get("status") or {}
        reserved = status.get("reservedFor") or []
        kept = [r for r in reserved if r.get("uid") in pods]
        if len(kept) == len(reserved):
            continue
        body: JSON = {
            "metadata": {"resourceVersion": obj["metadata"]["resourceVersion"]},
            "status": {"reservedFor": kept or None},
        }
        if not kept:
            body["status"]["allocation"] = None
            released.append(obj["metadata"]["name"])
        path = RESOURCE_CLAIMS.path(s.name, obj["metadata"]["name"], "status")
        await s.client.request(
            "PATCH", path, body=body, content_type="application/merge-patch+json"
        )
    return released


def _devices(obj: JSON) -> list[tuple[str, str, str]]:
    allocation = (obj.get("status") or {}).get("allocation") or {}
    results = (allocation.get("devices") or {}).get("results") or []
    return sorted((r["driver"], r["pool"], r["device"]) for r in results)


@async_test(timeout=120)
async def test_a_high_priority_pod_preempts_a_device_holder_and_gets_its_device(
    control_plane: dict[str, str],
) -> None:
    """Two low-priority pods hold the node's two GPUs through claims; a high-priority
    pod asking for one GPU evicts exactly one of them and gets the GPU it held, while
    a pod of the victims' priority arriving with it does not take that GPU."""
    async with space(control_plane["KUBECONFIG"], "drapreempt") as s:
        node = await s.add_node("g", cpu="8")
        await gpu_slice(s, node, 2, "80Gi")
        gpu = await device_class(s)
        for name in ("low-a", "low-b", "high", "late"):
            await claim(s, name, gpu)
        high_class = await s.add_priority_class("high", 1000)
        async with s.shoal(s.options("drapreempt")) as shoal:
            await pod_with_claim(s, "low-a", "low-a")
            await pod_with_claim(s, "low-b", "low-b")
            for name in ("low-a", "low-b"):
                await wait_for(lambda name=name: _bound(s, name), what=f"{name} bound")
            held = {name: _devices(await status_of(s, name)) for name in ("low-a", "low-b")}
            assert sorted(d for devs in held.values() for d in devs) == [
                (DRIVER, node, "gpu-0"),
                (DRIVER, node, "gpu-1"),
            ]

            async def controller() -> None:
                while True:
                    with contextlib.suppress(Exception):  # a conflict: next round
                        await release_claims_of_deleted_pods(s)
                    await asyncio.sleep(0.2)

            playing = asyncio.create_task(controller())
            try:
                await pod_with_claim(s, "high", "high", priority_class=high_class)
                await pod_with_claim(s, "late", "late")
                await wait_for(lambda: _bound(s, "high"), timeout=30, what="high bound")

                async def victim_released() -> bool:
                    pods = await s.pods()
                    gone = [n for n in ("low-a", "low-b") if n not in pods]
                    return len(gone) == 1 and not _devices(await status_of(s, gone[0]))

                await wait_for(victim_released, what="the victim's claim deallocated")
                await asyncio.sleep(2.0)  # settle: no further eviction may follow
            finally:
                playing.cancel()
                with contextlib.suppress(BaseException):
                    await playing
            pods = await s.pods()
            (victim,) = [n for n in ("low-a", "low-b") if n not in pods]
            survivor = "low-b" if victim == "low-a" else "low-a"
            bound = await s.bound()
            assert bound == {survivor: node, "high": node}, bound
            assert _devices(await status_of(s, "high")) == held[victim]
            assert _devices(await status_of(s, survivor)) == held[survivor]
            high = await status_of(s, "high")
            assert [r["name"] for r in high["status"]["reservedFor"]] == ["high"]
            assert not _devices(await status_of(s, "late"))
            assert await s.events(victim, "Preempted")
            evictions = shoal.kube.metrics.evictions.labels("evicted")._value.get()
            assert evictions == 1, evictions
