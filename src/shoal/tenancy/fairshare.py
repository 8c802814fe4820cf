"""Fair share between queues: weighted hierarchical DRF (HDRF).

Pure functions over the queue tree and arrays indexed [queue, resource]; the manager
imports them and passes its state in (this module never imports the manager).

`choose_leaf` says which queue's work is tried next: walk from the root; at every level
take, among the children that have pending work and are not at their maximum, the one
with the lowest dominant share divided by its weight (dominant share = max over
resources of the subtree's usage / cluster capacity); ties go to the queue name, so the
order is deterministic. This is the HDRF selection of Bhattacharya et al. (2013) without
its rescaling of blocked children (a saturated child is simply skipped).

`fair_shares_of` computes what each queue *should* hold as a dominant share: weighted
max-min fairness of dominant shares, water-filled down the tree, each queue capped by
its demand (usage + pending) and its maximum (the simulator's fairness metric).

`hdrf_fair_share` computes each queue's fair share in resource units, multi-resource
and with guarantees: at every queue, children with demand share what the queue holds in
proportion to their weights by dominant share (DRF progressive filling), each capped by
its demand and maximum and never below its guarantee while it has demand; what a
capped child leaves goes to its siblings.

Jain's index over allocation / fair share measures fairness.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np
from numpy.typing import NDArray

from shoal.tenancy.tree import UNLIMITED, QueueTree

__all__ = [
    "QueueState",
    "choose_leaf",
    "dominant_shares",
    "fair_shares",
    "hdrf_fair_share",
    "jain_index",
]

_EPS = 1e-9


class QueueState(Protocol):
    """What `fair_shares` reads (the manager has it)."""

    @property
    def tree(self) -> QueueTree: ...
    @property
    def usage(self) -> NDArray[np.int64]: ...
    @property
    def pending_sum(self) -> NDArray[np.int64]: ...


def dominant_shares(usage: NDArray[Any], capacity: NDArray[np.float64]) -> NDArray[np.float64]:
    with np.errstate(divide="ignore", invalid="ignore"):
        frac = np.where(capacity > 0, usage / np.where(capacity > 0, capacity, 1), 0.0)
    return frac.max(axis=-1) if frac.size else np.zeros(usage.shape[:-1])


def choose_leaf(
    tree: QueueTree, active: list[int], share: list[float], saturated: list[bool]
) -> int:
    """The leaf whose work goes next, or -1 if nothing is pending. A walk from the root:
    at each level the child with pending work (`active`, per subtree) and the lowest
    dominant share / weight (unsaturated children first; ties by name). Plain Python
    over a few children per level: the caller keeps `share` current as pods come and
    go."""
    leaves = tree.leaves
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


def fair_shares(state: QueueState, capacity: NDArray[np.float64]) -> dict[str, float]:
    """Each queue's HDRF fair share as a dominant share of the cluster (0..1): the
    largest, over resources, of `hdrf_fair_share` / capacity, for the manager's usage and
    pending requests. The one fair-share number every report gives (Queue status, the
    CLI, the dashboard, the simulator's summary)."""
    tree = state.tree
    fair = hdrf_fair_share(tree, state.usage + state.pending_sum, capacity)
    cap = np.asarray(capacity, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        share = np.where(cap[None, :] > 0, fair / cap[None, :], 0.0)
    dominant = share.max(axis=1) if share.shape[1] else np.zeros(len(tree.names))
    return {tree.names[i]: float(dominant[i]) for i in range(1, len(tree.names))}


def hdrf_fair_share(
    tree: QueueTree, demand: NDArray[Any], capacity: NDArray[Any]
) -> NDArray[np.float64]:
    """Each queue's fair share in resource units, [queue, resource] over
    `tree.resources` (row 0, the root, is the capacity).

    `demand[leaf]` is what the leaf would use if it could (usage + pending requests; rows
    of internal queues are ignored: a subtree demands what its leaves do). `capacity` is
    the cluster's allocatable. Top-down water-filling: what a queue holds is shared among
    its children with demand in proportion to weight by dominant share (share of the
    cluster capacity), each along the mix of resources it demands (DRF progressive
    filling), capped by its demand and maximum; a child with demand gets at least its
    guarantee (up to its demand; when guarantees together exceed what the parent holds,
    they are scaled down to fit). When a child is capped, the rest keep filling, so its
    leftover goes to its siblings; a resource that runs out stops the children that need
    it. Leontief coupling can leave some of a resource unused in a subtree (nobody there
    can use it without another that ran out): it is not lent across subtrees.
    """
    cap = np.asarray(capacity, dtype=np.float64)
    n, r = len(tree.names), len(tree.resources)
    want = np.zeros((n, r))
    maximum = np.where(tree.maximum >= UNLIMITED, np.inf, tree.maximum.astype(np.float64))
    # A subtree demands what its leaves do, capped by every maximum on the way.
    order = sorted(range(1, n), key=lambda i: -len(tree.path_lists[i]))
    for i in order:
        if i in tree.leaves:
            want[i] += np.asarray(demand[i], dtype=np.float64)
        want[i] = np.minimum(want[i], maximum[i])
        parent = int(tree.parent[i])
        if parent > 0:
            want[parent] += want[i]
    share = np.zeros((n, r))
    share[0] = cap
    for parent in [0, *sorted(range(1, n), key=lambda i: len(tree.path_lists[i]))]:
        kids = tree.children_list[parent]
        if kids:
            share[kids] = _fill(
                share[parent],
                want[kids],
                tree.weight[kids],
                tree.guaranteed[kids].astype(np.float64),
                cap,
            )
    return share


def _fill(
    available: NDArray[np.float64],
    want: NDArray[np.float64],
    weight: NDArray[np.float64],
    guaranteed: NDArray[np.float64],
    capacity: NDArray[np.float64],
) -> NDArray[np.float64]:
    """Weighted DRF progressive filling of `available` among children (rows) with
    demands `want`, each at least min(guarantee, demand)."""
    k, r = want.shape
    counted = capacity > 0
    want = np.where(counted, want, 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        per_unit = np.where(counted, want / np.where(counted, capacity, 1.0), 0.0)
    dom = per_unit.max(axis=1) if r else np.zeros(k)
    # Allocation along the child's demand mix per unit of dominant share.
    direction = np.zeros_like(want)
    np.divide(want, dom[:, None], out=direction, where=dom[:, None] > 0)
    floor = np.minimum(guaranteed, want)
    total = floor.sum(axis=0)
    over = total > available
    if over.any():
        scale = np.ones(r)
        scale[over] = available[over] / total[over]
        floor = floor * scale
    alloc = floor.copy()
    # `level` is the dominant share per unit of weight; a child at level t holds
    # max(floor, min(dom, w t) * direction).
    growing = (dom > 0) & (floor < want - _EPS).any(axis=1)
    level = 0.0

    def at(t: float) -> NDArray[np.float64]:
        ds = np.minimum(dom, weight * t)
        return np.maximum(floor, ds[:, None] * direction)

    while growing.any():
        g = np.flatnonzero(growing)
        # Breakpoints: a child reaching its demand, or one of its resources rising
        # above its floor (the slope changes there).
        points = [dom[g] / weight[g]]
        with np.errstate(divide="ignore", invalid="ignore"):
            crossing = floor[g] / (weight[g, None] * direction[g])
        points.append(crossing[np.isfinite(crossing) & (crossing > level + _EPS)])
        nxt = float(min(p.min() for p in points if p.size))
        base = alloc.sum(axis=0)
        target = at(nxt)
        used = base - alloc[g].sum(axis=0) + target[g].sum(axis=0)
        short = used > available + _EPS * np.maximum(1.0, available)
        if not short.any():
            alloc[g] = target[g]
            level = nxt
            done = dom[g] <= weight[g] * level + _EPS
            growing[g[done]] = False
            continue
        # A resource runs out before `nxt`: between breakpoints the consumption of
        # each resource is linear in the level; stop where the first one runs out.
        half = (nxt - level) / 2
        slope = (at(level + half)[g].sum(axis=0) - alloc[g].sum(axis=0)) / half
        with np.errstate(divide="ignore", invalid="ignore"):
            until = np.where(short & (slope > 0), level + (available - base) / slope, np.inf)
        stop = float(until.min())
        if not np.isfinite(stop):  # rounding: stop every child that needs what is short
            stop, out = level, short
        else:
            stop = max(level, stop)
            out = short & (until <= stop + _EPS * max(1.0, stop))
        alloc[g] = at(stop)[g]
        level = stop
        # Children that need a resource that ran out stop where they are.
        needs = (direction[g][:, out] > 0).any(axis=1)
        growing[g[needs] if needs.any() else g] = False
        done = dom[g] <= weight[g] * level + _EPS
        growing[g[done]] = False
    return alloc


def jain_index(values: list[float]) -> float:
    """Jain's fairness index: 1 when all equal, 1/n when one value takes everything."""
    x = np.asarray(values, dtype=np.float64)
    if x.size == 0 or not np.any(x):
        return 1.0
    return float(x.sum() ** 2 / (x.size * (x**2).sum()))
