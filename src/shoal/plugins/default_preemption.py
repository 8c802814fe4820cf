"""DefaultPreemption (PostFilter): a pod that fits nowhere may preempt lower-priority
pods, with kube-scheduler's victim choice (every filter re-run with the victims removed,
minimal set per node by reprieve, PDB-aware node ranking; `shoal.preemption.evaluator`)
and a nominated node. The plugin only names the victims; the scheduler commits them.
With tenant queues configured, victims come from the preemptor's own leaf queue only:
taking capacity across queues is reclaim's job (QueueCapacity), which respects
guarantees. Pods with preemptionPolicy Never never preempt.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from shoal.api.podinfo import PodInfo
from shoal.cache.snapshot import PodRecord
from shoal.framework.cycle_state import CycleState
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
        takeable, where = self._pool(pod)
        if not any(record is not None and takeable(record) for record in where):
            # Nothing of lower priority runs where it could be taken: nothing to explain
            # beyond the filters' reasons.
            return None, Status(Code.UNSCHEDULABLE)
        search = VictimSearch(
            self.handle,
            units=GangUnits(self.gangs, snap),
            pdb_violations=self.pdbs.checker(snap),
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
                Code.UNSCHEDULABLE,
                f"preemption: 0/{snap.n} nodes are available: removing "
                "lower-priority pods would not make room",
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

    def _pool(self, pod: PodInfo) -> tuple[Callable[[PodRecord], bool], Iterable[PodRecord | None]]:
        """Which running pods the preemptor may take (lower priority; in its own leaf
        queue when there are queues), as a test the search applies to the pods of the
        nodes it visits, and where such pods are (to see whether there is any at all)."""
        leaf, error = self.queues.queue_of(pod)
        placed = self.handle.snapshot.placed
        if len(self.queues.tree.leaves) > 1 and not error:
            mine = set(self.queues.placed_in({leaf}))
            return LowerPriority(pod.priority, mine), (placed.get(uid) for uid in mine)
        return LowerPriority(pod.priority), placed.values()

    @classmethod
    def new(cls, args: DefaultPreemptionArgs | None, handle: Handle) -> DefaultPreemption:
        return cls(handle, args or DefaultPreemptionArgs())
