"""DeviceTaintRules (KEP-5055: resource.k8s.io/v1beta2, served by the kit's v1.36 with
the DRADeviceTaintRules feature gate) on the real API server, with Shoal.

Not beside the stock kube-scheduler: the kit's v1.36.2 with DRADeviceTaintRules on
panics once a DeviceTaintRule exists ("interface conversion: interface {} is
*v1beta2.DeviceTaintRule, not *v1alpha3.DeviceTaintRule" in its ResourceSlice tracker,
reproduced by hand with one rule, one slice and one pod), so the checks below are the
ones its documentation defines: a rule's taint acts as if the driver had put it in the
slice.

The test gets a namespace, two nodes and a scheduler name of its own. Node `gpu`
publishes four untainted GPUs in its slice (pool = the node's name); the rules:

* `maintenance`: driver, pool and device gpu-0: `example.com/maintenance=true:NoSchedule`;
* `broken`: pool and device gpu-1: `example.com/broken=ecc:NoExecute`;
* `other-driver`: another driver and this pool: NoSchedule, selects nothing here;
* `note`: the whole pool, effect `None`: informational, blocks nothing.

Pod `pair` (two GPUs, no tolerations) comes first and must get gpu-2 and gpu-3; then
`tolerant` (one GPU, tolerating `example.com/maintenance`) must get gpu-0 and
`untolerated` (one GPU) must stay pending, its claim unallocated (gpu-1 goes to nobody).
Then the `broken` rule is deleted: `untolerated` must get gpu-1.

Run with `pytest -m apiserver`; skipped when ../shared/k8s is absent (see conftest.py).
"""

from __future__ import annotations

import asyncio
from typing import Any

from apihelpers import Space, space, wait_for
from kubehelpers import async_test
from test_dra_capacity import _bound, _class, _pod, _slice
from test_dra_taints_first_available import _claim

from shoal.drivers.kube.dra import DEVICE_TAINT_RULES, FINALIZER, RESOURCE_CLAIMS

JSON = dict[str, Any]
GPU = "gpu.example.com"


async def _rule(s: Space, name: str, selector: JSON, taint: JSON) -> str:
    full = f"{s.name}-{name}"
    await s.create(
        DEVICE_TAINT_RULES.path(),
        {
            "apiVersion": "resource.k8s.io/v1beta2",
            "kind": "DeviceTaintRule",
            "metadata": {"name": full},
            "spec": {"deviceSelector": selector, "taint": taint},
        },
    )
    s.cluster_objects.append(DEVICE_TAINT_RULES.path(name=full))
    return full


async def create_objects(s: Space) -> tuple[str, str]:
    """Nodes, the slice, the class, the rules and the claims (no pods yet); the GPU
    node's name and the `broken` rule's."""
    node = await s.add_node("gpu", cpu="8", memory="32Gi")
    await s.add_node("plain", cpu="8", memory="32Gi")
    devices = [{"name": f"gpu-{i}", "attributes": {"index": {"int": i}}} for i in range(4)]
    pool = {"name": node, "generation": 1, "resourceSliceCount": 1}
    await _slice(
        s, f"{node}-gpus", {"driver": GPU, "nodeName": node, "pool": pool, "devices": devices}
    )
    gpu_class = await _class(s, GPU)
    await _rule(
        s,
        "maintenance",
        {"driver": GPU, "pool": node, "device": "gpu-0"},
        {"key": "example.com/maintenance", "value": "true", "effect": "NoSchedule"},
    )
    broken = await _rule(
        s,
        "broken",
        {"pool": node, "device": "gpu-1"},
        {"key": "example.com/broken", "value": "ecc", "effect": "NoExecute"},
    )
    await _rule(
        s,
        "other-driver",
        {"driver": "nic.example.com", "pool": node},
        {"key": "example.com/other", "effect": "NoSchedule"},
    )
    await _rule(s, "note", {"pool": node}, {"key": "example.com/note", "effect": "None"})
    await _claim(s, "pair", {"exactly": {"deviceClassName": gpu_class, "count": 2}})
    await _claim(s, "untolerated", {"exactly": {"deviceClassName": gpu_class}})
    tolerations = [{"key": "example.com/maintenance", "operator": "Exists"}]
    await _claim(
        s, "tolerant", {"exactly": {"deviceClassName": gpu_class, "tolerations": tolerations}}
    )
    return node, broken


async def _claims(s: Space) -> dict[str, JSON]:
    found = await s.client.request("GET", RESOURCE_CLAIMS.path(s.name))
    return {c["metadata"]["name"]: c for c in found.get("items") or []}


async def check_allocations(s: Space, node: str, expected: dict[str, list[str]]) -> None:
    pods = await s.pods()
    claims = await _claims(s)
    for name, devices in expected.items():
        assert pods[name]["spec"].get("nodeName") == node, f"{name} not bound to {node}"
        status = claims[name].get("status") or {}
        allocation = status.get("allocation")
        assert allocation, f"claim {name} not allocated"
        got = sorted(r["device"] for r in allocation["devices"]["results"])
        assert got == devices, (name, allocation["devices"]["results"])
        assert [r["name"] for r in status.get("reservedFor") or []] == [name]
        assert FINALIZER in claims[name]["metadata"].get("finalizers", []), name


async def run_side(s: Space, node: str, broken: str) -> None:
    await _pod(s, "pair")
    await wait_for(lambda: _bound(s, ["pair"]), timeout=60, what="pod pair bound")
    await _pod(s, "untolerated")
    await _pod(s, "tolerant")
    await wait_for(lambda: _bound(s, ["tolerant"]), timeout=60, what="pod tolerant bound")
    await asyncio.sleep(4.0)  # room for a wrong allocation to show up
    await check_allocations(s, node, {"pair": ["gpu-2", "gpu-3"], "tolerant": ["gpu-0"]})
    pods = await s.pods()
    assert not pods["untolerated"]["spec"].get("nodeName"), "untolerated was bound"
    assert not ((await _claims(s))["untolerated"].get("status") or {}).get("allocation")
    # The rule gone, its device is free for a claim that does not tolerate its taint.
    await s.client.request("DELETE", DEVICE_TAINT_RULES.path(name=broken))
    await wait_for(lambda: _bound(s, ["untolerated"]), timeout=60, what="untolerated bound")
    await check_allocations(s, node, {"untolerated": ["gpu-1"]})


@async_test(timeout=150)
async def test_device_taint_rules_keep_devices_from_claims_that_do_not_tolerate_them(
    control_plane: dict[str, str],
) -> None:
    async with space(control_plane["KUBECONFIG"], "drarule") as s:
        node, broken = await create_objects(s)
        async with s.shoal(s.options("drarule")):
            await run_side(s, node, broken)
