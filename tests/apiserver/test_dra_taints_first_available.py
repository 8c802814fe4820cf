"""Device taints (KEP-5055, beta and on by default in v1.36: DRADeviceTaints) and
firstAvailable (KEP-4816, GA in v1.36) on the real API server, given once to Shoal and
once to the stock kube-scheduler of the kit. Both sides must pass the same checks.

Each side gets a namespace, two nodes and a scheduler name of its own. Node `gpu`
publishes four GPUs: `gpu-0` tainted `example.com/maintenance=true:NoSchedule`, `gpu-1`
tainted `example.com/broken=ecc:NoExecute`, `gpu-2` and `gpu-3` untainted. Node `plain`
has none.

* Pod `fa` comes first, alone: its claim's request `dev` has `firstAvailable`
  [`triple`: 3 GPUs, `pair`: 2 GPUs]. Only two GPUs are untainted, so it must get
  `dev/pair` on gpu-2 and gpu-3 (the allocation names the sub-request).
* Then pod `untolerated` (one GPU, no tolerations) and pod `tolerant` (one GPU,
  tolerating `example.com/maintenance` with operator Exists): `tolerant` gets gpu-0,
  `untolerated` stays pending, its claim unallocated; gpu-1 (NoExecute) goes to
  nobody.

Run with `pytest -m apiserver`; skipped when ../shared/k8s is absent (see conftest.py).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from apihelpers import Space, scheduling, space, wait_for
from kubehelpers import async_test
from test_dra_capacity import _bound, _class, _pod, _slice

from shoal.drivers.kube.dra import FINALIZER, RESOURCE_CLAIMS

JSON = dict[str, Any]
GPU = "gpu.example.com"
TAINTS: dict[int, list[JSON]] = {
    0: [{"key": "example.com/maintenance", "value": "true", "effect": "NoSchedule"}],
    1: [{"key": "example.com/broken", "value": "ecc", "effect": "NoExecute"}],
}


async def _claim(s: Space, name: str, request: JSON) -> None:
    await s.create(
        RESOURCE_CLAIMS.path(s.name),
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": s.name},
            "spec": {"devices": {"requests": [{"name": "dev", **request}]}},
        },
    )


async def create_objects(s: Space) -> str:
    """Nodes, the slice, the class and the claims (no pods yet); the GPU node's name."""
    node = await s.add_node("gpu", cpu="8", memory="32Gi")
    await s.add_node("plain", cpu="8", memory="32Gi")
    devices: list[JSON] = []
    for i in range(4):
        device: JSON = {"name": f"gpu-{i}", "attributes": {"index": {"int": i}}}
        if i in TAINTS:
            device["taints"] = TAINTS[i]
        devices.append(device)
    pool = {"name": node, "generation": 1, "resourceSliceCount": 1}
    await _slice(
        s, f"{node}-gpus", {"driver": GPU, "nodeName": node, "pool": pool, "devices": devices}
    )
    gpu_class = await _class(s, GPU)
    subs = [
        {"name": "triple", "deviceClassName": gpu_class, "count": 3},
        {"name": "pair", "deviceClassName": gpu_class, "count": 2},
    ]
    await _claim(s, "fa", {"firstAvailable": subs})
    await _claim(s, "untolerated", {"exactly": {"deviceClassName": gpu_class}})
    tolerations = [{"key": "example.com/maintenance", "operator": "Exists"}]
    await _claim(
        s, "tolerant", {"exactly": {"deviceClassName": gpu_class, "tolerations": tolerations}}
    )
    return node


async def check_allocations(s: Space, node: str) -> None:
    """The same checks for either scheduler (see the module docstring)."""
    pods = await s.pods()
    found = await s.client.request("GET", RESOURCE_CLAIMS.path(s.name))
    claims = {c["metadata"]["name"]: c for c in found.get("items") or []}
    expected = {
        "fa": [("dev/pair", "gpu-2"), ("dev/pair", "gpu-3")],
        "tolerant": [("dev", "gpu-0")],
    }
    for name, results in expected.items():
        assert pods[name]["spec"].get("nodeName") == node, f"{name} not bound to {node}"
        status = claims[name].get("status") or {}
        allocation = status.get("allocation")
        assert allocation, f"claim {name} not allocated"
        got = sorted(
            (r["request"], r["device"])
            for r in allocation["devices"]["results"]
            if r["driver"] == GPU and r["pool"] == node
        )
        assert got == results, (name, allocation["devices"]["results"])
        term = allocation["nodeSelector"]["nodeSelectorTerms"][0]
        assert term["matchFields"][0]["values"] == [node], term
        assert [r["name"] for r in status.get("reservedFor") or []] == [name]
        assert FINALIZER in claims[name]["metadata"].get("finalizers", []), name
    assert not pods["untolerated"]["spec"].get("nodeName"), "untolerated was bound"
    status = claims["untolerated"].get("status") or {}
    assert not status.get("allocation"), "untolerated allocated"


async def run_side(s: Space, node: str) -> None:
    await _pod(s, "fa")
    await wait_for(lambda: _bound(s, ["fa"]), timeout=60, what="pod fa bound")
    await _pod(s, "untolerated")
    await _pod(s, "tolerant")
    await wait_for(lambda: _bound(s, ["tolerant"]), timeout=60, what="pod tolerant bound")
    await asyncio.sleep(4.0)  # room for a wrong allocation to show up
    await check_allocations(s, node)


@pytest.mark.parametrize("scheduler", ["shoal", "kube-scheduler"])
@async_test(timeout=150)
async def test_taints_and_first_available_pass_the_same_checks_with_shoal_and_kube_scheduler(
    control_plane: dict[str, str], tmp_path: Path, scheduler: str
) -> None:
    async with space(control_plane["KUBECONFIG"], "drataint") as s:
        node = await create_objects(s)
        async with scheduling(control_plane, s, tmp_path, scheduler, "drataint"):
            await run_side(s, node)
