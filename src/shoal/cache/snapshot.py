"""Snapshot: the read-only view of cluster state that plugins see during a cycle.

It is the plugins' only window on the cache: node columns, the pods placed on nodes,
who is being evicted, who is nominated where, namespace labels and GPU devices are all
read through it (a lint test keeps `handle.cluster` out of `shoal.plugins`); what-ifs
go through `handle.transaction()`. Mappings and sets come back typed read-only.

Arrays are numpy views with the writeable flag cleared, so a plugin that tries to change
cluster state fails loudly instead of corrupting it. Views are rebuilt only when the node
table reallocates; in between they see the table's current contents, which is exactly the
state a serial scheduling cycle should read (pods assumed by earlier cycles included).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence, Set

import numpy as np
from numpy.typing import NDArray

from shoal.api.hypernode import key_tier
from shoal.api.objects import Node, Taint
from shoal.api.podinfo import HostPort, PodInfo
from shoal.cache.cluster import ClusterState, PodRecord
from shoal.cache.declared_features import DeclaredFeatures
from shoal.cache.domain_index import DomainIndex
from shoal.cache.gpu_devices import GpuDevices
from shoal.cache.hypernodes import HyperNodeTopology
from shoal.cache.images import ImageStates
from shoal.cache.kueue_topologies import KueueTopologies
from shoal.cache.labels import LabelColumns
from shoal.cache.namespaces import NamespaceLabels
from shoal.cache.node_fence import NodeFence

__all__ = ["PodRecord", "Snapshot"]


def _frozen(array: NDArray[np.generic]) -> NDArray[np.generic]:
    view = array.view()
    view.flags.writeable = False
    return view


class Snapshot:
    """What plugins may read. Rows are node indices `0..n-1`."""

    allocatable: NDArray[np.int64]
    requested: NDArray[np.int64]
    free: NDArray[np.int64]
    nonzero_requested: NDArray[np.int64]
    unschedulable: NDArray[np.bool_]
    taint_set: NDArray[np.int32]
    names: NDArray[np.object_]

    def __init__(self, cluster: ClusterState) -> None:
        self._cluster = cluster
        self._layout = -1
        # Level key -> (the node and HyperNode versions it was built at, its index).
        self._domain_indexes: dict[str, tuple[tuple[int, int, int], DomainIndex]] = {}
        self.refresh()

    def refresh(self) -> None:
        table = self._cluster.table
        if table.layout_version != self._layout:
            self._layout = table.layout_version
            self.allocatable = _frozen(table.allocatable)  # type: ignore[assignment]
            self.requested = _frozen(table.requested)  # type: ignore[assignment]
            self.free = _frozen(table.free)  # type: ignore[assignment]
            self.nonzero_requested = _frozen(table.nonzero_requested)  # type: ignore[assignment]
            self.unschedulable = _frozen(table.unschedulable)  # type: ignore[assignment]
            self.taint_set = _frozen(table.taint_set)  # type: ignore[assignment]
            self.names = _frozen(table.names_array)  # type: ignore[assignment]

    @property
    def n(self) -> int:
        """Number of nodes."""
        return self._cluster.table.n

    @property
    def generation(self) -> int:
        return self._cluster.table.generation

    @property
    def declared_features(self) -> DeclaredFeatures:
        """The features nodes declare (NodeDeclaredFeatures); read it, never change it."""
        return self._cluster.declared_features

    @property
    def images(self) -> ImageStates:
        """Container images per node (ImageLocality); read it, never change it."""
        return self._cluster.images

    @property
    def nodes_version(self) -> int:
        """Changes whenever a node is added, removed or changes (not when pods move)."""
        return self._cluster.table.nodes_version

    @property
    def placed(self) -> Mapping[str, PodRecord]:
        """uid -> where the pod is (assumed or bound), known node or not."""
        return self._cluster.placed

    @property
    def evicting(self) -> Set[str]:
        """Pods whose eviction was sent: still counted, never chosen as victims again."""
        return self._cluster.evicting

    @property
    def nominations(self) -> Mapping[str, tuple[str, PodInfo]]:
        """uid -> (node, pod) of preemptors waiting for the room they freed."""
        return self._cluster.nominations

    @property
    def namespaces(self) -> NamespaceLabels:
        return self._cluster.namespaces

    @property
    def fence(self) -> NodeFence:
        """The node shards this replica may place on (see shoal.cache.node_fence)."""
        return self._cluster.fence

    @property
    def gpu_devices(self) -> GpuDevices | None:
        """GPU devices per node row (None until a node with GPUs is seen)."""
        return self._cluster.gpu_devices

    @property
    def resources(self) -> list[str]:
        return self._cluster.table.resources

    @property
    def resource_index(self) -> Mapping[str, int]:
        return self._cluster.table.resource_index

    @property
    def labels(self) -> LabelColumns:
        return self._cluster.table.labels

    @property
    def hypernodes(self) -> HyperNodeTopology:
        """Volcano's HyperNodes resolved to nodes (`shoal.cache.hypernodes`)."""
        return self._cluster.hypernodes

    @property
    def kueue_topologies(self) -> KueueTopologies:
        """Kueue's Topology objects (`shoal.cache.kueue_topologies`)."""
        return self._cluster.kueue_topologies

    def domain_column(self, key: str) -> tuple[NDArray[np.int32], Sequence[str]]:
        """A topology level over node rows 0..n-1: each node's domain code (MISSING: in
        none) and the domains' names by code. A node label, or a HyperNode tier
        (`volcano.sh/hypernode-tier-N`: the HyperNode of tier <= N holding the node),
        which node labels and selectors never see."""
        n = self.n
        tier = key_tier(key)
        if tier is not None:
            hypernodes = self._cluster.hypernodes
            codes = hypernodes.column(tier, n).view()
            codes.flags.writeable = False
            return codes, hypernodes.values
        labels = self._cluster.table.labels
        return labels.column(key, slice(0, n)), labels.values.get(key, [])

    def domain_index(self, key: str) -> DomainIndex:
        """`domain_column(key)` as an index for sums per domain (`DomainIndex`), built
        again only when a node (or, for a HyperNode tier, a HyperNode) changed: what
        topology-aware gang placement reads for every gang."""
        table = self._cluster.table
        version = (
            table.nodes_version,
            table.n,
            self._cluster.hypernodes.version if key_tier(key) is not None else -1,
        )
        cached = self._domain_indexes.get(key)
        if cached is not None and cached[0] == version:
            return cached[1]
        index = DomainIndex(*self.domain_column(key))
        self._domain_indexes[key] = (version, index)
        return index

    @property
    def taint_sets(self) -> list[tuple[Taint, ...]]:
        return self._cluster.table.taint_sets

    @property
    def row_of(self) -> Mapping[str, int]:
        """Node name -> row."""
        return self._cluster.table.row_of

    def rows(self, names: Iterable[str]) -> NDArray[np.intp]:
        """The rows of the named nodes that exist, in the order given."""
        return self._cluster.table.rows(names)

    def row(self, name: str) -> int | None:
        return self._cluster.table.row_of.get(name)

    def node_named(self, name: str) -> Node | None:
        return self._cluster.node(name)

    def node(self, row: int) -> Node:
        return self._cluster.table.nodes[row]

    def pods_on(self, row: int) -> Mapping[str, PodInfo]:
        return self._cluster.table.pods[row]

    def host_ports(self, row: int) -> list[HostPort]:
        return self._cluster.table.host_ports[row]

    def any_unschedulable(self) -> bool:
        """Is any node cordoned (`spec.unschedulable`)?"""
        return self._cluster.table.any_unschedulable()

    def rows_with_host_ports(self) -> NDArray[np.intp]:
        table = self._cluster.table
        return np.flatnonzero(table.host_port_count[: table.n])

    def nomination_of(self, pod: PodInfo) -> int | None:
        """The row of the node the pod is nominated to (after preempting), if any."""
        found = self._cluster.nominations.get(pod.uid)
        return None if found is None else self._cluster.table.row_of.get(found[0])

    def nominated_room(self, pod: PodInfo) -> tuple[NDArray[np.intp], NDArray[np.int64]]:
        """(rows, request vectors over all columns) of the nominated pods `pod` must
        leave room for, as `nominated_against`, vectorised over the nominations kept as
        columns (`shoal.cache.nominations`: preemption waves leave hundreds waiting)."""
        columns = self._cluster.nominated
        columns.sync(self._cluster.table)
        self.refresh()
        size = columns.size
        rows = columns.row[:size]
        mine = (columns.priority[:size] >= pod.priority) & (rows >= 0)
        own = columns.index.get(pod.uid)
        if own is not None:
            mine[own] = False
        return rows[mine], columns.vector[:size][mine]

    def free_for(self, pod: PodInfo, rows: NDArray[np.intp]) -> NDArray[np.int64]:
        """Free resources of `rows` (all columns, a copy) less the room nominated to
        other pods of equal or higher priority (kube adds nominated pods before judging
        a node)."""
        nominated_rows, vectors = self.nominated_room(pod)
        free: NDArray[np.int64] = self.free[rows].copy()
        if nominated_rows.size:
            position = np.full(self.n, -1, dtype=np.intp)
            position[rows] = np.arange(rows.size, dtype=np.intp)
            at = position[nominated_rows]
            hit = at >= 0
            np.subtract.at(free, at[hit], vectors[hit])
        return free

    def nominated_against(self, pod: PodInfo) -> list[tuple[int, PodInfo]]:
        """(row, pod) of nominated pods that `pod` must leave room for: other pods with
        equal or higher priority that preempted room on a node and wait for it."""
        out = []
        for uid, (node, other) in self._cluster.nominations.items():
            if uid != pod.uid and other.priority >= pod.priority:
                row = self._cluster.table.row_of.get(node)
                if row is not None:
                    out.append((row, other))
        return out

    def pod_vector(self, pod: PodInfo) -> NDArray[np.int64]:
        """The pod's requests over the snapshot's resource columns (incl. one pod slot)."""
        vector = self._cluster.table.pod_vector(pod)
        # A resource no node has yet adds a (zero) column: rebuild the views to match.
        self.refresh()
        return vector
