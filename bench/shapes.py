"""scheduler_perf's default node and pod shapes, shared by the benchmark scripts:
node-default.yaml (4 cpu / 32Gi / 110 pods) and pod-default.yaml (100m / 500Mi)."""

from __future__ import annotations

from shoal.api.objects import (
    Container,
    Node,
    NodeStatus,
    ObjectMeta,
    Pod,
    PodSpec,
    ResourceRequirements,
)

__all__ = ["default_node", "default_pod"]


def default_node(i: int, labels: dict[str, str] | None = None) -> Node:
    return Node(
        metadata=ObjectMeta(name=f"node-{i}", labels=labels or {}),
        status=NodeStatus(
            capacity={"cpu": "4", "memory": "32Gi", "pods": "110"},
            allocatable={"cpu": "4", "memory": "32Gi", "pods": "110"},
        ),
    )


def default_pod(name: str, namespace: str, labels: dict[str, str] | None = None) -> Pod:
    return Pod(
        metadata=ObjectMeta(name=name, namespace=namespace, uid=name, labels=labels or {}),
        spec=PodSpec(
            containers=[
                Container(
                    name="pause",
                    image="registry.k8s.io/pause:3.10",
                    resources=ResourceRequirements(requests={"cpu": "100m", "memory": "500Mi"}),
                )
            ]
        ),
    )
