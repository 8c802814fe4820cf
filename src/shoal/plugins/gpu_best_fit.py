"""GpuBestFit (Score): the published "BestFit" baseline.

The node with the least leftover after placing the pod wins:

    leftover = 0.5 (cpu left - cpu) / 128 cpu + 0.5 (GPU milli left - GPU milli) / 8 GPUs
    score = floor(100 (1 - leftover)), then min-max normalised to 0..100 over the nodes.

A GPU share takes the tightest-fitting device.
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

__all__ = ["NAME", "GpuBestFit", "min_max_normalize"]

NAME = "GpuBestFit"


def min_max_normalize(scores: NDArray[np.int64]) -> NDArray[np.int64]:
    """Scale to 0..100 by the lowest and highest score (all 0 when they are equal)."""
    if not scores.size:
        return scores
    low, high = int(scores.min()), int(scores.max())
    if high == low:
        return np.zeros_like(scores)
    return (scores - low) * MAX_NODE_SCORE // (high - low)


class GpuBestFit:
    name = NAME

    def __init__(self, handle: Handle) -> None:
        self.handle = handle
        self.devices = GpuDevices.of(handle)

    def score(self, state: CycleState, pod: PodInfo, nodes: Candidates) -> NDArray[np.int64]:
        request = request_of(state, pod)
        idx = nodes.index
        cpu_free = cpu_left(self.handle.snapshot, idx)
        gpu_free = self.devices.total_free(idx)
        cpu = pod.nonzero[0]
        gpu = request.total_milli
        leftover = (cpu_free - cpu) / MAX_SPEC_CPU * 0.5 + (gpu_free - gpu) / MAX_SPEC_GPU * 0.5
        scores = ((1.0 - leftover) * MAX_NODE_SCORE).astype(np.int64)
        return np.where((cpu_free < cpu) | (gpu_free < gpu), 0, scores)

    def normalize_score(
        self, state: CycleState, pod: PodInfo, nodes: Candidates, scores: NDArray[np.int64]
    ) -> NDArray[np.int64]:
        return min_max_normalize(scores)

    @classmethod
    def new(cls, args: Any, handle: Handle) -> GpuBestFit:
        return cls(handle)
