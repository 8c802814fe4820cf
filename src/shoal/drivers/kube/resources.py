"""The API resources Shoal reads and writes, and how to address them.

A `ResourceKind` names a resource by group, version and plural, says whether it is
namespaced, which model decodes it and whether it may be missing from the cluster (a
CRD that is not installed). Informers are built from `WATCHED` (see
`shoal.drivers.kube.backend`), so watching a new kind is one entry there.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import quote

import msgspec

from shoal.api.hypernode import KUEUE_TOPOLOGY_VERSIONS, HyperNode, Topology
from shoal.api.objects import Node, Pod, PriorityClass
from shoal.api.podgroup import PodGroup, UpstreamPodGroup, VolcanoPodGroup
from shoal.api.queue import ElasticQuota, NodePool, PodDisruptionBudget, Queue, QueueBinding

__all__ = [
    "ELASTIC_QUOTAS",
    "ELASTIC_QUOTAS_SIGS",
    "EVENTS",
    "HYPERNODES",
    "KUEUE_TOPOLOGIES",
    "LEASES",
    "NAMESPACES",
    "NODES",
    "NODE_POOLS",
    "PDBS",
    "PODGROUPS",
    "PODGROUPS_SIGS",
    "PODS",
    "PRIORITY_CLASSES",
    "QUEUES",
    "QUEUE_BINDINGS",
    "UPSTREAM_PODGROUPS",
    "VOLCANO_PODGROUPS",
    "ResourceKind",
    "object_key",
    "object_ref",
]


@dataclass(frozen=True)
class ResourceKind:
    group: str  # "" for the core API
    version: str
    plural: str
    kind: str
    namespaced: bool
    model: type[msgspec.Struct] | None = None  # None: kept as raw JSON
    optional: bool = False  # a CRD that may not be installed
    # Other versions to read it in when `version` is not served (a CRD of an older or
    # newer release), in order; the informer uses the first that is.
    fallback_versions: tuple[str, ...] = ()

    def versions(self) -> list[ResourceKind]:
        """This kind, then one per fallback version."""
        return [
            self,
            *(replace(self, version=v, fallback_versions=()) for v in self.fallback_versions),
        ]

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def name(self) -> str:
        """`plural.group`, kubectl's fully qualified resource name."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    def path(
        self, namespace: str | None = None, name: str | None = None, subresource: str = ""
    ) -> str:
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{quote(namespace, safe='')}"
        base += f"/{self.plural}"
        if name is not None:
            base += f"/{quote(name, safe='')}"
            if subresource:
                base += f"/{subresource}"
        return base


def object_key(obj: dict[str, Any]) -> str:
    """`namespace/name` (or `name` for cluster-scoped objects), as in client-go caches."""
    meta = obj.get("metadata") or {}
    namespace = meta.get("namespace") or ""
    name = meta.get("name") or ""
    return f"{namespace}/{name}" if namespace else str(name)


def object_ref(kind: ResourceKind, obj: dict[str, Any]) -> dict[str, str]:
    """An ObjectReference to `obj` (for events' `regarding`)."""
    meta = obj.get("metadata") or {}
    api_version = str(obj.get("apiVersion") or "")
    if api_version.rpartition("/")[0] != kind.group:  # a version it was read in, or ours
        api_version = kind.api_version
    ref = {
        "apiVersion": api_version,
        "kind": kind.kind,
        "name": str(meta.get("name", "")),
        "uid": str(meta.get("uid", "")),
        "resourceVersion": str(meta.get("resourceVersion", "")),
    }
    if kind.namespaced:
        ref["namespace"] = str(meta.get("namespace", "")) or "default"
    return ref


PODS = ResourceKind("", "v1", "pods", "Pod", True, Pod)
NODES = ResourceKind("", "v1", "nodes", "Node", False, Node)
NAMESPACES = ResourceKind("", "v1", "namespaces", "Namespace", False)
PRIORITY_CLASSES = ResourceKind(
    "scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", False, PriorityClass
)
PDBS = ResourceKind(
    "policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", True, PodDisruptionBudget
)
PODGROUPS = ResourceKind(
    "scheduling.x-k8s.io", "v1alpha1", "podgroups", "PodGroup", True, PodGroup, optional=True
)
PODGROUPS_SIGS = ResourceKind(
    "scheduling.sigs.k8s.io", "v1alpha1", "podgroups", "PodGroup", True, PodGroup, optional=True
)
VOLCANO_PODGROUPS = ResourceKind(
    "scheduling.volcano.sh",
    "v1beta1",
    "podgroups",
    "PodGroup",
    True,
    VolcanoPodGroup,
    optional=True,
)
# Kubernetes' own (v1.36 alpha: served with the GenericWorkload gate and the
# scheduling.k8s.io/v1alpha2 API enabled; absent otherwise).
UPSTREAM_PODGROUPS = ResourceKind(
    "scheduling.k8s.io",
    "v1alpha2",
    "podgroups",
    "PodGroup",
    True,
    UpstreamPodGroup,
    optional=True,
)
QUEUES = ResourceKind("shoal.dev", "v1alpha1", "queues", "Queue", False, Queue, optional=True)
QUEUE_BINDINGS = ResourceKind(
    "shoal.dev", "v1alpha1", "queuebindings", "QueueBinding", False, QueueBinding, optional=True
)
NODE_POOLS = ResourceKind(
    "shoal.dev", "v1alpha1", "nodepools", "NodePool", False, NodePool, optional=True
)
ELASTIC_QUOTAS = ResourceKind(
    "scheduling.x-k8s.io",
    "v1alpha1",
    "elasticquotas",
    "ElasticQuota",
    True,
    ElasticQuota,
    optional=True,
)
ELASTIC_QUOTAS_SIGS = ResourceKind(
    "scheduling.sigs.k8s.io",
    "v1alpha1",
    "elasticquotas",
    "ElasticQuota",
    True,
    ElasticQuota,
    optional=True,
)
# Volcano's network topology (cluster-scoped; read when Volcano's CRD is installed).
HYPERNODES = ResourceKind(
    "topology.volcano.sh", "v1alpha1", "hypernodes", "HyperNode", False, HyperNode, optional=True
)
# Kueue's Topology objects (cluster-scoped; read when Kueue's CRD is installed, in the
# newest version it serves of those Shoal knows: they all have the same schema).
KUEUE_TOPOLOGIES = ResourceKind(
    "kueue.x-k8s.io",
    KUEUE_TOPOLOGY_VERSIONS[0],
    "topologies",
    "Topology",
    False,
    Topology,
    optional=True,
    fallback_versions=KUEUE_TOPOLOGY_VERSIONS[1:],
)
LEASES = ResourceKind("coordination.k8s.io", "v1", "leases", "Lease", True)
EVENTS = ResourceKind("events.k8s.io", "v1", "events", "Event", True)
