"""Choosing preemption victims on one node, shared by priority preemption and reclaim.

kube-scheduler's DefaultPreemption, vectorised where it matters: candidate nodes are
those where the pod failed only for resources (NodeResourcesFit was the first filter to
reject them, so removing pods can help); for each, every eligible victim is removed,
then victims are given back from the most important down while the pod still fits,
which leaves a minimal set. Nodes are ranked by kube's criteria: fewest PDB violations,
lowest highest-victim priority, smallest priority sum, fewest victims, then the node
whose victims started last.

Gangs: a victim that belongs to a group at or below its minMember takes the whole group
with it (a partial gang is never left running); members above minMember go one by one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from shoal.api.podinfo import PodInfo
from shoal.cache.cluster import ClusterState, PodRecord
from shoal.framework.interfaces import NodeFilterStatuses
from shoal.gang.manager import GangManager

__all__ = ["Victims", "find_victims"]

MAX_CANDIDATE_NODES = 100  # kube's minCandidateNodesAbsolute


@dataclass
class Victims:
    node: str
    pods: list[PodInfo] = field(default_factory=list)
    pdb_violations: int = 0

    def rank(self) -> tuple[int, int, int, int, float]:
        prios = [p.priority for p in self.pods] or [0]
        latest = max((p.timestamp for p in self.pods), default=0.0)
        return (self.pdb_violations, max(prios), sum(prios), len(self.pods), -latest)


def _units(pod: PodInfo, gangs: GangManager, cluster: ClusterState) -> list[PodInfo]:
    """The pods that must go together with `pod` (its gang when it is at minMember)."""
    group = gangs.group_of_uid(pod.uid)
    if group is None or len(group.bound) > group.min_member:
        return [pod]
    return [cluster.placed[u].pod for u in group.bound if u in cluster.placed]


def find_victims(
    cluster: ClusterState,
    gangs: GangManager,
    pod: PodInfo,
    statuses: NodeFilterStatuses,
    pool: Iterable[PodRecord],
    budget: Callable[[list[PodInfo]], bool] | None = None,
    pdb_violations: Callable[[list[PodInfo]], int] | None = None,
    fit_plugin: str = "NodeResourcesFit",
    max_candidates: int = MAX_CANDIDATE_NODES,
) -> Victims | None:
    """The best node and minimal victim set for `pod`, or None.

    `pool` holds the pods that may be preempted at all (the caller narrows it: lower
    priority, or queues above their guarantee); `budget(victims)` says whether a whole
    set may be taken (e.g. no queue pushed below its guarantee).
    """
    table = cluster.table
    n = table.n
    need = table.pod_vector(pod)
    cols = np.flatnonzero(need)
    # Eligible victims and what they would free, per node row.
    victims_by_row: dict[int, list[PodInfo]] = {}
    freeable = np.zeros((n, len(cols)), dtype=np.int64)
    for record in pool:
        row = table.row_of.get(record.node)
        if row is not None and not record.assumed:
            victims_by_row.setdefault(row, []).append(record.pod)
    if not victims_by_row:
        return None
    rows = np.fromiter(victims_by_row, dtype=np.intp)
    for row in rows:
        freeable[row] = sum(table.pod_vector(p)[cols] for p in victims_by_row[int(row)])
    # Room already promised to other nominated preemptors of equal or higher priority
    # is not free (kube adds nominated pods before selecting victims).
    free = table.free[:n][:, cols].copy()
    for uid, (node, other) in cluster.nominations.items():
        row = table.row_of.get(node)
        if uid != pod.uid and row is not None and other.priority >= pod.priority:
            free[row] -= table.pod_vector(other)[cols]
    could_fit = np.all(free[rows] + freeable[rows] >= need[cols], axis=1)
    candidates = [
        int(r)
        for r in rows[could_fit]
        if statuses.status_of(table.names[int(r)]).plugin == fit_plugin
    ][:max_candidates]
    best: Victims | None = None
    for row in candidates:
        chosen = _minimal_set(free[row], need[cols], victims_by_row[row], cols, table)
        if not chosen:
            continue  # impossible, or no victim needed (then it is not preemption's job)
        expanded: dict[str, PodInfo] = {}
        for v in chosen:
            for u in _units(v, gangs, cluster):
                expanded[u.uid] = u
        victims = list(expanded.values())
        if budget is not None and not budget(victims):
            continue
        result = Victims(str(table.names[row]), victims)
        if pdb_violations is not None:
            result.pdb_violations = pdb_violations(victims)
        if best is None or result.rank() < best.rank():
            best = result
    return best


def _minimal_set(
    free: NDArray[np.int64],
    need: NDArray[np.int64],
    candidates: list[PodInfo],
    cols: NDArray[np.intp],
    table: object,
) -> list[PodInfo] | None:
    """Remove all candidates, then give back the most important ones while it still fits."""
    vectors = {p.uid: table.pod_vector(p)[cols] for p in candidates}  # type: ignore[attr-defined]
    available = free + sum(vectors.values())
    if np.any(available < need):
        return None
    removed = sorted(candidates, key=lambda p: (p.priority, p.timestamp), reverse=True)
    kept: list[PodInfo] = []
    for p in removed:  # most important first: keep it if the pod still fits without it
        if np.all(available - vectors[p.uid] >= need):
            available = available - vectors[p.uid]
            kept.append(p)
    return [p for p in removed if p not in kept]
