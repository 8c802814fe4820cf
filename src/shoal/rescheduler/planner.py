"""Placement by migration: which running pods to move, and where, so a waiting pod fits.

Priority preemption takes room from lower-priority work and leaves it pending. When
there is nothing of lower priority to take, or taking it is not wanted, the room a
waiting pod needs often exists in pieces: a node is a few GPUs short, and the pods that
make it short would fit elsewhere. A `MigrationPlanner` finds a small set of *moves*
(running pods evicted and re-created on a node the plan chose) after which the waiting
pod fits on a target node, and where every moved pod has its own place to go.

The search, for one waiting pod:

1. Nodes are taken in the order of how little room they lack for the pod (vectorised
   over the node table, nominated room counted as taken, only nodes where the pod's
   rejection is resolvable); pods are looked at only on the nodes examined, so the
   cost follows the nodes looked at, not the cluster. At most `max_scanned` nodes with
   pods that could move are examined (and 16 times as many looked at).
2. On each node, the pods that may move (`movable`: priority, opt-out, controller,
   minimum run time, cool-down) are grouped into *units* that move together (`units`: a
   running gang moves whole, or not at all); a unit is kept only if each member would
   fit on some other node as the cluster is (judged once per distinct pod shape over
   every node, vectorised, GPU devices included).
3. Per node, the sets of units that cover the shortfall: every single unit that does,
   else one greedy set (most shortfall per unit of cost, then pruned), within
   `max_moves` pods and without a PodDisruptionBudget violation; a set's cost is the
   sum of the moved pods' costs (`cost`). Scanning stops once `max_targets` nodes have
   such a set.
4. The sets are verified cheapest first (then the smallest excess, i.e. the smallest
   pods), at most `max_verified`, each in one `Transaction`: evict the units, re-run
   every PreFilter and Filter of the waiting pod's profile on the target, then place
   each moved pod (largest first, as its controller will re-create it) on the
   best-fitting node where its own profile's filters pass (never the target), assuming
   it there so that the next moved pod and the waiting pod see it; finally the waiting
   pod must still fit on the target. The first plan that places everything wins; the
   transaction is always discarded: the planner decides nothing. The scheduler commits
   the plan's evictions and nominations (waiting pod and holds, see
   `shoal.rescheduler.holds`) as one transaction.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import msgspec
import numpy as np
from numpy.typing import NDArray

from shoal.api.gpu import ANNOTATION_GPU_INDEX, ANNOTATION_GPU_INDEX_ALIBABA, GpuRequest
from shoal.api.podinfo import PodInfo
from shoal.cache.cluster import ClusterState, PodRecord
from shoal.cache.gpu_devices import GpuDevices, request_of
from shoal.cache.transaction import Transaction
from shoal.framework.cycle_state import CycleState
from shoal.framework.handle import Handle
from shoal.framework.interfaces import NodeFilterStatuses
from shoal.framework.runner import PluginRunner
from shoal.framework.types import Candidates

__all__ = ["BIND_ANNOTATIONS", "MigrationPlan", "MigrationPlanner", "Move", "unbound"]

# Written when a pod is bound (its GPU devices); a re-created pod has none of them.
BIND_ANNOTATIONS = frozenset({ANNOTATION_GPU_INDEX, ANNOTATION_GPU_INDEX_ALIBABA})


@dataclass(frozen=True, slots=True)
class Move:
    pod: PodInfo
    source: str
    target: str


@dataclass
class MigrationPlan:
    node: str  # where the waiting pod goes
    moves: list[Move] = field(default_factory=list)
    cost: float = 0.0


# Rows looked at per row scanned: a row none of whose pods could move costs little.
LOOKED_PER_SCANNED = 16

Movable = Callable[[PodRecord], bool]
Units = Callable[[PodInfo], list[PodInfo]]
Cost = Callable[[PodInfo], float]


class MigrationPlanner:
    """One planning attempt (see the module docstring)."""

    def __init__(
        self,
        handle: Handle,
        *,
        movable: Movable,
        units: Units | None = None,
        cost: Cost | None = None,
        pdb_violations: Callable[[Iterable[PodInfo]], int] | None = None,
        max_moves: int = 4,
        max_targets: int = 16,
        max_verified: int = 8,
        max_scanned: int = 256,
    ) -> None:
        self.handle = handle
        self.movable = movable
        self.units: Units = units or (lambda pod: [pod])
        self.cost: Cost = cost or (lambda pod: 1.0)
        self.pdb_violations = pdb_violations or (lambda pods: 0)
        self.max_moves = max_moves
        self.max_targets = max_targets
        self.max_verified = max_verified
        self.max_scanned = max_scanned  # rows with movable pods examined, fewest lacking first
        self.tried = 0  # candidates verified in the last `plan` (for diagnostics)
        self._costs: dict[str, float] = {}

    def plan(self, pod: PodInfo, statuses: NodeFilterStatuses | None) -> MigrationPlan | None:
        cluster = self.handle.cluster
        table = cluster.table
        n = table.n
        if n == 0 or self.max_moves <= 0:
            return None
        room = _Room(cluster, pod)
        need = room.need
        if not need.size:
            return None
        # Rows in the order of how little they lack (vectorised over the node table);
        # pods are looked at only on the rows examined.
        everywhere = np.arange(n, dtype=np.intp)
        free_all = room.free(everywhere)
        # Room nominated to pods that go first (preemptors, other plans' holds) is taken.
        for row, other in self.handle.snapshot.nominated_against(pod):
            free_all[row] -= room.of(other)
        lack = (np.maximum(need - free_all, 0) / np.maximum(room.capacity(everywhere), 1)).sum(
            axis=1
        )
        rows = everywhere
        if statuses is not None:
            rows = rows[statuses.resolvable(rows)]
        fenced = self.handle.snapshot.fence.fenced()
        if fenced is not None:  # nodes of another replica's shards (node shards)
            rows = rows[~fenced[rows]]
        rows = rows[np.argsort(lack[rows], kind="stable")]
        fits_elsewhere = _ShapeRoom(cluster)
        choices: list[tuple[float, float, int, list[list[PodInfo]]]] = []
        covered = found = 0
        seen: set[str] = set()
        for row in rows[: self.max_scanned * LOOKED_PER_SCANNED].tolist():
            units = self._units_on(row, seen)
            units = [u for u in units if fits_elsewhere.all_fit(u)]
            if not units:
                continue  # nothing here could move: cheap, counts only as looked at
            covered += 1
            deficit = np.maximum(need - free_all[row], 0)
            added = False
            for excess, chosen in self._cover(row, deficit, units, room):
                moved = [p for unit in chosen for p in unit]
                if self.pdb_violations(moved) > 0:
                    continue
                choices.append((sum(self._cost(p) for p in moved), excess, row, chosen))
                added = True
            found += added
            if found >= self.max_targets or covered >= self.max_scanned:
                break
        choices.sort(key=lambda c: (c[0], c[1], c[2]))
        self.tried = 0
        for cost, _, row, chosen in choices[: self.max_verified]:
            self.tried += 1
            plan = self._verify(pod, row, chosen)
            if plan is not None:
                plan.cost = cost
                return plan
        return None

    # ---- choosing what to move ---------------------------------------------------------

    def _units_on(self, row: int, seen: set[str]) -> list[list[PodInfo]]:
        """The units with a member on `row` that may move (every member eligible: a unit
        with a member that may not move does not move at all), each unit once."""
        cluster = self.handle.cluster
        placed, evicting = cluster.placed, cluster.evicting
        out: list[list[PodInfo]] = []
        for uid in cluster.table.pods[row]:
            if uid in seen:
                continue
            record = placed.get(uid)
            if record is None or not self._eligible(record, evicting):
                continue
            unit = self.units(record.pod) or [record.pod]
            if len(unit) == 1:
                seen.add(uid)
                out.append(unit)
                continue
            seen.update(p.uid for p in unit)
            if len(unit) > self.max_moves:
                continue
            if all(
                (r := placed.get(p.uid)) is not None and self._eligible(r, evicting) for p in unit
            ):
                out.append(unit)
        return out

    def _eligible(self, record: PodRecord, evicting: set[str]) -> bool:
        return (
            not record.assumed
            and record.pod.uid not in evicting
            and record.node in self.handle.cluster.table.row_of
            and self.movable(record)
        )

    def _cover(
        self,
        row: int,
        deficit: NDArray[np.int64],
        units: list[list[PodInfo]],
        room: _Room,
    ) -> list[tuple[float, list[list[PodInfo]]]]:
        """Sets of units on `row` whose members there free at least `deficit`, with how
        much more than needed each frees (normalised): every single unit that does, else
        one greedy set. Smaller excess moves smaller pods, which are easier to place."""
        table = self.handle.cluster.table
        sizes = np.array([len(u) for u in units])
        if not deficit.any():
            # Enough in total, yet the filters said no: GPU milli scattered over devices
            # (or another per-node reason). One unit at a time; verifying decides.
            return [(0.0, [u]) for u in units if len(u) <= self.max_moves]
        name = str(table.names[row])
        frees = np.stack(
            [
                room.of(u[0])
                if len(u) == 1
                else sum(
                    (room.of(p) for p in u if self._node(p) == name),
                    np.zeros(room.need.size, dtype=np.int64),
                )
                for u in units
            ]
        )
        costs = np.array([sum(self._cost(p) for p in u) for u in units])
        scale = np.maximum(deficit, 1)
        single = np.all(frees >= deficit, axis=1) & (sizes <= self.max_moves)
        if single.any():
            excess = ((frees - deficit) / scale).sum(axis=1)
            return [(float(excess[j]), [units[j]]) for j in np.flatnonzero(single).tolist()]
        # Greedy: most of the (normalised) shortfall covered per unit of cost.
        value = (np.minimum(frees, deficit) / scale).sum(axis=1) / np.maximum(costs, 1e-9)
        chosen: list[int] = []
        left = deficit.copy()
        moves = 0
        for j in np.argsort(-value, kind="stable").tolist():
            if not left.any():
                break
            if moves + sizes[j] > self.max_moves or not (np.minimum(frees[j], left) > 0).any():
                continue
            chosen.append(j)
            moves += int(sizes[j])
            left = np.maximum(left - frees[j], 0)
        if left.any():
            return []
        # Prune units the others make unnecessary, costliest first.
        for j in sorted(chosen, key=lambda j: -costs[j]):
            rest = [i for i in chosen if i != j]
            if rest and np.all(frees[rest].sum(axis=0) >= deficit):
                chosen = rest
        excess = float(((frees[chosen].sum(axis=0) - deficit) / scale).sum())
        return [(excess, [units[j] for j in chosen])]

    def _cost(self, pod: PodInfo) -> float:
        found = self._costs.get(pod.uid)
        if found is None:
            found = self._costs[pod.uid] = self.cost(pod)
        return found

    def _node(self, pod: PodInfo) -> str:
        record = self.handle.cluster.placed.get(pod.uid)
        return record.node if record is not None else ""

    # ---- verifying a choice ----------------------------------------------------------

    def _verify(self, pod: PodInfo, row: int, units: list[list[PodInfo]]) -> MigrationPlan | None:
        cluster = self.handle.cluster
        table = cluster.table
        target = str(table.names[row])
        moved = [p for unit in units for p in unit]
        sources = {p.uid: self._node(p) for p in moved}
        with Transaction(cluster) as tx:
            for p in moved:
                tx.evict(p, "migration plan")
            if not self._fits_rows(pod, np.array([row], dtype=np.intp))[0]:
                return None
            moves: list[Move] = []
            others = np.delete(np.arange(table.n, dtype=np.intp), row)
            for p in sorted(moved, key=_size, reverse=True):
                fresh = unbound(p)  # as its controller re-creates it
                dest = self._best_fit(fresh, others)
                if dest is None:
                    return None
                name = str(table.names[dest])
                tx.assume(fresh, name)
                moves.append(Move(p, sources[p.uid], name))
            if not self._fits_rows(pod, np.array([row], dtype=np.intp))[0]:
                return None
            # The waiting pod itself, to be sure all of it holds together.
            tx.assume(pod, target)
        return MigrationPlan(target, moves)

    def _runner(self, pod: PodInfo) -> PluginRunner:
        return self.handle.runner(pod)

    def _fits_rows(self, pod: PodInfo, rows: NDArray[np.intp]) -> NDArray[np.bool_]:
        """Does `pod` pass every PreFilter and Filter of its profile on `rows`, against
        the cache as it is now (inside the plan's transaction)?"""
        runner = self._runner(pod)
        state = CycleState()
        pre, status = runner.run_pre_filter(state, pod)
        if not status.ok or not rows.size:
            return np.zeros(rows.size, dtype=bool)
        outcome = runner.run_filters(state, pod, Candidates.of(rows))
        passed: NDArray[np.bool_] = outcome.passed.copy()
        if pre is not None and pre.node_names is not None:
            names = self.handle.cluster.table.names
            passed &= np.array([str(names[r]) in pre.node_names for r in rows.tolist()], bool)
        return passed

    def _best_fit(self, pod: PodInfo, rows: NDArray[np.intp]) -> int | None:
        """The passing row the pod fills most (smallest normalised room left), so that
        moves consolidate rather than spread."""
        passed = self._fits_rows(pod, rows)
        if not passed.any():
            return None
        ok = rows[passed]
        room = _Room(self.handle.cluster, pod)
        if not room.need.size:
            return int(ok[0])
        left = (room.free(ok) - room.need) / np.maximum(room.capacity(ok), 1)
        return int(ok[int(np.argmin(left.sum(axis=1)))])


def unbound(pod: PodInfo) -> PodInfo:
    """The pod as its replacement will be: the same spec, not bound to a node, without
    the GPU devices written at its bind."""
    annotations = pod.pod.metadata.annotations
    if not pod.node_name and not any(k in annotations for k in BIND_ANNOTATIONS):
        return pod
    meta = msgspec.structs.replace(
        pod.pod.metadata,
        annotations={k: v for k, v in annotations.items() if k not in BIND_ANNOTATIONS},
    )
    spec = msgspec.structs.replace(pod.pod.spec, node_name="")
    fresh = PodInfo(msgspec.structs.replace(pod.pod, metadata=meta, spec=spec), pod.timestamp)
    fresh.priority = pod.priority
    return fresh


def _size(pod: PodInfo) -> tuple[int, int]:
    """Larger pods are placed first (GPU milli, then the sum of the other requests)."""
    return request_of(None, pod).total_milli, sum(pod.requests.values())


class _Room:
    """The resources a plan trades in, for one pod: the node-table columns it requests,
    plus its GPU milli from the device table (shared GPUs and GPUs requested through
    annotations are not a table column). A necessary condition only: which devices the
    milli are on is judged by the filters when the plan is verified."""

    def __init__(self, cluster: ClusterState, pod: PodInfo) -> None:
        self.table = cluster.table
        self.devices = cluster.gpu_devices
        vector = self.table.pod_vector(pod)
        self.cols = np.flatnonzero(vector)
        gpu = request_of(None, pod).total_milli if self.devices is not None else 0
        self.gpu = gpu > 0
        need = vector[self.cols]
        self.need: NDArray[np.int64] = np.append(need, gpu) if self.gpu else need

    def of(self, pod: PodInfo) -> NDArray[np.int64]:
        """What `pod` holds of these resources (frees when it leaves)."""
        held = self.table.pod_vector(pod)[self.cols]
        if self.gpu:
            held = np.append(held, _gpu_milli(self.devices, pod))
        return held

    def free(self, rows: NDArray[np.intp]) -> NDArray[np.int64]:
        free = self.table.free[rows][:, self.cols]
        if self.gpu and self.devices is not None:
            free = np.column_stack([free, self.devices.total_free(rows)])
        return free

    def capacity(self, rows: NDArray[np.intp]) -> NDArray[np.int64]:
        capacity = self.table.allocatable[rows][:, self.cols]
        if self.gpu and self.devices is not None:
            capacity = np.column_stack([capacity, self.devices.count[rows].astype(np.int64) * 1000])
        return capacity


def _gpu_milli(devices: GpuDevices | None, pod: PodInfo) -> int:
    """Milli-GPU a placed pod holds (its devices' record; parsed only when unknown)."""
    found = devices.assigned.get(pod.uid) if devices is not None else None
    if found is not None:
        return found.milli * len(found.devices)
    return request_of(None, pod).total_milli


def _gpu_request(cluster: ClusterState, pod: PodInfo) -> GpuRequest:
    """A placed pod's GPU request, from its devices' record when there is one."""
    devices = cluster.gpu_devices
    found = devices.assigned.get(pod.uid) if devices is not None else None
    if found is not None and found.devices:
        return GpuRequest(len(found.devices), found.milli)
    return request_of(None, pod)


class _ShapeRoom:
    """Would a pod fit on some node other than its own, as the cluster is (resources,
    and GPU devices where the cluster has them)? A necessary condition for moving it,
    judged once per distinct pod shape over every node (vectorised) and remembered for
    the rest of the planning attempt."""

    def __init__(self, cluster: ClusterState) -> None:
        self.cluster = cluster
        self.fits: dict[tuple[bytes, int, int], tuple[NDArray[np.bool_], int]] = {}

    def all_fit(self, unit: list[PodInfo]) -> bool:
        return all(self.fits_elsewhere(p) for p in unit)

    def fits_elsewhere(self, pod: PodInfo) -> bool:
        cluster = self.cluster
        table = cluster.table
        vector = table.pod_vector(pod)
        request = _gpu_request(cluster, pod)
        key = (vector.tobytes(), request.count, request.milli)
        found = self.fits.get(key)
        if found is None:
            n = table.n
            fits = np.all(table.free[:n] >= vector, axis=1)
            devices = cluster.gpu_devices
            if devices is not None and request:
                fits &= devices.enough(request, slice(0, n))
            found = self.fits[key] = (fits, int(np.count_nonzero(fits)))
        fits, count = found
        record = cluster.placed.get(pod.uid)
        own = table.row_of.get(record.node, -1) if record is not None else -1
        return count - (1 if own >= 0 and bool(fits[own]) else 0) > 0
