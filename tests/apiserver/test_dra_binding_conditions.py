"""Binding conditions (KEP-5007; DRADeviceBindingConditions and
DRAResourceClaimDeviceStatus are beta and on by default in the kit's v1.36) on the real
API server, given once to Shoal and once to the stock kube-scheduler. Both sides must
pass the same checks.

A node publishes one GPU whose slice names a binding condition
(`example.com/attached`) and a binding failure condition. The pod using a claim for it
must not be bound while the test (playing the driver) has not reported the condition;
the allocation must carry both conditions and an `allocationTimestamp`; once the test
reports `example.com/attached: True` in the claim's `status.devices`, the pod must be
bound to the node.

Run with `pytest -m apiserver`; skipped when ../shared/k8s is absent (see conftest.py).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from apihelpers import MERGE, Space, scheduling, space, wait_for
from kubehelpers import async_test
from test_dra_capacity import _bound, _claim, _class, _pod, _slice

from shoal.drivers.kube.dra import RESOURCE_CLAIMS

JSON = dict[str, Any]
GPU = "gpu.example.com"


async def create_objects(s: Space) -> str:
    node = await s.add_node("gpu", cpu="8", memory="32Gi")
    device = {
        "name": "gpu-0",
        "bindingConditions": ["example.com/attached"],
        "bindingFailureConditions": ["example.com/failed"],
    }
    pool = {"name": node, "generation": 1, "resourceSliceCount": 1}
    await _slice(
        s, f"{node}-gpus", {"driver": GPU, "nodeName": node, "pool": pool, "devices": [device]}
    )
    gpu_class = await _class(s, GPU)
    await _claim(s, "a", {"deviceClassName": gpu_class})
    return node


async def report_attached(s: Space, node: str) -> None:
    """What the driver does once the device is attached."""
    condition = {
        "type": "example.com/attached",
        "status": "True",
        "reason": "Attached",
        "message": "attached by the test",
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }
    body = {
        "status": {
            "devices": [{"driver": GPU, "pool": node, "device": "gpu-0", "conditions": [condition]}]
        }
    }
    await s.client.request(
        "PATCH", RESOURCE_CLAIMS.path(s.name, "a", "status"), body=body, content_type=MERGE
    )


@pytest.mark.parametrize("scheduler", ["shoal", "kube-scheduler"])
@async_test(timeout=150)
async def test_binding_waits_for_the_drivers_conditions_with_shoal_and_kube_scheduler(
    control_plane: dict[str, str], tmp_path: Path, scheduler: str
) -> None:
    async with space(control_plane["KUBECONFIG"], "drabind") as s:
        node = await create_objects(s)
        async with scheduling(control_plane, s, tmp_path, scheduler, "drabind"):
            await _pod(s, "a")

            async def allocated() -> bool:
                claim = await s.client.request("GET", RESOURCE_CLAIMS.path(s.name, "a"))
                return bool((claim.get("status") or {}).get("allocation"))

            await wait_for(allocated, timeout=60, what="claim a allocated")
            await asyncio.sleep(3.0)
            assert not await _bound(s, ["a"]), "bound before the driver reported the condition"
            claim = await s.client.request("GET", RESOURCE_CLAIMS.path(s.name, "a"))
            allocation = claim["status"]["allocation"]
            (result,) = allocation["devices"]["results"]
            assert result["bindingConditions"] == ["example.com/attached"]
            assert result["bindingFailureConditions"] == ["example.com/failed"]
            assert allocation.get("allocationTimestamp")
            await report_attached(s, node)
            await wait_for(lambda: _bound(s, ["a"]), timeout=60, what="pod a bound")
        pods = await s.pods()
        assert pods["a"]["spec"]["nodeName"] == node
