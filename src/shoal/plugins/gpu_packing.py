"""GpuPacking (Score): the published "GpuPacking" baseline.

From best to worst, a GPU pod prefers (scores in brackets):

1. sharing devices already in use: 100 - (free percent of the devices it takes) / 10,
   at least 50 [50, 100];
2. fully free devices of a node already in use: 50 - devices taken, at least 33;
3. an idle node: 33 - its device count (at least the device count).

The devices considered are the feasible ones with the least free milli first; CPU-only
pods score 0 everywhere. A GPU share takes the tightest-fitting device.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from shoal.api.gpu import GPU_MILLI
from shoal.api.podinfo import PodInfo
from shoal.cache.gpu_devices import GpuDevices, request_of
from shoal.framework.cycle_state import CycleState
from shoal.framework.handle import Handle
from shoal.framework.types import MAX_NODE_SCORE, Candidates

__all__ = ["NAME", "GpuPacking"]

NAME = "GpuPacking"
_THIRD = MAX_NODE_SCORE // 3
_HALF = MAX_NODE_SCORE // 2


class GpuPacking:
    name = NAME

    def __init__(self, handle: Handle) -> None:
        self.handle = handle
        self.devices = GpuDevices.of(handle)

    def score(self, state: CycleState, pod: PodInfo, nodes: Candidates) -> NDArray[np.int64]:
        request = request_of(state, pod)
        if not request:
            return np.zeros(nodes.size, dtype=np.int64)
        devices = self.devices
        idx = nodes.index
        free = devices.free[idx].astype(np.int64)
        count = devices.count[idx]
        fully_free = (free == GPU_MILLI).sum(axis=1)
        idle_node = np.maximum(_THIRD - fully_free, fully_free)
        sorted_free = np.sort(free, axis=1)
        feasible = sorted_free >= request.milli
        taken = feasible & (np.cumsum(feasible, axis=1) <= request.count)
        ok = taken.sum(axis=1) == request.count
        whole_taken = (taken & (sorted_free == GPU_MILLI)).sum(axis=1)
        used_node = np.maximum(_HALF - whole_taken, _THIRD)
        free_percent = np.where(taken, sorted_free * 100 // GPU_MILLI, 0).sum(axis=1)
        shared = np.maximum(MAX_NODE_SCORE - free_percent // 10, _HALF)
        scores = np.where(whole_taken > 0, used_node, shared)
        scores = np.where(ok, scores, 0)
        return np.where(fully_free == count, idle_node, scores)

    @classmethod
    def new(cls, args: Any, handle: Handle) -> GpuPacking:
        return cls(handle)
