"""Builders shared by the tenancy scenarios."""

from __future__ import annotations

from typing import Any

from shoal.api.manifests import decode
from shoal.api.podgroup import VolcanoPodGroup
from shoal.api.queue import ElasticQuota, NodePool, Queue, QueueBinding
from shoal.testing import SchedulerHarness

GPU = "nvidia.com/gpu"


def queue(name: str, **spec: Any) -> Queue:
    return decode({"metadata": {"name": name}, "spec": spec}, Queue)


def binding(name: str, q: str, *namespaces: str, **spec: Any) -> QueueBinding:
    raw = {"metadata": {"name": name}, "spec": {"queue": q, "namespaces": list(namespaces), **spec}}
    return decode(raw, QueueBinding)


def elastic_quota(namespace: str, **spec: Any) -> ElasticQuota:
    return decode(
        {"metadata": {"name": "quota", "namespace": namespace}, "spec": spec}, ElasticQuota
    )


def node_pool(name: str, **spec: Any) -> NodePool:
    return decode({"metadata": {"name": name}, "spec": spec}, NodePool)


def volcano_group(namespace: str, name: str, q: str = "", min_member: int = 1) -> VolcanoPodGroup:
    raw = {
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"minMember": min_member, "queue": q},
    }
    return decode(raw, VolcanoPodGroup)


def harness(reclaim_delay: float = 30.0) -> SchedulerHarness:
    config = {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "profiles": [
            {
                "schedulerName": "default-scheduler",
                "pluginConfig": [
                    {"name": "QueueCapacity", "args": {"reclaimDelaySeconds": reclaim_delay}}
                ],
            }
        ],
    }
    return SchedulerHarness(config)
