"""Device configuration on the real API server, given once to Shoal and once to the
stock kube-scheduler of the kit: the allocation a scheduler writes carries the driver
parameters of the classes and of the claim (`status.allocation.devices.config`), which
is how a DRA driver learns them. Both sides must write exactly the same list.

The claim is created with this project's client, whose JSON has spaces after ':' and
',': a merge patch of the claim's metadata (the finalizer) is refused for such opaque
parameters ("spec: field is immutable": the API server re-encodes them), which Shoal
works around by writing the claim back whole; both sides must add the finalizer.

One node publishes four GPUs. Class `a` (every GPU) and class `b` (GPUs with index >= 2)
each carry an opaque config. The claim has requests `r1` and `r2` (one GPU of class a
each) and `r3` with `firstAvailable` [`s1`: five GPUs of class b (cannot be met), `s2`:
one], and five configs of its own: one for every request, one for `r1`, one for the
chosen `r3/s2`, one for the sub-request not chosen (`r3/s1`) and one for `r1` and `r2`.

Run with `pytest -m apiserver`; skipped when ../shared/k8s is absent (see conftest.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from apihelpers import Space, scheduling, space, wait_for
from kubehelpers import async_test
from test_dra_capacity import _bound, _pod, _slice

from shoal.drivers.kube.dra import DEVICE_CLASSES, FINALIZER, RESOURCE_CLAIMS

JSON = dict[str, Any]
GPU = "gpu.example.com"


def _opaque(value: str) -> JSON:
    return {"opaque": {"driver": GPU, "parameters": {"mode": value}}}


async def _config_class(s: Space, name: str, expression: str, mode: str) -> str:
    full = f"{s.name}-{name}"
    await s.create(
        DEVICE_CLASSES.path(),
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": full},
            "spec": {
                "selectors": [{"cel": {"expression": expression}}],
                "config": [_opaque(mode)],
            },
        },
    )
    s.cluster_objects.append(DEVICE_CLASSES.path(name=full))
    return full


async def create_objects(s: Space) -> tuple[str, str]:
    node = await s.add_node("gpu", cpu="8", memory="32Gi")
    devices = [{"name": f"gpu-{i}", "attributes": {"index": {"int": i}}} for i in range(4)]
    pool = {"name": node, "generation": 1, "resourceSliceCount": 1}
    await _slice(
        s, f"{node}-gpus", {"driver": GPU, "nodeName": node, "pool": pool, "devices": devices}
    )
    a = await _config_class(s, "a", f'device.driver == "{GPU}"', "class-a")
    b = await _config_class(
        s, "b", f'device.driver == "{GPU}" && device.attributes["{GPU}"].index >= 2', "class-b"
    )
    requests = [
        {"name": "r1", "exactly": {"deviceClassName": a}},
        {"name": "r2", "exactly": {"deviceClassName": a}},
        {
            "name": "r3",
            "firstAvailable": [
                {"name": "s1", "deviceClassName": b, "count": 5},
                {"name": "s2", "deviceClassName": b},
            ],
        },
    ]
    config = [
        _opaque("every-request"),
        {"requests": ["r1"], **_opaque("r1")},
        {"requests": ["r3/s2"], **_opaque("chosen")},
        {"requests": ["r3/s1"], **_opaque("not-chosen")},
        {"requests": ["r1", "r2"], **_opaque("r1-r2")},
    ]
    await s.create(
        RESOURCE_CLAIMS.path(s.name),
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": "cfg", "namespace": s.name},
            "spec": {"devices": {"requests": requests, "config": config}},
        },
    )
    return a, b


def expected(a: str, b: str) -> list[JSON]:
    """What kube's allocator writes (and what both schedulers are held to)."""
    return [
        {"source": "FromClass", "requests": ["r1", "r2"], **_opaque("class-a")},
        {"source": "FromClass", "requests": ["r3/s2"], **_opaque("class-b")},
        {"source": "FromClaim", **_opaque("every-request")},
        {"source": "FromClaim", "requests": ["r1"], **_opaque("r1")},
        {"source": "FromClaim", "requests": ["r3/s2"], **_opaque("chosen")},
        {"source": "FromClaim", "requests": ["r1", "r2"], **_opaque("r1-r2")},
        {"source": "FromClaim", "requests": ["r1", "r2"], **_opaque("r1-r2")},
    ]


@pytest.mark.parametrize("scheduler", ["shoal", "kube-scheduler"])
@async_test(timeout=120)
async def test_the_allocation_carries_the_same_config_with_shoal_and_kube_scheduler(
    control_plane: dict[str, str], tmp_path: Path, scheduler: str
) -> None:
    async with space(control_plane["KUBECONFIG"], "dracfg") as s:
        a, b = await create_objects(s)
        async with scheduling(control_plane, s, tmp_path, scheduler, "dracfg"):
            await _pod(s, "cfg")
            await wait_for(lambda: _bound(s, ["cfg"]), timeout=60, what="pod cfg bound")
        claim = await s.client.request("GET", RESOURCE_CLAIMS.path(s.name, "cfg"))
        allocation = claim["status"]["allocation"]["devices"]
        requests = sorted(r["request"] for r in allocation["results"])
        assert requests == ["r1", "r2", "r3/s2"], allocation["results"]
        assert allocation.get("config") == expected(a, b)
        # The claim was created as this client writes JSON (spaces after ':' and ','),
        # which a merge patch of its metadata cannot keep in its opaque parameters: the
        # finalizer still had to be written (Shoal: by a PUT of the claim as read).
        assert FINALIZER in claim["metadata"].get("finalizers", [])
