"""Feeding storage objects to a scheduler: the one intake the kube backend, the
simulator and the test harness share.

Each object goes into the scheduler's `VolumeCatalog`, then the matching cluster event
goes to the queue, so pods a volume plugin rejected are retried when a claim, volume,
class, CSINode, CSIDriver or CSIStorageCapacity they wait on changes.
"""

from __future__ import annotations

from shoal.api.volumes import (
    CSIDriver,
    CSINode,
    CSIStorageCapacity,
    PersistentVolume,
    PersistentVolumeClaim,
    StorageClass,
)
from shoal.cache.volumes import VolumeCatalog
from shoal.framework.types import ActionType, ClusterEvent, EventResource
from shoal.scheduler.scheduler import Scheduler

__all__ = ["StorageObject", "delete_storage", "upsert_storage"]

StorageObject = (
    PersistentVolumeClaim
    | PersistentVolume
    | StorageClass
    | CSINode
    | CSIDriver
    | CSIStorageCapacity
)

_RESOURCE = {
    "PersistentVolumeClaim": EventResource.PERSISTENT_VOLUME_CLAIM,
    "PersistentVolume": EventResource.PERSISTENT_VOLUME,
    "StorageClass": EventResource.STORAGE_CLASS,
    "CSINode": EventResource.CSI_NODE,
    "CSIDriver": EventResource.CSI_DRIVER,
    "CSIStorageCapacity": EventResource.CSI_STORAGE_CAPACITY,
}


def upsert_storage(scheduler: Scheduler, obj: StorageObject) -> None:
    catalog = VolumeCatalog.of(scheduler.handle)
    name = obj.metadata.name
    if isinstance(obj, PersistentVolumeClaim):
        if not name:
            raise ValueError("PersistentVolumeClaim without metadata.name: give it a name")
        known = obj.key in catalog.claims
        catalog.upsert_claim(obj)
    elif isinstance(obj, PersistentVolume):
        if not name:
            raise ValueError("PersistentVolume without metadata.name: give it a name")
        known = name in catalog.volumes
        catalog.upsert_volume(obj)
    elif isinstance(obj, StorageClass):
        if not name:
            raise ValueError("StorageClass without metadata.name: give it a name")
        known = name in catalog.classes
        catalog.upsert_class(obj)
    elif isinstance(obj, CSINode):
        if not name:
            raise ValueError("CSINode without metadata.name: name it after its node")
        known = name in catalog.csi_nodes
        catalog.upsert_csi_node(obj)
    elif isinstance(obj, CSIDriver):
        if not name:
            raise ValueError("CSIDriver without metadata.name: name it after the driver")
        known = name in catalog.csi_drivers
        catalog.upsert_csi_driver(obj)
    else:
        if not name:
            raise ValueError("CSIStorageCapacity without metadata.name: give it a name")
        known = obj.key in catalog.capacities
        catalog.upsert_capacity(obj)
    action = ActionType.UPDATE if known else ActionType.ADD
    scheduler.notify(ClusterEvent(_RESOURCE[obj.kind], action))


def delete_storage(scheduler: Scheduler, kind: str, namespace: str, name: str) -> None:
    """Forget a storage object by kind ("PersistentVolumeClaim", "PersistentVolume",
    "StorageClass", "CSINode", "CSIDriver" or "CSIStorageCapacity")."""
    catalog = VolumeCatalog.of(scheduler.handle)
    if kind == "PersistentVolumeClaim":
        catalog.delete_claim(namespace, name)
    elif kind == "PersistentVolume":
        catalog.delete_volume(name)
    elif kind == "StorageClass":
        catalog.delete_class(name)
    elif kind == "CSINode":
        catalog.delete_csi_node(name)
    elif kind == "CSIDriver":
        catalog.delete_csi_driver(name)
    elif kind == "CSIStorageCapacity":
        catalog.delete_capacity(namespace, name)
    else:
        raise ValueError(f"{kind} is not a storage kind")
    scheduler.notify(ClusterEvent(_RESOURCE[kind], ActionType.DELETE))
