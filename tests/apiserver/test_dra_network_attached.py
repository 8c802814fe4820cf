"""Network-attached pools (a ResourceSlice with `spec.nodeSelector`) on the real API
server, given once to Shoal and once to the stock kube-scheduler of the kit. Both sides
must pass the same checks.

Each side gets a namespace, three nodes (`a`, `b`, `c`) and a scheduler name of its own.
One slice publishes two devices reachable from the nodes whose hostname is `a` or `b`
(no device is local to any node). Three pods each claim one device:

* two are bound, to `a` or `b` (never `c`), each claim allocated one device with the
  slice's node selector as the allocation's (so the kubelet of another node would not
  prepare it), reserved for its pod, with kube's delete-protection finalizer;
* the third stays pending, its claim unallocated: both devices are taken, and `c`,
  which has room, reaches none.

Run with `pytest -m apiserver`; skipped when ../shared/k8s is absent (see conftest.py).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from apihelpers import Space, scheduling, space, wait_for
from kubehelpers import async_test
from test_dra_capacity import _class, _pod, _slice

from shoal.drivers.kube.dra import FINALIZER, RESOURCE_CLAIMS

JSON = dict[str, Any]
DRIVER = "fabric.example.com"
PODS = ["one-0", "one-1", "one-2"]
HOSTNAME = "kubernetes.io/hostname"


async def create_objects(s: Space) -> list[str]:
    """Nodes, the slice, the class and the claims (no pods yet); the reaching nodes."""
    reaching = [await s.add_node(name, cpu="8", memory="32Gi") for name in ("a", "b")]
    await s.add_node("c", cpu="8", memory="32Gi")
    term = {"matchExpressions": [{"key": HOSTNAME, "operator": "In", "values": reaching}]}
    pool = {"name": f"{s.name}-fabric", "generation": 1, "resourceSliceCount": 1}
    devices = [{"name": f"fpga-{i}", "attributes": {"index": {"int": i}}} for i in range(2)]
    spec = {
        "driver": DRIVER,
        "nodeSelector": {"nodeSelectorTerms": [term]},
        "pool": pool,
        "devices": devices,
    }
    await _slice(s, f"{s.name}-fabric", spec)
    fabric_class = await _class(s, DRIVER)
    for name in PODS:
        await s.create(
            RESOURCE_CLAIMS.path(s.name),
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": {"name": name, "namespace": s.name},
                "spec": {
                    "devices": {
                        "requests": [{"name": "dev", "exactly": {"deviceClassName": fabric_class}}]
                    }
                },
            },
        )
    return reaching


async def check_allocations(s: Space, reaching: list[str]) -> None:
    """The same checks for either scheduler (see the module docstring)."""
    pods = await s.pods()
    found = await s.client.request("GET", RESOURCE_CLAIMS.path(s.name))
    claims = {c["metadata"]["name"]: c for c in found.get("items") or []}
    bound = [name for name in PODS if pods[name]["spec"].get("nodeName")]
    assert len(bound) == 2, f"bound: {bound}"
    devices = []
    for name in bound:
        assert pods[name]["spec"]["nodeName"] in reaching, (name, pods[name]["spec"])
        status = claims[name].get("status") or {}
        allocation = status.get("allocation")
        assert allocation, f"claim {name} not allocated"
        results = allocation["devices"]["results"]
        assert len(results) == 1 and results[0]["driver"] == DRIVER, results
        devices.append(results[0]["device"])
        terms = allocation["nodeSelector"]["nodeSelectorTerms"]
        assert len(terms) == 1 and not terms[0].get("matchFields"), terms
        [expression] = terms[0]["matchExpressions"]
        assert expression["key"] == HOSTNAME and sorted(expression["values"]) == sorted(reaching), (
            expression
        )
        assert [r["name"] for r in status.get("reservedFor") or []] == [name]
        assert FINALIZER in claims[name]["metadata"].get("finalizers", []), name
    assert sorted(devices) == ["fpga-0", "fpga-1"], devices
    [waiting] = [name for name in PODS if name not in bound]
    assert not (claims[waiting].get("status") or {}).get("allocation"), "third claim allocated"


async def run_side(s: Space, reaching: list[str]) -> None:
    for name in PODS:
        await _pod(s, name)

    async def two_bound() -> bool:
        return len(await s.bound()) >= 2

    await wait_for(two_bound, timeout=60, what="two pods bound")
    await asyncio.sleep(4.0)  # room for a wrong allocation to show up
    await check_allocations(s, reaching)


@pytest.mark.parametrize("scheduler", ["shoal", "kube-scheduler"])
@async_test(timeout=150)
async def test_network_attached_devices_pass_the_same_checks_with_shoal_and_kube_scheduler(
    control_plane: dict[str, str], tmp_path: Path, scheduler: str
) -> None:
    async with space(control_plane["KUBECONFIG"], "dranet") as s:
        reaching = await create_objects(s)
        async with scheduling(control_plane, s, tmp_path, scheduler, "dranet"):
            await run_side(s, reaching)
