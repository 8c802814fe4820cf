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
        counted = allocatable_and_requested(
            self.handle.snapshot, pod, nodes, self.resources, use_requested=True
        )
        alloc = counted.allocatable
        k = counted.positions.size
        if k == 0:
            return np.full(nodes.size, MAX_NODE_SCORE, dtype=np.int64)
        # Utilisation fractions of every resource of every candidate (k x candidates).
        fraction = counted.requested / np.maximum(alloc, 1)
        np.minimum(fraction, 1.0, out=fraction)
        has = alloc > 0
        everywhere = bool(has.all())  # every candidate has every resource (the usual case)
        if not everywhere:
            fraction[~has] = 0.0
        if k == 2:
            # kube's special case for two resources: |f1 - f2| / 2 (the population std),
            # when both count on the node; with one or none the deviation is 0.
            std = np.abs(fraction[0] - fraction[1])
            std /= 2
            if not everywhere:
                std[~(has[0] & has[1])] = 0.0
        else:
            count = has.sum(axis=0)
            mean = fraction.sum(axis=0) / np.maximum(count, 1)
            dev = np.where(has, (fraction - mean) ** 2, 0.0).sum(axis=0)
            dev /= np.maximum(count, 1)
            std = np.where(count >= 2, np.sqrt(dev), 0.0)
        scores: NDArray[np.int64] = ((1.0 - std) * MAX_NODE_SCORE).astype(np.int64)
        return scores

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
