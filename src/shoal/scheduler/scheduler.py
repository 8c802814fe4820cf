"""The scheduler core: sans-I/O, driven by its backend.

A backend (the simulator, or the Kubernetes backend) feeds observed objects in
(`add_pod`, `add_node`, ...), calls `schedule_one()` while `has_work()`, runs the binding
cycles it gets from `take_bindings()` (coroutines: awaited concurrently in a cluster,
stepped to completion in the simulator) and calls `tick()` as time passes. Nothing here
reads a clock, sleeps, or talks to the network.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from shoal.api.objects import Node, Pod, PriorityClass
from shoal.api.podgroup import PodGroup, VolcanoPodGroup
from shoal.api.podinfo import PodInfo
from shoal.api.queue import ElasticQuota, NodePool, Queue, QueueBinding
from shoal.cache.cluster import ClusterState
from shoal.framework.cycle_state import CycleState
from shoal.framework.diagnosis import Diagnosis
from shoal.framework.handle import Handle, WaitingPod
from shoal.framework.runtime import FilterOutcome, Framework
from shoal.framework.status import Code, Status
from shoal.framework.types import ActionType, Candidates, ClusterEvent, EventResource
from shoal.gang.cycle import (
    GangConfig,
    held_by_reservation,
    schedule_gang,
    update_reservation,
)
from shoal.gang.manager import GangManager
from shoal.scheduler.listener import NullListener, SchedulerListener
from shoal.scheduling_queue.queue import QueueConfig, QueuedPod, SchedulingQueue
from shoal.tenancy.manager import QueueManager

__all__ = ["BindingTask", "CycleResult", "Scheduler", "num_feasible_nodes_to_find"]

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


@dataclass
class CycleResult:
    pod: PodInfo
    node: str | None
    status: Status
    message: str = ""
    diagnosis: Diagnosis | None = None


@dataclass(eq=False)
class BindingTask:
    pod: PodInfo
    node: str
    state: CycleState
    framework: Framework
    entry: QueuedPod
    cancelled: bool = False


class Scheduler:
    def __init__(
        self,
        profiles: Mapping[str, Framework],
        handle: Handle,
        queue_config: QueueConfig | None = None,
        listener: SchedulerListener | None = None,
    ) -> None:
        if not profiles:
            raise ValueError("at least one profile is required")
        self.profiles = dict(profiles)
        self.handle = handle
        self.cluster: ClusterState = handle.cluster
        self.snapshot = handle.snapshot
        self.clock = handle.clock
        self.listener: SchedulerListener = listener or NullListener()
        first = next(iter(self.profiles.values()))
        plugin_events: dict[str, list[ClusterEvent]] = {}
        for fwk in self.profiles.values():
            plugin_events.update(fwk.events_to_register())
        # The gang cycle rejects as "Coscheduling" (group-level reasons): worth retrying
        # when capacity frees, nodes change, or groups or queues change.
        plugin_events.setdefault(
            "Coscheduling",
            [
                ClusterEvent(EventResource.ASSIGNED_POD, ActionType.DELETE),
                ClusterEvent(EventResource.NODE, ActionType.ADD | ActionType.UPDATE),
                ClusterEvent(EventResource.POD_GROUP | EventResource.QUEUE, ActionType.ALL),
            ],
        )
        self.queues = QueueManager.of(handle)
        self.queues.job_of = self._job_of
        self._base_sort_key = first.queue_sort.sort_key
        self.queue = SchedulingQueue(
            sort_key=self._sort_key,
            config=queue_config or QueueConfig(),
            plugin_events=plugin_events,
            pre_enqueue=self._pre_enqueue,
            partition_of=self.queues.partition_of,
            choose_partition=self._choose_partition,
            on_active_delta=self.queues.on_active_delta,
            on_pending=self.queues.on_pending,
        )
        self.queues.on_install.append(self.queue.repartition)
        self.priority_classes: dict[str, PriorityClass] = {}
        self._next_start_node_index = 0
        self._ready: deque[BindingTask] = deque()
        self._waiting: dict[str, BindingTask] = {}
        self._binding: dict[str, BindingTask] = {}
        self._pods: dict[str, PodInfo] = {}  # every pod we know, by uid
        self.gangs = GangManager.of(handle)
        self.gang_config = GangConfig()
        self._bad_group: dict[str, str] = {}  # uid -> why its group key is unusable

    # ---- intake from the backend ---------------------------------------------------

    def add_priority_class(self, pc: PriorityClass) -> None:
        self.priority_classes[pc.metadata.name] = pc

    def pod_info(self, pod: Pod, timestamp: float | None = None) -> PodInfo:
        """Admission defaults (priority from priorityClassName), then derive PodInfo."""
        spec = pod.spec
        if spec.priority is None:
            pc = (
                self.priority_classes.get(spec.priority_class_name)
                if spec.priority_class_name
                else None
            )
            if pc is None and not spec.priority_class_name:
                pc = next((c for c in self.priority_classes.values() if c.global_default), None)
            if pc is not None:
                spec.priority = pc.value
        now = self.clock.now() if timestamp is None else timestamp
        return PodInfo(pod, timestamp=now)

    def is_ours(self, pod: PodInfo) -> bool:
        return pod.scheduler_name in self.profiles

    def add_pod(self, pod: Pod | PodInfo) -> PodInfo:
        info = pod if isinstance(pod, PodInfo) else self.pod_info(pod)
        now = self.clock.now()
        self._pods[info.uid] = info
        self._join_group(info, now)
        if info.node_name:
            self.cluster.add_bound_pod(info, info.node_name)
            self._event(ClusterEvent(EventResource.ASSIGNED_POD, ActionType.ADD))
        elif self.is_ours(info):
            self.queue.add(info, now)
        return info

    def _join_group(self, info: PodInfo, now: float) -> None:
        try:
            ref = self.gangs.ref(info.pod)
        except ValueError as err:
            self._bad_group[info.uid] = f"pod {info.key}: invalid gang key: {err}"
            return
        if ref is None:
            return
        group = self.gangs.member_added(info, ref, now)
        if not self.gangs.gate(group):
            self.queue.regate([uid for uid in group.members if uid != info.uid])

    def add_pod_group(self, obj: PodGroup | VolcanoPodGroup) -> None:
        """A PodGroup object (scheduler-plugins or Volcano) was created or updated."""
        now = self.clock.now()
        group = self.gangs.add_pod_group(obj, now)
        queue = obj.spec.queue if isinstance(obj, VolcanoPodGroup) else ""
        if self.queues.set_group_queue(group.key, queue, list(group.members.values())):
            # Members waiting in the scheduling queue go to their new queue's partition.
            for member in list(group.members.values()):
                if self.queue.get(member.uid) is not None:
                    self.queue.update(member, now)
        self.queue.regate(list(group.members))

    def finish_pod(self, uid: str, succeeded: bool = True) -> None:
        """A bound pod ran to completion (Succeeded or Failed): free it, count it."""
        self.gangs.member_finished(uid, succeeded)
        self.delete_pod(uid)
        if succeeded:
            # Dependent gangs may now start.
            for other in self.gangs.groups.values():
                if other.depends_on and not self.gangs.gate(other):
                    self.queue.regate(list(other.members))

    def update_pod(self, pod: Pod) -> PodInfo:
        old = self._pods.get(
            pod.metadata.uid or f"{pod.metadata.namespace or 'default'}/{pod.metadata.name}"
        )
        info = self.pod_info(pod, timestamp=old.timestamp if old else None)
        if old is not None and not old.node_name and info.node_name:
            # Our bind landed (or someone else bound it).
            self.queue.delete(info.uid)
        self._pods[info.uid] = info
        group = self.gangs.group_of_uid(info.uid)
        if group is not None:
            group.members[info.uid] = info
        if info.node_name:
            self.cluster.add_bound_pod(info, info.node_name)
            self._event(ClusterEvent(EventResource.ASSIGNED_POD, ActionType.UPDATE_POD_LABEL))
        elif self.is_ours(info) and info.uid not in self._binding and info.uid not in self._waiting:
            self.queue.update(info, self.clock.now())
        return info

    def delete_pod(self, uid: str) -> None:
        self._pods.pop(uid, None)
        self.cluster.clear_nomination(uid)
        self._bad_group.pop(uid, None)
        self.gangs.member_removed(uid)
        self.queue.delete(uid)
        for tasks in (self._waiting, self._binding):
            task = tasks.get(uid)
            if task is not None:
                task.cancelled = True
        waiting = self.handle.waiting_pods.by_uid.pop(uid, None)
        if waiting is not None:
            task = self._waiting.pop(uid)
            task.framework.run_unreserve(task.state, task.pod, task.node)
        removed = self.cluster.remove_pod(uid)
        if removed is not None:
            self._event(ClusterEvent(EventResource.ASSIGNED_POD, ActionType.DELETE))

    def add_node(self, node: Node) -> None:
        self.cluster.add_node(node)
        self._event(ClusterEvent(EventResource.NODE, ActionType.ADD))

    def update_node(self, node: Node) -> None:
        self.cluster.update_node(node)
        self._event(ClusterEvent(EventResource.NODE, ActionType.UPDATE))

    def delete_node(self, name: str) -> None:
        self.cluster.remove_node(name)
        self._event(ClusterEvent(EventResource.NODE, ActionType.DELETE))

    def _release_held(self) -> None:
        """Pods held back by a gang reservation that just ended get another try."""
        if self.gangs.released:
            self.gangs.released = False
            self._event(ClusterEvent(EventResource.WILDCARD, ActionType.ALL))

    def _event(self, event: ClusterEvent) -> None:
        self.queue.on_event(event, self.clock.now())

    def _job_of(self, pod: PodInfo) -> str:
        group = self.gangs.group_of_uid(pod.uid)
        return group.key if group is not None else pod.uid

    def _sort_key(self, pod: PodInfo) -> tuple[object, ...]:
        return self.queues.order_key(pod, self._base_sort_key(pod))

    def _choose_partition(self) -> int:
        return self.queues.choose_partition(self.cluster.table)

    # ---- tenant queues -------------------------------------------------------------

    def apply_queues(
        self,
        queues: Iterable[Queue] = (),
        elastic_quotas: Iterable[ElasticQuota] = (),
        bindings: Iterable[QueueBinding] = (),
        pools: Iterable[NodePool] = (),
        deleted_queues: Iterable[str] = (),
        *,
        deleted_bindings: Iterable[str] = (),
        deleted_pools: Iterable[str] = (),
    ) -> list[str]:
        """Validate and apply queue objects, each on its own: the invalid ones are
        rejected, the rest applies. Returns the problems (each names its object, the
        field and the fix); see `QueueManager.apply`."""
        problems = self.queues.apply(
            queues,
            elastic_quotas,
            deleted_queues,
            bindings=bindings,
            pools=pools,
            deleted_bindings=deleted_bindings,
            deleted_pools=deleted_pools,
        )
        self._event(ClusterEvent(EventResource.QUEUE, ActionType.ALL))
        return problems

    def set_namespace_labels(self, namespace: str, labels: dict[str, str]) -> None:
        if self.queues.set_namespace_labels(namespace, labels):
            self._event(ClusterEvent(EventResource.QUEUE, ActionType.ALL))

    def _pre_enqueue(self, pod: PodInfo) -> Status:
        bad = self._bad_group.get(pod.uid)
        if bad:
            return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, bad, plugin="Coscheduling")
        group = self.gangs.group_of_uid(pod.uid)
        if group is not None:
            gate = self.gangs.gate(group)
            if gate:
                return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, gate, plugin="Coscheduling")
        fwk = self.profiles.get(pod.scheduler_name)
        return fwk.run_pre_enqueue(pod) if fwk is not None else Status()

    # ---- driving -------------------------------------------------------------------

    def has_work(self) -> bool:
        return len(self.queue) > 0

    def tick(self) -> None:
        """Let time pass: expire backoffs and Permit waits."""
        now = self.clock.now()
        update_reservation(self.gangs, self.gang_config, now)
        self._release_held()
        self.queue.flush(now)
        for waiting in self.handle.waiting_pods:
            if waiting.rejection is None and now >= waiting.deadline and waiting.pending:
                waiting.reject("", "rejected due to timeout after waiting at permit")
        self._settle_waiting()

    def next_wakeup(self) -> float | None:
        """When `tick` next has something to do (None: only a new event can help)."""
        times = [w.deadline for w in self.handle.waiting_pods if w.pending]
        if self.gangs.blocking is not None:
            times.append(self.gangs.blocking_until)
        elif self.gangs.failing:
            key, since = next(iter(self.gangs.failing.items()))
            times.append(
                max(
                    since + self.gang_config.reservation_after,
                    self.gangs.no_block_until.get(key, 0.0),
                )
            )
        queue_time = self.queue.next_wakeup()
        if queue_time is not None:
            times.append(queue_time)
        return min(times) if times else None

    def take_bindings(self) -> list[BindingTask]:
        """Binding cycles ready to run (the backend runs them, see `run_binding_cycle`)."""
        self._settle_waiting()
        tasks = list(self._ready)
        self._ready.clear()
        return tasks

    def schedule_one(self) -> CycleResult | None:
        """Run one scheduling cycle for the next pod in the active queue."""
        entry = self.queue.pop()
        if entry is None:
            return None
        pod = entry.pod
        now = self.clock.now()
        if pod.initial_attempt_time is None:
            pod.initial_attempt_time = now
        fwk = self.profiles[pod.scheduler_name]
        held = held_by_reservation(self.gangs, pod, now, self.gang_config)
        if held:
            status = Status(Code.UNSCHEDULABLE, held, plugin="Coscheduling")
            self.queue.requeue_unschedulable(entry, now, frozenset({"Coscheduling"}), status, held)
            self.listener.pod_unschedulable(pod, status, held)
            return CycleResult(pod, None, status, held)
        group = self.gangs.group_of_uid(pod.uid)
        if group is not None:
            outcome = schedule_gang(self, entry, group, fwk, self.gang_config)
            self._release_held()
            return outcome
        self.snapshot.refresh()
        state = CycleState()
        try:
            node, status, diagnosis = self._schedule_pod(fwk, state, pod)
        except Exception as err:  # a plugin bug must not stop the scheduler
            node, diagnosis = None, None
            status = Status.error(f"scheduling cycle failed: {type(err).__name__}: {err}")
        if node is None:
            message = diagnosis.message() if diagnosis is not None else status.message
            retry_soon = False
            if diagnosis is not None and status.rejected and fwk.plugins.post_filter:
                result, post_status = fwk.run_post_filter(state, pod, diagnosis)
                # PENDING: a PostFilter will act after a delay (e.g. reclaim), or has just
                # freed room (preemption): retry after the backoff, not on an event.
                retry_soon = post_status.code in (Code.PENDING, Code.SUCCESS)
                if post_status.message:
                    diagnosis.post_filter_message = post_status.message
                    message = diagnosis.message()
                if result is not None and result.nominated_node:
                    pod.pod.status.nominated_node_name = result.nominated_node
                    self.cluster.nominate(pod, result.nominated_node)
            rejectors = frozenset(diagnosis.unschedulable_plugins) if diagnosis else frozenset()
            self.queue.requeue_unschedulable(
                entry, now, rejectors, status, message, retry_soon=retry_soon
            )
            self.listener.pod_unschedulable(pod, status, message)
            return CycleResult(pod, None, status, message, diagnosis)

        # Assume, then Reserve and Permit (kube-scheduler's order).
        self.cluster.clear_nomination(pod.uid)
        self.cluster.assume(pod, node)
        status = fwk.run_reserve(state, pod, node)
        if not status.ok:
            self._undo(fwk, state, pod, node, entry, status)
            return CycleResult(pod, None, status, status.message)
        status, timeout, waiting_on = fwk.run_permit(state, pod, node)
        if not self._admit(entry, node, state, fwk, status, timeout, waiting_on, now):
            return CycleResult(pod, None, status, status.message)
        return CycleResult(pod, node, status)

    def _admit(
        self,
        entry: QueuedPod,
        node: str,
        state: CycleState,
        fwk: Framework,
        status: Status,
        timeout: float,
        waiting_on: set[str],
        now: float,
    ) -> bool:
        """After Permit: hand the assumed pod to binding (or to waiting), or undo it."""
        pod = entry.pod
        if status.code not in (Code.SUCCESS, Code.WAIT):
            self._undo(fwk, state, pod, node, entry, status)
            return False
        task = BindingTask(pod, node, state, fwk, entry)
        self.queue.done(pod.uid)
        if status.code == Code.WAIT:
            self._waiting[pod.uid] = task
            self.handle.waiting_pods.by_uid[pod.uid] = WaitingPod(
                pod, node, now + timeout, waiting_on
            )
        else:
            self._ready.append(task)
            self._binding[pod.uid] = task  # tracked until its binding cycle ends
        return True

    def _undo(
        self,
        fwk: Framework,
        state: CycleState,
        pod: PodInfo,
        node: str,
        entry: QueuedPod,
        status: Status,
    ) -> None:
        fwk.run_unreserve(state, pod, node)
        self.cluster.forget(pod)
        self.gangs.member_unbound(pod.uid)
        # The freed resources may let other pods fit.
        self._event(ClusterEvent(EventResource.ASSIGNED_POD, ActionType.DELETE))
        if pod.uid in self._pods:
            self.queue.readd(entry)
            self.queue.requeue_unschedulable(
                entry, self.clock.now(), frozenset({status.plugin}), status, status.message
            )
        self.listener.pod_bind_failed(pod, node, status)

    def _settle_waiting(self) -> None:
        for waiting in self.handle.waiting_pods:
            task = self._waiting.get(waiting.pod.uid)
            if task is None:
                continue
            if waiting.rejection is not None:
                del self.handle.waiting_pods.by_uid[waiting.pod.uid]
                del self._waiting[waiting.pod.uid]
                self._undo(
                    task.framework, task.state, task.pod, task.node, task.entry, waiting.rejection
                )
            elif waiting.allowed:
                del self.handle.waiting_pods.by_uid[waiting.pod.uid]
                del self._waiting[waiting.pod.uid]
                self._ready.append(task)
                self._binding[waiting.pod.uid] = task

    async def run_binding_cycle(self, task: BindingTask) -> Status:
        """PreBind, Bind, PostBind for one assumed pod. Safe to run concurrently."""
        fwk, pod, node = task.framework, task.pod, task.node
        self._binding[pod.uid] = task
        try:
            status = Status()
            if not task.cancelled:
                status = await fwk.run_pre_bind(task.state, pod, node)
            if status.ok and not task.cancelled:
                status = await fwk.run_bind(task.state, pod, node)
        except Exception as err:  # a plugin or the binder failed: never lose the pod
            status = Status.error(f"binding failed: {err}")
        finally:
            self._binding.pop(pod.uid, None)
        if task.cancelled:
            # Deleted while binding: release what Reserve claimed, then the cache entry.
            fwk.run_unreserve(task.state, pod, node)
            self.cluster.forget(pod)
            return Status(Code.ERROR, "pod was deleted while binding")
        if not status.ok:
            self._undo(fwk, task.state, pod, node, task.entry, status)
            return status
        self.cluster.confirm(pod.uid)
        self.gangs.member_bound(pod.uid)
        pod.node_name = node
        # A pod landing may satisfy others' (anti-)affinity or spread rules.
        self._event(ClusterEvent(EventResource.ASSIGNED_POD, ActionType.ADD))
        self.listener.pod_bound(pod, node)
        await fwk.run_post_bind(task.state, pod, node)
        return status

    # ---- the scheduling algorithm (kube's schedulePod) ----------------------------

    def _schedule_pod(
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
        pick = best[0] if best.size == 1 else best[self.handle.rng.integers(best.size)]
        return int(nodes.rows[pick])

    # ---- inspection ----------------------------------------------------------------

    def explain(self, uid: str) -> str:
        """Why a pod is still pending, or "" if it is not."""
        entry = self.queue.get(uid)
        if entry is None:
            return ""
        if entry.gated_by:
            message = entry.message
            group = self.gangs.group_of_uid(uid)
            if group is not None and uid not in self._bad_group:
                message = self.gangs.gate(group) or message  # membership may have grown
            return f"pod is gated by {entry.gated_by}: {message}"
        return entry.message
