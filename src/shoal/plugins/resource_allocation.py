"""Shared resource-scoring arithmetic for NodeResourcesFit and BalancedAllocation.

Mirrors kube-scheduler's `resourceAllocationScorer`: for each configured resource, the
node's allocatable and (node requested + pod request); cpu and memory use the
"non-zero" requests (100m / 200Mi for containers that set none) unless `use_requested`.
Extended resources the pod does not request, and resources no node has, are left out.

Values come back as two (counted resources x candidates) arrays, so a scorer does its
arithmetic for every resource in one numpy operation rather than one per resource: at
the ~500 candidates kube scores per pod, the per-call cost of numpy is most of the work.
The table is column-major, so its transpose is row-major (resources x nodes) and
`take` along the node axis gathers every resource's candidates in one call.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from shoal.api.podinfo import PodInfo
from shoal.api.resources import CPU, MEMORY, is_extended
from shoal.cache.snapshot import Snapshot
from shoal.framework.types import Candidates

__all__ = ["ResourceMatrix", "allocatable_and_requested"]

_NONZERO_COLUMN = {CPU: 0, MEMORY: 1}
_FIRST_TWO = np.array([0, 1], dtype=np.intp)
_FIRST_TWO.flags.writeable = False


@dataclass(frozen=True, slots=True)
class ResourceMatrix:
    """The counted resources for a set of candidate nodes."""

    positions: NDArray[np.intp]  # of each counted resource in the configured list
    allocatable: NDArray[np.int64]  # counted x candidates
    requested: NDArray[np.int64]  # counted x candidates, the pod's request included


def allocatable_and_requested(
    snap: Snapshot,
    pod: PodInfo,
    nodes: Candidates,
    resources: list[str],
    use_requested: bool,
) -> ResourceMatrix:
    """Allocatable and requested-after-placing of every counted resource."""
    index = snap.resource_index
    positions: list[int] = []
    columns: list[int] = []
    nonzero: list[int] = []  # per counted resource: its nonzero column, or -1
    for j, name in enumerate(resources):
        col = index.get(name)
        if col is None or (is_extended(name) and not pod.requests.get(name, 0)):
            continue
        positions.append(j)
        columns.append(col)
        nonzero.append(-1 if use_requested else _NONZERO_COLUMN.get(name, -1))
    if columns == [0, 1]:
        # The default configuration: cpu and memory, the table's first two columns.
        alloc = _gather(snap.allocatable.T[:2], nodes)
        if nonzero == [0, 1]:
            req = _gather(snap.nonzero_requested.T, nodes)
            req += np.array(pod.nonzero, dtype=np.int64)[:, None]
        else:
            req = _gather(snap.requested.T[:2], nodes)
            own = [pod.requests.get(CPU, 0), pod.requests.get(MEMORY, 0)]
            req += np.array(own, dtype=np.int64)[:, None]
        at = _FIRST_TWO if positions == [0, 1] else np.array(positions, dtype=np.intp)
        return ResourceMatrix(at, alloc, req)
    alloc = _gather(snap.allocatable.T, nodes)[columns]
    req = np.empty_like(alloc)
    for k, (name_at, col, nz) in enumerate(zip(positions, columns, nonzero, strict=True)):
        if nz >= 0:
            req[k] = _gather(snap.nonzero_requested.T[nz], nodes) + pod.nonzero[nz]
        else:
            req[k] = _gather(snap.requested.T[col], nodes) + pod.requests.get(resources[name_at], 0)
    return ResourceMatrix(np.array(positions, dtype=np.intp), alloc, req)


def _gather(by_node: NDArray[np.int64], nodes: Candidates) -> NDArray[np.int64]:
    """The candidates' values along the last (node) axis, as a new array."""
    index = nodes.index
    if isinstance(index, slice):
        out: NDArray[np.int64] = by_node[..., index].copy()
        return out
    return by_node.take(index, axis=-1)
