"""Storage objects the volume plugins read: PersistentVolumeClaim, PersistentVolume,
StorageClass, CSINode, CSIDriver and CSIStorageCapacity (only the fields
kube-scheduler's volume plugins use), and what a pod's volumes ask of the scheduler.

Decoding checks types, quantities and enumerations, so a malformed object fails with the
path of the bad field (see `shoal.api.manifests`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import msgspec

from shoal.api.objects import LabelSelector, NodeSelector, ObjectMeta, Pod, Volume
from shoal.api.quantity import QuantityError, to_units

__all__ = [
    "ANNOTATION_BIND_COMPLETED",
    "ANNOTATION_BOUND_BY_CONTROLLER",
    "ANNOTATION_SELECTED_NODE",
    "IN_TREE_CSI_DRIVERS",
    "NO_PROVISIONER",
    "STORAGE",
    "ZONE_LABELS",
    "CSIDriver",
    "CSINode",
    "CSIStorageCapacity",
    "PersistentVolume",
    "PersistentVolumeClaim",
    "PodClaim",
    "StorageClass",
    "claim_class",
    "label_zones",
    "pod_claims",
    "unsupported_volumes",
]

AccessMode = Literal["ReadWriteOnce", "ReadOnlyMany", "ReadWriteMany", "ReadWriteOncePod"]
VolumeMode = Literal["Filesystem", "Block"]
Quantity = str | int | float

ANNOTATION_SELECTED_NODE = "volume.kubernetes.io/selected-node"
ANNOTATION_BOUND_BY_CONTROLLER = "pv.kubernetes.io/bound-by-controller"
# Set by the PersistentVolume controller once a claim's binding is complete.
ANNOTATION_BIND_COMPLETED = "pv.kubernetes.io/bind-completed"
_BETA_CLASS_ANNOTATION = "volume.beta.kubernetes.io/storage-class"
NO_PROVISIONER = "kubernetes.io/no-provisioner"
STORAGE = "storage"

# Node labels VolumeZone compares with a PersistentVolume's (kube's volumeZoneLabels).
ZONE_LABELS = (
    "topology.kubernetes.io/zone",
    "topology.kubernetes.io/region",
    "failure-domain.beta.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region",
)

# In-tree plugins and the CSI drivers CSI migration moved them to (csi-translation-lib);
# NodeVolumeLimits counts their PersistentVolumes against the CSI driver's limit.
IN_TREE_CSI_DRIVERS = {
    "kubernetes.io/aws-ebs": "ebs.csi.aws.com",
    "kubernetes.io/gce-pd": "pd.csi.storage.gke.io",
    "kubernetes.io/azure-disk": "disk.csi.azure.com",
    "kubernetes.io/cinder": "cinder.csi.openstack.org",
    "kubernetes.io/azure-file": "file.csi.azure.com",
    "kubernetes.io/vsphere-volume": "csi.vsphere.vmware.com",
    "kubernetes.io/portworx-volume": "pxd.portworx.com",
}


class _Base(msgspec.Struct, rename="camel", kw_only=True, omit_defaults=True):
    pass


def _storage(raw: dict[str, Quantity], field: str) -> int:
    if STORAGE not in raw:
        return 0
    try:
        return to_units(raw[STORAGE])
    except (QuantityError, ValueError) as err:
        raise ValueError(f"{field}.storage: {err}") from None


# ---- PersistentVolumeClaim -----------------------------------------------------------


class VolumeResourceRequirements(_Base):
    requests: dict[str, Quantity] = {}
    limits: dict[str, Quantity] = {}

    def __post_init__(self) -> None:
        _storage(self.requests, "requests")
        _storage(self.limits, "limits")


class PersistentVolumeClaimSpec(_Base):
    access_modes: list[AccessMode] = []
    resources: VolumeResourceRequirements = msgspec.field(
        default_factory=VolumeResourceRequirements
    )
    volume_name: str = ""
    storage_class_name: str | None = None
    volume_mode: VolumeMode | None = None
    selector: LabelSelector | None = None


class PersistentVolumeClaimStatus(_Base):
    phase: str = ""


class PersistentVolumeClaim(_Base):
    api_version: str = "v1"
    kind: str = "PersistentVolumeClaim"
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: PersistentVolumeClaimSpec = msgspec.field(default_factory=PersistentVolumeClaimSpec)
    status: PersistentVolumeClaimStatus = msgspec.field(default_factory=PersistentVolumeClaimStatus)

    @property
    def key(self) -> str:
        return f"{self.metadata.namespace or 'default'}/{self.metadata.name}"

    @property
    def request(self) -> int:
        """Requested storage in bytes."""
        return _storage(self.spec.resources.requests, "spec.resources.requests")


def claim_class(claim: PersistentVolumeClaim) -> str:
    """kube's GetPersistentVolumeClaimClass: the beta annotation wins, then the field."""
    beta = claim.metadata.annotations.get(_BETA_CLASS_ANNOTATION)
    if beta is not None:
        return beta
    return claim.spec.storage_class_name or ""


# ---- PersistentVolume ----------------------------------------------------------------


class ObjectReference(_Base):
    kind: str = ""
    api_version: str = ""
    namespace: str = ""
    name: str = ""
    uid: str = ""
    resource_version: str = ""


class VolumeNodeAffinity(_Base):
    required: NodeSelector | None = None


class CSIPersistentVolumeSource(_Base):
    driver: str
    volume_handle: str


class _InTreeDisk(_Base):
    volume_id: str = msgspec.field(default="", name="volumeID")
    pd_name: str = ""
    disk_name: str = ""
    disk_uri: str = msgspec.field(default="", name="diskURI")
    volume_path: str = ""
    share_name: str = ""


class PersistentVolumeSpec(_Base):
    capacity: dict[str, Quantity] = {}
    access_modes: list[AccessMode] = []
    claim_ref: ObjectReference | None = None
    storage_class_name: str = ""
    volume_mode: VolumeMode | None = None
    node_affinity: VolumeNodeAffinity | None = None
    csi: CSIPersistentVolumeSource | None = None
    aws_elastic_block_store: _InTreeDisk | None = None
    gce_persistent_disk: _InTreeDisk | None = None
    azure_disk: _InTreeDisk | None = None
    azure_file: _InTreeDisk | None = None
    cinder: _InTreeDisk | None = None
    vsphere_volume: _InTreeDisk | None = None
    portworx_volume: _InTreeDisk | None = None

    def __post_init__(self) -> None:
        _storage(self.capacity, "capacity")


class PersistentVolumeStatus(_Base):
    phase: str = ""


class PersistentVolume(_Base):
    api_version: str = "v1"
    kind: str = "PersistentVolume"
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: PersistentVolumeSpec = msgspec.field(default_factory=PersistentVolumeSpec)
    status: PersistentVolumeStatus = msgspec.field(default_factory=PersistentVolumeStatus)

    @property
    def capacity(self) -> int:
        return _storage(self.spec.capacity, "spec.capacity")

    def csi_driver(self) -> tuple[str, str]:
        """(CSI driver, volume handle), with in-tree sources translated as CSI migration
        does; ("", "") for a volume no CSI driver attaches (local, hostPath, nfs...)."""
        spec = self.spec
        if spec.csi is not None:
            return spec.csi.driver, spec.csi.volume_handle
        for plugin, disk in (
            ("kubernetes.io/aws-ebs", spec.aws_elastic_block_store),
            ("kubernetes.io/gce-pd", spec.gce_persistent_disk),
            ("kubernetes.io/azure-disk", spec.azure_disk),
            ("kubernetes.io/azure-file", spec.azure_file),
            ("kubernetes.io/cinder", spec.cinder),
            ("kubernetes.io/vsphere-volume", spec.vsphere_volume),
            ("kubernetes.io/portworx-volume", spec.portworx_volume),
        ):
            if disk is not None:
                handle = (
                    disk.volume_id
                    or disk.pd_name
                    or disk.disk_uri
                    or disk.disk_name
                    or disk.volume_path
                    or disk.share_name
                    or self.metadata.name
                )
                return IN_TREE_CSI_DRIVERS[plugin], handle
        return "", ""

    def bound_to(self, claim: PersistentVolumeClaim) -> bool:
        """kube's IsVolumeBoundToClaim: the claimRef names the claim (and its uid, if set)."""
        ref = self.spec.claim_ref
        if ref is None:
            return False
        meta = claim.metadata
        if ref.name != meta.name or (ref.namespace or "default") != (meta.namespace or "default"):
            return False
        return not ref.uid or not meta.uid or ref.uid == meta.uid


# ---- StorageClass ----------------------------------------------------------------------


class TopologySelectorLabelRequirement(_Base):
    key: str
    values: list[str]

    def __post_init__(self) -> None:
        if not self.values:
            raise ValueError(f"allowedTopologies key {self.key!r}: values must not be empty")


class TopologySelectorTerm(_Base):
    match_label_expressions: list[TopologySelectorLabelRequirement] = []


class StorageClass(_Base):
    api_version: str = "storage.k8s.io/v1"
    kind: str = "StorageClass"
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    provisioner: str = ""
    # The API server defaults an unset mode to Immediate.
    volume_binding_mode: Literal["Immediate", "WaitForFirstConsumer"] = "Immediate"
    allowed_topologies: list[TopologySelectorTerm] = []


# ---- CSINode ------------------------------------------------------------------------


class VolumeNodeResources(_Base):
    count: int | None = None

    def __post_init__(self) -> None:
        if self.count is not None and self.count < 0:
            raise ValueError(f"count {self.count} must not be negative")


class CSINodeDriver(_Base):
    name: str
    node_id: str = msgspec.field(default="", name="nodeID")
    allocatable: VolumeNodeResources | None = None
    topology_keys: list[str] | None = None


class CSINodeSpec(_Base):
    drivers: list[CSINodeDriver] = []


class CSINode(_Base):
    api_version: str = "storage.k8s.io/v1"
    kind: str = "CSINode"
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: CSINodeSpec = msgspec.field(default_factory=CSINodeSpec)

    def limits(self) -> dict[str, int]:
        """Attach limit per CSI driver (drivers without a count have none)."""
        return {
            d.name: d.allocatable.count
            for d in self.spec.drivers
            if d.allocatable is not None and d.allocatable.count is not None
        }


# ---- CSIDriver, CSIStorageCapacity (storage capacity tracking) -------------------------


class CSIDriverSpec(_Base):
    # True: the driver publishes CSIStorageCapacity objects and VolumeBinding checks
    # them before choosing a node for a claim it provisions.
    storage_capacity: bool | None = None


class CSIDriver(_Base):
    api_version: str = "storage.k8s.io/v1"
    kind: str = "CSIDriver"
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: CSIDriverSpec = msgspec.field(default_factory=CSIDriverSpec)


def _nonnegative_bytes(value: Quantity | None, field: str) -> int | None:
    if value is None:
        return None
    try:
        amount = to_units(value)
    except (QuantityError, ValueError) as err:
        raise ValueError(f"{field}: {err}") from None
    if amount < 0:
        raise ValueError(f"{field}: {value!r} must not be negative")
    return amount


class CSIStorageCapacity(_Base):
    """What one CSI GetCapacity call reported for a class in a topology segment: the
    nodes `nodeTopology` selects may have a volume of the class provisioned up to
    `maximumVolumeSize` (else `capacity`) bytes."""

    api_version: str = "storage.k8s.io/v1"
    kind: str = "CSIStorageCapacity"
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    storage_class_name: str = ""
    # None: no node has access (kube's nodeHasAccess).
    node_topology: LabelSelector | None = None
    capacity: Quantity | None = None
    maximum_volume_size: Quantity | None = None

    def __post_init__(self) -> None:
        if not self.storage_class_name:
            raise ValueError(
                "storageClassName is required: name the StorageClass this capacity is for"
            )
        _nonnegative_bytes(self.capacity, "capacity")
        _nonnegative_bytes(self.maximum_volume_size, "maximumVolumeSize")

    @property
    def key(self) -> str:
        return f"{self.metadata.namespace or 'default'}/{self.metadata.name}"

    @property
    def limit(self) -> int | None:
        """The largest volume it allows, in bytes (kube's volumeLimit: maximumVolumeSize
        when given, it is the more precise; else capacity; None: neither)."""
        if self.maximum_volume_size is not None:
            return _nonnegative_bytes(self.maximum_volume_size, "maximumVolumeSize")
        return _nonnegative_bytes(self.capacity, "capacity")


# ---- what a pod's volumes need ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PodClaim:
    """A claim a pod uses: named in a persistentVolumeClaim volume, or the claim of a
    generic ephemeral volume (`<pod>-<volume>`, which must be owned by the pod)."""

    volume: str
    namespace: str
    name: str
    ephemeral: bool

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def pod_claims(pod: Pod) -> list[PodClaim]:
    namespace = pod.metadata.namespace or "default"
    out = []
    for volume in pod.spec.volumes:
        if volume.persistent_volume_claim is not None:
            out.append(
                PodClaim(volume.name, namespace, volume.persistent_volume_claim.claim_name, False)
            )
        elif volume.ephemeral is not None:
            out.append(PodClaim(volume.name, namespace, f"{pod.metadata.name}-{volume.name}", True))
    return out


# Sources kube-scheduler places no constraint on (node-local, config, network shares).
_FREE_SOURCES = (
    "host_path",
    "empty_dir",
    "secret",
    "config_map",
    "downward_api",
    "projected",
    "image",
    "git_repo",
    "nfs",
    "cephfs",
    "glusterfs",
    "fc",
    "azure_file",
    "flex_volume",
    "quobyte",
    "flocker",
    "csi",
    "cinder",
    "azure_disk",
    "vsphere_volume",
    "photon_persistent_disk",
    "portworx_volume",
    "scale_io",
    "storageos",
)
# Inline disks kube-scheduler's VolumeRestrictions checks for conflicts between pods
# on a node (`inline_disks`).
_RESTRICTED_SOURCES = ("gce_persistent_disk", "aws_elastic_block_store", "rbd", "iscsi")


def unsupported_volumes(pod: Pod) -> list[str]:
    """Why some of the pod's volumes cannot be placed safely by Shoal yet (empty: all
    are modelled). Each entry names the volume and what is missing."""
    problems = []
    for volume in pod.spec.volumes:
        if volume.persistent_volume_claim is not None or volume.ephemeral is not None:
            continue
        if not _has_source(volume):
            problems.append(
                f"volume {volume.name!r} uses a volume source Shoal does not know, so it cannot "
                "tell where it can attach"
            )
    return problems


@dataclass(frozen=True, slots=True)
class InlineDisk:
    """An inline disk of a pod as kube's VolumeRestrictions compares them (its
    `isVolumeConflict`): the same GCE persistent disk (`pdName`) conflicts unless both
    mounts are read-only; the same AWS EBS volume (`volumeID`) always; the same iSCSI
    target (`iqn`) unless both are read-only; the same Ceph RBD image (pool and image,
    with a monitor in common) unless both are read-only."""

    kind: str  # the API's source name: gcePersistentDisk, awsElasticBlockStore, ...
    disk: str  # what names the disk within its kind (pool/image for RBD)
    read_only: bool
    monitors: frozenset[str] = frozenset()  # RBD only

    def conflicts(self, other: InlineDisk) -> bool:
        if self.kind != other.kind or self.disk != other.disk:
            return False
        if self.kind == "awsElasticBlockStore":
            return True
        if self.kind == "rbd" and not self.monitors & other.monitors:
            return False
        return not (self.read_only and other.read_only)


def inline_disks(pod: Pod) -> tuple[InlineDisk, ...]:
    """The pod's inline disks VolumeRestrictions compares (empty for most pods)."""
    found: list[InlineDisk] = []
    for volume in pod.spec.volumes:
        if volume.persistent_volume_claim is not None:
            continue
        if (gce := volume.gce_persistent_disk) is not None:
            found.append(InlineDisk("gcePersistentDisk", gce.pd_name, gce.read_only))
        elif (ebs := volume.aws_elastic_block_store) is not None:
            found.append(InlineDisk("awsElasticBlockStore", ebs.volume_id, ebs.read_only))
        elif (iscsi := volume.iscsi) is not None:
            found.append(InlineDisk("iscsi", iscsi.iqn, iscsi.read_only))
        elif (rbd := volume.rbd) is not None:
            disk = f"{rbd.pool}/{rbd.image}"
            found.append(InlineDisk("rbd", disk, rbd.read_only, frozenset(rbd.monitors)))
    return tuple(found)


def _has_source(volume: Volume) -> bool:
    return any(
        getattr(volume, field) is not None for field in (*_FREE_SOURCES, *_RESTRICTED_SOURCES)
    )


def label_zones(value: str) -> set[str]:
    """kube's LabelZonesToSet: a zone label may list several zones joined by "__"."""
    return {z for z in value.split("__") if z} if value else set()
