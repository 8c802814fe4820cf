"""Storage objects in a cluster: what the kube backend watches for the volume plugins,
and how VolumeBinding's decisions (`BindVolumes`) are written.

Watched (list+watch, into the scheduler's `VolumeCatalog`): PersistentVolumeClaims,
PersistentVolumes, StorageClasses, CSINodes, CSIDrivers and CSIStorageCapacities. A
malformed object is reported (event, log line, metric) and left out; the others apply.

Written (`VolumeWriter`), as kube-scheduler's volume binder writes them, before the
pod's Binding:

* a claim to be provisioned: the annotation `volume.kubernetes.io/selected-node` (merge
  patch, with the claim's uid as precondition);
* a claim given a static volume: the volume's `spec.claimRef` and the annotation
  `pv.kubernetes.io/bound-by-controller: "yes"` (merge patch with the volume's
  resourceVersion, so a volume someone else took in the meantime is a conflict, not an
  overwrite). The PersistentVolume controller completes the binding.

A failed write fails the pod's bind (`BindError`): the pod is requeued and its
assumed volumes are released.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Protocol

from shoal.api.volumes import (
    ANNOTATION_BOUND_BY_CONTROLLER,
    ANNOTATION_SELECTED_NODE,
    CSIDriver,
    CSINode,
    CSIStorageCapacity,
    PersistentVolume,
    PersistentVolumeClaim,
    StorageClass,
)
from shoal.drivers.kube.client import JSON, ApiError, KubeClient
from shoal.drivers.kube.resources import ResourceKind
from shoal.framework.effects import BindError, BindVolumes
from shoal.scheduler.scheduler import Scheduler
from shoal.scheduler.volumes import delete_storage, upsert_storage


class _Intake(Protocol):
    """What the watch handlers here need of the backend: the core they feed."""

    @property
    def scheduler(self) -> Scheduler: ...


__all__ = [
    "CSI_DRIVERS",
    "CSI_NODES",
    "CSI_STORAGE_CAPACITIES",
    "PVCS",
    "PVS",
    "STORAGE_CLASSES",
    "VOLUME_KINDS",
    "VolumeWriter",
]

PVCS = ResourceKind(
    "", "v1", "persistentvolumeclaims", "PersistentVolumeClaim", True, PersistentVolumeClaim
)
PVS = ResourceKind("", "v1", "persistentvolumes", "PersistentVolume", False, PersistentVolume)
STORAGE_CLASSES = ResourceKind(
    "storage.k8s.io", "v1", "storageclasses", "StorageClass", False, StorageClass
)
CSI_NODES = ResourceKind("storage.k8s.io", "v1", "csinodes", "CSINode", False, CSINode)
CSI_DRIVERS = ResourceKind("storage.k8s.io", "v1", "csidrivers", "CSIDriver", False, CSIDriver)
CSI_STORAGE_CAPACITIES = ResourceKind(
    "storage.k8s.io", "v1", "csistoragecapacities", "CSIStorageCapacity", True, CSIStorageCapacity
)


def _upsert(backend: _Intake, obj: Any, raw: JSON) -> None:
    upsert_storage(backend.scheduler, obj)


def _remover(kind: ResourceKind) -> Callable[[_Intake, str, str], None]:
    def remove(backend: _Intake, namespace: str, name: str) -> None:
        delete_storage(backend.scheduler, kind.kind, namespace, name)

    return remove


# (kind, upsert, remove) for the backend's WATCHED list.
VOLUME_KINDS: list[
    tuple[ResourceKind, Callable[[_Intake, Any, JSON], None], Callable[..., None]]
] = [
    (kind, _upsert, _remover(kind))
    for kind in (PVCS, PVS, STORAGE_CLASSES, CSI_NODES, CSI_DRIVERS, CSI_STORAGE_CAPACITIES)
]


class VolumeWriter:
    """Carries out `BindVolumes` (see the module docstring). `lookup(kind, key)` is the
    informer's latest copy of an object."""

    def __init__(
        self,
        client: KubeClient,
        lookup: Callable[[ResourceKind, str], JSON | None],
        timeout: float = 10.0,
    ) -> None:
        self.client = client
        self.lookup = lookup
        self.timeout = timeout
        self._pending: dict[str, asyncio.Task[None]] = {}  # pod uid -> writes

    def start(self, effect: BindVolumes) -> None:
        """Begin the writes (called from `emit`, inside a binding cycle)."""
        self._pending[effect.pod.uid] = asyncio.ensure_future(self.write(effect))

    def forget(self, uid: str) -> None:
        self._pending.pop(uid, None)

    async def wait(self, uid: str) -> None:
        """Before the pod's Binding: the volume writes for it, if any, must have landed."""
        task = self._pending.pop(uid, None)
        if task is not None:
            await task

    async def write(self, effect: BindVolumes) -> None:
        for claim_key, volume in effect.static:
            await self._bind_static(effect, claim_key, volume)
        for claim_key in effect.provision:
            await self._select_node(effect, claim_key)

    async def _select_node(self, effect: BindVolumes, claim_key: str) -> None:
        namespace, _, name = claim_key.partition("/")
        claim = self.lookup(PVCS, claim_key) or {}
        uid = (claim.get("metadata") or {}).get("uid")
        meta: JSON = {"annotations": {ANNOTATION_SELECTED_NODE: effect.node}}
        if uid:
            meta["uid"] = uid
        await self._patch(PVCS.path(namespace, name), {"metadata": meta}, claim_key, effect)

    async def _bind_static(self, effect: BindVolumes, claim_key: str, volume: str) -> None:
        namespace, _, name = claim_key.partition("/")
        claim = self.lookup(PVCS, claim_key) or {}
        claim_meta = claim.get("metadata") or {}
        current = self.lookup(PVS, volume) or {}
        meta: JSON = {"annotations": {ANNOTATION_BOUND_BY_CONTROLLER: "yes"}}
        version = (current.get("metadata") or {}).get("resourceVersion")
        if version:
            meta["resourceVersion"] = version
        ref = {
            "kind": "PersistentVolumeClaim",
            "apiVersion": "v1",
            "namespace": namespace,
            "name": name,
            "uid": claim_meta.get("uid", ""),
            "resourceVersion": claim_meta.get("resourceVersion", ""),
        }
        body = {"metadata": meta, "spec": {"claimRef": ref}}
        await self._patch(PVS.path(None, volume), body, f"persistentvolume {volume}", effect)

    async def _patch(self, path: str, body: JSON, what: str, effect: BindVolumes) -> None:
        try:
            await self.client.request(
                "PATCH",
                path,
                body=body,
                content_type="application/merge-patch+json",
                timeout=self.timeout,
            )
        except ApiError as err:
            raise BindError(
                f"pod {effect.pod.key}: binding volumes for {effect.node} failed at {what}: "
                f"{err.status} {err.reason}: {err.message}"
            ) from None
