"""Shared resource-scoring arithmetic for NodeResourcesFit and BalancedAllocation.

Mirrors kube-scheduler's `resourceAllocationScorer`: for each configured resource, the
node's allocatable and (node requested + pod request); cpu and memory use the
"non-zero" requests (100m / 200Mi for containers that set none) unless `use_requested`.
Extended resources the pod does not request are left out of the score.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from shoal.api.podinfo import PodInfo
from shoal.api.resources import CPU, MEMORY, is_extended
from shoal.framework.types import Candidates
from shoal.state.snapshot import Snapshot

__all__ = ["allocatable_and_requested"]


def allocatable_and_requested(
    snap: Snapshot,
    pod: PodInfo,
    nodes: Candidates,
    resources: list[str],
    use_requested: bool,
) -> tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.bool_]]:
    """(allocatable, requested-after-placing-the-pod, included) as [nodes, resources].

    `included[j]` is False for a resource that must not count (an extended resource the
    pod does not request, or one no node has).
    """
    idx = nodes.index
    alloc = np.zeros((nodes.size, len(resources)), dtype=np.int64)
    req = np.zeros((nodes.size, len(resources)), dtype=np.int64)
    included = np.ones(len(resources), dtype=bool)
    index = snap.resource_index
    for j, name in enumerate(resources):
        col = index.get(name)
        pod_request = pod.requests.get(name, 0)
        if col is None or (pod_request == 0 and is_extended(name)):
            included[j] = False
            continue
        alloc[:, j] = snap.allocatable[idx, col]
        if not use_requested and name in (CPU, MEMORY):
            k = 0 if name == CPU else 1
            req[:, j] = snap.nonzero_requested[idx, k] + pod.nonzero[k]
        else:
            req[:, j] = snap.requested[idx, col] + pod_request
    return alloc, req, included
