"""Feeding Dynamic Resource Allocation objects to a scheduler: the one intake the kube
backend, the simulator and the test harness share.

Each object goes into the scheduler's `DeviceCatalog`, then the matching cluster event
goes to the queue, so pods DynamicResources rejected are retried when a claim, slice
or class changes; pods gated waiting for a claim are checked again when claims change.
"""

from __future__ import annotations

from shoal.api.dra import (
    DeviceClass,
    DeviceTaintRule,
    ResourceClaim,
    ResourceClaimTemplate,
    ResourceSlice,
)
from shoal.cache.dra import DeviceCatalog
from shoal.framework.types import ActionType, ClusterEvent, EventResource
from shoal.scheduler.scheduler import Scheduler

__all__ = ["DRA_KINDS", "DraObject", "delete_dra", "upsert_dra"]

DraObject = DeviceClass | ResourceSlice | ResourceClaim | ResourceClaimTemplate | DeviceTaintRule
DRA_KINDS = (
    "DeviceClass",
    "ResourceSlice",
    "ResourceClaim",
    "ResourceClaimTemplate",
    "DeviceTaintRule",
)

_RESOURCE = {
    "DeviceClass": EventResource.DEVICE_CLASS,
    "ResourceSlice": EventResource.RESOURCE_SLICE,
    "ResourceClaim": EventResource.RESOURCE_CLAIM,
    "ResourceClaimTemplate": EventResource.RESOURCE_CLAIM,
    # A rule taints or frees devices as a slice's own taints do.
    "DeviceTaintRule": EventResource.RESOURCE_SLICE,
}


def _regate_claimants(scheduler: Scheduler) -> None:
    queue = scheduler.scheduling_queue
    waiting = [e.pod.uid for e in queue.gated() if e.pod.pod.spec.resource_claims]
    if waiting:
        queue.regate(waiting)


def upsert_dra(scheduler: Scheduler, obj: DraObject) -> None:
    catalog = DeviceCatalog.of(scheduler.handle)
    name = obj.metadata.name
    if not name:
        raise ValueError(f"{obj.kind} without metadata.name: give it a name")
    if isinstance(obj, DeviceClass):
        known = name in catalog.classes
        catalog.upsert_class(obj)
    elif isinstance(obj, ResourceSlice):
        known = name in catalog.slices
        catalog.upsert_slice(obj)
    elif isinstance(obj, ResourceClaim):
        known = obj.key in catalog.claims
        catalog.upsert_claim(obj)
    elif isinstance(obj, DeviceTaintRule):
        problem = obj.problem()
        if problem:
            raise ValueError(f"DeviceTaintRule {name}: {problem}")
        known = name in catalog.taint_rules
        catalog.upsert_taint_rule(obj)
    else:
        known = obj.key in catalog.templates
        catalog.upsert_template(obj)
    action = ActionType.UPDATE if known else ActionType.ADD
    scheduler.notify(ClusterEvent(_RESOURCE[obj.kind], action))
    if isinstance(obj, ResourceClaim):
        _regate_claimants(scheduler)


def delete_dra(scheduler: Scheduler, kind: str, namespace: str, name: str) -> None:
    """Forget a DRA object by kind ("DeviceClass", "ResourceSlice", "ResourceClaim",
    "ResourceClaimTemplate" or "DeviceTaintRule")."""
    catalog = DeviceCatalog.of(scheduler.handle)
    if kind == "DeviceClass":
        catalog.delete_class(name)
    elif kind == "ResourceSlice":
        catalog.delete_slice(name)
    elif kind == "ResourceClaim":
        catalog.delete_claim(namespace, name)
    elif kind == "ResourceClaimTemplate":
        catalog.delete_template(namespace, name)
    elif kind == "DeviceTaintRule":
        catalog.delete_taint_rule(name)
    else:
        raise ValueError(f"{kind} is not a Dynamic Resource Allocation kind")
    # A rule gone frees devices, as a slice updated without the taint would.
    action = ActionType.UPDATE if kind == "DeviceTaintRule" else ActionType.DELETE
    scheduler.notify(ClusterEvent(_RESOURCE[kind], action))
