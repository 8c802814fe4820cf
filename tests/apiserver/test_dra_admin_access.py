"""Admin access (KEP-5018) on the real API server, given once to Shoal and once to the
stock kube-scheduler of the kit: both must pass the same checks.

Each side gets a namespace labelled `resource.kubernetes.io/admin-access: "true"` (the
API server admits admin claims only there), one node with one GPU and a scheduler name
of its own. Pod `job` takes the GPU with a plain claim; then pod `monitor`, whose claim
asks for the GPU with `adminAccess: true`, is bound too, its allocation naming the same
device with `adminAccess: true`.

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
from shoal.drivers.kube.resources import NAMESPACES

JSON = dict[str, Any]
GPU = "gpu.example.com"


async def create_objects(s: Space) -> str:
    await s.client.request(
        "PATCH",
        NAMESPACES.path(name=s.name),
        body={"metadata": {"labels": {"resource.kubernetes.io/admin-access": "true"}}},
        content_type=MERGE,
    )
    node = await s.add_node("gpu", cpu="8", memory="32Gi")
    pool = {"name": node, "generation": 1, "resourceSliceCount": 1}
    devices = [{"name": "gpu-0", "attributes": {"index": {"int": 0}}}]
    await _slice(
        s, f"{node}-gpus", {"driver": GPU, "nodeName": node, "pool": pool, "devices": devices}
    )
    gpu_class = await _class(s, GPU)
    for name, admin in (("job", False), ("monitor", True)):
        exactly: JSON = {"deviceClassName": gpu_class}
        if admin:
            exactly["adminAccess"] = True
        await s.create(
            RESOURCE_CLAIMS.path(s.name),
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": {"name": name, "namespace": s.name},
                "spec": {"devices": {"requests": [{"name": "dev", "exactly": exactly}]}},
            },
        )
    return node


async def check(s: Space, node: str) -> None:
    pods = await s.pods()
    found = await s.client.request("GET", RESOURCE_CLAIMS.path(s.name))
    claims = {c["metadata"]["name"]: c for c in found.get("items") or []}
    for name, admin in (("job", None), ("monitor", True)):
        assert pods[name]["spec"].get("nodeName") == node, (name, pods[name]["spec"])
        allocation = (claims[name].get("status") or {}).get("allocation") or {}
        results = (allocation.get("devices") or {}).get("results") or []
        assert [(r["device"], r.get("adminAccess") or None) for r in results] == [
            ("gpu-0", admin)
        ], (name, results)


async def run_side(s: Space, node: str) -> None:
    await _pod(s, "job")
    await wait_for(lambda: _bound(s, ["job"]), timeout=60, what="pod job bound")
    await _pod(s, "monitor")
    await wait_for(lambda: _bound(s, ["monitor"]), timeout=60, what="pod monitor bound")
    await check(s, node)


@pytest.mark.parametrize("scheduler", ["shoal", "kube-scheduler"])
@async_test(timeout=150)
async def test_admin_access_passes_the_same_checks_with_shoal_and_kube_scheduler(
    control_plane: dict[str, str], tmp_path: Path, scheduler: str
) -> None:
    async with space(control_plane["KUBECONFIG"], "draadmin") as s:
        node = await create_objects(s)
        async with scheduling(control_plane, s, tmp_path, scheduler, "draadmin"):
            await run_side(s, node)
