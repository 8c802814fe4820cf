"""NodeName (Filter): a pod that names a node in spec.nodeName fits only there."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from shoal.api.podinfo import PodInfo
from shoal.framework.cycle_state import CycleState
from shoal.framework.handle import Handle
from shoal.framework.status import Code
from shoal.framework.types import ActionType, Candidates, ClusterEvent, EventResource, FilterResult

__all__ = ["NAME", "REASON", "NodeName"]

NAME = "NodeName"
REASON = "node(s) didn't match the requested node name"


class NodeName:
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
        if not pod.node_name:
            return FilterResult.all_pass(nodes.size)
        passed = self.handle.snapshot.names[nodes.index] == pod.node_name
        return FilterResult.from_mask(passed, REASON, Code.UNSCHEDULABLE_AND_UNRESOLVABLE)

    def events_to_register(self) -> Sequence[ClusterEvent]:
        return [ClusterEvent(EventResource.NODE, ActionType.ADD)]

    @classmethod
    def new(cls, args: Any, handle: Handle) -> NodeName:
        return cls(handle)
