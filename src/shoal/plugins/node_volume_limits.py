"""NodeVolumeLimits (PreFilter, Filter): a node may not use more distinct volumes of a
CSI driver than its CSINode allows (`spec.drivers[].allocatable.count`), counting the
pod's own, as kube-scheduler's nodevolumelimits (CSILimits) decides it.

A claim's driver is its bound PersistentVolume's (`spec.csi.driver`, in-tree sources
by the CSI driver CSI migration moved them to), else its StorageClass's provisioner.
A volume is counted once per node however many pods use it; a claim of the pod already
in use on the node adds nothing. Nodes without a CSINode, or a driver without a count,
have no limit. Failing nodes get "node(s) exceed max volume count" (preemption may free
room: removing pods detaches their volumes).

Attached volumes per node and driver are kept incrementally by the `VolumeCatalog`, so
Filter is a few vector operations over the candidate rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from shoal.api.podinfo import PodInfo
from shoal.cache.volumes import VolumeCatalog
from shoal.framework.cycle_state import CycleState
from shoal.framework.handle import Handle
from shoal.framework.status import Code, Status
from shoal.framework.types import (
    ActionType,
    Candidates,
    ClusterEvent,
    EventResource,
    FilterResult,
    PreFilterResult,
)

__all__ = ["NAME", "REASON", "NodeVolumeLimits"]

NAME = "NodeVolumeLimits"
REASON = "node(s) exceed max volume count"


class NodeVolumeLimits:
    name = NAME
    # Optimistic workers may decide with it: the pods they take (no claims) pass it
    # on any node (shoal.scheduler.optimistic).
    row_local = True
    # Its verdict on a node depends only on that node's pods and improves as they leave.
    preemption_local = True

    def __init__(self, handle: Handle) -> None:
        self.handle = handle
        self.catalog = VolumeCatalog.of(handle)

    def pre_filter(self, state: CycleState, pod: PodInfo) -> tuple[PreFilterResult | None, Status]:
        if not pod.pod.spec.volumes:
            return None, Status(Code.SKIP)
        attachable = self.catalog.attachable(pod)
        if not attachable:
            return None, Status(Code.SKIP)
        by_driver: dict[str, list[str]] = {}
        for claim, driver in attachable:
            if claim not in by_driver.setdefault(driver, []):
                by_driver[driver].append(claim)
        state.write(NAME, by_driver)
        return None, Status()

    def filter(self, state: CycleState, pod: PodInfo, nodes: Candidates) -> FilterResult:
        by_driver: dict[str, list[str]] = state.read(NAME)
        catalog = self.catalog
        rows = nodes.rows
        passed = np.ones(nodes.size, dtype=bool)
        for driver, claims in by_driver.items():
            limit = catalog.limit_of(driver, rows)
            limited = limit >= 0
            if not limited.any():
                continue
            new = np.full(nodes.size, len(claims), dtype=np.int64)
            for claim in claims:
                new -= catalog.claim_on(claim, rows)
            used = catalog.attached_on(driver, rows)
            passed &= ~(limited & (used + new > limit) & (new > 0))
        return FilterResult.from_mask(passed, REASON)

    def events_to_register(self) -> Sequence[ClusterEvent]:
        return [
            ClusterEvent(EventResource.CSI_NODE, ActionType.ADD | ActionType.UPDATE),
            ClusterEvent(EventResource.ASSIGNED_POD, ActionType.DELETE),
            # What a claim counts for may change with the claim, its volume or class.
            ClusterEvent(EventResource.PERSISTENT_VOLUME_CLAIM, ActionType.ALL),
            ClusterEvent(EventResource.PERSISTENT_VOLUME, ActionType.ALL),
            ClusterEvent(EventResource.STORAGE_CLASS, ActionType.ADD | ActionType.UPDATE),
            ClusterEvent(EventResource.NODE, ActionType.ADD),
        ]

    @classmethod
    def new(cls, args: Any, handle: Handle) -> NodeVolumeLimits:
        return cls(handle)
