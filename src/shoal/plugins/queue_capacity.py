"""QueueCapacity (PreFilter, PostFilter): tenant queues' limits and reclaim.

A thin plugin over `shoal.tenancy.manager.QueueManager` (the CapacityScheduling plugin of
scheduler-plugins, generalised to a queue tree):

* PreEnqueue: a pod whose queue (or one above it) is closed (`spec.state: Closed`) waits
  out of the queue until it opens (pods already placed keep running), as Volcano's closed
  queue and Kueue's stopPolicy Hold.
* PreFilter: the pod is admitted only if every queue on its path stays within its
  maximum (and its namespace's QueueBinding within maxPods), counting the quota held
  for nominated preemptors of higher or equal priority, and if what it borrows above
  its queue's guarantee is owed to no other queue. Gangs are admitted as a unit
  because the gang cycle places members in one transaction: a member that would
  break a limit rolls the whole gang back. A refusal by a maximum alone is flagged
  `resolvable_by_preemption`: DefaultPreemption may then take lower-priority pods of
  the pod's own leaf queue (the victim search re-runs this PreFilter without them).
* PostFilter (reclaim): a pod whose queue is below its target (its guarantee, or with
  `reclaimTo: FairShare` its HDRF fair share), counting room already being reclaimed for
  it, and that has waited at least `reclaimDelaySeconds`, takes capacity back by
  preempting pods of queues above the level they keep (the guarantee, or fair share plus
  `fairShareTolerance`): minimal victim set, whole gangs (or members above minMember),
  each unit taken only from queues above that level just before it goes (Kueue's rule,
  so an indivisible gang that borrowed can be reclaimed whole), never preempting
  higher-priority work, and only up to the preemptor queue's target, so two queues can
  never reclaim from each other in a loop. Gangs reclaim for all their members in one
  transaction (the gang cycle runs this PostFilter per member inside it). Victims
  (chosen by `shoal.preemption.evaluator`, every filter re-run without them) carry a
  reason naming both queues; the scheduler commits their eviction.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from typing import Literal

import numpy as np
from numpy.typing import NDArray
from pydantic import Field

from shoal.api.podinfo import PodInfo
from shoal.cache.snapshot import PodRecord
from shoal.framework.cycle_state import CycleState
from shoal.framework.handle import Handle
from shoal.framework.interfaces import NodeFilterStatuses, PostFilterResult, Victim
from shoal.framework.status import Code, Status
from shoal.framework.types import ActionType, ClusterEvent, EventResource, PreFilterResult
from shoal.gang.manager import GangManager
from shoal.gang.units import GangUnits
from shoal.plugins.args import Args
from shoal.preemption.evaluator import VictimSearch
from shoal.tenancy.fairshare import hdrf_fair_share
from shoal.tenancy.manager import QueueManager

__all__ = ["NAME", "QueueCapacity", "QueueCapacityArgs"]

NAME = "QueueCapacity"


class QueueCapacityArgs(Args):
    reclaim: bool = True
    reclaim_delay_seconds: float = Field(default=30.0, ge=0)
    # Reclaim up to the guarantee (scheduler-plugins, YuniKorn), or up to the queue's
    # HDRF fair share (Volcano's reclaim under proportion/hdrf).
    reclaim_to: Literal["Guarantee", "FairShare"] = "Guarantee"
    # With FairShare: a queue is reclaimed from only above fair share x (1 + tolerance).
    fair_share_tolerance: float = Field(default=0.1, ge=0, le=1)


class QueueCapacity:
    name = NAME

    def __init__(self, handle: Handle, args: QueueCapacityArgs) -> None:
        self.handle = handle
        self.args = args
        self.queues = QueueManager.of(handle)
        self.gangs = GangManager.of(handle)

    def pre_enqueue(self, pod: PodInfo) -> Status:
        closed = self.queues.closed_reason(pod)
        if closed:
            return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, closed)
        return Status()

    def pre_filter(self, state: CycleState, pod: PodInfo) -> tuple[PreFilterResult | None, Status]:
        # A queue closed while the pod waited in the queue (the scheduler re-gates its
        # pods when a queue closes; this covers a pod already popped).
        closed = self.queues.closed_reason(pod)
        if closed:
            return None, Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, closed)
        refused = self.queues.refusal(
            pod, table=self.handle.snapshot, ahead=functools.partial(self._ahead, pod)
        )
        if refused is not None:
            # Only a max may be made room under by preempting lower-priority pods of
            # the pod's own queue; the borrowing rule and a QueueBinding's limits are
            # not resolved that way (across queues, reclaim takes capacity back).
            return None, Status(
                Code.UNSCHEDULABLE, refused.reason, resolvable_by_preemption=refused.max_only
            )
        return None, Status(Code.SKIP)

    def _ahead(self, pod: PodInfo) -> list[PodInfo]:
        """Nominated preemptors of higher or equal priority (not `pod`): the quota they
        will use is held for them, so the room their victims free in a queue is not
        taken by a lower-priority pod of that queue before they are retried (which
        would then preempt it in turn)."""
        nominations = self.handle.snapshot.nominations
        if not nominations:
            return []
        return [
            other
            for uid, (_, other) in nominations.items()
            if uid != pod.uid and other.priority >= pod.priority
        ]

    # ---- reclaim -------------------------------------------------------------------

    def post_filter(
        self, state: CycleState, pod: PodInfo, statuses: NodeFilterStatuses
    ) -> tuple[PostFilterResult | None, Status]:
        if not self.args.reclaim:
            return None, Status(Code.UNSCHEDULABLE)
        queues = self.queues
        tree = queues.tree
        leaf, error = queues.queue_of(pod)
        fair = self.args.reclaim_to == "FairShare"
        if error or not (fair or tree.quota_mask.any()):
            return None, Status(Code.UNSCHEDULABLE)
        vec = tree.charge(pod)
        # A fair share exists for every resource the tree tracks, guaranteed or not
        # (equal-weight queues without guarantees still have shares to reclaim up to).
        asked = (vec > 0) if fair else (vec > 0) & tree.quota_mask
        if not asked.any():
            return None, Status(Code.UNSCHEDULABLE)  # asks for nothing under quota
        target, keep = self._levels()
        what = "fair share" if self.args.reclaim_to == "FairShare" else "guarantee"
        # Room already being reclaimed for this queue (nominated pods) counts as its own.
        claimed = queues.usage[leaf] + self._nominated_usage(leaf, pod)
        if not (claimed[asked] + vec[asked] <= target[leaf][asked]).all():
            return None, Status(Code.UNSCHEDULABLE)  # only a queue below its target reclaims
        now = self.handle.clock.now()
        waited = now - (pod.initial_attempt_time if pod.initial_attempt_time is not None else now)
        if waited < self.args.reclaim_delay_seconds:
            return None, Status(
                Code.PENDING,
                f"reclaim for queue {tree.names[leaf]} starts after "
                f"{self.args.reclaim_delay_seconds:g}s of waiting",
                retry_after=self.args.reclaim_delay_seconds - waited,
            )
        # Pods already being evicted still count in `usage` until they are gone; a queue
        # is judged on what it keeps once they are (or it would be pushed below its level
        # by a second reclaim before the first one's victims have terminated).
        usage_after = self._usage_after_evictions()
        over = self._over(leaf, asked, keep, usage_after)
        if not over:
            # Said, so the pod waits on this PostFilter's events too: a pod landing in
            # another queue may lift it above its level (kube-style requeueing only
            # counts PostFilters that gave a reason; without one it waited for the
            # periodic flush, minutes).
            return None, Status(
                Code.UNSCHEDULABLE,
                f"reclaim for queue {tree.names[leaf]}: no other queue is above its {what}",
            )
        snap = self.handle.snapshot
        mine = set(tree.path_lists[leaf])
        units = GangUnits(self.gangs, snap)

        def budget(chosen: list[list[PodInfo]]) -> bool:
            """Kueue's rule, per unit that must go together (a gang at its minMember):
            every queue it is taken from (off the preemptor's path) is above the level
            it keeps (guarantee, or fair share plus tolerance) just before it goes."""
            usage = usage_after.copy()
            for unit in sorted(chosen, key=lambda u: min((v.priority, -v.timestamp) for v in u)):
                for member in unit:
                    vl = queues.placed_leaf(member.uid)
                    if vl < 0 or member.priority > pod.priority:
                        return False
                    path = [q for q in tree.path_lists[vl] if q not in mine]
                    if not all((usage[q][asked] > keep[q][asked]).any() for q in path):
                        return False
                for member in unit:
                    vl = queues.placed_leaf(member.uid)
                    for q in tree.path_lists[vl]:
                        if q not in mine:
                            usage[q] -= tree.charge(member)
            return True

        search = VictimSearch(self.handle, units=units)
        choice = search.best(pod, statuses, self._pool(over, pod), budget=budget)
        if choice is None and search.extender_error:
            # As DefaultPreemption: an extender's preempt verb failed; say which and why.
            return None, Status(Code.ERROR, f"reclaim: {search.extender_error}")
        if choice is None:
            return None, Status(Code.UNSCHEDULABLE, f"reclaim: no victims above their {what} fit")
        name = tree.names[leaf]
        victims = []
        for victim in choice.victims:
            vq = tree.names[queues.placed_leaf(victim.uid)]
            reason = (
                f"reclaimed: queue {vq} is above its {what} and queue {name} (below its "
                f"{what}) needs the capacity for pod {pod.key}"
            )
            victims.append(Victim(victim, reason))
        return PostFilterResult(choice.node, victims), Status(
            Code.SUCCESS,
            f"reclaim: evicting {len(victims)} pod(s) on {choice.node} for queue {name}",
        )

    def _levels(self) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        """(target, keep) per queue and resource: a queue below its target may reclaim;
        a queue above its keep level may be reclaimed from. With `reclaimTo: Guarantee`
        both are the guarantee; with `FairShare` the target is the HDRF fair share (never
        below the guarantee) and the keep level is that share plus the tolerance, so two
        queues near their shares never take from each other back and forth."""
        queues, tree = self.queues, self.queues.tree
        guaranteed = tree.guaranteed
        if self.args.reclaim_to != "FairShare":
            return guaranteed, guaranteed
        capacity = queues.capacity(self.handle.snapshot)
        demand = queues.usage + queues.pending_sum
        fair = hdrf_fair_share(tree, demand, capacity)
        target = np.maximum(guaranteed, np.floor(fair).astype(np.int64))
        slack = np.ceil(fair * (1 + self.args.fair_share_tolerance)).astype(np.int64)
        keep = np.maximum(guaranteed, slack)
        return target, keep

    def _nominated_usage(self, leaf: int, pod: PodInfo) -> NDArray[np.int64]:
        """What the queue's other nominated pods (room being reclaimed) will use."""
        queues, tree = self.queues, self.queues.tree
        total = np.zeros(len(tree.resources), dtype=np.int64)
        for uid, (_, other) in self.handle.snapshot.nominations.items():
            if uid != pod.uid and queues.queue_of(other)[0] == leaf:
                total += tree.charge(other)
        return total

    def _usage_after_evictions(self) -> NDArray[np.int64]:
        """Each queue's usage without its pods that are already being evicted."""
        queues, tree = self.queues, self.queues.tree
        usage: NDArray[np.int64] = queues.usage.copy()
        snap = self.handle.snapshot
        for uid in snap.evicting:
            record = snap.placed.get(uid)
            vl = queues.placed_leaf(uid)
            if record is None or vl < 0:
                continue
            vector = tree.charge(record.pod)
            for q in tree.path_lists[vl]:
                usage[q] -= vector
        return usage

    def _over(
        self,
        leaf: int,
        asked: NDArray[np.bool_],
        keep: NDArray[np.int64],
        usage: NDArray[np.int64],
    ) -> list[int]:
        """Leaves whose every queue off the preemptor's path is above its keep level (the
        budget's condition for a first victim: a leaf at its guarantee under a borrowing
        parent is not a victim, and must not crowd out its borrowing sibling in the
        minimal set), one of them reclaimable."""
        tree = self.queues.tree
        mine = set(tree.path_lists[leaf])
        above: NDArray[np.bool_] = np.any(usage[:, asked] > keep[:, asked], axis=1)
        out = []
        for lf in tree.leaves:
            path = [q for q in tree.path_lists[lf] if q not in mine]
            if (
                lf != leaf
                and all(above[q] for q in path)
                and any(tree.defs[tree.names[q]].reclaimable for q in path)
            ):
                out.append(lf)
        return out

    def _pool(self, leaves: list[int], pod: PodInfo) -> Iterable[PodRecord]:
        """Pods of those leaves no more important than the preemptor (the budget decides
        which sets may go)."""
        snap = self.handle.snapshot
        for uid in self.queues.placed_in(set(leaves)):
            record = snap.placed.get(uid)
            if record is not None and record.pod.priority <= pod.priority:
                yield record

    def post_filter_events(self) -> Sequence[ClusterEvent]:
        """When a pod whose reclaim found nothing is worth another try: a pod landing can
        lift another queue above its level, besides what admission waits for."""
        return [
            ClusterEvent(EventResource.ASSIGNED_POD, ActionType.ADD | ActionType.DELETE),
            ClusterEvent(EventResource.QUEUE, ActionType.ALL),
            ClusterEvent(EventResource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_ALLOCATABLE),
        ]

    def events_to_register(self) -> Sequence[ClusterEvent]:
        return [
            ClusterEvent(EventResource.ASSIGNED_POD, ActionType.DELETE),
            ClusterEvent(EventResource.QUEUE, ActionType.ALL),
            ClusterEvent(EventResource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_ALLOCATABLE),
        ]

    @classmethod
    def new(cls, args: QueueCapacityArgs | None, handle: Handle) -> QueueCapacity:
        return cls(handle, args or QueueCapacityArgs())
