"""Builders for Dynamic Resource Allocation objects in tests and examples.

    h.add_dra(
        device_class("gpu.example.com"),
        gpu_slice("n2", count=1, memory="80Gi"),
        resource_claim("one-gpu", "gpu.example.com"),
    )
    h.add_pods(with_claims(make_pod("a"), gpu="one-gpu"))

Claims are plain manifests decoded into `shoal.api.dra` types, so anything the API
takes can be written with `raw=...` too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from shoal.api.dra import (
    DeviceClass,
    ResourceClaim,
    ResourceClaimTemplate,
    ResourceSlice,
)
from shoal.api.manifests import decode
from shoal.api.objects import Pod, PodResourceClaim
from shoal.testing.builders import PodBuilder

__all__ = [
    "DRIVER",
    "claim_spec",
    "claim_template",
    "device_class",
    "gpu_slice",
    "resource_claim",
    "with_claims",
]

DRIVER = "gpu.example.com"


def device_class(name: str = DRIVER, *expressions: str, driver: str = DRIVER) -> DeviceClass:
    """A DeviceClass selecting the driver's devices (plus `expressions`)."""
    exprs = [f'device.driver == "{driver}"', *expressions]
    return decode(
        {
            "metadata": {"name": name},
            "spec": {"selectors": [{"cel": {"expression": e}} for e in exprs]},
        },
        DeviceClass,
    )


def gpu_slice(
    node: str,
    count: int = 8,
    *,
    memory: str = "80Gi",
    model: str = "H100",
    driver: str = DRIVER,
    attributes: Mapping[str, Sequence[Any]] | None = None,
    all_nodes: bool = False,
    generation: int = 1,
    name: str = "",
) -> ResourceSlice:
    """A ResourceSlice publishing `count` GPUs of `node` (pool = node name).
    `attributes` gives extra per-device values: {"nvlinkDomain": [0, 0, 1, 1, ...]}."""
    devices = []
    for i in range(count):
        attrs: dict[str, Any] = {
            "model": {"string": model},
            "index": {"int": i},
            "uuid": {"string": f"GPU-{node}-{i}"},
        }
        for key, values in (attributes or {}).items():
            value = values[i]
            kind = (
                "bool" if isinstance(value, bool) else "int" if isinstance(value, int) else "string"
            )
            attrs[key] = {kind: value}
        devices.append(
            {"name": f"gpu-{i}", "attributes": attrs, "capacity": {"memory": {"value": memory}}}
        )
    spec: dict[str, Any] = {
        "driver": driver,
        "pool": {"name": node, "generation": generation, "resourceSliceCount": 1},
        "devices": devices,
    }
    if all_nodes:
        spec["allNodes"] = True
    else:
        spec["nodeName"] = node
    return decode({"metadata": {"name": name or f"{node}-{driver}"}, "spec": spec}, ResourceSlice)


def claim_spec(
    device_class_name: str = DRIVER,
    *,
    count: int = 1,
    all_devices: bool = False,
    selectors: Sequence[str] = (),
    requests: Sequence[Mapping[str, Any]] | None = None,
    match_attribute: str = "",
) -> dict[str, Any]:
    """`spec` of a claim: one request "gpu" (or the raw `requests` given)."""
    if requests is None:
        exactly: dict[str, Any] = {"deviceClassName": device_class_name}
        if all_devices:
            exactly["allocationMode"] = "All"
        else:
            exactly["count"] = count
        if selectors:
            exactly["selectors"] = [{"cel": {"expression": e}} for e in selectors]
        requests = [{"name": "gpu", "exactly": exactly}]
    devices: dict[str, Any] = {"requests": list(requests)}
    if match_attribute:
        devices["constraints"] = [{"matchAttribute": match_attribute}]
    return {"devices": devices}


def resource_claim(
    name: str, device_class_name: str = DRIVER, *, namespace: str = "default", **kwargs: Any
) -> ResourceClaim:
    return decode(
        {
            "metadata": {"name": name, "namespace": namespace},
            "spec": claim_spec(device_class_name, **kwargs),
        },
        ResourceClaim,
    )


def claim_template(
    name: str, device_class_name: str = DRIVER, *, namespace: str = "default", **kwargs: Any
) -> ResourceClaimTemplate:
    return decode(
        {
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"spec": claim_spec(device_class_name, **kwargs)},
        },
        ResourceClaimTemplate,
    )


def with_claims(
    pod: Pod | PodBuilder, templates: Mapping[str, str] | None = None, **claims: str
) -> Pod:
    """The pod with `spec.resourceClaims`: entry=claim name, and `templates`
    entry=ResourceClaimTemplate name."""
    obj = pod.obj() if isinstance(pod, PodBuilder) else pod
    entries = [PodResourceClaim(name=k, resource_claim_name=v) for k, v in claims.items()]
    entries += [
        PodResourceClaim(name=k, resource_claim_template_name=v)
        for k, v in (templates or {}).items()
    ]
    spec = msgspec.structs.replace(obj.spec, resource_claims=entries)
    return msgspec.structs.replace(obj, spec=spec)
