"""GpuClustering (Score): the published "GpuClustering" baseline.

Puts GPU pods of the same kind ("share-gpu", "1-gpu", "2-gpu", ...) together. With
`used = 25 * (8000 - GPU milli left) / 8000` (integer division), a GPU pod scores

* 75 + used on a node running only pods of its kind,
* 50 + used on a node running its kind among others,
* 25 + used on a node running no GPU pod,
* used on a node running only other kinds;

CPU-only pods score 0 everywhere. A GPU share takes the tightest-fitting device.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from shoal.api.podinfo import PodInfo
from shoal.cache.gpu_devices import MAX_SPEC_GPU, GpuDevices, request_of
from shoal.framework.cycle_state import CycleState
from shoal.framework.handle import Handle
from shoal.framework.types import MAX_NODE_SCORE, Candidates
from shoal.plugins.normalize import go_div

__all__ = ["NAME", "GpuClustering"]

NAME = "GpuClustering"
_QUARTER = MAX_NODE_SCORE // 4


class GpuClustering:
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
        used = go_div(_QUARTER * (MAX_SPEC_GPU - devices.total_free(idx)), MAX_SPEC_GPU)
        kinds = devices.kinds[idx]
        distinct = (kinds > 0).sum(axis=1)
        k = devices.kind_index.get(request.affinity)
        same = kinds[:, k] > 0 if k is not None else np.zeros(nodes.size, dtype=bool)
        bonus = np.where(
            same,
            np.where(distinct == 1, 3 * _QUARTER, 2 * _QUARTER),
            np.where(distinct == 0, _QUARTER, 0),
        )
        return used + bonus

    @classmethod
    def new(cls, args: Any, handle: Handle) -> GpuClustering:
        return cls(handle)
