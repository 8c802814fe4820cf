"""ClusterState: the scheduler's cache of nodes and the pods placed on them.

Backends feed it what they observe (node and pod add/update/delete); the scheduler
*assumes* a pod onto a node at Reserve, before the bind is confirmed, and *forgets* it
if binding fails. Bound pods count wherever they came from, including pods bound by
another scheduler or created with `spec.nodeName`.

Two kinds of observers keep derived state incremental:

* `PlacementObserver` (the pod-topology index, GPU devices): told when a pod starts or
  stops occupying a node *row*; a pod whose node is missing from the cache occupies none.
* `AssignmentObserver` (tenant queue usage): told when a pod is assigned to a node or
  released, whether or not the node is known. Quota is charged to pods, not rows: a node
  that drops out of the cache for a while must not make its pods' usage disappear.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Set
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

from shoal.api.gpu import ANNOTATION_GPU_INDEX, node_gpus
from shoal.api.objects import Node
from shoal.api.podinfo import PodInfo
from shoal.cache.declared_features import DeclaredFeatures
from shoal.cache.gpu_devices import GpuDevices
from shoal.cache.hypernodes import HyperNodeTopology
from shoal.cache.images import ImageStates
from shoal.cache.kueue_topologies import KueueTopologies
from shoal.cache.namespaces import NamespaceLabels
from shoal.cache.node_fence import NodeFence
from shoal.cache.node_table import NodeTable
from shoal.cache.nominations import NominatedColumns

__all__ = [
    "AssignmentObserver",
    "ClusterState",
    "PlacedPods",
    "PlacementObserver",
    "PodRecord",
    "observer_service",
]


class PlacementObserver(Protocol):
    """Told about every pod that starts or stops occupying a node row."""

    def pod_placed(self, row: int, pod: PodInfo) -> None: ...
    def pod_unplaced(self, row: int, pod: PodInfo) -> None: ...
    def row_moved(self, src: int, dst: int) -> None: ...
    def node_changed(self, row: int) -> None: ...


_Observer = TypeVar("_Observer", bound=PlacementObserver)


def observer_service(
    services: dict[str, object],
    cluster: ClusterState,
    key: str,
    kind: type[_Observer],
    build: Callable[[ClusterState], _Observer],
) -> _Observer:
    """The handle's service `key` (an index kept by placement events, e.g. the volume or
    device catalog): built on first use, told about every pod already placed, then
    registered as an observer of the cluster."""
    found = services.get(key)
    if isinstance(found, kind):
        return found
    made = build(cluster)
    services[key] = made
    cluster.observers.append(made)
    table = cluster.table
    for row in range(table.n):
        for pod in table.pods[row].values():
            made.pod_placed(row, pod)
    return made


def same_footprint(a: PodInfo, b: PodInfo) -> bool:
    """Do two versions of a pod count the same for every observer (requests, ports,
    labels, priority, affinity terms, the annotations that name queues, groups and GPU
    needs, whether it is terminating)? The device indices Shoal writes at bind are left
    out: the devices were chosen when the pod was assumed and the echo only records
    them."""
    if a is b:
        return True
    if (
        # Terminating pods leave topology spread's counts (kube skips them): a pod that
        # starts terminating (a watch update with its deletionTimestamp, which the API
        # server sends before the deletion even at grace 0) must be counted again, or
        # it is never uncounted and spread judges by pods long gone.
        (a.pod.metadata.deletion_timestamp is None) != (b.pod.metadata.deletion_timestamp is None)
        or a.requests != b.requests
        or a.labels != b.labels
        or a.host_ports != b.host_ports
        or a.priority != b.priority
        or a.namespace != b.namespace
        or a.nonzero != b.nonzero
        or a.affinity_terms != b.affinity_terms
        or a.anti_affinity_terms != b.anti_affinity_terms
        or a.preferred_affinity_terms != b.preferred_affinity_terms
        or a.preferred_anti_affinity_terms != b.preferred_anti_affinity_terms
        or a.spread_constraints != b.spread_constraints
    ):
        return False
    ann_a, ann_b = a.pod.metadata.annotations, b.pod.metadata.annotations
    if ann_a == ann_b:
        return True
    index_a = ann_a.get(ANNOTATION_GPU_INDEX)
    index_b = ann_b.get(ANNOTATION_GPU_INDEX)
    if index_a is not None and index_b is not None and index_a != index_b:
        return False  # someone else decided other devices: recount
    strip = {ANNOTATION_GPU_INDEX}
    return {k: v for k, v in ann_a.items() if k not in strip} == {
        k: v for k, v in ann_b.items() if k not in strip
    }


class AssignmentObserver(Protocol):
    """Told about every pod that is assigned (assumed or bound) to a node or released,
    independent of whether the node is in the cache."""

    def pod_assigned(self, pod: PodInfo, node: str) -> None: ...
    def pod_released(self, pod: PodInfo, node: str) -> None: ...


@dataclass(slots=True)
class PodRecord:
    pod: PodInfo
    node: str
    assumed: bool  # True until the backend confirms the bind


class PlacedPods(Protocol):
    """Read access to where pods are and who is being evicted: what victim searches and
    gang accounting need. The cache and the plugins' `Snapshot` both provide it."""

    @property
    def placed(self) -> Mapping[str, PodRecord]: ...
    @property
    def evicting(self) -> Set[str]: ...


@dataclass
class ClusterState:
    table: NodeTable = field(default_factory=NodeTable)
    # uid -> where the pod is (assumed or bound), whether or not its node is known yet.
    placed: dict[str, PodRecord] = field(default_factory=dict)
    # Pods bound to nodes we have not seen yet (informer order is not guaranteed).
    _waiting_for_node: dict[str, dict[str, PodInfo]] = field(default_factory=dict)
    observers: list[PlacementObserver] = field(default_factory=list)
    assignment_observers: list[AssignmentObserver] = field(default_factory=list)
    # Pods that preempted room on a node and wait to be placed there (kube's nominator):
    # uid -> (node, pod). Lower- or equal-priority pods treat that room as taken.
    nominations: dict[str, tuple[str, PodInfo]] = field(default_factory=dict)
    # The same as columns (`shoal.cache.nominations`), kept in step by nominate/clear.
    nominated: NominatedColumns = field(default_factory=NominatedColumns)
    # Pods whose eviction was decided and sent, still counted until they are deleted.
    # They are never chosen as victims again.
    evicting: set[str] = field(default_factory=set)
    # Pods assumed and not yet confirmed bound (`placed` records with `assumed`), so a
    # search over many pods can leave them out without reading every record.
    assumed: set[str] = field(default_factory=set)
    # Labels of namespaces, for namespace selectors (pod affinity terms, queue bindings).
    namespaces: NamespaceLabels = field(default_factory=NamespaceLabels)
    # GPU devices per node row; created with the first node that has GPUs, so a cluster
    # without GPUs pays nothing per placement (see shoal.cache.gpu_devices).
    gpu_devices: GpuDevices | None = None
    # Open what-if transactions (`Transaction(what_if=True)`): while any is, assignment
    # observers are not told (cluster-wide tallies need not follow a what-if).
    unobserved: int = 0
    # Bumped by every change of `nominations` (readers cache what they derive from it).
    nominations_version: int = 0
    # The node shards this replica may place on (nothing fenced unless a driver says).
    fence: NodeFence = field(init=False)
    # Volcano HyperNodes resolved to nodes: the network tiers as domain columns
    # (`shoal.cache.hypernodes`); told of every node change (nothing to do without any).
    hypernodes: HyperNodeTopology = field(init=False)
    # Kueue's Topology objects: the levels coarser than a node label, for gangs whose
    # members prefer a level (`shoal.cache.kueue_topologies`).
    kueue_topologies: KueueTopologies = field(default_factory=KueueTopologies)
    # Container images the nodes hold (`status.images`), for ImageLocality.
    images: ImageStates = field(init=False)
    # The features nodes declare (`status.declaredFeatures`), for NodeDeclaredFeatures.
    declared_features: DeclaredFeatures = field(init=False)

    def __post_init__(self) -> None:
        self.fence = NodeFence(self.table)
        self.hypernodes = HyperNodeTopology(self.table)
        self.images = ImageStates(self.table)
        self.declared_features = DeclaredFeatures(self.table)

    def nominate(self, pod: PodInfo, node: str) -> None:
        self.nominations[pod.uid] = (node, pod)
        self.nominated.set(self.table, pod, node)
        self.nominations_version += 1

    def clear_nomination(self, uid: str) -> None:
        if self.nominations.pop(uid, None) is not None:
            self.nominated.remove(uid)
            self.nominations_version += 1

    # ---- nodes -------------------------------------------------------------------

    def add_node(self, node: Node) -> None:
        name = node.metadata.name
        if name in self.table.row_of:
            self.update_node(node)
            return
        row = self.table.add(node)
        self.hypernodes.node_changed(row)
        self.images.node_changed(row)
        self.declared_features.node_changed(row)
        for obs in self.observers:
            obs.node_changed(row)
        for pod in self._waiting_for_node.pop(name, {}).values():
            self._occupy(row, pod)
        self._track_gpus(node)

    def update_node(self, node: Node) -> None:
        if node.metadata.name not in self.table.row_of:
            self.add_node(node)
            return
        row = self.table.update(node)
        self.hypernodes.node_changed(row)
        self.images.node_changed(row)
        self.declared_features.node_changed(row)
        for obs in self.observers:
            obs.node_changed(row)
        self._track_gpus(node)  # GPUs often appear later, when the device plugin registers

    def _track_gpus(self, node: Node) -> None:
        if self.gpu_devices is None and node_gpus(node)[0] > 0:
            GpuDevices.of_cluster(self)

    def remove_node(self, name: str) -> list[PodInfo]:
        """Remove a node. Its pods stay recorded (they still exist in the API) until deleted."""
        if name not in self.table.row_of:
            return []
        row = self.table.row_of[name]
        for pod in list(self.table.pods[row].values()):
            for obs in self.observers:
                obs.pod_unplaced(row, pod)
        last = self.table.n - 1
        pods = self.table.remove(name)
        self.hypernodes.node_removed(name, row, last)
        self.images.node_removed(row, last)
        self.declared_features.node_removed(row, last)
        if row != last:
            for obs in self.observers:
                obs.row_moved(last, row)
        self._waiting_for_node[name] = {p.uid: p for p in pods}
        return pods

    def node(self, name: str) -> Node | None:
        row = self.table.row_of.get(name)
        return None if row is None else self.table.nodes[row]

    # ---- pods --------------------------------------------------------------------

    def assume(self, pod: PodInfo, node: str) -> None:
        """Count the pod on the node before its binding is confirmed (Reserve)."""
        if pod.uid in self.placed:
            raise ValueError(f"pod {pod.key} is already placed on {self.placed[pod.uid].node}")
        self.placed[pod.uid] = PodRecord(pod, node, assumed=True)
        self.assumed.add(pod.uid)
        self._assigned(pod, node)
        self._attach(pod, node)

    def forget(self, pod: PodInfo) -> None:
        """Undo `assume` after a failed bind or a rejected Permit."""
        record = self.placed.get(pod.uid)
        if record is None or not record.assumed:
            return
        del self.placed[pod.uid]
        self.assumed.discard(pod.uid)
        self._detach(record.pod, record.node)
        self._released(record.pod, record.node)

    def confirm(self, uid: str) -> None:
        """The backend has seen the bind land."""
        record = self.placed.get(uid)
        if record is not None:
            record.assumed = False
            self.assumed.discard(uid)

    def add_bound_pod(self, pod: PodInfo, node: str) -> None:
        """A pod observed with spec.nodeName set (bound by us, by others, or static)."""
        record = self.placed.get(pod.uid)
        self.assumed.discard(pod.uid)
        if record is not None:
            if record.node == node:
                record.assumed = False
                if record.pod is not pod and same_footprint(record.pod, pod):
                    # The watch echo of our own bind (or a status-only update): what the
                    # observers count is unchanged, so only the object is replaced.
                    self._replace(record, pod)
                elif record.pod is not pod:
                    self._detach(record.pod, node)
                    self._released(record.pod, node)
                    record.pod = pod
                    self._assigned(pod, node)
                    self._attach(pod, node)
                return
            self._detach(record.pod, record.node)
            self._released(record.pod, record.node)
        self.placed[pod.uid] = PodRecord(pod, node, assumed=False)
        self._assigned(pod, node)
        self._attach(pod, node)

    def _replace(self, record: PodRecord, pod: PodInfo) -> None:
        record.pod = pod
        row = self.table.row_of.get(record.node)
        if row is not None:
            self.table.replace(row, pod)
        else:
            self._waiting_for_node.setdefault(record.node, {})[pod.uid] = pod

    def remove_pod(self, uid: str) -> PodInfo | None:
        record = self.placed.pop(uid, None)
        self.assumed.discard(uid)
        if record is None:
            return None
        self._detach(record.pod, record.node)
        self._released(record.pod, record.node)
        return record.pod

    def pods_on(self, node: str) -> list[PodInfo]:
        row = self.table.row_of.get(node)
        return [] if row is None else list(self.table.pods[row].values())

    def _assigned(self, pod: PodInfo, node: str) -> None:
        if self.unobserved:
            return
        for obs in self.assignment_observers:
            obs.pod_assigned(pod, node)

    def _released(self, pod: PodInfo, node: str) -> None:
        if self.unobserved:
            return
        for obs in self.assignment_observers:
            obs.pod_released(pod, node)

    def _attach(self, pod: PodInfo, node: str) -> None:
        row = self.table.row_of.get(node)
        if row is None:
            self._waiting_for_node.setdefault(node, {})[pod.uid] = pod
            return
        self._occupy(row, pod)

    def _occupy(self, row: int, pod: PodInfo) -> None:
        self.table.place(row, pod)
        for obs in self.observers:
            obs.pod_placed(row, pod)

    def _detach(self, pod: PodInfo, node: str) -> None:
        row = self.table.row_of.get(node)
        if row is None:
            self._waiting_for_node.get(node, {}).pop(pod.uid, None)
            return
        self.table.unplace(row, pod)
        for obs in self.observers:
            obs.pod_unplaced(row, pod)
