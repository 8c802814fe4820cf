"""Coscheduling (PreEnqueue, Filter): gang scheduling, a thin adapter over `GangManager`
(as scheduler-plugins' coscheduling plugin is over its PodGroupManager).

Enabling it in a profile makes the pod-group keys of that profile's pods mean something:
they join groups, and the scheduler places each group's minimum members all-or-nothing
in one transaction (`shoal.scheduler.gang_cycle`). In a profile without it, group labels
are ignored and such pods are scheduled one by one like any other pod.

* PreEnqueue: a member stays out of the queue until its group can be tried: minMember
  pods exist, its PodGroup object exists (for keys that need one), the groups it
  depends on have succeeded; a malformed group key keeps the pod out with a message
  naming the key.
* Filter: the head-of-line reservation (`shoal.gang.reservation`). While a gang that
  has failed for `reservationAfterSeconds` holds it, pods outside that gang with lower
  or equal priority are rejected on the nodes the gang could use ("node(s) were reserved
  for gang ns/name"); every other node stays open to them.

Args (`CoschedulingArgs`): `scheduleTimeoutSeconds` for groups that set none,
`headOfLineReservation`, `reservationAfterSeconds`, `reservationMaxSeconds`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

from shoal.api.podinfo import PodInfo
from shoal.framework.cycle_state import CycleState
from shoal.framework.handle import Handle
from shoal.framework.status import Code, Status
from shoal.framework.types import (
    ActionType,
    Candidates,
    ClusterEvent,
    EventResource,
    FilterResult,
)
from shoal.gang.manager import GangConfig, GangManager
from shoal.gang.reservation import reserving_group
from shoal.plugins.args import CoschedulingArgs

__all__ = ["NAME", "Coscheduling"]

NAME = "Coscheduling"


class Coscheduling:
    name = NAME
    # Optimistic workers may decide with it: the pods they take (not gang members) pass it
    # on any node (shoal.scheduler.optimistic).
    row_local = True
    # The reservation rejects nodes by name, whatever runs there: preemption may judge
    # all candidate nodes at once (shoal.preemption).
    preemption_local = True
    # Its verdict does not depend on the pods on a node at all (labels, taints, the
    # node's own fields, reservations): preemption judges it once, with no victim gone.
    preemption_node_only = True

    def __init__(self, handle: Handle, args: CoschedulingArgs) -> None:
        self.handle = handle
        self.args = args
        self.gangs = GangManager.of(handle)
        # The settings the groups of this profile's pods get (registered with the
        # GangManager when the profile is built: `register_profile`).
        self.gang_config = GangConfig(
            schedule_timeout=args.schedule_timeout_seconds,
            head_of_line_reservation=args.head_of_line_reservation,
            reservation_after=args.reservation_after_seconds,
            reservation_max=args.reservation_max_seconds,
        )
        self._mask: NDArray[np.bool_] = np.zeros(0, dtype=bool)
        self._mask_key: tuple[int, int] = (-1, -1)

    def register_profile(self, profile_name: str) -> None:
        # ProfilePolicy: enabling Coscheduling is what makes this profile's pods join
        # groups; the scheduler learns it from the GangManager, not from the plugin.
        self.gangs.register_profile(profile_name, self.gang_config)

    def pre_enqueue(self, pod: PodInfo) -> Status:
        group = self.gangs.group_of_uid(pod.uid)
        if group is None:
            try:
                GangManager.ref(pod.pod)
            except ValueError as err:
                return Status(
                    Code.UNSCHEDULABLE_AND_UNRESOLVABLE, f"pod {pod.key}: invalid gang key: {err}"
                )
            return Status()
        gate = self.gangs.gate(group)
        if gate:
            return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, gate)
        return Status()

    def filter(self, state: CycleState, pod: PodInfo, nodes: Candidates) -> FilterResult:
        group = reserving_group(self.gangs, pod)
        held = self.gangs.reservation
        if group is None or held is None or self.handle.clock.now() >= held.until:
            # Over at `until` even if the tick that releases it has not run yet.
            return FilterResult.all_pass(nodes.size)
        reserved = self._reserved()[nodes.index]
        # Code UNSCHEDULABLE: the reservation is temporary, unlike a label mismatch.
        return FilterResult.from_mask(~reserved, f"node(s) were reserved for gang {group.key}")

    def _reserved(self) -> NDArray[np.bool_]:
        """The reserved nodes as a row mask, rebuilt when the reservation or the node
        rows change."""
        held = self.gangs.reservation
        assert held is not None
        snap = self.handle.snapshot
        key = (held.serial, snap.nodes_version)
        if key != self._mask_key:
            mask = np.zeros(snap.n, dtype=bool)
            mask[snap.rows(held.nodes)] = True
            self._mask, self._mask_key = mask, key
        return self._mask

    def events_to_register(self) -> Sequence[ClusterEvent]:
        # Gang rejections (too few members placeable, topology, minResources) are worth
        # retrying when capacity frees, nodes change, or groups or queues change; pods
        # kept off reserved nodes when the reservation ends (a POD_GROUP update).
        return [
            ClusterEvent(EventResource.ASSIGNED_POD, ActionType.DELETE),
            ClusterEvent(EventResource.NODE, ActionType.ADD | ActionType.UPDATE),
            ClusterEvent(EventResource.POD_GROUP | EventResource.QUEUE, ActionType.ALL),
        ]

    @classmethod
    def new(cls, args: CoschedulingArgs | None, handle: Handle) -> Coscheduling:
        return cls(handle, args or CoschedulingArgs())
