"""Shared resource-scoring arithmetic for NodeResourcesFit and BalancedAllocation.

Mirrors kube-scheduler's `resourceAllocationScorer`: for each configured resource, the
node's allocatable and (node requested + pod request); cpu and memory use the
"non-zero" requests (100m / 200Mi for containers that set none) unless `use_requested`.
Extended resources the pod does not request, and resources no node has, are left out.

Values come back as one 1-D array per resource, gathered from the column-major node
table (a contiguous column per resource), which keeps temporaries small.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from shoal.api.podinfo import PodInfo
from shoal.api.resources import CPU, MEMORY, is_extended
from shoal.cache.snapshot import Snapshot
from shoal.framework.types import Candidates

__all__ = ["ResourceColumns", "allocatable_and_requested"]

_NONZERO_COLUMN = {CPU: 0, MEMORY: 1}

ResourceColumns = list[tuple[int, NDArray[np.int64], NDArray[np.int64]]]
"""(position in the configured resource list, allocatable, requested incl. the pod)."""


def allocatable_and_requested(
    snap: Snapshot,
    pod: PodInfo,
    nodes: Candidates,
    resources: list[str],
    use_requested: bool,
) -> ResourceColumns:
    """Per counted resource: its position, allocatable and requested-after-placing."""
    index = snap.resource_index
    rows = nodes.index
    out: ResourceColumns = []
    for j, name in enumerate(resources):
        col = index.get(name)
        pod_request = pod.requests.get(name, 0)
        if col is None or (pod_request == 0 and is_extended(name)):
            continue
        # A column first, then the rows: cheaper than one 2-D fancy index.
        alloc = snap.allocatable[:, col][rows]
        k = _NONZERO_COLUMN.get(name, -1)
        if not use_requested and k >= 0:
            req = snap.nonzero_requested[:, k][rows] + pod.nonzero[k]
        else:
            req = snap.requested[:, col][rows] + pod_request
        out.append((j, alloc, req))
    return out
