"""DefaultPreemption (PostFilter): a pod that fits nowhere may preempt lower-priority
pods, with kube-scheduler's victim choice (every filter re-run with the victims removed,
minimal set per node by reprieve, PDB-aware node ranking; `shoal.preemption.evaluator`)
and a nominated node. The plugin only names the victims; the scheduler commits them.
With tenant queues configured, victims come from the preemptor's own leaf queue only:
taking capacity across queues is reclaim's job (QueueCapacity), which respects
guarantees. Pods with preemptionPolicy Never never preempt.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
from numpy.typing import NDArray

from shoal.api.podinfo import PodInfo
from shoal.framework.cycle_state import CycleState
from shoal.framework.diagnosis import fit_error_message
from shoal.framework.handle import Handle
from shoal.framework.interfaces import NodeFilterStatuses, PostFilterResult, Victim
from shoal.framework.status import Code, Status
from shoal.gang.manager import GangManager
from shoal.gang.units import GangUnits
from shoal.plugins.args import DefaultPreemptionArgs
from shoal.preemption.budgets import DisruptionBudgets
from shoal.preemption.evaluator import LowerPriority, VictimSearch
from shoal.tenancy.manager import QueueManager

__all__ = ["NAME", "DefaultPreemption"]

NAME = "DefaultPreemption"
NOT_HELPFUL = "Preemption is not helpful for scheduling"
"""kube's reason for a node where the pod failed with UnschedulableAndUnresolvable."""
NO_VICTIMS = "No preemption victims found for incoming pod"
"""kube's reason for a node running nothing the preemptor may take."""


class DefaultPreemption:
    name = NAME

    def __init__(self, handle: Handle, args: DefaultPreemptionArgs) -> None:
        self.handle = handle
        self.args = args
        self.gangs = GangManager.of(handle)
        self.queues = QueueManager.of(handle)
        self.pdbs = DisruptionBudgets.of(handle)

    def post_filter(
        self, state: CycleState, pod: PodInfo, statuses: NodeFilterStatuses
    ) -> tuple[PostFilterResult | None, Status]:
        if pod.pod.spec.preemption_policy == "Never":
            return None, Status(
                Code.UNSCHEDULABLE, "preemption: not eligible due to preemptionPolicy=Never."
            )
        snap = self.handle.snapshot
        takeable = self._pool(pod)
        search = VictimSearch(
            self.handle,
            units=GangUnits(self.gangs, snap),
            pdb_violations=self.pdbs.checker(snap),
        )
        with_victims = search.rows_with_victims(takeable)
        if not with_victims.any():
            # Nothing of lower priority runs where it could be taken.
            return None, Status(
                Code.UNSCHEDULABLE, self._no_room(pod, search, takeable, with_victims, statuses)
            )
        choice = search.best(
            pod,
            statuses,
            takeable,
            max_candidates=max(
                self.args.min_candidate_nodes_absolute,
                snap.n * self.args.min_candidate_nodes_percentage // 100,
            ),
        )
        if choice is None and search.extender_error:
            return None, Status(Code.ERROR, f"preemption: {search.extender_error}")
        if choice is None:
            return None, Status(
                Code.UNSCHEDULABLE, self._no_room(pod, search, takeable, with_victims, statuses)
            )
        victims = [
            Victim(
                v,
                f"preempted by {pod.key} (priority {pod.priority} > {v.priority}) "
                f"on node {choice.node}",
            )
            for v in choice.victims
        ]
        return PostFilterResult(choice.node, victims), Status(
            Code.SUCCESS, f"preemption: evicting {len(victims)} pod(s) on {choice.node}"
        )

    def _no_room(
        self,
        pod: PodInfo,
        search: VictimSearch,
        pool: LowerPriority,
        with_victims: NDArray[np.bool_],
        statuses: NodeFilterStatuses,
    ) -> str:
        """Why preemption found no node, node by node in kube's words: nodes where the
        pod failed beyond what removing pods can fix, nodes with nothing the preemptor
        may take, and on the rest the reasons the pod fails there even with all of it
        gone."""
        n = self.handle.snapshot.n
        rows = np.arange(n, dtype=np.intp)
        if statuses.pre_filter_resolvable:
            resolvable = np.ones(n, dtype=bool)
        else:
            resolvable = statuses.resolvable(rows)
        reasons: Counter[str] = Counter()
        helpless = n - int(np.count_nonzero(resolvable))
        if helpless:
            reasons[NOT_HELPFUL] = helpless
        no_victims = int(np.count_nonzero(resolvable & ~with_victims))
        if no_victims:
            reasons[NO_VICTIMS] = no_victims
        rest = rows[resolvable & with_victims]
        if statuses.pre_filter_resolvable:
            reasons.update(statuses.reasons_at(rest))
        else:
            reasons.update(search.reasons_without_victims(pod, rest, pool, statuses))
        return "preemption: " + fit_error_message(n, reasons).rstrip(".")

    def _pool(self, pod: PodInfo) -> LowerPriority:
        """Which running pods the preemptor may take: lower priority; in its own leaf
        queue when there are queues."""
        leaf, error = self.queues.queue_of(pod)
        if len(self.queues.tree.leaves) > 1 and not error:
            return LowerPriority(pod.priority, set(self.queues.placed_in({leaf})))
        return LowerPriority(pod.priority)

    @classmethod
    def new(cls, args: DefaultPreemptionArgs | None, handle: Handle) -> DefaultPreemption:
        return cls(handle, args or DefaultPreemptionArgs())
