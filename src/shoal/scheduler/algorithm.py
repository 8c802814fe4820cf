"""kube-scheduler's schedulePod: PreFilter, Filter over the candidate nodes, PreScore,
Score, pick a host.

A plain function of the cache as it is when called (pods assumed or evicted inside an
open transaction included), so the single-pod cycle, the gang transaction, the Spark
driver-first what-if and the rescheduler's plans all place pods the same way. It keeps
kube's `nextStartNodeIndex` rotation across calls.
"""

from __future__ import annotations

import numpy as np

from shoal.api.podinfo import PodInfo
from shoal.cache.snapshot import Snapshot
from shoal.framework.cycle_state import CycleState
from shoal.framework.diagnosis import Diagnosis
from shoal.framework.runtime import FilterOutcome, Framework
from shoal.framework.status import Code, Status
from shoal.framework.types import Candidates

__all__ = ["PlacementAlgorithm", "num_feasible_nodes_to_find"]

MIN_FEASIBLE_NODES_TO_FIND = 100
MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND = 5


def num_feasible_nodes_to_find(num_nodes: int, percentage: int | None) -> int:
    """kube-scheduler's numFeasibleNodesToFind (adaptive when percentage is 0/None)."""
    if num_nodes < MIN_FEASIBLE_NODES_TO_FIND:
        return num_nodes
    pct = percentage or 0
    if pct == 0:
        pct = max(50 - num_nodes // 125, MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND)
    if pct >= 100:
        return num_nodes
    return max(num_nodes * pct // 100, MIN_FEASIBLE_NODES_TO_FIND)


class PlacementAlgorithm:
    def __init__(self, snapshot: Snapshot, rng: np.random.Generator) -> None:
        self.snapshot = snapshot
        self.rng = rng
        self._next_start_node_index = 0

    def schedule_pod(
        self,
        fwk: Framework,
        state: CycleState,
        pod: PodInfo,
        restrict: np.ndarray | None = None,
    ) -> tuple[str | None, Status, Diagnosis | None]:
        """kube's schedulePod; `restrict` (a mask over node rows) limits the candidates
        (topology-aware gang placement)."""
        snap = self.snapshot
        n = snap.n
        if n == 0:
            # kube's ErrNoNodesAvailable: not a FitError, the message says it all.
            return None, Status(Code.UNSCHEDULABLE, "no nodes available to schedule pods"), None
        pre_result, status = fwk.run_pre_filter(state, pod)
        if not status.ok:
            if status.rejected:
                diagnosis = Diagnosis(n, pre_filter_message=status.message)
                if status.plugin:
                    diagnosis.unschedulable_plugins.add(status.plugin)
                if pre_result is not None:
                    diagnosis.unschedulable_plugins |= pre_result.plugins
                return None, status, diagnosis
            return None, status, None
        absent = 0  # nodes a PreFilterResult left out
        if pre_result is not None and pre_result.node_names is not None:
            rows = np.sort(snap._cluster.table.rows(pre_result.node_names))
            absent = n - rows.size
            if restrict is not None:
                rows = rows[restrict[rows]]
            candidates = Candidates.of(rows)
        elif restrict is not None:
            candidates = Candidates.of(np.flatnonzero(restrict[:n]))
        else:
            candidates = Candidates.all(n)
        nominated = self._nominated_row(pod, candidates)
        if nominated is not None:
            # kube's evaluateNominatedNode: a preemptor goes to the node it made room on
            # when it fits there, so the room it freed is not left empty.
            one = Candidates.of(np.array([nominated], dtype=np.intp))
            if fwk.run_filters(state, pod, one).passed[0]:
                return str(snap.names[nominated]), Status(), None
        outcome = fwk.run_filters(state, pod, candidates)
        feasible = self._pick_feasible(fwk, outcome)
        if feasible is None:
            diagnosis = Diagnosis.from_filters(n, candidates, outcome.results)
            if absent and pre_result is not None:
                # kube's AbsentNodesStatus for the nodes the PreFilter result excluded.
                plugins = " ".join(sorted(pre_result.plugins))
                diagnosis.reasons[f"node(s) didn't satisfy plugin(s) [{plugins}]"] += absent
                diagnosis.unschedulable_plugins |= pre_result.plugins
            return None, Status(Code.UNSCHEDULABLE, diagnosis.message()), diagnosis
        if feasible.size == 1:
            return str(snap.names[feasible.rows[0]]), Status(), None
        status = fwk.run_pre_score(state, pod, feasible)
        if not status.ok:
            return None, status, None
        scores = fwk.run_score(state, pod, feasible)
        if scores.max() > fwk.max_total_score or scores.min() < 0:
            fwk.check_scores(state, pod, feasible)  # raises, naming the plugin
        return str(snap.names[self._select_host(feasible, scores)]), Status(), None

    def _nominated_row(self, pod: PodInfo, candidates: Candidates) -> int | None:
        """The row of the node the pod is nominated to, if it is a candidate."""
        found = self.snapshot.nomination_of(pod)
        if found is None:
            return None
        if isinstance(candidates.index, slice):
            return found if found < candidates.size else None
        return found if bool(np.any(candidates.rows == found)) else None

    def _pick_feasible(self, fwk: Framework, outcome: FilterOutcome) -> Candidates | None:
        """The first numFeasibleNodesToFind passing nodes, starting where the last cycle
        stopped (kube's nextStartNodeIndex rotation)."""
        cands = outcome.candidates
        positions = np.flatnonzero(outcome.passed)
        if positions.size == 0:
            return None
        size = cands.size
        start = self._next_start_node_index % size
        limit = num_feasible_nodes_to_find(size, fwk.percentage_of_nodes_to_score)
        if start:
            split = int(np.searchsorted(positions, start))
            positions = np.concatenate([positions[split:], positions[:split]])
        if positions.size > limit:
            positions = positions[:limit]
            processed = int((positions[-1] - start) % size) + 1
        else:
            processed = size
        self._next_start_node_index = (start + processed) % size
        rows = positions if isinstance(cands.index, slice) else cands.rows[positions]
        return Candidates.of(rows)

    def _select_host(self, nodes: Candidates, scores: np.ndarray) -> int:
        best = np.flatnonzero(scores == scores.max())
        pick = best[0] if best.size == 1 else best[self.rng.integers(best.size)]
        return int(nodes.rows[pick])
