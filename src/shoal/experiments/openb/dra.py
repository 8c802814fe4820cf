"""The openb trace as a DRA driver and its users would describe it (for
`runner.run_one_dra`, the protocol with the GPUs published through Dynamic Resource
Allocation).

The same trace, workload and policy as `runner.run_one`, with the cluster described as
a DRA driver and its users would: nodes list no GPU in their allocatable; each node's
GPUs are devices of a ResourceSlice (attribute `productName` = the node's model), each
allowing multiple allocations with a `compute` capacity of 1000 (milli-GPU); one
DeviceClass (`extendedResourceName: nvidia.com/gpu`) stands for them. A pod's GPU
request is a ResourceClaim: a share is one device with a `compute` capacity request of
its milli-GPU, k whole GPUs are k devices taking all 1000 of it; a pod constrained to
models selects them by `productName`. DynamicResources allocates; the policy scores the
nodes from the devices' state (`shoal.gpu.dra_gpus`), and a share's device is the one
the policy chose.

What differs from the listed GPUs of `run_one`: nothing in the protocol; the unallocated
GPU is measured from the devices' state. It shows that the device model is one: the same
policy strands about as much GPU either way (docs/dra.md).
"""

from __future__ import annotations

import msgspec

from shoal.api.dra import DeviceClass, ResourceClaim, ResourceSlice
from shoal.api.manifests import decode
from shoal.api.objects import Node, NodeStatus, Pod, PodResourceClaim
from shoal.api.resources import GPU
from shoal.experiments.openb.trace import NAMESPACE, NodeRow, PodRow, node_manifest

__all__ = ["DRIVER", "device_class", "dra_node", "gpu_claim", "gpu_slice", "with_claim"]

DRIVER = "gpu.openb.example.com"
_CLASS = "openb-gpu"


def device_class() -> DeviceClass:
    return decode(
        {
            "metadata": {"name": _CLASS},
            "spec": {
                "selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}],
                "extendedResourceName": GPU,
            },
        },
        DeviceClass,
    )


def dra_node(row: NodeRow) -> Node:
    node = node_manifest(row)
    listed = {k: v for k, v in node.status.allocatable.items() if k != GPU}
    return Node(
        metadata=node.metadata,
        spec=node.spec,
        status=NodeStatus(capacity=listed, allocatable=dict(listed)),
    )


def gpu_slice(row: NodeRow) -> ResourceSlice:
    devices = [
        {
            "name": f"gpu-{i}",
            "allowMultipleAllocations": True,
            "attributes": {"productName": {"string": row.model or "unknown"}},
            "capacity": {"compute": {"value": "1000"}},
        }
        for i in range(row.gpus)
    ]
    return decode(
        {
            "metadata": {"name": f"{row.name}-gpus"},
            "spec": {
                "driver": DRIVER,
                "nodeName": row.name,
                "pool": {"name": row.name, "generation": 1, "resourceSliceCount": 1},
                "devices": devices,
            },
        },
        ResourceSlice,
    )


def gpu_claim(row: PodRow, name: str) -> ResourceClaim:
    exactly: dict[str, object] = {
        "deviceClassName": _CLASS,
        "count": row.num_gpu,
        "capacity": {"requests": {"compute": str(row.gpu_milli)}},
    }
    models = [m.strip() for m in row.gpu_spec.split("|") if m.strip()]
    if models:
        listed = ", ".join(f'"{m}"' for m in models)
        exactly["selectors"] = [
            {"cel": {"expression": f'device.attributes["{DRIVER}"].productName in [{listed}]'}}
        ]
    return decode(
        {
            "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}},
        },
        ResourceClaim,
    )


def with_claim(pod: Pod, name: str) -> Pod:
    meta = msgspec.structs.replace(pod.metadata, annotations={})
    spec = msgspec.structs.replace(
        pod.spec, resource_claims=[PodResourceClaim(name="gpu", resource_claim_name=name)]
    )
    return msgspec.structs.replace(pod, metadata=meta, spec=spec)
