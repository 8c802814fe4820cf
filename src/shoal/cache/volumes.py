"""VolumeCatalog: the scheduler's cache of storage objects, and volume attachments per node.

Backends feed it PersistentVolumeClaims, PersistentVolumes, StorageClasses, CSINodes,
CSIDrivers and CSIStorageCapacities (the kube backend from informers, the simulator and
the test harness directly). The volume plugins (VolumeBinding, VolumeZone,
NodeVolumeLimits) read it.

Two things are kept incrementally:

* Assumed bindings (kube's assume cache): VolumeBinding's Reserve records which
  PersistentVolume it chose for a claim and which node it selected for a claim to be
  provisioned, so later pods see that volume as taken before the API says so. An
  assumption ends when the API shows the object changed (`upsert_*`) or when Unreserve
  takes it back.
* Attached volumes per node row and CSI driver (a `PlacementObserver`), for
  NodeVolumeLimits: a volume counts once per node however many pods use it, as in
  kube. A claim is one volume (claims and volumes bind one to one), so the claim's key
  identifies it; its driver is resolved when the pod is placed. Pods without
  claims cost one attribute test.

Nothing here performs I/O; it is created once per scheduler (`VolumeCatalog.of`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Protocol

import msgspec
import numpy as np
from numpy.typing import NDArray

from shoal.api.podinfo import PodInfo
from shoal.api.volumes import (
    ANNOTATION_SELECTED_NODE,
    IN_TREE_CSI_DRIVERS,
    NO_PROVISIONER,
    CSIDriver,
    CSINode,
    CSIStorageCapacity,
    ObjectReference,
    PersistentVolume,
    PersistentVolumeClaim,
    StorageClass,
    claim_class,
    pod_claims,
)
from shoal.cache.change_log import ChangeLog
from shoal.cache.cluster import ClusterState, observer_service

__all__ = ["ClaimBinding", "VolumeCatalog"]

_SERVICE = "volumes"


class _Services(Protocol):
    """What `VolumeCatalog.of` needs of the framework's Handle."""

    services: dict[str, object]
    cluster: ClusterState


@dataclass(frozen=True, slots=True)
class ClaimBinding:
    """What VolumeBinding decided for one unbound claim of a pod on a node: bind it to
    the static volume `volume`, or (volume "") have it provisioned for the node."""

    claim: str  # namespace/name
    volume: str = ""


@dataclass
class _RowAttachments:
    refs: dict[str, int] = field(default_factory=dict)  # claim key -> pods using it
    driver_of: dict[str, str] = field(default_factory=dict)  # claim key -> driver


class VolumeCatalog:
    def __init__(self, cluster: ClusterState) -> None:
        self.cluster = cluster
        self.claims: dict[str, PersistentVolumeClaim] = {}
        self.volumes: dict[str, PersistentVolume] = {}
        self.classes: dict[str, StorageClass] = {}
        self.csi_nodes: dict[str, CSINode] = {}
        # Storage capacity tracking: CSIDrivers by name, CSIStorageCapacities by
        # namespace/name; `capacity_version` is bumped when either changes. The keys of
        # changed capacities, in order, are followed by StorageCapacityIndex.
        self.csi_drivers: dict[str, CSIDriver] = {}
        self.capacities: dict[str, CSIStorageCapacity] = {}
        self.capacity_version = 0
        self.capacity_changes = ChangeLog()
        # Bumped on every change (plugins cache derived masks against it).
        self.version = 0
        # Names of changed volumes, in order (followed by VolumeIndex).
        self.volume_changes = ChangeLog()
        # Assumed at Reserve: volume -> claim key, claim key -> selected node.
        self.assumed_volume: dict[str, str] = {}
        self.assumed_node: dict[str, str] = {}
        # Attachments (NodeVolumeLimits): per row, and per driver a count per row.
        self._rows: dict[int, _RowAttachments] = {}
        self._pod_claims: dict[str, list[tuple[str, str]]] = {}  # uid -> (claim, driver)
        self._claim_rows: dict[str, set[int]] = {}  # claim key -> rows it is attached on
        # claim key -> placed pods using it (counted or not yet resolvable).
        self._users: dict[str, dict[str, PodInfo]] = {}
        self.attached: dict[str, NDArray[np.int32]] = {}  # driver -> distinct volumes/row
        self._limits: dict[str, NDArray[np.int64]] = {}
        self._limits_key: tuple[int, int] = (-1, -1)
        self._csi_version = 0

    @classmethod
    def of(cls, handle: _Services) -> VolumeCatalog:
        """The scheduler's catalog (created on first use, watching the cluster)."""
        return observer_service(handle.services, handle.cluster, _SERVICE, cls, cls)

    # ---- objects from the API -------------------------------------------------------

    def upsert_claim(self, claim: PersistentVolumeClaim) -> None:
        key = claim.key
        self.claims[key] = claim
        selected = claim.metadata.annotations.get(ANNOTATION_SELECTED_NODE)
        if claim.spec.volume_name or selected == self.assumed_node.get(key):
            self.assumed_node.pop(key, None)
        self.version += 1
        if key in self._users:
            self._recount([key])

    def delete_claim(self, namespace: str, name: str) -> None:
        key = f"{namespace or 'default'}/{name}"
        self.claims.pop(key, None)
        self.assumed_node.pop(key, None)
        self.version += 1
        if key in self._users:
            self._recount([key])  # kube counts only claims it can look up

    def _volume_changed(self, name: str) -> None:
        self.volume_changes.changed(name, len(self.volumes))

    def upsert_volume(self, volume: PersistentVolume) -> None:
        name = volume.metadata.name
        self.volumes[name] = volume
        self._volume_changed(name)
        if volume.spec.claim_ref is not None:
            self.assumed_volume.pop(name, None)
            ref = volume.spec.claim_ref
            key = f"{ref.namespace or 'default'}/{ref.name}"
            if key in self._users:
                self._recount([key])
        self.version += 1

    def delete_volume(self, name: str) -> None:
        gone = self.volumes.pop(name, None)
        self._volume_changed(name)
        self.assumed_volume.pop(name, None)
        self.version += 1
        ref = gone.spec.claim_ref if gone is not None else None
        if ref is not None:
            self._recount([f"{ref.namespace or 'default'}/{ref.name}"])

    def upsert_class(self, storage_class: StorageClass) -> None:
        name = storage_class.metadata.name
        self.classes[name] = storage_class
        self.version += 1
        self._recount(
            [
                key
                for key in self._users
                if (claim := self.claims.get(key)) is not None and claim_class(claim) == name
            ]
        )

    def delete_class(self, name: str) -> None:
        self.classes.pop(name, None)
        self.version += 1

    def upsert_csi_node(self, csi_node: CSINode) -> None:
        self.csi_nodes[csi_node.metadata.name] = csi_node
        self._csi_version += 1
        self.version += 1

    def delete_csi_node(self, name: str) -> None:
        self.csi_nodes.pop(name, None)
        self._csi_version += 1
        self.version += 1

    def upsert_csi_driver(self, driver: CSIDriver) -> None:
        self.csi_drivers[driver.metadata.name] = driver
        self.capacity_version += 1
        self.version += 1

    def delete_csi_driver(self, name: str) -> None:
        self.csi_drivers.pop(name, None)
        self.capacity_version += 1
        self.version += 1

    def upsert_capacity(self, capacity: CSIStorageCapacity) -> None:
        self.capacities[capacity.key] = capacity
        self._capacity_changed(capacity.key)

    def delete_capacity(self, namespace: str, name: str) -> None:
        key = f"{namespace or 'default'}/{name}"
        self.capacities.pop(key, None)
        self._capacity_changed(key)

    def _capacity_changed(self, key: str) -> None:
        self.capacity_changes.changed(key, len(self.capacities))
        self.capacity_version += 1
        self.version += 1

    def tracks_capacity(self, provisioner: str) -> bool:
        """kube's hasEnoughCapacity gate: only a CSIDriver named after the class's
        provisioner with `storageCapacity: true` has its capacity checked."""
        driver = self.csi_drivers.get(provisioner)
        return driver is not None and bool(driver.spec.storage_capacity)

    # ---- reading, with assumptions applied --------------------------------------------

    def claim(self, key: str) -> PersistentVolumeClaim | None:
        return self.claims.get(key)

    def selected_node(self, claim: PersistentVolumeClaim) -> str:
        return self.assumed_node.get(claim.key) or claim.metadata.annotations.get(
            ANNOTATION_SELECTED_NODE, ""
        )

    def volume_taken(self, volume: PersistentVolume, claim: PersistentVolumeClaim) -> bool:
        """Bound or assumed for another claim than `claim`."""
        assumed = self.assumed_volume.get(volume.metadata.name)
        if assumed is not None:
            return assumed != claim.key
        return volume.spec.claim_ref is not None and not volume.bound_to(claim)

    def prebound(self, volume: PersistentVolume, claim: PersistentVolumeClaim) -> bool:
        return self.assumed_volume.get(volume.metadata.name) == claim.key or volume.bound_to(claim)

    def volumes_of_class(self, name: str) -> Iterator[PersistentVolume]:
        for volume in self.volumes.values():
            if volume.spec.storage_class_name == name:
                yield volume

    # ---- assume (VolumeBinding's Reserve) ---------------------------------------------

    def assume(self, bindings: list[ClaimBinding], node: str) -> None:
        for binding in bindings:
            if binding.volume:
                self.assumed_volume[binding.volume] = binding.claim
            else:
                self.assumed_node[binding.claim] = node
        self.version += 1

    def revert(self, bindings: list[ClaimBinding]) -> None:
        for binding in bindings:
            if binding.volume:
                if self.assumed_volume.get(binding.volume) == binding.claim:
                    del self.assumed_volume[binding.volume]
            else:
                self.assumed_node.pop(binding.claim, None)
        self.version += 1

    def bound_volume(self, claim: str, volume: str) -> None:
        """The in-memory cluster's PV controller: bind a claim and a volume at once."""
        found = self.claims.get(claim)
        pv = self.volumes.get(volume)
        if found is not None and pv is not None:
            ref = ObjectReference(
                kind="PersistentVolumeClaim",
                api_version="v1",
                namespace=found.metadata.namespace or "default",
                name=found.metadata.name,
                uid=found.metadata.uid,
            )
            self.upsert_volume(
                msgspec.structs.replace(
                    pv,
                    spec=msgspec.structs.replace(pv.spec, claim_ref=ref),
                    status=msgspec.structs.replace(pv.status, phase="Bound"),
                )
            )
            self.upsert_claim(
                msgspec.structs.replace(
                    found,
                    spec=msgspec.structs.replace(found.spec, volume_name=volume),
                    status=msgspec.structs.replace(found.status, phase="Bound"),
                )
            )

    def selected(self, claim: str, node: str) -> None:
        """The in-memory cluster records the node chosen for a claim to be provisioned."""
        found = self.claims.get(claim)
        if found is not None:
            meta = found.metadata
            annotations = {**meta.annotations, ANNOTATION_SELECTED_NODE: node}
            self.upsert_claim(
                msgspec.structs.replace(
                    found, metadata=msgspec.structs.replace(meta, annotations=annotations)
                )
            )

    # ---- attachments (NodeVolumeLimits) -------------------------------------------------

    def driver_of(self, claim: PersistentVolumeClaim) -> str:
        """The CSI driver that attaches the claim's volume ("" if none does, or not known
        yet): the bound volume's, else the provisioner of its StorageClass (kube's
        getCSIDriverInfo / getCSIDriverInfoFromSC, with CSI migration's names)."""
        if claim.spec.volume_name:
            volume = self.volumes.get(claim.spec.volume_name)
            if volume is not None:
                return volume.csi_driver()[0]
        name = claim_class(claim)
        storage_class = self.classes.get(name) if name else None
        if storage_class is None:
            return ""
        provisioner = storage_class.provisioner
        if provisioner == NO_PROVISIONER:
            return ""  # local volumes: nothing attaches them
        return IN_TREE_CSI_DRIVERS.get(provisioner, provisioner)

    def attachable(self, pod: PodInfo) -> list[tuple[str, str]]:
        """(claim key, CSI driver) of the pod's claims that a CSI driver attaches."""
        out = []
        for pc in pod_claims(pod.pod):
            claim = self.claims.get(pc.key)
            if claim is None:
                continue
            driver = self.driver_of(claim)
            if driver:
                out.append((pc.key, driver))
        return out

    def pod_placed(self, row: int, pod: PodInfo) -> None:
        if not pod.pod.spec.volumes:
            return
        for use in pod_claims(pod.pod):
            self._users.setdefault(use.key, {})[pod.uid] = pod
        found = self.attachable(pod)
        if not found:
            return
        self._pod_claims[pod.uid] = found
        slot = self._rows.setdefault(row, _RowAttachments())
        for claim, driver in found:
            count = slot.refs.get(claim, 0)
            slot.refs[claim] = count + 1
            if count == 0:
                slot.driver_of[claim] = driver
                self._column(driver, row)[row] += 1
                self._claim_rows.setdefault(claim, set()).add(row)

    def pod_unplaced(self, row: int, pod: PodInfo) -> None:
        if not pod.pod.spec.volumes:
            return
        for use in pod_claims(pod.pod):
            users = self._users.get(use.key)
            if users is not None:
                users.pop(pod.uid, None)
                if not users:
                    del self._users[use.key]
        found = self._pod_claims.pop(pod.uid, None)
        if not found:
            return
        slot = self._rows.get(row)
        if slot is None:
            return
        for claim, _ in found:
            count = slot.refs.get(claim, 0) - 1
            if count > 0:
                slot.refs[claim] = count
                continue
            slot.refs.pop(claim, None)
            rows = self._claim_rows.get(claim)
            if rows is not None:
                rows.discard(row)
                if not rows:
                    del self._claim_rows[claim]
            driver = slot.driver_of.pop(claim, "")
            column = self.attached.get(driver)
            if column is not None and row < len(column):
                column[row] -= 1
        if not slot.refs:
            del self._rows[row]

    def users_of(self, claim: str) -> dict[str, PodInfo]:
        """Placed pods (assumed or bound) that use the claim, by uid."""
        return self._users.get(claim, {})

    def _recount(self, claims: list[str]) -> None:
        """Count the placed pods using `claims` again: what a claim's driver resolves to
        changed (the claim, its volume or its class arrived or changed; after a restart
        pods may be read before their claims)."""
        table = self.cluster.table
        pods: dict[str, PodInfo] = {}
        for claim in claims:
            pods.update(self._users.get(claim, {}))
        for uid, pod in pods.items():
            record = self.cluster.placed.get(uid)
            row = table.row_of.get(record.node) if record is not None else None
            if row is None:
                continue
            self.pod_unplaced(row, pod)
            self.pod_placed(row, pod)

    def row_moved(self, src: int, dst: int) -> None:
        slot = self._rows.pop(src, None)
        if slot is not None:
            self._rows[dst] = slot
            for claim in slot.refs:
                rows = self._claim_rows.get(claim)
                if rows is not None:
                    rows.discard(src)
                    rows.add(dst)
        for driver, column in list(self.attached.items()):
            if len(column) <= max(src, dst):
                column = self.attached[driver] = _grown(column, max(src, dst) + 1)
            column[dst] = column[src]
            column[src] = 0
        self._limits_key = (-1, -1)

    def node_changed(self, row: int) -> None:
        self._limits_key = (-1, -1)

    def _column(self, driver: str, row: int) -> NDArray[np.int32]:
        column = self.attached.get(driver)
        if column is None or row >= len(column):
            size = max(row + 1, self.cluster.table.n, 64)
            column = self.attached[driver] = (
                np.zeros(size, dtype=np.int32) if column is None else _grown(column, size)
            )
        return column

    def attached_on(self, driver: str, rows: NDArray[np.intp]) -> NDArray[np.int32]:
        """Distinct volumes of `driver` attached on each row."""
        column = self.attached.get(driver)
        if column is None:
            return np.zeros(len(rows), dtype=np.int32)
        if len(column) < self.cluster.table.n:
            column = self.attached[driver] = _grown(column, self.cluster.table.n)
        return column[rows]

    def claim_on(self, claim: str, rows: NDArray[np.intp]) -> NDArray[np.bool_]:
        """Whether the claim's volume is already in use on each row."""
        holding = self._claim_rows.get(claim)
        if not holding:
            return np.zeros(len(rows), dtype=bool)
        found: NDArray[np.bool_] = np.isin(rows, list(holding))
        return found

    def limit_of(self, driver: str, rows: NDArray[np.intp]) -> NDArray[np.int64]:
        """The attach limit of `driver` per row from the node's CSINode (-1: no limit)."""
        table = self.cluster.table
        key = (table.nodes_version, self._csi_version)
        if self._limits_key != key:
            self._limits.clear()
            self._limits_key = key
        column = self._limits.get(driver)
        if column is None:
            column = np.full(table.n, -1, dtype=np.int64)
            for name, csi_node in self.csi_nodes.items():
                row = table.row_of.get(name)
                if row is None:
                    continue
                limit = csi_node.limits().get(driver)
                if limit is not None:
                    column[row] = limit
            self._limits[driver] = column
        return column[rows]


def _grown(column: NDArray[np.int32], size: int) -> NDArray[np.int32]:
    grown = np.zeros(max(size, 2 * len(column)), dtype=np.int32)
    grown[: len(column)] = column
    return grown
