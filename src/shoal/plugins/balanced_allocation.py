"""NodeResourcesBalancedAllocation (PreScore, Score): prefer nodes whose resource
utilisation fractions stay close to each other after placing the pod
(score = (1 - std of fractions) * 100)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

from shoal.api.podinfo import PodInfo
from shoal.framework.cycle_state import CycleState
from shoal.framework.handle import Handle
from shoal.framework.status import Code, Status
from shoal.framework.types import (
    MAX_NODE_SCORE,
    ActionType,
    Candidates,
    ClusterEvent,
    EventResource,
)
from shoal.plugins.args import NodeResourcesBalancedAllocationArgs
from shoal.plugins.resource_allocation import allocatable_and_requested

__all__ = ["NAME", "BalancedAllocation"]

NAME = "NodeResourcesBalancedAllocation"


class BalancedAllocation:
    name = NAME

    def __init__(self, handle: Handle, args: NodeResourcesBalancedAllocationArgs) -> None:
        self.handle = handle
        self.resources = [r.name for r in args.resources]

    def pre_score(self, state: CycleState, pod: PodInfo, nodes: Candidates) -> Status:
        # A best-effort pod (no requests for the scored resources) leaves balance unchanged.
        if not any(pod.requests.get(r, 0) for r in self.resources):
            return Status(Code.SKIP)
        return Status()

    def score(self, state: CycleState, pod: PodInfo, nodes: Candidates) -> NDArray[np.int64]:
        alloc, req, _ = allocatable_and_requested(
            state,
            self.handle.snapshot, pod, nodes, self.resources, use_requested=True
        )
        counted = alloc > 0
        fraction = np.minimum(req / np.where(counted, alloc, 1), 1.0)
        fraction[~counted] = 0.0
        k = counted.sum(axis=1)
        if fraction.shape[1] == 2:
            # kube's special case for two resources: |f1 - f2| / 2 (the population std).
            std = np.abs(fraction[:, 0] - fraction[:, 1]) / 2
        else:
            mean = fraction.sum(axis=1) / np.maximum(k, 1)
            dev = np.where(counted, (fraction - mean[:, None]) ** 2, 0.0)
            std = np.sqrt(dev.sum(axis=1) / np.maximum(k, 1))
        std = np.where(k >= 2, std, 0.0)
        return ((1.0 - std) * MAX_NODE_SCORE).astype(np.int64)

    def events_to_register(self) -> Sequence[ClusterEvent]:
        return [
            ClusterEvent(EventResource.ASSIGNED_POD, ActionType.DELETE),
            ClusterEvent(EventResource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_ALLOCATABLE),
        ]

    @classmethod
    def new(
        cls, args: NodeResourcesBalancedAllocationArgs | None, handle: Handle
    ) -> BalancedAllocation:
        return cls(handle, args or NodeResourcesBalancedAllocationArgs())
