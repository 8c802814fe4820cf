"""GpuRandom (PreScore, Score): the published "Random" baseline.

PreScore picks one feasible node uniformly at random (the handle's seeded generator);
Score gives it 100 and every other node 0. A GPU share takes a device chosen uniformly at
random among the devices of that node with enough free milli.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from shoal.api.podinfo import PodInfo
from shoal.cache.gpu_devices import GpuDevices, request_of
from shoal.framework.cycle_state import CycleState
from shoal.framework.handle import Handle
from shoal.framework.status import Status
from shoal.framework.types import MAX_NODE_SCORE, Candidates

__all__ = ["NAME", "GpuRandom"]

NAME = "GpuRandom"
_STATE_KEY = "PreScore" + NAME


class GpuRandom:
    name = NAME

    def __init__(self, handle: Handle) -> None:
        self.handle = handle
        self.devices = GpuDevices.of(handle)

    def pre_score(self, state: CycleState, pod: PodInfo, nodes: Candidates) -> Status:
        state.write(_STATE_KEY, int(self.handle.rng.integers(nodes.size)))
        return Status()

    def score(self, state: CycleState, pod: PodInfo, nodes: Candidates) -> NDArray[np.int64]:
        chosen = state.read(_STATE_KEY)
        scores = np.zeros(nodes.size, dtype=np.int64)
        scores[chosen] = MAX_NODE_SCORE
        request = request_of(state, pod)
        if request.shared:
            row = int(nodes.rows[chosen])
            fits = np.flatnonzero(
                self.devices.free[row, : self.devices.count[row]] >= request.milli
            )
            if len(fits) >= request.count:
                picked = self.handle.rng.choice(fits, size=request.count, replace=False)
                self.devices.plan(pod.uid, np.array([row], dtype=np.intp), np.sort(picked))
        return scores

    @classmethod
    def new(cls, args: Any, handle: Handle) -> GpuRandom:
        return cls(handle)
