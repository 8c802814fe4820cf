"""GpuDotProduct (Score): the published "DotProd" baseline (Tetris-style alignment).

With free = (cpu left, GPU milli left) of the node and request = (cpu, GPU milli) of the
pod, both divided by the largest node (128 cpu, 8 GPUs):

    score = floor(100 * (1 - (free . request) / 2))

so nodes whose free resources align least with the request (the fuller ones) win; a node
without enough cpu scores 0. A GPU share takes the tightest-fitting device.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from shoal.api.podinfo import PodInfo
from shoal.cache.gpu_devices import MAX_SPEC_CPU, MAX_SPEC_GPU, GpuDevices, cpu_left, request_of
from shoal.framework.cycle_state import CycleState
from shoal.framework.handle import Handle
from shoal.framework.types import MAX_NODE_SCORE, Candidates

__all__ = ["NAME", "GpuDotProduct"]

NAME = "GpuDotProduct"


class GpuDotProduct:
    name = NAME

    def __init__(self, handle: Handle) -> None:
        self.handle = handle
        self.devices = GpuDevices.of(handle)

    def score(self, state: CycleState, pod: PodInfo, nodes: Candidates) -> NDArray[np.int64]:
        request = request_of(state, pod)
        idx = nodes.index
        cpu_free = cpu_left(self.handle.snapshot, idx)
        gpu_free = self.devices.total_free(idx)
        cpu = float(pod.nonzero[0])
        dot = (cpu_free / MAX_SPEC_CPU) * (cpu / MAX_SPEC_CPU) + (gpu_free / MAX_SPEC_GPU) * (
            request.total_milli / MAX_SPEC_GPU
        )
        scores = (MAX_NODE_SCORE * (1.0 - dot / 2.0)).astype(np.int64)
        return np.where(cpu_free < cpu, 0, scores)

    @classmethod
    def new(cls, args: Any, handle: Handle) -> GpuDotProduct:
        return cls(handle)
