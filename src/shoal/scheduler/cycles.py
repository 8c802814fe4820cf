"""Scheduling cycles: one pod, or its whole gang, decided and acted on.

`SchedulingCycles.attempt` runs a cycle for a pod taken from the scheduling queue. A pod
outside any gang goes through kube-scheduler's scheduling cycle (`PlacementAlgorithm`:
PreFilter, Filter, Score, select host); a gang member takes the gang's other pending
members along and the gang cycle (`GangCycle`) decides them in one transaction. Then
the outcome is acted on, always the same way:

* placed: assumed, Reserve and Permit in a transaction (`place`), then handed to the
  binding cycles;
* no node fits: PostFilter (preemption, reclaim), the victims evicted and the preemptor
  nominated (`victims.commit_preemption`), then requeued with the plugins that rejected
  it, and the reason emitted (`Requeuer`);
* a gang that does not fit in this replica's node shards may ask to borrow others'
  (`ShardLoans.borrow_for`).

An unexpected error (a plugin bug) fails this pod's attempt, which backs off and is
retried, never the scheduler.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass

from shoal.api.podinfo import PodInfo
from shoal.cache.transaction import Transaction
from shoal.framework.cycle_state import CycleState
from shoal.framework.diagnosis import Diagnosis
from shoal.framework.handle import Handle
from shoal.framework.runtime import Framework, post_filter_key
from shoal.framework.status import Code, Status
from shoal.framework.types import ActionType, ClusterEvent, EventResource
from shoal.gang.manager import GangManager, Group
from shoal.scheduler.algorithm import PlacementAlgorithm
from shoal.scheduler.binding import BindingCycles
from shoal.scheduler.gang_cycle import GangCycle
from shoal.scheduler.requeue import Requeuer, retry_by
from shoal.scheduler.shard_loans import ShardLoans
from shoal.scheduler.victims import (
    AWAITING_VICTIMS,
    awaiting_victims,
    commit_preemption,
    emit_nominations,
)
from shoal.scheduling_queue.queue import QueuedPod, SchedulingQueue

__all__ = ["CycleResult", "SchedulingCycles"]


@dataclass
class CycleResult:
    pod: PodInfo
    node: str | None
    status: Status
    message: str = ""
    diagnosis: Diagnosis | None = None


class SchedulingCycles:
    def __init__(
        self,
        profiles: Mapping[str, Framework],
        handle: Handle,
        algorithm: PlacementAlgorithm,
        gang_cycle: GangCycle,
        gangs: GangManager,
        scheduling_queue: SchedulingQueue,
        bindings: BindingCycles,
        requeue: Requeuer,
        shard_loans: ShardLoans,
    ) -> None:
        self.profiles = profiles
        self.cluster = handle.cluster
        self.snapshot = handle.snapshot
        self.clock = handle.clock
        self.effects = handle.effects
        self.algorithm = algorithm
        self.gang_cycle = gang_cycle
        self.gangs = gangs
        self.scheduling_queue = scheduling_queue
        self.bindings = bindings
        self.requeue = requeue
        self.shard_loans = shard_loans

    def place(self, entry: QueuedPod, node: str) -> CycleResult:
        """Place a pod popped with `pop_pod` on a node decided elsewhere (an optimistic
        worker's proposal the committer validated, `shoal.scheduler.optimistic`): the
        tail of a cycle that chose `node` (assume, Reserve, Permit), with a fresh
        CycleState, which is why only pods whose Reserve reads none go that way."""
        pod = entry.pod
        now = self.clock.now()
        if pod.initial_attempt_time is None:
            pod.initial_attempt_time = now
        try:
            return self._place(entry, self.profiles[pod.scheduler_name], CycleState(), node, now)
        except Exception as err:
            status = Status.error(f"scheduling cycle failed: {type(err).__name__}: {err}")
            if self.scheduling_queue.get(pod.uid) is not None:
                self.requeue.unschedulable(entry, now, frozenset(), status, status.message)
            return CycleResult(pod, None, status, status.message)

    def attempt(self, entry: QueuedPod) -> CycleResult:
        try:
            return self._cycle(entry)
        except Exception as err:
            status = Status.error(f"scheduling cycle failed: {type(err).__name__}: {err}")
            if self.scheduling_queue.get(entry.pod.uid) is not None:
                self.requeue.unschedulable(
                    entry, self.clock.now(), frozenset(), status, status.message
                )
            return CycleResult(entry.pod, None, status, status.message)

    def _cycle(self, entry: QueuedPod) -> CycleResult:
        pod = entry.pod
        now = self.clock.now()
        if pod.initial_attempt_time is None:
            pod.initial_attempt_time = now
        fwk = self.profiles[pod.scheduler_name]
        group = self.gangs.group_of_uid(pod.uid)
        if group is not None:
            result = self._schedule_gang(entry, group, fwk, now)
            self.release_held()
            return result
        self.snapshot.refresh()
        state = CycleState()
        try:
            node, status, diagnosis = self.algorithm.schedule_pod(fwk, state, pod)
        except Exception as err:  # a plugin bug must not stop the scheduler
            node, diagnosis = None, None
            status = Status.error(f"scheduling cycle failed: {type(err).__name__}: {err}")
        if node is None:
            return self._unschedulable(entry, fwk, state, status, diagnosis, now)
        return self._place(entry, fwk, state, node, now)

    def _place(
        self, entry: QueuedPod, fwk: Framework, state: CycleState, node: str, now: float
    ) -> CycleResult:
        """Assume, then Reserve and Permit (kube-scheduler's order), in a transaction."""
        pod = entry.pod
        with Transaction(self.cluster) as tx:
            tx.clear_nomination(pod)
            tx.assume(pod, node)
            tx.on_undo(functools.partial(fwk.run_unreserve, state, pod, node))
            status = fwk.run_reserve(state, pod, node)
            if not status.ok:
                tx.discard()  # Unreserve, then the assumption taken back
                self.requeue.bind_failed(entry, node, status)
                return CycleResult(pod, None, status, status.message)
            decision = tx.commit()
        emit_nominations(self.effects, decision.nominated)
        status, timeout, waiting_on = fwk.run_permit(state, pod, node)
        if not self.bindings.admit(entry, node, state, fwk, status, timeout, waiting_on, now):
            return CycleResult(pod, None, status, status.message)
        return CycleResult(pod, node, status)

    def _unschedulable(
        self,
        entry: QueuedPod,
        fwk: Framework,
        state: CycleState,
        status: Status,
        diagnosis: Diagnosis | None,
        now: float,
    ) -> CycleResult:
        """No node fits: PostFilter (preemption, reclaim), then requeue and explain."""
        pod = entry.pod
        message = diagnosis.message() if diagnosis is not None else status.message
        retry_soon = False
        retry_at: float | None = None
        nominated = ""
        waiting = awaiting_victims(self.cluster, pod)
        if waiting:
            # kube's PodEligibleToPreemptOthers: victims chosen earlier are still
            # terminating on the nominated node; preempting again would take more. It
            # waits for an event (the last victim gone wakes it: `_victim_gone`), not in
            # a doubling backoff while they terminate.
            nominated, message = waiting[0], f"{message} {waiting[1]}"
        elif diagnosis is not None and status.rejected and fwk.plugins.post_filter:
            try:
                result, post_status = fwk.run_post_filter(state, pod, diagnosis)
            except Exception as err:  # a plugin bug must not stop the scheduler
                result = None
                post_status = Status.error(f"PostFilter failed: {type(err).__name__}: {err}")
            # PENDING: a PostFilter will act after a delay (e.g. reclaim): retry after
            # the backoff (by when the delay ends), not on an event; SUCCESS: it has just
            # made room (preemption): likewise, unless its victims are terminating (below).
            retry_soon = post_status.code in (Code.PENDING, Code.SUCCESS)
            retry_at = retry_by(post_status, now)
            if post_status.message:
                diagnosis.post_filter_message = post_status.message
                message = diagnosis.message()
            if result is not None and result.nominated_node:
                nominated = result.nominated_node
                commit_preemption(
                    self.cluster, self.effects, [(pod, nominated), *result.holds], result.victims
                )
                if awaiting_victims(self.cluster, pod):
                    # Its victims terminate now: it waits for the last one gone (which
                    # tries it at once), as kube's preemptor waits in the unschedulable
                    # pool, instead of a retry after its backoff that finds them still
                    # terminating (one more attempt and FailedScheduling each).
                    retry_soon, waiting = False, (nominated, "")
        if not nominated and pod.uid in self.cluster.nominations:
            # kube clears the nomination of a pod that failed without a new one.
            with Transaction(self.cluster) as tx:
                tx.clear_nomination(pod)
                emit_nominations(self.effects, tx.commit().nominated)
        rejectors = frozenset(diagnosis.unschedulable_plugins) if diagnosis else frozenset()
        if waiting:
            rejectors = frozenset({AWAITING_VICTIMS})
        if diagnosis is not None and diagnosis.post_filter_plugins:
            # What a PostFilter tried and could not do yet (reclaim finding no queue above
            # its level) may become possible on the events it registered for.
            events = self.scheduling_queue.plugin_events
            keys = {post_filter_key(p) for p in diagnosis.post_filter_plugins}
            rejectors |= {k for k in keys if k in events}
        self.requeue.unschedulable(
            entry, now, rejectors, status, message, retry_soon, nominated, retry_at
        )
        return CycleResult(pod, None, status, message, diagnosis)

    def _schedule_gang(
        self, entry: QueuedPod, group: Group, fwk: Framework, now: float
    ) -> CycleResult:
        """Take every pending member out of the queue and decide them together."""
        others = [uid for uid in group.members if uid != entry.pod.uid and uid not in group.bound]
        entries = [entry, *self.scheduling_queue.take(others)]
        gate = self.gangs.gate(group)
        if gate:
            status = Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, gate)
            return self._gang_failed(entry, entries, group, status, gate, frozenset(), now)
        for e in entries:
            waiting = awaiting_victims(self.cluster, e.pod)
            if waiting:
                message = f"gang {group.key}: {waiting[1]}"
                status = Status(Code.UNSCHEDULABLE, message, plugin="Coscheduling")
                # As a pod awaiting its victims: the members wait for the last victim
                # of any of them gone (`_victim_gone` wakes one; the gang cycle takes
                # the others along), not in a doubling backoff.
                waits = frozenset({AWAITING_VICTIMS})
                for each in entries:
                    node = self.cluster.nominations.get(each.pod.uid, ("", each.pod))[0]
                    self.requeue.unschedulable(each, now, waits, status, message, False, node)
                return CycleResult(entry.pod, None, status, message)
        try:
            outcome = self.gang_cycle.decide(entries, group, fwk, now)
        except Exception as err:  # a plugin bug must not stop the scheduler
            status = Status.error(f"gang cycle failed: {type(err).__name__}: {err}")
            return self._gang_failed(
                entry, entries, group, status, status.message, frozenset(), now
            )
        if outcome.rejected is not None:
            status, message, rejectors = outcome.rejected
            borrowing = self.shard_loans.borrow_for(entries, group, fwk, now)
            if borrowing:
                message = f"{message.rstrip().rstrip('.')}; {borrowing}"
            return self._gang_failed(
                entry,
                entries,
                group,
                status,
                message,
                rejectors,
                now,
                outcome.retry_soon,
                outcome.retry_by,
            )
        if outcome.nominations:
            commit_preemption(self.cluster, self.effects, outcome.nominations, outcome.victims)
            message = (
                f"gang {group.key}: preempting {len(outcome.victims)} pod(s) to place "
                f"{len(outcome.nominations)} member(s); waiting for them to terminate"
            )
            self.gangs.attempt_failed(group, message, now)
            nominated = dict((p.uid, n) for p, n in outcome.nominations)
            # Victims terminating: the members wait for the last one gone (it wakes one,
            # the gang cycle takes the others along), not for a retry after the backoff
            # that finds them still there.
            terminating = any(awaiting_victims(self.cluster, p) for p, _ in outcome.nominations)
            rejectors = frozenset({AWAITING_VICTIMS}) if terminating else frozenset()
            for e in entries:
                e.attempts = max(e.attempts, group.attempts)
                status = Status(Code.UNSCHEDULABLE, message, plugin="Coscheduling")
                self.requeue.unschedulable(
                    e,
                    now,
                    rejectors,
                    status,
                    message,
                    not terminating,
                    nominated.get(e.pod.uid, ""),
                )
            return CycleResult(entry.pod, None, Status(Code.UNSCHEDULABLE, message), message)
        for placement in outcome.placed:
            e, node, state = placement.entry, placement.node, placement.state
            status, timeout, waiting_on = fwk.run_permit(state, e.pod, node)
            self.bindings.admit(e, node, state, fwk, status, timeout, waiting_on, now)
            if status.code in (Code.SUCCESS, Code.WAIT):
                group.bound.add(e.pod.uid)
        self.gangs.attempt_succeeded(group)
        for e, status, diagnosis in outcome.failed:
            message = diagnosis.message() if diagnosis is not None else status.message
            rejectors = frozenset(diagnosis.unschedulable_plugins) if diagnosis else frozenset()
            self.requeue.unschedulable(e, now, rejectors, status, message)
        first_node = outcome.placed[0].node if outcome.placed else None
        return CycleResult(entry.pod, first_node, Status())

    def _gang_failed(
        self,
        entry: QueuedPod,
        entries: list[QueuedPod],
        group: Group,
        status: Status,
        message: str,
        rejectors: frozenset[str],
        now: float,
        retry_soon: bool = False,
        retry_by: float | None = None,
    ) -> CycleResult:
        """`retry_soon`: something time-based (a reclaim delay) will change the answer,
        so the members retry after their backoff (at `retry_by` at the latest) rather
        than on a cluster event."""
        self.gangs.attempt_failed(group, message, now)
        for e in entries:
            e.attempts = max(e.attempts, group.attempts)
            self.requeue.unschedulable(
                e, now, rejectors, status, message, retry_soon, retry_by=retry_by
            )
        return CycleResult(entry.pod, None, status, message)

    def release_held(self) -> None:
        """Pods kept off reserved nodes get another try when the reservation ends (an
        event Coscheduling registered for)."""
        if self.gangs.released:
            self.gangs.released = False
            self.scheduling_queue.on_event(
                ClusterEvent(EventResource.POD_GROUP, ActionType.UPDATE), self.clock.now()
            )
