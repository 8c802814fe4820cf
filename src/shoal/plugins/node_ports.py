"""NodePorts (PreFilter, Filter): a host port (with protocol and IP) can be used by one
pod per node; 0.0.0.0 conflicts with every address."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

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
    PreFilterResult,
)

__all__ = ["NAME", "REASON", "NodePorts"]

NAME = "NodePorts"
REASON = "node(s) didn't have free ports for the requested pod ports"


class NodePorts:
    name = NAME
    # Optimistic workers may decide with it: its verdict reads only the node's row and
    # the pod (shoal.scheduler.optimistic).
    row_local = True
    # Its verdict on a node depends only on that node's pods and only improves as pods
    # leave: preemption may judge all candidate nodes at once (shoal.preemption).
    preemption_local = True

    def __init__(self, handle: Handle) -> None:
        self.handle = handle

    def pre_filter(self, state: CycleState, pod: PodInfo) -> tuple[PreFilterResult | None, Status]:
        if not pod.host_ports:
            return None, Status(Code.SKIP)
        return None, Status()

    def filter(self, state: CycleState, pod: PodInfo, nodes: Candidates) -> FilterResult:
        snap = self.handle.snapshot
        # Only rows that already use host ports can conflict: look at those alone.
        busy_rows = snap.rows_with_host_ports()
        conflict_rows = [
            row
            for row in busy_rows
            if any(want.conflicts(used) for want in pod.host_ports for used in snap.host_ports(row))
        ]
        if not conflict_rows:
            return FilterResult.all_pass(nodes.size)
        blocked = np.zeros(snap.n, dtype=bool)
        blocked[conflict_rows] = True
        return FilterResult.from_mask(~blocked[nodes.index], REASON)

    def events_to_register(self) -> Sequence[ClusterEvent]:
        return [
            ClusterEvent(EventResource.ASSIGNED_POD, ActionType.DELETE),
            ClusterEvent(EventResource.NODE, ActionType.ADD | ActionType.UPDATE),
        ]

    @classmethod
    def new(cls, args: Any, handle: Handle) -> NodePorts:
        return cls(handle)
