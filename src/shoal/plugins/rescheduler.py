"""Rescheduler (PostFilter): place a pod that fits nowhere by moving running pods.

Runs after DefaultPreemption (when enabled): if there is nothing of lower priority to
take, it looks for a few running pods to move elsewhere so the waiting pod fits
(`shoal.rescheduler.planner`). The plan's moved pods are evicted (reason names the plan,
where the pod goes and what it makes room for), the waiting pod is nominated to its
target, and each moved pod's new node is held for its replacement
(`shoal.rescheduler.holds`); the scheduler commits all of it in one
transaction. Like DefaultPreemption the plugin only decides.

What may move (`_movable`): pods of equal or lower priority than the waiting pod, with a
controller that re-creates them (a controller owner reference), not annotated
`shoal.dev/movable: "false"`, running for at least `minRunSeconds`, whose controller had
no pod moved in the last `cooldownSeconds`, and whose queue has budget left; a running
gang moves whole (every running member) or not at all. Plans never exceed
`maxMovesPerPlan`, the hourly budgets, or a PodDisruptionBudget.
"""

from __future__ import annotations

import math
from typing import Any

import msgspec

from shoal.api.podinfo import PodInfo
from shoal.cache.snapshot import PodRecord
from shoal.config.types import KubeSchedulerConfiguration, Plugin, PluginConfig
from shoal.framework.cycle_state import CycleState
from shoal.framework.handle import Handle
from shoal.framework.interfaces import NodeFilterStatuses, PostFilterResult, Victim
from shoal.framework.status import Code, Status
from shoal.gang.manager import GangManager
from shoal.plugins.args import ReschedulerArgs
from shoal.preemption.budgets import DisruptionBudgets
from shoal.rescheduler.defrag import plan_defragmentation
from shoal.rescheduler.holds import (
    ANNOTATION_MOVABLE,
    ANNOTATION_RESTART_COST,
    RESCHEDULED,
    MigrationHolds,
    owner_key,
)
from shoal.rescheduler.planner import MigrationPlan, MigrationPlanner
from shoal.tenancy.manager import QueueManager

__all__ = ["NAME", "Rescheduler", "with_rescheduler"]

NAME = "Rescheduler"
MAX_AGE_HOURS = 24.0
MAX_REMEMBERED = 4096  # pods without a plan remembered at most (then forgotten at once)


class Rescheduler:
    name = NAME

    def __init__(self, handle: Handle, args: ReschedulerArgs) -> None:
        self.handle = handle
        self.args = args
        self.holds = MigrationHolds.of(handle)
        self.gangs = GangManager.of(handle)
        self.queues = QueueManager.of(handle)
        self.pdbs = DisruptionBudgets.of(handle)
        self._time_blocked = 0
        # Pods (by `_equivalence`) that found no plan, and the cluster version then.
        self._no_plan: dict[bytes, tuple[int, int, float, Status]] = {}
        self._unblocked_at = math.inf  # when the first time-blocked pod may move
        self._defrag_due = args.defrag_interval_seconds  # first pass one interval in

    # ---- PostFilter -----------------------------------------------------------------

    def post_filter(
        self, state: CycleState, pod: PodInfo, statuses: NodeFilterStatuses
    ) -> tuple[PostFilterResult | None, Status]:
        now = self.handle.clock.now()
        args = self.args
        self.holds.refresh(now)
        left = args.moves_per_hour - self.holds.moves_in_last_hour(now)
        if left <= 0:
            # PENDING: the budget frees up with time; retry after the backoff.
            return None, Status(
                Code.PENDING,
                f"rescheduler: the budget of {args.moves_per_hour} moves per hour is used up",
            )
        max_moves = min(args.max_moves_per_plan, left)
        # Gang members are planned with the rest of their gang: never taken as equivalent.
        key = None if self.gangs.group_of_uid(pod.uid) else _equivalence(pod)
        known = self._no_plan.get(key) if key is not None else None
        if known is not None:
            version, moves, until, status = known
            if version == self.holds.version and moves == max_moves and now < until:
                # An equivalent pod found no plan, nothing was placed or removed since,
                # and no pod has come of age to be moved.
                return None, status
        plan = self.plan(pod, statuses, now, max_moves)
        if plan is not None:
            return self.propose(pod, plan, now)
        status = Status(
            Code.UNSCHEDULABLE,
            f"rescheduler: no plan of at most {max_moves} move(s) of movable pods makes room",
        )
        until = self._unblocked_at
        if self._time_blocked and self.plan(pod, statuses, now, max_moves, timeless=True):
            # Some pods it would move have not run long enough, or their controller had
            # a pod moved recently: that changes with time alone.
            status = Status(
                Code.PENDING,
                f"rescheduler: a plan needs pods that ran less than {args.min_run_seconds:g}s "
                f"or were moved less than {args.cooldown_seconds:g}s ago; waiting",
            )
        if key is not None:
            if len(self._no_plan) > MAX_REMEMBERED:
                self._no_plan.clear()
            self._no_plan[key] = (self.holds.version, max_moves, until, status)
        return None, status

    # ---- the periodic defragmentation pass ---------------------------------------------

    def defragment(self, now: float) -> PostFilterResult | None:
        """Every `defragIntervalSeconds`: a plan making room for typical GPU work that no
        node has room for, if one lowers fragmentation (`shoal.rescheduler.defrag`);
        at most `defragMovesPerPass` moves, within the hourly budgets. The scheduler
        commits its evictions and holds as it does a PostFilter's."""
        args = self.args
        if not args.defrag_interval_seconds or now < self._defrag_due:
            return None
        self._defrag_due = now + args.defrag_interval_seconds
        self.holds.refresh(now)
        left = min(
            args.defrag_moves_per_pass,
            args.moves_per_hour - self.holds.moves_in_last_hour(now),
        )
        if left <= 0:
            return None
        found = plan_defragmentation(
            self.handle.snapshot,
            self.handle.transaction,
            lambda typical: self.plan(typical, None, now, left),
        )
        if found is None:
            return None
        shape = found.shape
        what = (
            f"room for a typical {shape.gpu_count} x {shape.gpu_milli} milli-GPU pod "
            f"(fragmentation of the nodes touched {found.frag_before:.0f} -> "
            f"{found.frag_after:.0f} milli-GPU)"
        )
        result, _ = self.propose(None, found.plan, now, what)
        return result

    def plan(
        self,
        pod: PodInfo,
        statuses: NodeFilterStatuses | None,
        now: float,
        max_moves: int,
        *,
        timeless: bool = False,
    ) -> MigrationPlan | None:
        """The cheapest plan that places `pod`, within the per-queue budgets
        (`timeless`: as if every pod had run long enough and cooled down)."""
        self._time_blocked = 0  # pods left out only for their run time or cool-down
        self._unblocked_at = math.inf
        group = self.gangs.group_of_uid(pod.uid)
        own = set(group.members) if group is not None else {pod.uid}
        queue_left: dict[str, int] = {}

        def movable(record: PodRecord) -> bool:
            p = record.pod
            if p.uid in own or not self._movable(p, pod, now, timeless):
                return False
            queue = self._queue(p)
            if queue not in queue_left:
                queue_left[queue] = self.args.moves_per_hour_per_queue - (
                    self.holds.moves_in_last_hour(now, queue)
                )
            return queue_left[queue] > 0

        planner = MigrationPlanner(
            self.handle,
            movable=movable,
            units=self._units,
            cost=lambda p: self._cost(p, now),
            pdb_violations=self.pdbs.checker(self.handle.snapshot),
            max_moves=max_moves,
            max_targets=self.args.max_candidate_nodes,
            max_scanned=self.args.max_scanned_nodes,
        )
        self.holds.muted = True  # the plan's what-if is undone: the cluster is unchanged
        try:
            plan = planner.plan(pod, statuses)
        finally:
            self.holds.muted = False
        if plan is None:
            return None
        per_queue: dict[str, int] = {}
        for move in plan.moves:
            queue = self._queue(move.pod)
            per_queue[queue] = per_queue.get(queue, 0) + 1
            if per_queue[queue] > queue_left.get(queue, 0):
                return None  # one plan would overrun a queue's budget
        return plan

    def propose(
        self, pod: PodInfo | None, plan: MigrationPlan, now: float, what: str = ""
    ) -> tuple[PostFilterResult, Status]:
        """Register the plan's holds; the victims and nominations for the scheduler
        (`pod`: the waiting pod; None for a defragmentation pass, which says `what` it
        makes room for)."""
        plan_id = self.holds.next_plan_id()
        purpose = what or f"room for {pod.key if pod else '?'} on node {plan.node}"
        victims: list[Victim] = []
        holds: list[tuple[PodInfo, str]] = []
        for move in plan.moves:
            stand_in = self.holds.propose(
                plan_id,
                move.pod,
                move.target,
                queue=self._queue(move.pod),
                priority=pod.priority if pod is not None else move.pod.priority,
                now=now,
                hold_seconds=self.args.hold_seconds,
            )
            holds.append((stand_in, move.target))
            victims.append(
                Victim(
                    move.pod,
                    f"{RESCHEDULED}{plan_id}: moving from node {move.source} to node "
                    f"{move.target} to make {purpose}",
                )
            )
        moved = ", ".join(f"{m.pod.key} {m.source}->{m.target}" for m in plan.moves)
        nominated = plan.node if pod is not None else ""
        return PostFilterResult(nominated, victims, holds), Status(
            Code.SUCCESS,
            f"rescheduler: plan {plan_id} moves {len(plan.moves)} pod(s) ({moved}) to place "
            f"the pod on node {plan.node}",
        )

    # ---- what may move, and what it costs -----------------------------------------------

    def _movable(self, p: PodInfo, waiting: PodInfo, now: float, timeless: bool = False) -> bool:
        args = self.args
        if not (
            p.priority <= waiting.priority
            and p.pod.metadata.annotations.get(ANNOTATION_MOVABLE, "").lower() != "false"
            and owner_key(p) is not None
        ):
            return False
        if timeless or (
            now - p.timestamp >= args.min_run_seconds
            and not self.holds.cooling(p, now, args.cooldown_seconds)
        ):
            return True
        self._time_blocked += 1
        last = self.holds.last_moved.get(owner_key(p) or "", -math.inf)
        self._unblocked_at = min(
            self._unblocked_at,
            max(p.timestamp + args.min_run_seconds, last + args.cooldown_seconds),
        )
        return False

    def _units(self, p: PodInfo) -> list[PodInfo]:
        """A gang member moves with every running member of its gang."""
        group = self.gangs.group_of_uid(p.uid)
        if group is None:
            return [p]
        snap = self.handle.snapshot
        return [
            record.pod
            for uid in sorted(group.members)
            if uid not in snap.evicting and (record := snap.placed.get(uid)) is not None
        ]

    def _cost(self, p: PodInfo, now: float) -> float:
        raw = p.pod.metadata.annotations.get(ANNOTATION_RESTART_COST, "")
        try:
            restart = max(0.0, float(raw)) if raw else 1.0
        except ValueError:
            restart = 1.0  # a malformed annotation costs what an absent one does
        hours = min(MAX_AGE_HOURS, max(0.0, now - p.timestamp) / 3600.0)
        return restart * (1.0 + self.args.age_weight * hours)

    def _queue(self, p: PodInfo) -> str:
        leaf, error = self.queues.queue_of(p)
        if error or leaf < 0:
            return ""
        return str(self.queues.tree.names[leaf])

    @classmethod
    def new(cls, args: ReschedulerArgs | None, handle: Handle) -> Rescheduler:
        return cls(handle, args or ReschedulerArgs())


def _equivalence(pod: PodInfo) -> bytes | None:
    """What planning for a pod depends on besides the cluster: its spec (requests,
    selectors, affinity, tolerations, priority), labels and annotations (GPU shares)."""
    meta = pod.pod.metadata
    return msgspec.json.encode(
        (pod.namespace, pod.priority, meta.labels, meta.annotations, pod.pod.spec)
    )


def with_rescheduler(
    config: KubeSchedulerConfiguration, args: dict[str, Any] | None = None
) -> KubeSchedulerConfiguration:
    """`config` with the Rescheduler enabled at PostFilter in every profile that does not
    have it yet (after the profile's other PostFilter plugins, so priority preemption
    goes first), with `args` as its pluginConfig where the profile has none
    (`--rescheduler` of `shoal simulate`, `shoal run` and the openb replay)."""
    out = config.model_copy(deep=True)
    for profile in out.profiles:
        points = profile.plugins
        named = {p.name for p in points.post_filter.enabled} | {
            p.name for p in points.multi_point.enabled
        }
        if NAME not in named:
            points.post_filter.enabled.append(Plugin(name=NAME))
        if not any(c.name == NAME for c in profile.plugin_config):
            profile.plugin_config.append(PluginConfig(name=NAME, args=dict(args or {})))
    return out.with_warnings(config.warnings)
