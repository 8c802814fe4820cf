"""Builders for Dynamic Resource Allocation objects in tests and examples.

    h.add_dra(
        device_class("gpu.example.com"),
        gpu_slice("n2", count=1, memory="80Gi"),
        resource_claim("one-gpu", "gpu.example.com"),
    )
    h.add_pods(with_claims(make_pod("a"), gpu="one-gpu"))

Devices shared by capacity (`shared_slice`, claims with `capacity={...}`) and
partitionable GPUs taking shared counters (`partitioned_slices`) too:

    h.add_dra(shared_slice("n1", capacity={"bandwidth": "10G"}))
    h.add_dra(resource_claim("half", "gpu.example.com", capacity={"bandwidth": "4G"}))
    h.add_dra(*partitioned_slices("n1", parts={"half": 2}))

Claims are plain manifests decoded into `shoal.api.dra` types, so anything the API
takes can be written with `raw=...` too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from shoal.api.dra import (
    DeviceClass,
    DeviceTaintRule,
    ResourceClaim,
    ResourceClaimTemplate,
    ResourceSlice,
)
from shoal.api.manifests import decode
from shoal.api.objects import Pod, PodResourceClaim
from shoal.api.quantity import parse_quantity
from shoal.testing.builders import PodBuilder

__all__ = [
    "DRIVER",
    "claim_spec",
    "claim_template",
    "device_class",
    "device_taint_rule",
    "gpu_slice",
    "partitioned_slices",
    "resource_claim",
    "shared_slice",
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
    taints: Mapping[int, Sequence[Mapping[str, str]]] | None = None,
) -> ResourceSlice:
    """A ResourceSlice publishing `count` GPUs of `node` (pool = node name).
    `attributes` gives extra per-device values: {"nvlinkDomain": [0, 0, 1, 1, ...]};
    `taints` the taints of some devices: {0: [{"key": "k", "effect": "NoSchedule"}]}."""
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
        device: dict[str, Any] = {
            "name": f"gpu-{i}",
            "attributes": attrs,
            "capacity": {"memory": {"value": memory}},
        }
        if taints and taints.get(i):
            device["taints"] = [dict(t) for t in taints[i]]
        devices.append(device)
    return _node_slice(name or f"{node}-{driver}", node, driver, generation, devices, all_nodes)


def _node_slice(
    name: str,
    node: str,
    driver: str,
    generation: int,
    devices: list[dict[str, Any]],
    all_nodes: bool,
) -> ResourceSlice:
    """A slice of one pool named after `node`, published for it (or for all nodes)."""
    spec: dict[str, Any] = {
        "driver": driver,
        "pool": {"name": node, "generation": generation, "resourceSliceCount": 1},
        "devices": devices,
    }
    if all_nodes:
        spec["allNodes"] = True
    else:
        spec["nodeName"] = node
    return decode({"metadata": {"name": name}, "spec": spec}, ResourceSlice)


def shared_slice(
    node: str,
    count: int = 1,
    *,
    capacity: Mapping[str, Any],
    driver: str = DRIVER,
    prefix: str = "nic",
    attributes: Mapping[str, Any] | None = None,
    all_nodes: bool = False,
    generation: int = 1,
    name: str = "",
) -> ResourceSlice:
    """A ResourceSlice of `count` devices of `node` that allow multiple allocations
    (`<prefix>-0`, ...; pool = node name), each with `capacity`: name -> value, or name
    -> {"value": ..., "requestPolicy": {...}} as the API spells it."""
    caps = {
        key: dict(value) if isinstance(value, Mapping) else {"value": value}
        for key, value in capacity.items()
    }
    devices = [
        {
            "name": f"{prefix}-{i}",
            "allowMultipleAllocations": True,
            "attributes": {
                "kind": {"string": prefix},
                "index": {"int": i},
                **{k: _attribute(v) for k, v in (attributes or {}).items()},
            },
            "capacity": caps,
        }
        for i in range(count)
    ]
    return _node_slice(
        name or f"{node}-{driver}-{prefix}", node, driver, generation, devices, all_nodes
    )


def partitioned_slices(
    node: str,
    gpus: int = 1,
    *,
    memory: str = "80Gi",
    parts: Mapping[str, int] | None = None,
    driver: str = DRIVER,
    generation: int = 1,
) -> list[ResourceSlice]:
    """What a driver of partitionable GPUs on `node` publishes (pool = node name), as
    Kubernetes 1.36 takes it: one slice with a counter set per GPU (`gpu-<i>`, counter
    `memory`) and one with the devices: per GPU the whole GPU `gpu-<i>` (attribute
    `size` "whole", taking all the memory) and, per entry of `parts` (name -> how many
    parts of equal size, default half: 2, quarter: 4), the partitions
    `gpu-<i>-<name>-<j>` (`size` = name, each taking memory/parts)."""
    total = parse_quantity(memory)
    split = dict(parts) if parts is not None else {"half": 2, "quarter": 4}
    counter_sets = [
        {"name": f"gpu-{g}", "counters": {"memory": {"value": memory}}} for g in range(gpus)
    ]
    devices: list[dict[str, Any]] = []
    for g in range(gpus):

        def device(name: str, size: str, amount: str, g: int = g) -> dict[str, Any]:
            return {
                "name": name,
                "attributes": {"size": {"string": size}, "gpu": {"int": g}},
                "capacity": {"memory": {"value": amount}},
                "consumesCounters": [
                    {"counterSet": f"gpu-{g}", "counters": {"memory": {"value": amount}}}
                ],
            }

        devices.append(device(f"gpu-{g}", "whole", memory))
        for size, n in split.items():
            amount = total / n
            text = str(amount.numerator) if amount.denominator == 1 else f"{amount * 1000:.0f}m"
            devices.extend(device(f"gpu-{g}-{size}-{j}", size, text) for j in range(n))
    pool = {"name": node, "generation": generation, "resourceSliceCount": 2}
    return [
        decode(
            {
                "metadata": {"name": f"{node}-{driver}-counters"},
                "spec": {
                    "driver": driver,
                    "nodeName": node,
                    "pool": pool,
                    "sharedCounters": counter_sets,
                },
            },
            ResourceSlice,
        ),
        decode(
            {
                "metadata": {"name": f"{node}-{driver}-partitions"},
                "spec": {"driver": driver, "nodeName": node, "pool": pool, "devices": devices},
            },
            ResourceSlice,
        ),
    ]


def _attribute(value: Any) -> dict[str, Any]:
    kind = "bool" if isinstance(value, bool) else "int" if isinstance(value, int) else "string"
    return {kind: value}


def claim_spec(
    device_class_name: str = DRIVER,
    *,
    count: int = 1,
    all_devices: bool = False,
    selectors: Sequence[str] = (),
    requests: Sequence[Mapping[str, Any]] | None = None,
    match_attribute: str = "",
    capacity: Mapping[str, str] | None = None,
    tolerations: Sequence[Mapping[str, str]] = (),
    config: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """`spec` of a claim: one request "gpu" (or the raw `requests` given); `capacity`
    is its `capacity.requests` (name -> quantity), `tolerations` its tolerations,
    `config` the claim's `devices.config` entries."""
    if requests is None:
        exactly: dict[str, Any] = {"deviceClassName": device_class_name}
        if all_devices:
            exactly["allocationMode"] = "All"
        else:
            exactly["count"] = count
        if selectors:
            exactly["selectors"] = [{"cel": {"expression": e}} for e in selectors]
        if capacity:
            exactly["capacity"] = {"requests": dict(capacity)}
        if tolerations:
            exactly["tolerations"] = [dict(t) for t in tolerations]
        requests = [{"name": "gpu", "exactly": exactly}]
    devices: dict[str, Any] = {"requests": list(requests)}
    if match_attribute:
        devices["constraints"] = [{"matchAttribute": match_attribute}]
    if config:
        devices["config"] = [dict(c) for c in config]
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


def device_taint_rule(
    name: str,
    key: str = "example.com/maintenance",
    *,
    value: str = "",
    effect: str = "NoSchedule",
    selector: Mapping[str, str] | None = None,
) -> DeviceTaintRule:
    """A DeviceTaintRule putting `key=value:effect` on the devices `selector` picks
    ({"driver": ..., "pool": ..., "device": ...}, any of them; {} picks every device,
    None none)."""
    spec: dict[str, Any] = {"taint": {"key": key, "effect": effect}}
    if value:
        spec["taint"]["value"] = value
    if selector is not None:
        spec["deviceSelector"] = dict(selector)
    return decode({"metadata": {"name": name}, "spec": spec}, DeviceTaintRule)


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
