"""VolumeRestrictions (PreFilter, Filter): volumes two pods may not share, as
kube-scheduler's volumerestrictions plugin decides it.

* Inline disks on one node (kube's isVolumeConflict): the same GCE persistent disk
  (`pdName`) unless every mount is read-only, the same AWS EBS volume (`volumeID`)
  always, the same iSCSI target (`iqn`) unless every mount is read-only, the same Ceph
  RBD image (pool and image, sharing a monitor) unless every mount is read-only. A node
  where a placed pod mounts a disk in conflict fails with "node(s) had no available
  disk" (Unschedulable: preemption may free it).
* A `ReadWriteOncePod` PersistentVolumeClaim is used by one pod in the whole cluster: while
  a placed pod uses it, every node fails with kube's "node(s) unavailable due to
  PersistentVolumeClaim with ReadWriteOncePod access mode already in-use by another pod"
  (Unschedulable). Preemption resolves it as in kube: a preemption what-if takes the
  victims off the node (and off the `VolumeCatalog`'s users), PreFilter counts again,
  and the node holding the claim's user passes once that user is a victim. A claim that
  does not exist keeps the pod pending with kube's message.

PreFilter returns Skip for pods with neither (nearly all): Filter does not run for them,
and preemption may judge all nodes at once. The disks of placed pods come from
`InlineDisks`, an index of only the pods that have such disks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from shoal.api.podinfo import PodInfo
from shoal.api.volumes import InlineDisk, inline_disks, pod_claims
from shoal.cache.inline_disks import InlineDisks
from shoal.cache.volumes import VolumeCatalog
from shoal.framework.cycle_state import CycleState
from shoal.framework.handle import Handle
from shoal.framework.status import Code, Status
from shoal.framework.types import (
    ActionType,
    Candidates,
    ClusterEvent,
    EventResource,
    Failure,
    FilterResult,
    PreFilterResult,
)

__all__ = ["NAME", "REASON_DISK_CONFLICT", "REASON_READ_WRITE_ONCE_POD", "VolumeRestrictions"]

NAME = "VolumeRestrictions"
REASON_DISK_CONFLICT = "node(s) had no available disk"
REASON_READ_WRITE_ONCE_POD = (
    "node(s) unavailable due to PersistentVolumeClaim with ReadWriteOncePod access mode "
    "already in-use by another pod"
)
_STATE = NAME


@dataclass(frozen=True, slots=True)
class _Restrictions:
    disks: tuple[InlineDisk, ...]
    claims_in_use: int  # ReadWriteOncePod claims of the pod that a placed pod uses


class VolumeRestrictions:
    name = NAME
    # Optimistic workers may decide with it: its verdict reads only the node's row and
    # the pod (shoal.scheduler.optimistic).
    row_local = True

    def __init__(self, handle: Handle) -> None:
        self.handle = handle
        self.catalog = VolumeCatalog.of(handle)
        self.disks = InlineDisks.of(handle)

    def pre_filter(self, state: CycleState, pod: PodInfo) -> tuple[PreFilterResult | None, Status]:
        if not pod.pod.spec.volumes:
            return None, Status(Code.SKIP)
        disks = inline_disks(pod.pod)
        in_use = 0
        for use in pod_claims(pod.pod):
            if use.ephemeral:
                continue  # kube reads persistentVolumeClaim volumes only
            claim = self.catalog.claim(use.key)
            if claim is None:
                return None, Status(
                    Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
                    f'persistentvolumeclaim "{use.name}" not found',
                )
            if "ReadWriteOncePod" not in claim.spec.access_modes:
                continue
            if any(uid != pod.uid for uid in self.catalog.users_of(use.key)):
                in_use += 1
        if not disks and not in_use:
            return None, Status(Code.SKIP)
        state.write(_STATE, _Restrictions(disks, in_use))
        return None, Status()

    def filter(self, state: CycleState, pod: PodInfo, nodes: Candidates) -> FilterResult:
        restrictions: _Restrictions = state.read(_STATE)
        passed = np.ones(nodes.size, dtype=bool)
        failures = []
        if restrictions.disks:
            rows = self.disks.conflicting_rows(restrictions.disks)
            if rows.size:
                conflict = np.isin(nodes.rows, rows)
                if conflict.any():
                    passed &= ~conflict
                    failures.append(Failure(REASON_DISK_CONFLICT, conflict))
        if restrictions.claims_in_use and passed.any():
            # Reported where the disks did not already fail (kube: the first reason).
            failures.append(Failure(REASON_READ_WRITE_ONCE_POD, passed.copy()))
            passed[:] = False
        return FilterResult(passed, failures)

    def events_to_register(self) -> Sequence[ClusterEvent]:
        return [
            # The pod holding the disk or the claim went away.
            ClusterEvent(EventResource.ASSIGNED_POD, ActionType.DELETE),
            ClusterEvent(EventResource.NODE, ActionType.ADD),
            ClusterEvent(EventResource.PERSISTENT_VOLUME_CLAIM, ActionType.ADD),
        ]

    @classmethod
    def new(cls, args: Any, handle: Handle) -> VolumeRestrictions:
        return cls(handle)
