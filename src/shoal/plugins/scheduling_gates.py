"""SchedulingGates (PreEnqueue): a pod with spec.schedulingGates stays out of the queue
until every gate is removed."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from shoal.api.podinfo import PodInfo
from shoal.framework.handle import Handle
from shoal.framework.status import Code, Status
from shoal.framework.types import ActionType, ClusterEvent, EventResource

__all__ = ["NAME", "SchedulingGates"]

NAME = "SchedulingGates"


class SchedulingGates:
    name = NAME

    def pre_enqueue(self, pod: PodInfo) -> Status:
        gates = pod.pod.spec.scheduling_gates
        if not gates:
            return Status()
        names = [g.get("name", "") for g in gates]
        # Go's %v of a []string, as kube prints it: [a b]
        message = f"waiting for scheduling gates: [{' '.join(names)}]"
        return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, message)

    def events_to_register(self) -> Sequence[ClusterEvent]:
        return [ClusterEvent(EventResource.POD, ActionType.UPDATE)]

    @classmethod
    def new(cls, args: Any, handle: Handle) -> SchedulingGates:
        return cls()
