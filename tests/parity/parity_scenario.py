"""One scenario, as the raw API objects a cluster would hold, for the parity tests.

Every placement in it is decided by the plugins, not by arrival order or a random
tie-break: distinct priorities fix the queue order, distinct node sizes and GPU models
leave one best node for each pod, so the simulator and a cluster must agree exactly.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from shoal.api.gpu import ANNOTATION_GPU_COUNT, ANNOTATION_GPU_MILLI, ANNOTATION_GPU_MODEL
from shoal.api.gpu import LABEL_GPU_MODEL as GPU_MODEL

JSON = dict[str, Any]

SCHEDULER = "shoal"
GROUP_LABEL = "scheduling.x-k8s.io/pod-group"

CONFIG: JSON = {
    "percentageOfNodesToScore": 100,
    "profiles": [
        {
            "schedulerName": SCHEDULER,
            "plugins": {"multiPoint": {"enabled": [{"name": "GpuShare"}, {"name": "GpuPacking"}]}},
        }
    ],
}


def node(name: str, cpu: str, memory: str, gpus: int = 0, model: str = "", **labels: str) -> JSON:
    capacity: JSON = {"cpu": cpu, "memory": memory, "pods": "110"}
    if gpus:
        capacity["nvidia.com/gpu"] = str(gpus)
        labels[GPU_MODEL] = model
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **labels}},
        "status": {"capacity": capacity, "allocatable": dict(capacity)},
    }


def pod(
    name: str,
    cpu: str,
    priority: int,
    *,
    memory: str = "1Gi",
    pool: str = "",
    gpus: int = 0,
    annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    node_name: str = "",
) -> JSON:
    requests: JSON = {"cpu": cpu, "memory": memory}
    if gpus:
        requests["nvidia.com/gpu"] = str(gpus)
    spec: JSON = {
        "schedulerName": SCHEDULER,
        "priority": priority,
        "containers": [{"name": "c", "image": "busybox", "resources": {"requests": requests}}],
    }
    if gpus:
        spec["containers"][0]["resources"]["limits"] = {"nvidia.com/gpu": str(gpus)}
    if pool:
        spec["nodeSelector"] = {"pool": pool}
    if node_name:
        spec["nodeName"] = node_name
    meta: JSON = {"name": name, "namespace": "default"}
    if labels:
        meta["labels"] = labels
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def share(name: str, milli: int, priority: int, model: str = "") -> JSON:
    annotations = {ANNOTATION_GPU_MILLI: str(milli), ANNOTATION_GPU_COUNT: "1"}
    if model:
        annotations[ANNOTATION_GPU_MODEL] = model
    return pod(name, "1", priority, annotations=annotations)


def pod_group(name: str, min_member: int, timeout: int = 600) -> JSON:
    return {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"minMember": min_member, "scheduleTimeoutSeconds": timeout},
    }


@dataclass
class Scenario:
    nodes: list[JSON] = field(default_factory=list)
    pods: list[JSON] = field(default_factory=list)  # pending, for the scheduler
    running: list[JSON] = field(default_factory=list)  # bound and Running from the start
    groups: list[JSON] = field(default_factory=list)  # scheduler-plugins PodGroups

    def copy(self) -> Scenario:
        return copy.deepcopy(self)


def gpu_cluster() -> Scenario:
    """GPU shares, a whole-GPU pod, a gang that fits, one that cannot, a preemption."""
    s = Scenario()
    s.nodes = [
        node("gpu-v100", "16", "64Gi", gpus=2, model="V100"),
        node("gpu-a100", "32", "128Gi", gpus=4, model="A100"),
        node("cpu-big", "10", "40Gi", pool="cpu"),
        node("cpu-small", "4", "16Gi", pool="cpu"),
        node("cpu-tiny", "2", "8Gi", pool="tiny"),
    ]
    # GPU work, highest priority first so the order is fixed: the whole-GPU pod takes two
    # A100s; shares pack onto used devices (GpuPacking) within their model.
    s.pods = [
        pod("whole", "4", 900, gpus=2, annotations={ANNOTATION_GPU_MODEL: "A100"}),
        share("share-v1", 600, 800, model="V100"),
        share("share-v2", 300, 700, model="V100"),
        share("share-a", 500, 600, model="A100"),
        share("share-any", 200, 500),
    ]
    # A gang that fits (2 x 3 cpu) and one that cannot (3 x 6 cpu on 10 + 4 cpu).
    s.groups = [pod_group("fits", 2), pod_group("too-big", 3)]
    s.pods += [
        pod(f"fits-{i}", "3", 100, pool="cpu", labels={GROUP_LABEL: "fits"}) for i in range(2)
    ]
    s.pods += [
        pod(f"too-big-{i}", "6", 0, pool="cpu", labels={GROUP_LABEL: "too-big"}) for i in range(3)
    ]
    # A low-priority pod fills cpu-tiny; an urgent one must preempt it.
    s.running = [pod("victim", "2", 1, pool="tiny", node_name="cpu-tiny")]
    s.pods.append(pod("urgent", "2", 1000, pool="tiny"))
    return s
