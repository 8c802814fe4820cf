"""Fair share between queues: weighted hierarchical DRF (HDRF).

Which queue's work is tried next: walk from the root; at every level take, among the
children that have pending work and are not at their maximum, the one with the lowest
dominant share divided by its weight (dominant share = max over resources of the
subtree's usage / cluster capacity); ties go to the queue name, so the order is
deterministic. This is the HDRF selection of Bhattacharya et al. (2013) without its
rescaling of blocked children (a saturated child is simply skipped).

`fair_shares` computes what each queue *should* hold: weighted max-min fairness of
dominant shares, water-filled down the tree, each queue capped by its demand (usage +
pending) and its maximum. Jain's index over allocation / fair share measures fairness.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from shoal.tenancy.tree import UNLIMITED

if TYPE_CHECKING:
    from shoal.tenancy.manager import QueueManager

__all__ = ["choose_leaf", "dominant_shares", "fair_shares", "jain_index"]


def dominant_shares(usage: NDArray[Any], capacity: NDArray[np.float64]) -> NDArray[np.float64]:
    with np.errstate(divide="ignore", invalid="ignore"):
        frac = np.where(capacity > 0, usage / np.where(capacity > 0, capacity, 1), 0.0)
    return frac.max(axis=-1) if frac.size else np.zeros(usage.shape[:-1])


def choose_leaf(manager: QueueManager) -> int:
    """The leaf whose work goes next, or -1 if nothing is pending. A walk from the root:
    at each level the child with pending work and the lowest dominant share / weight
    (unsaturated children first; ties by name). Pure Python over a few children per
    level: shares are kept current by the manager as pods come and go."""
    tree = manager.tree
    leaves = tree.leaves
    active = manager.active_list
    share = manager.share_list
    saturated = manager.saturated_list
    weight = tree.weight_list
    names = tree.names
    node = 0
    while node not in leaves:
        best = -1
        best_key: tuple[bool, float, str] | None = None
        for c in tree.children_list[node]:
            if active[c] <= 0:
                continue
            key = (saturated[c], share[c] / weight[c], names[c])
            if best_key is None or key < best_key:
                best, best_key = c, key
        if best < 0:
            return -1
        node = best
    return node


def fair_shares(manager: QueueManager, capacity_by_name: dict[str, int]) -> dict[str, float]:
    """Each queue's weighted max-min fair dominant share (0..1) of the cluster."""
    tree = manager.tree
    capacity = np.array([float(capacity_by_name.get(r, 0)) for r in tree.resources])
    n = len(tree.names)
    demand_vec = manager.usage.astype(np.float64).copy()
    # pending demand: approximate by the pending pod count times the leaf's mean request
    for leaf in tree.leaves:
        waiting = manager.pending_sum[leaf]
        if waiting.any():
            demand_vec[tree.paths[leaf]] += waiting
    demand = dominant_shares(demand_vec, capacity)
    cap = np.array(
        [
            dominant_shares(np.where(tree.maximum[i] >= UNLIMITED, 0, tree.maximum[i]), capacity)
            if (tree.maximum[i] < UNLIMITED).any()
            else 1.0
            for i in range(n)
        ]
    )
    share = np.zeros(n)

    def fill(parent: int, amount: float) -> None:
        kids = tree.children[parent]
        if not kids:
            return
        limit = {c: min(demand[c], cap[c]) for c in kids}
        given = {c: 0.0 for c in kids}
        active = [c for c in kids if limit[c] > 1e-12]
        left = amount
        while active and left > 1e-12:
            total_w = sum(tree.weight[c] for c in active)
            step = min((limit[c] - given[c]) / tree.weight[c] for c in active)
            step = min(step, left / total_w)
            for c in active:
                given[c] += step * tree.weight[c]
            left -= step * total_w
            active = [c for c in active if limit[c] - given[c] > 1e-12]
        for c in kids:
            share[c] = given[c]
            fill(c, given[c])

    fill(0, 1.0)
    return {tree.names[i]: float(share[i]) for i in range(1, n)}


def jain_index(values: list[float]) -> float:
    """Jain's fairness index: 1 when all equal, 1/n when one value takes everything."""
    x = np.asarray(values, dtype=np.float64)
    if x.size == 0 or not np.any(x):
        return 1.0
    return float(x.sum() ** 2 / (x.size * (x**2).sum()))
