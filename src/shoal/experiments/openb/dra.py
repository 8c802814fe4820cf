"""The openb protocol with the GPUs published through Dynamic Resource Allocation.

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

import time
from collections.abc import Callable

import msgspec
import numpy as np

from shoal.api.dra import DeviceClass, ResourceClaim, ResourceSlice
from shoal.api.manifests import decode
from shoal.api.objects import Node, NodeStatus, Pod, PodResourceClaim
from shoal.api.resources import GPU
from shoal.cache.dra import DeviceCatalog
from shoal.config.types import KubeSchedulerConfiguration
from shoal.drivers.memory import MemoryEffects
from shoal.experiments.openb.protocol import (
    DEFAULT_RATIO,
    prepare_workload,
    target_workload,
)
from shoal.experiments.openb.runner import (
    _MEMORY_ARGS,
    SCHEDULER_NAME,
    RunResult,
    build_scheduler,
    driver_of,
    experiment_config,
    policy_plugin,
    run_result,
)
from shoal.experiments.openb.trace import (
    NAMESPACE,
    NodeRow,
    PodRow,
    Trace,
    node_manifest,
    pod_manifest,
)
from shoal.gpu.dra_gpus import DraGpuView
from shoal.scheduler.dra import upsert_dra

__all__ = ["DRIVER", "run_one_dra"]

DRIVER = "gpu.openb.example.com"
_CLASS = "openb-gpu"


def run_one_dra(
    trace: Trace,
    policy: str,
    seed: int,
    *,
    ratio: float = DEFAULT_RATIO,
    on_pod: Callable[[PodRow, bool, float], None] | None = None,
) -> RunResult:
    """One seed of the protocol with DRA GPUs (see the module docstring); `on_pod` as
    in `run_one`."""
    start = time.perf_counter()
    pods = prepare_workload(trace, seed, ratio)
    plugin = policy_plugin(policy)
    target = target_workload(trace, memory=plugin in _MEMORY_ARGS)
    config = experiment_config(policy, target)
    raw = config.model_dump(by_alias=True, exclude_none=True)
    raw["profiles"][0]["plugins"]["multiPoint"]["enabled"].append({"name": "DynamicResources"})
    sched = build_scheduler(KubeSchedulerConfiguration.model_validate(raw), seed)
    upsert_dra(sched, _device_class())
    order = np.random.default_rng([seed, 1]).permutation(len(trace.nodes))
    for i in order:
        node = trace.nodes[int(i)]
        sched.add_node(_node(node))
        if node.gpus:
            upsert_dra(sched, _slice(node))
    catalog = DeviceCatalog.of(sched.handle)
    capacity = trace.gpu_capacity_milli
    arrived = np.zeros(len(pods), dtype=np.int64)
    alloc = np.zeros(len(pods), dtype=np.int64)
    total = placed = 0
    first_failure: float | None = None
    driver = driver_of(sched)
    effects = driver.inbox
    assert isinstance(effects, MemoryEffects)
    allocated = 0
    for i, row in enumerate(pods):
        total += row.total_milli
        name = f"{i}-{row.name}"
        pod = pod_manifest(row, name, SCHEDULER_NAME)
        if row.num_gpu:
            upsert_dra(sched, _claim(row, name))
            pod = _with_claim(pod, name)
        info = sched.add_pod(pod)
        driver.run()
        if info.uid in effects.bound:
            placed += 1
            if row.num_gpu:
                view = DraGpuView.of(catalog)
                allocated = int(view.whole.sum() + view.shared.sum()) if view is not None else 0
        else:
            sched.delete_pod(info.uid)  # dropped: no retry
            if first_failure is None and row.total_milli:
                first_failure = 100.0 * total / capacity
        arrived[i] = total
        alloc[i] = allocated
        if on_pod is not None:
            on_pod(row, info.uid in effects.bound, 100.0 * total / capacity)
    return run_result(trace, policy, seed, placed, arrived, alloc, first_failure, start)


def _device_class() -> DeviceClass:
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


def _node(row: NodeRow) -> Node:
    node = node_manifest(row)
    listed = {k: v for k, v in node.status.allocatable.items() if k != GPU}
    return Node(
        metadata=node.metadata,
        spec=node.spec,
        status=NodeStatus(capacity=listed, allocatable=dict(listed)),
    )


def _slice(row: NodeRow) -> ResourceSlice:
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


def _claim(row: PodRow, name: str) -> ResourceClaim:
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


def _with_claim(pod: Pod, name: str) -> Pod:
    meta = msgspec.structs.replace(pod.metadata, annotations={})
    spec = msgspec.structs.replace(
        pod.spec, resource_claims=[PodResourceClaim(name="gpu", resource_claim_name=name)]
    )
    return msgspec.structs.replace(pod, metadata=meta, spec=spec)
