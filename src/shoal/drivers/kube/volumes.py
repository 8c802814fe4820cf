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

Then, as kube-scheduler's PreBind (`BindPodVolumes` / `checkBindings`), the pod's
Binding waits until each of these claims, and each claim to be provisioned that was
marked for this node before, is bound: `spec.volumeName` set and
`pv.kubernetes.io/bind-completed` on the claim, read from the informers (every 0.2 s).
It fails, as kube's does, when a claim or a chosen volume is deleted, when a chosen
volume's claimRef is taken away, when the claim's provisioner takes the node's mark away
(that is how external-provisioner says provisioning failed there and the pod should go
elsewhere), or after VolumeBinding's `bindTimeoutSeconds` (600 s). A mark or claimRef
not yet seen by the informer is waited for, never taken as removed. The wait holds no
Binding slot.

A failed write or wait fails the pod's bind (`BindError`): the pod is requeued and its
assumed volumes are released.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Protocol

from shoal.api.volumes import (
    ANNOTATION_BIND_COMPLETED,
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
        poll: float = 0.2,
    ) -> None:
        self.client = client
        self.lookup = lookup
        self.timeout = timeout
        self.poll = poll  # how often a waiting bind reads its claims again
        self._pending: dict[str, asyncio.Task[None]] = {}  # pod uid -> writes and wait

    def start(self, effect: BindVolumes) -> None:
        """Begin the writes (called from `emit`, inside a binding cycle)."""
        self._pending[effect.pod.uid] = asyncio.ensure_future(self.write(effect))

    def forget(self, uid: str) -> None:
        task = self._pending.pop(uid, None)
        if task is not None:
            task.cancel()  # the pod is not bound here after all: stop waiting for it

    async def wait(self, uid: str) -> None:
        """Before the pod's Binding: the volume writes for it, if any, must have landed."""
        task = self._pending.pop(uid, None)
        if task is not None:
            await task

    async def write(self, effect: BindVolumes) -> None:
        # The resourceVersion each write produced, by claim key or volume name: a copy
        # of that version or a later one shows what became of the write.
        written: dict[str, int] = {}
        for claim_key, volume in effect.static:
            written[volume] = await self._bind_static(effect, claim_key, volume)
        for claim_key in effect.provision:
            written[claim_key] = await self._select_node(effect, claim_key)
        await self._until_bound(effect, written)

    async def _until_bound(self, effect: BindVolumes, written: dict[str, int]) -> None:
        """kube's checkBindings, polled on the informers' copies until every claim is
        bound, one fails, or `effect.timeout` passes (see the module docstring)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + effect.timeout
        # Claims (and volumes) whose written mark (claimRef) the informer has shown:
        # only then does its absence mean someone took it away.
        seen: set[str] = set(effect.provisioning)
        while True:
            waiting = self._unbound(effect, seen, written)
            if not waiting:
                return
            left = deadline - loop.time()
            if left <= 0:
                raise BindError(
                    f"pod {effect.pod.key}: binding volumes for {effect.node}: timed out "
                    f"after {effect.timeout:g} s waiting for {', '.join(waiting)} to be bound "
                    "(VolumeBinding's bindTimeoutSeconds)"
                )
            await asyncio.sleep(min(self.poll, left))

    def _unbound(self, effect: BindVolumes, seen: set[str], written: dict[str, int]) -> list[str]:
        """The claims not bound yet; BindError when one of them cannot be any more.
        A mark (claimRef) counts as taken away once a copy shows it gone that was read
        after it was seen, or that is no older than the write that made it (kube's
        assume cache compares resourceVersions as numbers too)."""
        waiting: list[str] = []

        def fail(why: str) -> BindError:
            return BindError(f"pod {effect.pod.key}: binding volumes for {effect.node}: {why}")

        for claim_key, volume in effect.static:
            pv = self.lookup(PVS, volume)
            if pv is None:
                raise fail(f'persistentvolume "{volume}" was deleted')
            ref = (pv.get("spec") or {}).get("claimRef") or {}
            namespace, _, name = claim_key.partition("/")
            mine = ref.get("name") == name and ref.get("namespace") == namespace
            if mine:
                seen.add(volume)
            elif volume in seen or _caught_up(pv, written.get(volume)):
                raise fail(f'ClaimRef got reset for pv "{volume}"')
            if not self._claim_bound(claim_key, fail):
                waiting.append(f"persistentvolumeclaim {claim_key}")
        for claim_key in (*effect.provision, *effect.provisioning):
            claim = self._claim(claim_key, fail)
            annotations = (claim.get("metadata") or {}).get("annotations") or {}
            if annotations.get(ANNOTATION_SELECTED_NODE) == effect.node:
                seen.add(claim_key)
            elif claim_key in seen or _caught_up(claim, written.get(claim_key)):
                # external-provisioner takes the mark away when provisioning failed
                raise fail(f'provisioning failed for PVC "{claim_key.partition("/")[2]}"')
            if not self._claim_bound(claim_key, fail):
                waiting.append(f"persistentvolumeclaim {claim_key}")
        return waiting

    def _claim(self, claim_key: str, fail: Callable[[str], BindError]) -> JSON:
        claim = self.lookup(PVCS, claim_key)
        if claim is None:
            raise fail(f"persistentvolumeclaim {claim_key} was deleted")
        return claim

    def _claim_bound(self, claim_key: str, fail: Callable[[str], BindError]) -> bool:
        """kube's isPVCFullyBound: a volume named and the controller's binding complete."""
        claim = self._claim(claim_key, fail)
        annotations = (claim.get("metadata") or {}).get("annotations") or {}
        return bool((claim.get("spec") or {}).get("volumeName")) and (
            ANNOTATION_BIND_COMPLETED in annotations
        )

    async def _select_node(self, effect: BindVolumes, claim_key: str) -> int:
        namespace, _, name = claim_key.partition("/")
        claim = self.lookup(PVCS, claim_key) or {}
        uid = (claim.get("metadata") or {}).get("uid")
        meta: JSON = {"annotations": {ANNOTATION_SELECTED_NODE: effect.node}}
        if uid:
            meta["uid"] = uid
        return await self._patch(PVCS.path(namespace, name), {"metadata": meta}, claim_key, effect)

    async def _bind_static(self, effect: BindVolumes, claim_key: str, volume: str) -> int:
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
        return await self._patch(PVS.path(None, volume), body, f"persistentvolume {volume}", effect)

    async def _patch(self, path: str, body: JSON, what: str, effect: BindVolumes) -> int:
        """The merge patch; returns the resourceVersion it produced (-1: not a number)."""
        try:
            answer = await self.client.request(
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
        return _version(answer)


def _version(obj: JSON) -> int:
    """An object's resourceVersion as a number (-1 when it is not one)."""
    text = str((obj.get("metadata") or {}).get("resourceVersion", ""))
    return int(text) if text.isdigit() else -1


def _caught_up(copy: JSON, written: int | None) -> bool:
    """Is the informer's copy the version a write produced, or a later one?"""
    return written is not None and written >= 0 and _version(copy) >= written
