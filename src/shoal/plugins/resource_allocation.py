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
from shoal.framework.cycle_state import CycleState
from shoal.framework.types import Candidates
from shoal.state.snapshot import Snapshot

__all__ = ["allocatable_and_requested"]

_NONZERO_COLUMN = {CPU: 0, MEMORY: 1}


_ROWS_KEY = "shoal.resource_rows"


def _candidate_rows(
    state: CycleState, snap: Snapshot, nodes: Candidates
) -> tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.int64]]:
    """Allocatable, requested and non-zero requested rows of the candidates, gathered
    once per cycle and shared by every scoring plugin (they score the same nodes)."""
    cached = state.get(_ROWS_KEY)
    if cached is not None and cached[0] is nodes:
        return cached[1]  # type: ignore[no-any-return]
    rows = nodes.index
    gathered = (snap.allocatable[rows], snap.requested[rows], snap.nonzero_requested[rows])
    state.write(_ROWS_KEY, (nodes, gathered))
    return gathered


def allocatable_and_requested(
    state: CycleState,
    snap: Snapshot,
    pod: PodInfo,
    nodes: Candidates,
    resources: list[str],
    use_requested: bool,
) -> tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.bool_]]:
    """(allocatable, requested-after-placing-the-pod, included) as [nodes, resources].

    `included[j]` is False for a resource that must not count (an extended resource the
    pod does not request, or one no node has); its columns are zero.
    """
    index = snap.resource_index
    alloc_rows, requested_rows, nonzero_rows = _candidate_rows(state, snap, nodes)
    included = np.array(
        [r in index and (pod.requests.get(r, 0) > 0 or not is_extended(r)) for r in resources],
        dtype=bool,
    )
    cols = [index.get(r, 0) for r in resources]
    alloc = alloc_rows[:, cols]
    if use_requested:
        req = requested_rows[:, cols]
        req += np.array([pod.requests.get(r, 0) for r in resources], dtype=np.int64)
    else:
        req = requested_rows[:, cols]
        nonzero = [_NONZERO_COLUMN.get(r, -1) for r in resources]
        pod_req = [pod.requests.get(r, 0) for r in resources]
        for j, k in enumerate(nonzero):
            if k >= 0:
                req[:, j] = nonzero_rows[:, k]
                pod_req[j] = pod.nonzero[k]
        req += np.array(pod_req, dtype=np.int64)
    if not included.all():
        alloc[:, ~included] = 0
        req[:, ~included] = 0
    return alloc, req, included
