"""Small builders for GPU nodes and pods in the GPU tests."""

from __future__ import annotations

from shoal.api.gpu import (
    ANNOTATION_GPU_COUNT,
    ANNOTATION_GPU_INDEX,
    ANNOTATION_GPU_MILLI,
    ANNOTATION_GPU_MODEL,
    LABEL_GPU_MODEL,
)
from shoal.testing.builders import NodeBuilder, PodBuilder, make_node, make_pod


def gpu_node(
    name: str, gpus: int, cpu: str = "64", memory: str = "256Gi", model: str = "V100"
) -> NodeBuilder:
    node = make_node(name).capacity({"cpu": cpu, "memory": memory, "nvidia.com/gpu": gpus})
    return node.label(LABEL_GPU_MODEL, model) if model else node


def gpu_pod(
    name: str,
    *,
    milli: int = 1000,
    count: int = 1,
    cpu: str = "4",
    memory: str = "8Gi",
    models: str = "",
    node: str = "",
    devices: str = "",
) -> PodBuilder:
    annotations = {ANNOTATION_GPU_MILLI: str(milli), ANNOTATION_GPU_COUNT: str(count)}
    if models:
        annotations[ANNOTATION_GPU_MODEL] = models
    if devices:
        annotations[ANNOTATION_GPU_INDEX] = devices
    pod = make_pod(name).uid(name).req(cpu=cpu, memory=memory).annotations(annotations)
    return pod.node(node) if node else pod


def cpu_pod(name: str, cpu: str = "4", memory: str = "8Gi", node: str = "") -> PodBuilder:
    pod = make_pod(name).uid(name).req(cpu=cpu, memory=memory)
    return pod.node(node) if node else pod
