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
        columns = allocatable_and_requested(
            self.handle.snapshot, pod, nodes, self.resources, use_requested=True
        )
        fractions = []
        counted = []
        everywhere = True  # every candidate has every resource (the usual case)
        for _, alloc, req in columns:
            has = alloc > 0
            fraction = req / np.maximum(alloc, 1)
            np.minimum(fraction, 1.0, out=fraction)
            if not has.all():
                everywhere = False
                fraction[~has] = 0.0
            fractions.append(fraction)
            counted.append(has)
        if not fractions:
            return np.full(nodes.size, MAX_NODE_SCORE, dtype=np.int64)
        if len(fractions) == 2:
            # kube's special case for two resources: |f1 - f2| / 2 (the population std),
            # when both count on the node; with one or none the deviation is 0.
            std = np.abs(fractions[0] - fractions[1])
            std /= 2
            if not everywhere:
                std[~(counted[0] & counted[1])] = 0.0
        else:
            f = np.array(fractions)
            c = np.array(counted)
            k = c.sum(axis=0)
            mean = f.sum(axis=0) / np.maximum(k, 1)
            dev = np.where(c, (f - mean) ** 2, 0.0).sum(axis=0) / np.maximum(k, 1)
            std = np.where(k >= 2, np.sqrt(dev), 0.0)
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
