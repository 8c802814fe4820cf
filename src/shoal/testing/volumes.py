"""Builders for storage objects (claims, volumes, classes, CSINodes, CSIDrivers and
CSIStorageCapacities), in the style of
`shoal.testing.builders`: every method returns the builder, `obj()` returns a fresh
object validated as a manifest would be.

    h.add_storage(
        make_storage_class("local").wait_for_first_consumer().provisioner(NO_PROVISIONER),
        make_pv("pv-a").capacity("10Gi").storage_class("local").on_nodes("n1"),
        make_pvc("data").request("5Gi").storage_class("local"),
        make_csi_node("n1").driver("ebs.csi.aws.com", count=25),
    )
    h.add_pods(make_pod("db").pvc("data"))
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal

import msgspec

from shoal.api.manifests import decode
from shoal.api.volumes import (
    ANNOTATION_SELECTED_NODE,
    CSIDriver,
    CSINode,
    CSIStorageCapacity,
    PersistentVolume,
    PersistentVolumeClaim,
    StorageClass,
)

__all__ = [
    "CSIDriverBuilder",
    "CSINodeBuilder",
    "CapacityBuilder",
    "ClaimBuilder",
    "StorageClassBuilder",
    "VolumeBuilder",
    "make_capacity",
    "make_csi_driver",
    "make_csi_node",
    "make_pv",
    "make_pvc",
    "make_storage_class",
]

AccessMode = Literal["ReadWriteOnce", "ReadOnlyMany", "ReadWriteMany", "ReadWriteOncePod"]


class _Builder:
    _kind: type[msgspec.Struct]

    def __init__(self, manifest: dict[str, Any]) -> None:
        self._m = manifest

    def _meta(self) -> dict[str, Any]:
        meta: dict[str, Any] = self._m.setdefault("metadata", {})
        return meta

    def _spec(self) -> dict[str, Any]:
        spec: dict[str, Any] = self._m.setdefault("spec", {})
        return spec

    def _labels(self, labels: dict[str, str]) -> None:
        meta = self._meta()
        meta["labels"] = {**meta.get("labels", {}), **labels}

    def manifest(self) -> dict[str, Any]:
        return msgspec.json.decode(msgspec.json.encode(self._m))  # type: ignore[no-any-return]


class ClaimBuilder(_Builder):
    def __init__(self, name: str, namespace: str) -> None:
        super().__init__(
            {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "metadata": {"name": name, "namespace": namespace, "uid": f"uid-pvc-{name}"},
                "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {}}},
            }
        )
        self.request("1Gi")

    def request(self, size: str | None) -> ClaimBuilder:
        """`resources.requests.storage` (None: no storage request)."""
        requests = self._spec()["resources"]["requests"]
        if size is None:
            requests.pop("storage", None)
        else:
            requests["storage"] = size
        return self

    def storage_class(self, name: str) -> ClaimBuilder:
        self._spec()["storageClassName"] = name
        return self

    def access_modes(self, *modes: AccessMode) -> ClaimBuilder:
        self._spec()["accessModes"] = list(modes)
        return self

    def bound_to(self, volume: str) -> ClaimBuilder:
        """Bound (spec.volumeName), as the PersistentVolume controller leaves it."""
        self._spec()["volumeName"] = volume
        self._m["status"] = {"phase": "Bound"}
        return self

    def selected_node(self, node: str) -> ClaimBuilder:
        meta = self._meta()
        meta["annotations"] = {**meta.get("annotations", {}), ANNOTATION_SELECTED_NODE: node}
        return self

    def owned_by_pod(self, pod: str, uid: str = "") -> ClaimBuilder:
        ref = {"kind": "Pod", "name": pod, "uid": uid, "controller": True}
        self._meta()["ownerReferences"] = [ref]
        return self

    def terminating(self) -> ClaimBuilder:
        self._meta()["deletionTimestamp"] = "1970-01-01T00:00:00Z"
        return self

    def obj(self) -> PersistentVolumeClaim:
        return decode(self.manifest(), PersistentVolumeClaim)


class VolumeBuilder(_Builder):
    def __init__(self, name: str) -> None:
        super().__init__(
            {
                "apiVersion": "v1",
                "kind": "PersistentVolume",
                "metadata": {"name": name},
                "spec": {"accessModes": ["ReadWriteOnce"], "capacity": {"storage": "1Gi"}},
                "status": {"phase": "Available"},
            }
        )

    def capacity(self, size: str) -> VolumeBuilder:
        self._spec()["capacity"] = {"storage": size}
        return self

    def storage_class(self, name: str) -> VolumeBuilder:
        self._spec()["storageClassName"] = name
        return self

    def access_modes(self, *modes: AccessMode) -> VolumeBuilder:
        self._spec()["accessModes"] = list(modes)
        return self

    def labels(self, **labels: str) -> VolumeBuilder:
        self._labels(labels)
        return self

    def zone(self, zone: str) -> VolumeBuilder:
        self._labels({"topology.kubernetes.io/zone": zone})
        return self

    def csi(self, driver: str, handle: str = "") -> VolumeBuilder:
        name = self._meta()["name"]
        self._spec()["csi"] = {"driver": driver, "volumeHandle": handle or name}
        return self

    def on_nodes(self, *names: str) -> VolumeBuilder:
        """Required node affinity on `kubernetes.io/hostname` (a local volume)."""
        return self.node_affinity("kubernetes.io/hostname", names)

    def node_affinity(self, key: str, values: Iterable[str]) -> VolumeBuilder:
        term = {"matchExpressions": [{"key": key, "operator": "In", "values": list(values)}]}
        self._spec()["nodeAffinity"] = {"required": {"nodeSelectorTerms": [term]}}
        return self

    def claimed_by(self, claim: str, namespace: str = "default") -> VolumeBuilder:
        """Bound (or pre-bound) to a claim: spec.claimRef."""
        self._spec()["claimRef"] = {
            "kind": "PersistentVolumeClaim",
            "namespace": namespace,
            "name": claim,
        }
        self._m["status"] = {"phase": "Bound"}
        return self

    def phase(self, phase: str) -> VolumeBuilder:
        self._m["status"] = {"phase": phase}
        return self

    def obj(self) -> PersistentVolume:
        return decode(self.manifest(), PersistentVolume)


class StorageClassBuilder(_Builder):
    def __init__(self, name: str) -> None:
        super().__init__(
            {
                "apiVersion": "storage.k8s.io/v1",
                "kind": "StorageClass",
                "metadata": {"name": name},
                "provisioner": "csi.example.com",
            }
        )

    def provisioner(self, name: str) -> StorageClassBuilder:
        self._m["provisioner"] = name
        return self

    def wait_for_first_consumer(self) -> StorageClassBuilder:
        self._m["volumeBindingMode"] = "WaitForFirstConsumer"
        return self

    def immediate(self) -> StorageClassBuilder:
        self._m["volumeBindingMode"] = "Immediate"
        return self

    def allowed_topology(self, key: str, *values: str) -> StorageClassBuilder:
        term = {"matchLabelExpressions": [{"key": key, "values": list(values)}]}
        self._m["allowedTopologies"] = [*self._m.get("allowedTopologies", []), term]
        return self

    def obj(self) -> StorageClass:
        return decode(self.manifest(), StorageClass)


class CSINodeBuilder(_Builder):
    def __init__(self, name: str) -> None:
        super().__init__(
            {
                "apiVersion": "storage.k8s.io/v1",
                "kind": "CSINode",
                "metadata": {"name": name},
                "spec": {"drivers": []},
            }
        )

    def driver(self, name: str, count: int | None = None) -> CSINodeBuilder:
        entry: dict[str, Any] = {"name": name, "nodeID": self._meta()["name"]}
        if count is not None:
            entry["allocatable"] = {"count": count}
        self._spec()["drivers"].append(entry)
        return self

    def obj(self) -> CSINode:
        return decode(self.manifest(), CSINode)


class CSIDriverBuilder(_Builder):
    def __init__(self, name: str) -> None:
        super().__init__(
            {
                "apiVersion": "storage.k8s.io/v1",
                "kind": "CSIDriver",
                "metadata": {"name": name},
                "spec": {"storageCapacity": True},
            }
        )

    def storage_capacity(self, enabled: bool | None) -> CSIDriverBuilder:
        """`spec.storageCapacity` (None: left out, as false)."""
        if enabled is None:
            self._spec().pop("storageCapacity", None)
        else:
            self._spec()["storageCapacity"] = enabled
        return self

    def obj(self) -> CSIDriver:
        return decode(self.manifest(), CSIDriver)


class CapacityBuilder(_Builder):
    def __init__(self, name: str, namespace: str) -> None:
        super().__init__(
            {
                "apiVersion": "storage.k8s.io/v1",
                "kind": "CSIStorageCapacity",
                "metadata": {"name": name, "namespace": namespace},
                "storageClassName": "",
            }
        )

    def storage_class(self, name: str) -> CapacityBuilder:
        self._m["storageClassName"] = name
        return self

    def capacity(self, amount: str) -> CapacityBuilder:
        self._m["capacity"] = amount
        return self

    def maximum_volume_size(self, amount: str) -> CapacityBuilder:
        self._m["maximumVolumeSize"] = amount
        return self

    def on_label(self, key: str, value: str) -> CapacityBuilder:
        """`nodeTopology` selecting the nodes labelled `key=value` (`matchLabels`)."""
        topology = self._m.setdefault("nodeTopology", {})
        topology.setdefault("matchLabels", {})[key] = value
        return self

    def on_expression(self, key: str, operator: str, *values: str) -> CapacityBuilder:
        """`nodeTopology` with one more `matchExpressions` requirement."""
        topology = self._m.setdefault("nodeTopology", {})
        requirement: dict[str, Any] = {"key": key, "operator": operator}
        if values:
            requirement["values"] = list(values)
        topology.setdefault("matchExpressions", []).append(requirement)
        return self

    def obj(self) -> CSIStorageCapacity:
        return decode(self.manifest(), CSIStorageCapacity)


def make_pvc(name: str, namespace: str = "default") -> ClaimBuilder:
    """A ReadWriteOnce claim for 1Gi (no class: change with the methods)."""
    return ClaimBuilder(name, namespace)


def make_pv(name: str) -> VolumeBuilder:
    """An Available ReadWriteOnce volume of 1Gi, without class or node affinity."""
    return VolumeBuilder(name)


def make_storage_class(name: str) -> StorageClassBuilder:
    """A class provisioned by `csi.example.com`, binding Immediate unless told."""
    return StorageClassBuilder(name)


def make_csi_node(name: str) -> CSINodeBuilder:
    """The CSINode of node `name`; add drivers with `.driver(name, count)`."""
    return CSINodeBuilder(name)


def make_csi_driver(name: str) -> CSIDriverBuilder:
    """The CSIDriver `name`, with `storageCapacity: true` unless told."""
    return CSIDriverBuilder(name)


def make_capacity(name: str, namespace: str = "kube-system") -> CapacityBuilder:
    """A CSIStorageCapacity without class, size or topology: give them with the methods
    (without `nodeTopology` it reaches no node)."""
    return CapacityBuilder(name, namespace)
