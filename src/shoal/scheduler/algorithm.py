"""kube-scheduler's schedulePod: PreFilter, Filter over the candidate nodes, PreScore,
Score, pick a host.

A plain function of the cache as it is when called (pods assumed or evicted inside an
open transaction included), so the single-pod cycle, the gang transaction, the Spark
driver-first what-if and the rescheduler's plans all place pods the same way. It keeps
kube's `nextStartNodeIndex` rotation across calls.

HTTP extenders (`extenders`, see `shoal.framework.extender`) are consulted where
kube-scheduler consults them: their filter after the plugins' Filter (also for the
nominated node), their scores added to the plugins' total.
"""

from __future__ import annotations

import numpy as np

from shoal.api.podinfo import PodInfo
from shoal.cache.snapshot import Snapshot
from shoal.framework.cycle_state import CycleState
from shoal.framework.diagnosis import Diagnosis
from shoal.framework.extender import (
    EXTENDER_NAME,
    Extender,
    filter_with_extenders,
    prioritize_with_extenders,
)
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
    def __init__(
        self,
        snapshot: Snapshot,
        rng: np.random.Generator,
        extenders: list[Extender] | None = None,
    ) -> None:
        self.snapshot = snapshot
        self.rng = rng
        self._next_start_node_index = 0
        # The handle's list (shared, so extenders configured later are seen).
        self.extenders: list[Extender] = extenders if extenders is not None else []

    def rotate_to(self, index: int) -> None:
        """Start the next cycle's search at this node row (kube's nextStartNodeIndex):
        optimistic workers start apart, so they do not all look at the same nodes."""
        self._next_start_node_index = index

    def schedule_pod(
        self,
        fwk: Framework,
        state: CycleState,
        pod: PodInfo,
        restrict: np.ndarray | None = None,
        restrict_rows: np.ndarray | None = None,
    ) -> tuple[str | None, Status, Diagnosis | None]:
        """kube's schedulePod; `restrict` (a mask over node rows) limits the candidates
        (topology-aware gang placement); `restrict_rows`, when given, is its rows below
        n (`np.flatnonzero(restrict[:n])`, read-only), which a gang's members share: found
        once per gang, not once per member."""
        snap = self.snapshot
        n = snap.n
        if n == 0:
            # kube's ErrNoNodesAvailable: not a FitError, the message says it all.
            return None, Status(Code.UNSCHEDULABLE, "no nodes available to schedule pods"), None
        pre_result, status = fwk.run_pre_filter(state, pod)
        if not status.ok:
            if status.rejected:
                diagnosis = Diagnosis(
                    n,
                    pre_filter_message=status.message,
                    pre_filter_resolvable=(
                        status.code == Code.UNSCHEDULABLE and status.resolvable_by_preemption
                    ),
                )
                if status.plugin:
                    diagnosis.unschedulable_plugins.add(status.plugin)
                if pre_result is not None:
                    diagnosis.unschedulable_plugins |= pre_result.plugins
                return None, status, diagnosis
            return None, status, None
        absent = 0  # nodes a PreFilterResult left out
        if pre_result is not None and pre_result.node_names is not None:
            rows = np.sort(snap.rows(pre_result.node_names))
            absent = n - rows.size
            if restrict is not None:
                rows = rows[restrict[rows]]
            candidates = Candidates.of(rows)
        elif restrict is not None:
            rows = np.flatnonzero(restrict[:n]) if restrict_rows is None else restrict_rows
            candidates = Candidates.of(rows)
        else:
            candidates = Candidates.all(n)
        nominated = self._nominated_row(pod, candidates)
        if nominated is not None:
            # kube's evaluateNominatedNode: a preemptor goes to the node it made room on
            # when it fits there, so the room it freed is not left empty.
            one = Candidates.of(np.array([nominated], dtype=np.intp))
            if fwk.run_filters(state, pod, one).passed[0]:
                passed = self._extender_filter(pod, one)
                if isinstance(passed, Status):
                    return None, passed, None
                if passed[0].size:
                    return str(snap.names[nominated]), Status(), None
        outcome = fwk.run_filters(state, pod, candidates)
        feasible = self._pick_feasible(fwk, outcome)
        extender_failed: dict[int, tuple[str, bool]] | None = None
        if feasible is not None and self._filtering(pod):
            passed = self._extender_filter(pod, feasible)
            if isinstance(passed, Status):
                return None, passed, None
            feasible_rows, extender_failed = passed
            feasible = Candidates.of(feasible_rows) if feasible_rows.size else None
        if feasible is None:
            diagnosis = Diagnosis.from_filters(n, candidates, outcome.results)
            if extender_failed is not None:
                self._charge_extenders(diagnosis, candidates, outcome.passed, extender_failed)
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
        top = int(scores.max())
        if top > fwk.max_total_score or scores.min() < 0:
            fwk.check_scores(state, pod, feasible)  # raises, naming the plugin
        if self._prioritizing(pod):
            added = prioritize_with_extenders(
                self.extenders, pod, self._names(feasible.rows), self.snapshot.node_named
            )
            if added:
                names = snap.names[feasible.rows]
                extra = (added.get(str(name), 0) for name in names)
                scores = scores + np.fromiter(extra, dtype=scores.dtype, count=len(names))
                top = int(scores.max())
        return str(snap.names[self._select_host(feasible, scores, top)]), Status(), None

    def top_scores(
        self, fwk: Framework, pod: PodInfo, count: int = 3
    ) -> list[tuple[str, int, dict[str, int]]]:
        """For explanations: the `count` best feasible nodes for the pod as things are,
        each with its total score and every Score plugin's weighted part (all feasible
        nodes scored, without kube's sampling). Empty when no node fits or a PreFilter
        or PreScore refuses the pod."""
        state = CycleState(dry_run=True)
        snap = self.snapshot
        pre_result, status = fwk.run_pre_filter(state, pod)
        if not status.ok or snap.n == 0:
            return []
        if pre_result is not None and pre_result.node_names is not None:
            candidates = Candidates.of(np.sort(snap.rows(pre_result.node_names)))
        else:
            candidates = Candidates.all(snap.n)
        outcome = fwk.run_filters(state, pod, candidates)
        rows = candidates.rows[outcome.passed]
        if not rows.size:
            return []
        feasible = Candidates.of(rows)
        if not fwk.run_pre_score(state, pod, feasible).ok:
            return []
        parts = fwk.score_parts(state, pod, feasible)
        total = sum(parts.values(), np.zeros(rows.size, dtype=np.int64))
        best = np.argsort(-total, kind="stable")[:count].tolist()  # ties: row order
        return [
            (
                str(snap.names[rows[i]]),
                int(total[i]),
                {name: int(p[i]) for name, p in parts.items()},
            )
            for i in best
        ]

    # ---- extenders -----------------------------------------------------------------

    def _filtering(self, pod: PodInfo) -> bool:
        return any(e.is_filter and e.is_interested(pod) for e in self.extenders)

    def _prioritizing(self, pod: PodInfo) -> bool:
        return any(e.is_prioritizer and e.is_interested(pod) for e in self.extenders)

    def _names(self, rows: np.ndarray) -> list[str]:
        return [str(name) for name in self.snapshot.names[rows]]

    def _extender_filter(
        self, pod: PodInfo, feasible: Candidates
    ) -> tuple[np.ndarray, dict[int, tuple[str, bool]]] | Status:
        """The rows that also pass the extenders, and the rows they rejected (reason,
        unresolvable); a Status when a non-ignorable extender failed."""
        if not self._filtering(pod):
            return feasible.rows, {}
        rows = feasible.rows
        result = filter_with_extenders(
            self.extenders, pod, self._names(rows), self.snapshot.node_named
        )
        if result.error:
            return Status(Code.ERROR, result.error, plugin=EXTENDER_NAME)
        row_of = self.snapshot.row_of
        keep = np.fromiter(
            (row_of[name] for name in result.passed if name in row_of), dtype=np.intp
        )
        keep = rows[np.isin(rows, keep)]
        failed = {row_of[name]: why for name, why in result.failed.items() if name in row_of}
        return keep, failed

    def _charge_extenders(
        self,
        diagnosis: Diagnosis,
        candidates: Candidates,
        filter_passed: np.ndarray,
        failed: dict[int, tuple[str, bool]],
    ) -> None:
        """kube's findNodesThatPassExtenders statuses in the diagnosis: the nodes that
        passed the plugins and not the extenders, with the extenders' reasons; a node
        an extender dropped without a reason cannot be helped by preemption (kube's
        absent-node status)."""
        rows = candidates.rows
        diagnosis.unschedulable_plugins.add(EXTENDER_NAME)
        unresolvable = diagnosis.unresolvable
        for position in np.flatnonzero(filter_passed):
            row = int(rows[position])
            reason, hopeless = failed.get(row, ("", True))
            diagnosis.rejected_by[position] = EXTENDER_NAME
            if reason:
                diagnosis.reasons[reason] += 1
                diagnosis.node_reasons[position] = (reason,)
            if unresolvable is not None and hopeless:
                unresolvable[position] = True

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
        size = cands.size
        if size == 0:
            return None
        start = self._next_start_node_index % size
        limit = num_feasible_nodes_to_find(size, fwk.percentage_of_nodes_to_score)
        if outcome.all_passed or outcome.passed.all():
            # Every candidate passed (the usual case on a cluster with room): the first
            # `limit` from `start` on, without searching the mask.
            count = min(limit, size)
            positions = np.arange(start, start + count, dtype=np.intp)
            if start + count > size:
                positions %= size
            processed = count if size > limit else size
            self._next_start_node_index = (start + processed) % size
            rows = positions if isinstance(cands.index, slice) else cands.rows[positions]
            return Candidates.of(rows)
        positions = np.flatnonzero(outcome.passed)
        if positions.size == 0:
            return None
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

    def _select_host(self, nodes: Candidates, scores: np.ndarray, top: int) -> int:
        best = np.flatnonzero(scores == top)
        pick = best[0] if best.size == 1 else best[self.rng.integers(best.size)]
        return int(nodes.rows[pick])
