"""Extended resources backed by DRA (KEP-5004; beta and on by default in the kit's
v1.36) on the real API server, given once to Shoal and once to the stock
kube-scheduler. Both sides must pass the same checks.

Each side gets a namespace, a scheduler name and three nodes of its own: `dra`
publishes two GPUs in a ResourceSlice and lists no GPU in its allocatable, `plugin`
lists two `<space>.example.com/gpu` in its allocatable (a device plugin's) and
publishes nothing, `plain` has neither. The DeviceClass names
`<space>.example.com/gpu` as its `extendedResourceName`.

* `both` asks for 2 GPUs (and cpu): on `dra` it needs a claim, on `plugin` not;
  `plugin` is filled first by `filler` (2 GPUs through its column; held there by a
  node selector, as `dra` would take it as well), so `both` must go to
  `dra` and get a claim the scheduler creates: annotated
  `resource.kubernetes.io/extended-resource-claim`, owned by the pod, one request
  `container-0-request-1` (cpu is request 0) for 2 devices of the class, allocated and
  reserved for the pod, and named in the pod's `status.extendedResourceClaimStatus`
  with the request mapping; `filler` gets no claim.
* `implicit` asks for `deviceclass.resource.kubernetes.io/<class>: 1`: every device is
  taken, so it stays pending, and no device is in two claims.

Run with `pytest -m apiserver`; skipped when ../shared/k8s is absent (see conftest.py).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from apihelpers import MERGE, Space, scheduling, space, wait_for
from kubehelpers import async_test
from test_dra_capacity import _bound, _slice

from shoal.drivers.kube.dra import DEVICE_CLASSES, RESOURCE_CLAIMS
from shoal.drivers.kube.resources import NODES, PODS

JSON = dict[str, Any]
DRIVER = "gpu.example.com"
ANNOTATION = "resource.kubernetes.io/extended-resource-claim"


async def create_objects(s: Space) -> tuple[str, str, str]:
    """Nodes, slice and class; (the DRA node, the device plugin's node, the class)."""
    gpu = f"{s.name}.example.com/gpu"
    dra = await s.add_node("dra", cpu="8", memory="32Gi")
    plugin = await s.add_node("plugin", cpu="8", memory="32Gi")
    await s.add_node("plain", cpu="8", memory="32Gi")
    listed = {"cpu": "8", "memory": "32Gi", "pods": "110", gpu: "2"}
    await s.client.request(
        "PATCH",
        NODES.path(name=plugin, subresource="status"),
        body={"status": {"capacity": listed, "allocatable": listed}},
        content_type=MERGE,
    )
    devices = [{"name": f"gpu-{i}"} for i in range(2)]
    pool = {"name": dra, "generation": 1, "resourceSliceCount": 1}
    await _slice(
        s, f"{dra}-gpus", {"driver": DRIVER, "nodeName": dra, "pool": pool, "devices": devices}
    )
    name = f"{s.name}-gpu"
    await s.create(
        DEVICE_CLASSES.path(),
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": name},
            "spec": {
                "selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}],
                "extendedResourceName": gpu,
            },
        },
    )
    s.cluster_objects.append(DEVICE_CLASSES.path(name=name))
    return dra, plugin, name


async def _pod(s: Space, name: str, resource: str, count: int, node: str = "") -> None:
    body = s.pod(name, cpu="100m")
    body["spec"]["containers"][0]["resources"]["requests"][resource] = str(count)
    body["spec"]["containers"][0]["resources"]["limits"] = {resource: str(count)}
    if node:
        body["spec"]["nodeSelector"]["kubernetes.io/hostname"] = node
    await s.create(PODS.path(s.name), body)


async def check(s: Space, dra: str, plugin: str, device_class: str) -> None:
    pods = await s.pods()
    found = await s.client.request("GET", RESOURCE_CLAIMS.path(s.name))
    claims = {c["metadata"]["name"]: c for c in found.get("items") or []}
    assert pods["filler"]["spec"].get("nodeName") == plugin
    assert pods["both"]["spec"].get("nodeName") == dra
    assert not pods["implicit"]["spec"].get("nodeName"), "implicit was bound"
    status = pods["both"].get("status", {}).get("extendedResourceClaimStatus") or {}
    name = status.get("resourceClaimName")
    assert name in claims, (status, sorted(claims))
    assert len(claims) == 1, f"claims for pods without DRA devices: {sorted(claims)}"
    assert status["requestMappings"] == [
        {
            "containerName": "c",
            "resourceName": f"{s.name}.example.com/gpu",
            "requestName": "container-0-request-1",
        }
    ]
    claim = claims[name]
    meta = claim["metadata"]
    assert meta.get("annotations", {}).get(ANNOTATION) == "true"
    (owner,) = meta["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"], owner.get("controller")) == (
        "Pod",
        "both",
        pods["both"]["metadata"]["uid"],
        True,
    )
    (request,) = claim["spec"]["devices"]["requests"]
    assert request["name"] == "container-0-request-1"
    assert request["exactly"]["deviceClassName"] == device_class
    assert request["exactly"]["count"] == 2
    allocation = claim["status"]["allocation"]
    devices = sorted(r["device"] for r in allocation["devices"]["results"])
    assert devices == ["gpu-0", "gpu-1"]
    assert [r["name"] for r in claim["status"].get("reservedFor") or []] == ["both"]


@pytest.mark.parametrize("scheduler", ["shoal", "kube-scheduler"])
@async_test(timeout=150)
async def test_extended_resources_backed_by_dra_pass_the_same_checks_with_shoal_and_kube_scheduler(
    control_plane: dict[str, str], tmp_path: Path, scheduler: str
) -> None:
    async with space(control_plane["KUBECONFIG"], "draext") as s:
        dra, plugin, device_class = await create_objects(s)
        gpu = f"{s.name}.example.com/gpu"
        async with scheduling(control_plane, s, tmp_path, scheduler, "draext"):
            # Held to `plugin`: `dra` could take it too and nothing in either
            # scheduler's scores tells the two apart (kube-scheduler's random tie-break
            # put it on `dra` in one run).
            await _pod(s, "filler", gpu, 2, node=plugin)
            await wait_for(lambda: _bound(s, ["filler"]), timeout=60, what="filler bound")
            await _pod(s, "both", gpu, 2)
            await wait_for(lambda: _bound(s, ["both"]), timeout=60, what="both bound")
            await _pod(s, "implicit", f"deviceclass.resource.kubernetes.io/{device_class}", 1)
            await asyncio.sleep(4.0)  # room for a wrong placement to show up
            await check(s, dra, plugin, device_class)
