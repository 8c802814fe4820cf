"""QueueCapacity (PreFilter, PostFilter): tenant queues' limits and reclaim.

A thin plugin over `shoal.tenancy.manager.QueueManager` (the CapacityScheduling plugin of
scheduler-plugins, generalised to a queue tree):

* PreFilter: the pod is admitted only if every queue on its path stays within its
  maximum (and its namespace's QueueBinding within maxPods). Gangs are admitted as a
  unit because the gang cycle places members in one transaction: a member that would
  break a limit rolls the whole gang back.
* PostFilter (reclaim): a pod whose queue is below its guarantee, and has waited at
  least `reclaimDelaySeconds`, takes capacity back by preempting pods of queues that are
  above their guarantee: minimal victim set, whole gangs (or members above minMember),
  never pushing a victim queue below its guarantee, never preempting higher-priority
  work, and only up to the preemptor queue's guarantee, so two queues can never reclaim
  from each other in a loop. Victims (chosen by `shoal.preemption.evaluator`, every
  filter re-run without them) carry a reason naming both queues; the scheduler commits
  their eviction.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
from pydantic import Field

from shoal.api.podinfo import PodInfo
from shoal.cache.cluster import PodRecord
from shoal.framework.cycle_state import CycleState
from shoal.framework.handle import Handle
from shoal.framework.interfaces import NodeFilterStatuses, PostFilterResult, Victim
from shoal.framework.status import Code, Status
from shoal.framework.types import ActionType, ClusterEvent, EventResource, PreFilterResult
from shoal.gang.manager import GangManager
from shoal.plugins.args import Args
from shoal.preemption.evaluator import VictimSearch
from shoal.tenancy.manager import QueueManager

__all__ = ["NAME", "QueueCapacity", "QueueCapacityArgs"]

NAME = "QueueCapacity"


class QueueCapacityArgs(Args):
    reclaim: bool = True
    reclaim_delay_seconds: float = Field(default=30.0, ge=0)


class QueueCapacity:
    name = NAME

    def __init__(self, handle: Handle, args: QueueCapacityArgs) -> None:
        self.handle = handle
        self.args = args
        self.queues = QueueManager.of(handle)
        self.gangs = GangManager.of(handle)

    def pre_filter(self, state: CycleState, pod: PodInfo) -> tuple[PreFilterResult | None, Status]:
        reason = self.queues.admit(pod, table=self.handle.cluster.table)
        if reason:
            return None, Status(Code.UNSCHEDULABLE, reason)
        return None, Status(Code.SKIP)

    # ---- reclaim -------------------------------------------------------------------

    def post_filter(
        self, state: CycleState, pod: PodInfo, statuses: NodeFilterStatuses
    ) -> tuple[PostFilterResult | None, Status]:
        if not self.args.reclaim:
            return None, Status(Code.UNSCHEDULABLE)
        queues = self.queues
        tree = queues.tree
        leaf, error = queues.queue_of(pod)
        if error or not tree.guaranteed.any():
            return None, Status(Code.UNSCHEDULABLE)
        if not ((vec := tree.vector(pod.requests)) > 0)[tree.quota_mask].any():
            return None, Status(Code.UNSCHEDULABLE)  # asks for nothing under quota
        now = self.handle.clock.now()
        waited = now - (pod.initial_attempt_time if pod.initial_attempt_time is not None else now)
        asked = (vec > 0) & tree.quota_mask
        if not (queues.usage[leaf][asked] + vec[asked] <= tree.guaranteed[leaf][asked]).all():
            return None, Status(Code.UNSCHEDULABLE)  # only a queue within its guarantee reclaims
        if waited < self.args.reclaim_delay_seconds:
            return None, Status(
                Code.PENDING,
                f"reclaim for queue {tree.names[leaf]} starts after "
                f"{self.args.reclaim_delay_seconds:g}s of waiting",
            )
        over = self._over_guarantee(leaf, asked)
        if not over:
            return None, Status(Code.UNSCHEDULABLE)
        pool = self._pool(over, pod, leaf, asked)
        cluster = self.handle.cluster
        path_mine = set(tree.paths[leaf].tolist())

        def budget(victims: list[PodInfo]) -> bool:
            freed = np.zeros_like(queues.usage)
            for v in victims:
                vl = queues.placed_leaf(v.uid)
                if vl < 0 or v.priority > pod.priority:
                    return False
                for q in tree.paths[vl]:
                    if int(q) not in path_mine:
                        freed[q] += tree.vector(v.requests)
            after = queues.usage - freed
            touched = freed.any(axis=1)
            return bool(np.all(after[touched][:, asked] >= tree.guaranteed[touched][:, asked]))

        search = VictimSearch(self.handle, units=self.gangs.eviction_unit_of(cluster))
        choice = search.best(pod, statuses, pool, budget=budget)
        if choice is None:
            return None, Status(Code.UNSCHEDULABLE, "reclaim: no victims above their guarantee fit")
        mine = tree.names[leaf]
        victims = []
        for victim in choice.victims:
            vq = tree.names[queues.placed_leaf(victim.uid)]
            reason = (
                f"reclaimed: queue {vq} is above its guarantee and queue {mine} (below its "
                f"guarantee) needs the capacity for pod {pod.key}"
            )
            victims.append(Victim(victim, reason))
        return PostFilterResult(choice.node, victims), Status(
            Code.SUCCESS,
            f"reclaim: evicting {len(victims)} pod(s) on {choice.node} for queue {mine}",
        )

    def _over_guarantee(self, leaf: int, asked: np.ndarray) -> list[int]:
        """Leaves that are reclaimable and sit under a queue above its guarantee, off the
        preemptor's own path."""
        queues, tree = self.queues, self.queues.tree
        mine = set(tree.paths[leaf].tolist())
        over_q = {
            q
            for q in range(1, len(tree.names))
            if q not in mine
            and tree.defs[tree.names[q]].reclaimable
            and (queues.usage[q][asked] > tree.guaranteed[q][asked]).any()
        }
        return [
            lf for lf in tree.leaves if lf != leaf and any(int(q) in over_q for q in tree.paths[lf])
        ]

    def _pool(
        self, leaves: list[int], pod: PodInfo, leaf: int, asked: np.ndarray
    ) -> Iterable[PodRecord]:
        """Pods that may be taken one by one: not more important than the preemptor, and
        whose own removal keeps every queue on their path (off the preemptor's path) at
        or above its guarantee."""
        cluster = self.handle.cluster
        queues, tree = self.queues, self.queues.tree
        mine = set(tree.path_lists[leaf])
        for uid in queues.placed_in(set(leaves)):
            record = cluster.placed.get(uid)
            if record is None or record.pod.priority > pod.priority:
                continue
            vec = tree.vector(record.pod.requests)
            path = [q for q in tree.path_lists[queues.placed_leaf(uid)] if q not in mine]
            after = queues.usage[path] - vec
            if np.all(after[:, asked] >= tree.guaranteed[path][:, asked]):
                yield record

    def events_to_register(self) -> Sequence[ClusterEvent]:
        return [
            ClusterEvent(EventResource.ASSIGNED_POD, ActionType.DELETE),
            ClusterEvent(EventResource.QUEUE, ActionType.ALL),
            ClusterEvent(EventResource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_ALLOCATABLE),
        ]

    @classmethod
    def new(cls, args: QueueCapacityArgs | None, handle: Handle) -> QueueCapacity:
        return cls(handle, args or QueueCapacityArgs())
