"""A claim allocated where its pod cannot run is deallocated and allocated again (kube's
DynamicResources PostFilter), on the real API server, once with Shoal and once with the
stock kube-scheduler of the kit: both must pass the same checks.

Each side gets a namespace, two nodes with one GPU each (`full`, whose allocatable cpu
is below the pod's request, and `free`) and a scheduler name of its own. The claim is
already allocated to `full`'s GPU and reserved for nobody (as a pod that was deleted,
or whose bind failed, leaves it). Its pod fits only on `free`: the scheduler clears the
allocation, then allocates `free`'s GPU and binds the pod there.

Run with `pytest -m apiserver`; skipped when ../shared/k8s is absent (see conftest.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from apihelpers import MERGE, Space, scheduling, space, wait_for
from kubehelpers import async_test
from test_dra_capacity import _bound, _class, _pod, _slice

from shoal.drivers.kube.dra import RESOURCE_CLAIMS

JSON = dict[str, Any]
GPU = "gpu.example.com"


async def create_objects(s: Space) -> tuple[str, str]:
    """Nodes, slices, the class and the claim allocated on `full`; (full, free)."""
    full = await s.add_node("full", cpu="50m", memory="32Gi")
    free = await s.add_node("free", cpu="8", memory="32Gi")
    for node in (full, free):
        pool = {"name": node, "generation": 1, "resourceSliceCount": 1}
        devices = [{"name": "gpu-0", "attributes": {"index": {"int": 0}}}]
        await _slice(
            s, f"{node}-gpus", {"driver": GPU, "nodeName": node, "pool": pool, "devices": devices}
        )
    gpu_class = await _class(s, GPU)
    path = RESOURCE_CLAIMS.path(s.name)
    await s.create(
        path,
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": "stuck", "namespace": s.name},
            "spec": {
                "devices": {
                    "requests": [{"name": "dev", "exactly": {"deviceClassName": gpu_class}}]
                }
            },
        },
    )
    allocation = {
        "devices": {
            "results": [{"request": "dev", "driver": GPU, "pool": full, "device": "gpu-0"}]
        },
        "nodeSelector": {
            "nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [full]}]}
            ]
        },
    }
    await s.client.request(
        "PATCH",
        RESOURCE_CLAIMS.path(s.name, "stuck", "status"),
        body={"status": {"allocation": allocation}},
        content_type=MERGE,
    )
    return full, free


async def check(s: Space, free: str) -> None:
    pods = await s.pods()
    assert pods["stuck"]["spec"].get("nodeName") == free, pods["stuck"]["spec"]
    claim = await s.client.request("GET", RESOURCE_CLAIMS.path(s.name, "stuck"))
    allocation = (claim.get("status") or {}).get("allocation") or {}
    results = (allocation.get("devices") or {}).get("results") or []
    assert [(r["pool"], r["device"]) for r in results] == [(free, "gpu-0")], allocation
    reserved = (claim.get("status") or {}).get("reservedFor") or []
    assert [r["name"] for r in reserved] == ["stuck"], reserved


async def run_side(s: Space, free: str) -> None:
    await _pod(s, "stuck")
    await wait_for(lambda: _bound(s, ["stuck"]), timeout=60, what="pod stuck bound")
    await check(s, free)


@pytest.mark.parametrize("scheduler", ["shoal", "kube-scheduler"])
@async_test(timeout=150)
async def test_a_claim_allocated_where_its_pod_cannot_run_is_moved_by_shoal_and_kube_scheduler(
    control_plane: dict[str, str], tmp_path: Path, scheduler: str
) -> None:
    async with space(control_plane["KUBECONFIG"], "dradealloc") as s:
        _, free = await create_objects(s)
        async with scheduling(control_plane, s, tmp_path, scheduler, "dradealloc"):
            await run_side(s, free)
