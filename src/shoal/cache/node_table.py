"""The columnar node table: one row per node, one column per resource.

Filter and Score plugins read whole columns (`allocatable[idx]`, `requested[idx]`) and
compute results for every candidate node with numpy, never one node at a time. The
resource arrays are indexed [row, resource] but stored column-major (Fortran order), so
one resource over all nodes (`free[:n, cpu]`) is a contiguous vector: filters compare
one contiguous column per requested resource instead of striding through rows.
`free` (allocatable - requested) is kept up to date so the fit check is one compare. Rows are
kept dense: removing a node moves the last row into its slot, so the live nodes are
always rows `0..n-1` and "all nodes" is the cheap slice `0:n`.

Every row carries a generation (`row_generation`): the table-wide `generation` at the row's
last change (node written, pod placed or taken off). It moves with its node when rows are
compacted and never repeats, so "the row is as I read it" is one integer compare: an
optimistic worker's proposal is checked against it at commit
(`shoal.scheduler.optimistic`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from typing import Protocol, TypeVar

import numpy as np
from numpy.typing import NDArray

from shoal.api.objects import Node, Taint
from shoal.api.podinfo import HostPort, PodInfo
from shoal.api.resources import (
    CPU,
    EPHEMERAL_STORAGE,
    MEMORY,
    PODS,
    ResourceList,
    parse_resource_list,
)
from shoal.cache.labels import LabelColumns
from shoal.cache.pod_columns import PodColumns

__all__ = ["BASE_RESOURCES", "NodeColumns", "NodeTable", "node_hash"]

T = TypeVar("T", bound=np.generic)

BASE_RESOURCES = (CPU, MEMORY, EPHEMERAL_STORAGE, PODS)
_INITIAL_CAPACITY = 64
_POD_VECTORS_KEPT = 4096  # distinct request shapes remembered (then forgotten at once)


class NodeColumns(Protocol):
    """Read access to the node columns that cluster totals are taken from (quota
    capacity, dominant shares). The table and the plugins' `Snapshot` both provide it."""

    @property
    def n(self) -> int: ...
    @property
    def nodes_version(self) -> int: ...
    @property
    def resource_index(self) -> Mapping[str, int]: ...
    @property
    def allocatable(self) -> NDArray[np.int64]: ...


class NodeTable:
    """Node rows and resource columns. Mutated only by `ClusterState`."""

    def __init__(self) -> None:
        self.resources: list[str] = list(BASE_RESOURCES)
        self.resource_index: dict[str, int] = {r: i for i, r in enumerate(self.resources)}
        self.n = 0
        self._capacity = _INITIAL_CAPACITY
        r = len(self.resources)
        self.allocatable = np.zeros((self._capacity, r), dtype=np.int64, order="F")
        self.requested = np.zeros((self._capacity, r), dtype=np.int64, order="F")
        self.free = np.zeros((self._capacity, r), dtype=np.int64, order="F")
        # Non-zero cpu/memory requests (kube-scheduler's scoring view of pods).
        self.nonzero_requested = np.zeros((self._capacity, 2), dtype=np.int64, order="F")
        self.unschedulable = np.zeros(self._capacity, dtype=bool)
        self.taint_set = np.zeros(self._capacity, dtype=np.int32)
        # Host ports in use per row, so NodePorts only looks at rows that have any.
        self.host_port_count = np.zeros(self._capacity, dtype=np.int32)
        self.names_array: NDArray[np.object_] = np.empty(self._capacity, dtype=object)
        # `node_hash` of each node's name: node shards are `name_hash % slots` (NodeFence).
        self.name_hash = np.zeros(self._capacity, dtype=np.uint32)
        # The table `generation` at each row's last change (see the module docstring).
        self.row_generation = np.zeros(self._capacity, dtype=np.int64)
        self.labels = LabelColumns(self._capacity)
        self.names: list[str] = []
        self.row_of: dict[str, int] = {}
        self.nodes: list[Node] = []
        self.pods: list[dict[str, PodInfo]] = []
        self.host_ports: list[list[HostPort]] = []
        # Distinct taint lists; set 0 is "no taints". Few distinct sets exist in practice,
        # so taint checks are done once per set and broadcast to rows.
        self._pod_vectors: dict[tuple[int, tuple[tuple[str, int], ...]], NDArray[np.int64]] = {}
        self.taint_sets: list[tuple[Taint, ...]] = [()]
        self._taint_set_ids: dict[tuple[Taint, ...], int] = {(): 0}
        # Bumped whenever columns are reallocated or added: snapshots rebuild their views.
        self.layout_version = 0
        # Bumped on any change a scheduling decision could depend on.
        self.generation = 0
        # Bumped only when a node is added, changed or removed (not on pod placement).
        self.nodes_version = 0
        self._cordoned_at = (-1, False)  # (nodes_version, any row unschedulable)
        self._pod_columns: PodColumns | None = None  # see `pod_columns`

    # ---- resource columns ----------------------------------------------------------

    def column(self, resource: str) -> int:
        """Column of a resource, adding a zero column the first time it is seen."""
        col = self.resource_index.get(resource)
        if col is None:
            col = len(self.resources)
            self.resources.append(resource)
            self.resource_index[resource] = col
            self.allocatable = _widened(self.allocatable)
            self.requested = _widened(self.requested)
            self.free = _widened(self.free)
            if self._pod_columns is not None:
                self._pod_columns.widen(len(self.resources))
            self.layout_version += 1
        return col

    def vector(self, resources: ResourceList) -> NDArray[np.int64]:
        """A dense request vector over the table's columns."""
        index = self.resource_index
        cols = [index[name] if name in index else self.column(name) for name in resources]
        out = np.zeros(len(self.resources), dtype=np.int64)
        out[cols] = list(resources.values())
        return out

    def pod_vector(self, pod: PodInfo) -> NDArray[np.int64]:
        """The pod's requests plus one `pods` slot (read-only: memoised on the pod, as
        placement, preemption and nominations ask for the same pods again and again)."""
        cached = pod.table_vector
        width = len(self.resources)
        if cached is not None and cached[0] is self and cached[1] == width:
            found: NDArray[np.int64] = cached[2]
            return found
        # Pods of one template ask for the same: their vectors are shared too.
        key = (width, tuple(pod.requests.items()))
        vec = self._pod_vectors.get(key)
        if vec is None:
            vec = self.vector(pod.requests)
            vec[self.resource_index[PODS]] += 1
            vec.flags.writeable = False
            if len(self._pod_vectors) >= _POD_VECTORS_KEPT:
                self._pod_vectors.clear()
            # `vector` may have added a column: key by the width it has now.
            self._pod_vectors[(len(self.resources), key[1])] = vec
            width = len(self.resources)
        pod.table_vector = (self, width, vec)
        return vec

    def pod_columns(self) -> PodColumns:
        """The placed pods as columns (`shoal.cache.pod_columns`): built from the rows on
        first use, then kept up to date by every placement."""
        if self._pod_columns is None:
            columns = PodColumns(len(self.resources))
            for row in range(self.n):
                for pod in self.pods[row].values():
                    columns.add(row, pod, self.pod_vector(pod))
            self._pod_columns = columns
        return self._pod_columns

    def any_unschedulable(self) -> bool:
        """Is any node cordoned? (Rechecked only when nodes change.)"""
        version, cordoned = self._cordoned_at
        if version != self.nodes_version:
            cordoned = bool(self.unschedulable[: self.n].any())
            self._cordoned_at = (self.nodes_version, cordoned)
        return cordoned

    # ---- rows ----------------------------------------------------------------------

    def _grow(self) -> None:
        cap = self._capacity * 2

        def grown(a: NDArray[T]) -> NDArray[T]:
            out = np.zeros((cap, *a.shape[1:]), dtype=a.dtype, order="F")
            out[: self._capacity] = a
            return out

        self.allocatable = grown(self.allocatable)
        self.requested = grown(self.requested)
        self.free = grown(self.free)
        self.nonzero_requested = grown(self.nonzero_requested)
        self.unschedulable = grown(self.unschedulable)
        self.taint_set = grown(self.taint_set)
        self.host_port_count = grown(self.host_port_count)
        self.name_hash = grown(self.name_hash)
        self.row_generation = grown(self.row_generation)
        names = np.empty(cap, dtype=object)
        names[: self._capacity] = self.names_array
        self.names_array = names
        self.labels.grow(cap)
        self._capacity = cap
        self.layout_version += 1

    def add(self, node: Node) -> int:
        if self.n == self._capacity:
            self._grow()
        row = self.n
        self.n += 1
        name = node.metadata.name
        self.names.append(name)
        self.names_array[row] = name
        self.name_hash[row] = node_hash(name)
        self.row_of[name] = row
        self.nodes.append(node)
        self.pods.append({})
        self.host_ports.append([])
        self.requested[row] = 0
        self.nonzero_requested[row] = 0
        self.host_port_count[row] = 0
        self._write_node(row, node)
        return row

    def update(self, node: Node) -> int:
        row = self.row_of[node.metadata.name]
        self.nodes[row] = node
        self._write_node(row, node)
        return row

    def _write_node(self, row: int, node: Node) -> None:
        status = node.status
        allocatable = parse_resource_list(status.allocatable or status.capacity)
        self.allocatable[row] = 0
        for resource, amount in allocatable.items():
            col = self.column(resource)  # may widen the arrays: look it up first
            self.allocatable[row, col] = amount
        self.free[row] = self.allocatable[row] - self.requested[row]
        self.unschedulable[row] = node.spec.unschedulable
        self.taint_set[row] = self._taint_set_id(tuple(node.spec.taints))
        self.labels.set_row(row, node.metadata.labels)
        self.generation += 1
        self.row_generation[row] = self.generation
        self.nodes_version += 1

    def _taint_set_id(self, taints: tuple[Taint, ...]) -> int:
        found = self._taint_set_ids.get(taints)
        if found is None:
            found = self._taint_set_ids[taints] = len(self.taint_sets)
            self.taint_sets.append(taints)
        return found

    def remove(self, name: str) -> list[PodInfo]:
        """Drop a node; returns the pods that were on it. The last row fills the gap."""
        row = self.row_of.pop(name)
        orphans = list(self.pods[row].values())
        last = self.n - 1
        if self._pod_columns is not None:
            for pod in orphans:
                self._pod_columns.remove(pod.uid)
            if row != last:
                self._pod_columns.move_row(last, row)
        if row != last:
            for array in (
                self.allocatable,
                self.requested,
                self.free,
                self.nonzero_requested,
                self.unschedulable,
                self.taint_set,
                self.host_port_count,
                self.names_array,
                self.name_hash,
                self.row_generation,
            ):
                array[row] = array[last]
            self.labels.move_row(last, row)
            self.names[row] = self.names[last]
            self.nodes[row] = self.nodes[last]
            self.pods[row] = self.pods[last]
            self.host_ports[row] = self.host_ports[last]
            self.row_of[self.names[row]] = row
        else:
            self.labels.clear_row(row)
        self.names.pop()
        self.nodes.pop()
        self.pods.pop()
        self.host_ports.pop()
        self.names_array[last] = None
        self.n -= 1
        self.generation += 1
        self.nodes_version += 1
        return orphans

    # ---- pods on rows --------------------------------------------------------------

    def place(self, row: int, pod: PodInfo) -> None:
        vector = self.pod_vector(pod)
        self.requested[row] += vector
        self.free[row] -= vector
        self.nonzero_requested[row, 0] += pod.nonzero[0]
        self.nonzero_requested[row, 1] += pod.nonzero[1]
        self.pods[row][pod.uid] = pod
        if self._pod_columns is not None:
            self._pod_columns.add(row, pod, vector)
        if pod.host_ports:
            self.host_ports[row].extend(pod.host_ports)
            self.host_port_count[row] += len(pod.host_ports)
        self.generation += 1
        self.row_generation[row] = self.generation

    def unplace(self, row: int, pod: PodInfo) -> None:
        vector = self.pod_vector(pod)
        self.requested[row] -= vector
        self.free[row] += vector
        self.nonzero_requested[row, 0] -= pod.nonzero[0]
        self.nonzero_requested[row, 1] -= pod.nonzero[1]
        del self.pods[row][pod.uid]
        if self._pod_columns is not None:
            self._pod_columns.remove(pod.uid)
        for port in pod.host_ports:
            self.host_ports[row].remove(port)
        self.host_port_count[row] -= len(pod.host_ports)
        self.generation += 1
        self.row_generation[row] = self.generation

    def replace(self, row: int, pod: PodInfo) -> None:
        """A new object of a pod placed on `row` that counts the same
        (`shoal.cache.cluster.same_footprint`)."""
        self.pods[row][pod.uid] = pod
        if self._pod_columns is not None:
            self._pod_columns.replace(pod)

    def rows(self, names: Iterable[str]) -> NDArray[np.intp]:
        return np.array([self.row_of[n] for n in names if n in self.row_of], dtype=np.intp)


def node_hash(name: str) -> int:
    """A 32-bit hash of a node name that spreads similar names (`node-0`, `node-1`, ...)
    evenly over node shards (crc32 is linear: names differing in a short suffix fall into
    a few fixed residues). Stable across processes and versions: replicas must agree."""
    return int.from_bytes(hashlib.blake2b(name.encode(), digest_size=4).digest(), "little")


def _widened(a: NDArray[np.int64]) -> NDArray[np.int64]:
    """The array with one more (zero) resource column, still column-major."""
    out = np.zeros((a.shape[0], a.shape[1] + 1), dtype=a.dtype, order="F")
    out[:, :-1] = a
    return out
