"""NodeUnschedulable (Filter): skip cordoned nodes unless the pod tolerates the
`node.kubernetes.io/unschedulable:NoSchedule` taint."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from shoal.api.objects import Taint
from shoal.api.podinfo import PodInfo
from shoal.framework.cycle_state import CycleState
from shoal.framework.handle import Handle
from shoal.framework.status import Code
from shoal.framework.types import (
    ActionType,
    Candidates,
    ClusterEvent,
    EventResource,
    FilterResult,
)

__all__ = ["NAME", "REASON", "NodeUnschedulable"]

NAME = "NodeUnschedulable"
REASON = "node(s) were unschedulable"
UNSCHEDULABLE_TAINT = Taint(key="node.kubernetes.io/unschedulable", effect="NoSchedule")


class NodeUnschedulable:
    name = NAME
    # Optimistic workers may decide with it: its verdict reads only the node's row and
    # the pod (shoal.scheduler.optimistic).
    row_local = True
    # Its verdict on a node depends only on that node's pods and only improves as pods
    # leave: preemption may judge all candidate nodes at once (shoal.preemption).
    preemption_local = True
    # Its verdict does not depend on the pods on a node at all (labels, taints, the
    # node's own fields, reservations): preemption judges it once, with no victim gone.
    preemption_node_only = True

    def __init__(self, handle: Handle) -> None:
        self.handle = handle

    def filter(self, state: CycleState, pod: PodInfo, nodes: Candidates) -> FilterResult:
        snap = self.handle.snapshot
        if not snap.any_unschedulable() or pod.tolerates(UNSCHEDULABLE_TAINT):
            return FilterResult.all_pass(nodes.size)
        cordoned = snap.unschedulable[nodes.index]
        if not cordoned.any():
            return FilterResult.all_pass(nodes.size)
        return FilterResult.from_mask(~cordoned, REASON, Code.UNSCHEDULABLE_AND_UNRESOLVABLE)

    def events_to_register(self) -> Sequence[ClusterEvent]:
        return [
            ClusterEvent(
                EventResource.NODE,
                ActionType.ADD | ActionType.UPDATE_NODE_TAINT | ActionType.UPDATE_NODE_CONDITION,
            )
        ]

    @classmethod
    def new(cls, args: Any, handle: Handle) -> NodeUnschedulable:
        return cls(handle)
