"""Snapshot: the read-only view of cluster state that plugins see during a cycle.

Arrays are numpy views with the writeable flag cleared, so a plugin that tries to change
cluster state fails loudly instead of corrupting it. Views are rebuilt only when the node
table reallocates; in between they see the table's current contents, which is exactly the
state a serial scheduling cycle should read (pods assumed by earlier cycles included).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from numpy.typing import NDArray

from shoal.api.objects import Node, Taint
from shoal.api.podinfo import HostPort, PodInfo
from shoal.cache.cluster import ClusterState
from shoal.cache.labels import LabelColumns

__all__ = ["Snapshot"]


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
    def resources(self) -> list[str]:
        return self._cluster.table.resources

    @property
    def resource_index(self) -> Mapping[str, int]:
        return self._cluster.table.resource_index

    @property
    def labels(self) -> LabelColumns:
        return self._cluster.table.labels

    @property
    def taint_sets(self) -> list[tuple[Taint, ...]]:
        return self._cluster.table.taint_sets

    def row(self, name: str) -> int | None:
        return self._cluster.table.row_of.get(name)

    def node(self, row: int) -> Node:
        return self._cluster.table.nodes[row]

    def pods_on(self, row: int) -> Mapping[str, PodInfo]:
        return self._cluster.table.pods[row]

    def host_ports(self, row: int) -> list[HostPort]:
        return self._cluster.table.host_ports[row]

    def rows_with_host_ports(self) -> NDArray[np.intp]:
        table = self._cluster.table
        return np.flatnonzero(table.host_port_count[: table.n])

    def nomination_of(self, pod: PodInfo) -> int | None:
        """The row of the node the pod is nominated to (after preempting), if any."""
        found = self._cluster.nominations.get(pod.uid)
        return None if found is None else self._cluster.table.row_of.get(found[0])

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
