"""The scheduler core: sans-I/O, driven by the driver loop (`shoal.drivers.loop`).

A driver feeds observed objects in (`add_pod`, `add_node`, ...), calls `schedule_one()`
while `has_work()`, starts the binding cycles that are ready (`start_bindings`: PreBind,
then a `Bind` effect), feeds each bind's outcome back in as
an event (`bind_outcome`, or the watch showing the pod bound) and calls `tick()` as
time passes. Nothing here reads a clock, sleeps, awaits, or talks to the network.

`Scheduler` is the facade and the step loop: it builds the parts, each of which owns one
job, hands every call to the part that owns it, and runs what happens as time passes
(`tick`, `next_wakeup`). The parts: `ClusterIntake` (intake.py: observed objects
applied), `QueueGate` (gating.py: PreEnqueue), `SchedulingCycles` (cycles.py: a pod's or
a gang's cycle and its outcome), `Requeuer` (requeue.py), `BindingCycles` (binding.py),
`ShardLoans` (shard_loans.py: node shards), `StatusPublisher` (publishing.py), and
victims.py for committing preemptions. Policies registered by plugins (gangs, through
`ProfilePolicy`) live in their services (`GangManager`, `QueueManager`), not here.

How a decision flows: a cycle (single pod, or a gang through `GangCycle`) works in a
`Transaction` over the cache; committing it keeps the assumed pods (they go to binding)
or, for preemption and reclaim, marks the victims as evicting and nominates the
preemptors; everything that must reach the cluster (binds with annotations,
nominations, evictions with reasons, PodScheduled conditions and events, outcomes) goes
out through the one effects port, `handle.effects`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from shoal.api.hypernode import HyperNode, Topology
from shoal.api.objects import Node, Pod, PriorityClass
from shoal.api.podgroup import PodGroup, UpstreamPodGroup, VolcanoPodGroup
from shoal.api.podinfo import PodInfo
from shoal.api.queue import ElasticQuota, NodePool, Queue, QueueBinding
from shoal.cache.cluster import ClusterState
from shoal.framework.effects import BindOutcome
from shoal.framework.handle import Handle
from shoal.framework.runtime import Framework
from shoal.framework.types import ActionType, ClusterEvent, EventResource
from shoal.gang.manager import GangManager
from shoal.gang.reservation import reservation_due, update_reservation
from shoal.rescheduler.commit import (
    defragment,
    expire_holds,
    next_hold_expiry,
)
from shoal.scheduler.algorithm import PlacementAlgorithm, num_feasible_nodes_to_find
from shoal.scheduler.binding import BindingCycles, BindingTask
from shoal.scheduler.cycles import CycleResult, SchedulingCycles
from shoal.scheduler.gang_cycle import GangCycle
from shoal.scheduler.gating import QueueGate
from shoal.scheduler.intake import ClusterIntake
from shoal.scheduler.publishing import StatusPublisher
from shoal.scheduler.requeue import Requeuer
from shoal.scheduler.shard_loans import ShardLoans
from shoal.scheduler.victims import (
    AWAITING_VICTIMS,
    commit_preemption,
)
from shoal.scheduling_queue.queue import QueueConfig, QueuedPod, SchedulingQueue
from shoal.tenancy.manager import QueueManager

__all__ = ["BindingTask", "CycleResult", "Scheduler", "num_feasible_nodes_to_find"]


class Scheduler:
    def __init__(
        self,
        profiles: Mapping[str, Framework],
        handle: Handle,
        queue_config: QueueConfig | None = None,
        algorithm: PlacementAlgorithm | None = None,
    ) -> None:
        if not profiles:
            raise ValueError("at least one profile is required")
        self.profiles = dict(profiles)
        self.handle = handle
        self.cluster: ClusterState = handle.cluster
        self.snapshot = handle.snapshot
        self.clock = handle.clock
        self.effects = handle.effects
        handle.frameworks.update(self.profiles)
        self.algorithm = algorithm or PlacementAlgorithm(
            handle.snapshot, handle.rng, handle.extenders
        )
        self.gang_cycle = GangCycle(handle.cluster, self.algorithm)
        first = next(iter(self.profiles.values()))
        plugin_events: dict[str, list[ClusterEvent]] = {}
        # A preemptor waiting for its victims to terminate is woken when the last one
        # is gone (`ClusterIntake._victim_gone`), or when a node goes, not by every pod
        # event.
        plugin_events[AWAITING_VICTIMS] = [ClusterEvent(EventResource.NODE, ActionType.DELETE)]
        for fwk in self.profiles.values():
            plugin_events.update(fwk.events_to_register())
        self.tenant_queues = QueueManager.of(handle)
        self.tenant_queues.job_of = self._job_of
        self.gate = QueueGate(
            self.profiles,
            self.effects,
            lambda uid: self.scheduling_queue.gated_entry(uid),
            self.clock.now,
        )
        self._base_sort_key = first.queue_sort.sort_key
        self.scheduling_queue = SchedulingQueue(
            sort_key=self._sort_key,
            config=queue_config or QueueConfig(),
            plugin_events=plugin_events,
            pre_enqueue=self.gate.pre_enqueue,
            partitions=self.tenant_queues,
            on_gated=self.gate.gated,
        )
        self.tenant_queues.on_install.append(self.scheduling_queue.repartition)
        # Every pod we know, by uid: written by the intake, read by the requeuer (a pod
        # deleted meanwhile does not go back to the queue).
        self._pods: dict[str, PodInfo] = {}
        self.gangs = GangManager.of(handle)
        self.requeue = Requeuer(self.scheduling_queue, self._pods, self.clock, self.effects)
        self.bindings = BindingCycles(
            handle, self.gangs, self._event, self.scheduling_queue.done, self.requeue.undone
        )
        self.intake = ClusterIntake(
            self.profiles,
            handle,
            self._pods,
            self.gangs,
            self.tenant_queues,
            self.scheduling_queue,
            self.bindings,
        )
        self.priority_classes = self.intake.priority_classes
        self.shard_loans = ShardLoans(
            self.cluster,
            self.tenant_queues,
            self.gangs,
            self.scheduling_queue,
            self.gang_cycle,
            self.bindings,
        )
        self.cycles = SchedulingCycles(
            self.profiles,
            handle,
            self.algorithm,
            self.gang_cycle,
            self.gangs,
            self.scheduling_queue,
            self.bindings,
            self.requeue,
            self.shard_loans,
        )
        self.publisher = StatusPublisher(
            self.shard_loans,
            self.gangs,
            self.tenant_queues,
            self.scheduling_queue,
            self.cluster,
            self.effects,
        )

    # ---- intake (intake.py) ---------------------------------------------------------

    def add_priority_class(self, pc: PriorityClass) -> None:
        self.intake.add_priority_class(pc)

    def pod_info(
        self, pod: Pod, timestamp: float | None = None, previous: PodInfo | None = None
    ) -> PodInfo:
        """Admission defaults (priority from priorityClassName), then derive PodInfo."""
        return self.intake.pod_info(pod, timestamp, previous)

    def known_pod(self, uid: str) -> PodInfo | None:
        """The core's current view of a pod it was told about (None once deleted)."""
        return self.intake.known_pod(uid)

    def is_ours(self, pod: PodInfo) -> bool:
        return self.intake.is_ours(pod)

    def add_pod(self, pod: Pod | PodInfo) -> PodInfo:
        return self.intake.add_pod(pod)

    def update_pod(self, pod: Pod) -> PodInfo:
        return self.intake.update_pod(pod)

    def delete_pod(self, uid: str) -> None:
        self.intake.delete_pod(uid)

    def finish_pod(self, uid: str, succeeded: bool = True) -> None:
        """A bound pod ran to completion (Succeeded or Failed): free it, count it."""
        self.intake.finish_pod(uid, succeeded)

    def eviction_failed(self, uid: str) -> None:
        """An eviction we sent did not happen: the pod keeps running."""
        self.intake.eviction_failed(uid)

    def add_pod_group(self, obj: PodGroup | VolcanoPodGroup | UpstreamPodGroup) -> None:
        """A PodGroup object (scheduler-plugins, Volcano or Kubernetes' own) was created
        or updated."""
        self.intake.add_pod_group(obj)

    def delete_pod_group(self, namespace: str, name: str, source: str = "") -> None:
        self.intake.delete_pod_group(namespace, name, source)

    def clear_group_queue(self, key: str) -> None:
        """The group's `spec.queue` went with its Volcano object."""
        self.intake.clear_group_queue(key)

    def add_node(self, node: Node) -> None:
        self.intake.add_node(node)

    def update_node(self, node: Node) -> None:
        self.intake.update_node(node)

    def delete_node(self, name: str) -> None:
        self.intake.delete_node(name)

    def upsert_hypernode(self, hypernode: HyperNode) -> None:
        self.intake.upsert_hypernode(hypernode)

    def delete_hypernode(self, name: str) -> None:
        self.intake.delete_hypernode(name)

    def hypernode_problems(self) -> dict[str, str]:
        """Every HyperNode skipped as malformed, by name, with why."""
        return self.intake.hypernode_problems()

    def upsert_kueue_topology(self, topology: Topology) -> str:
        """What is wrong with the Kueue Topology ("" when nothing)."""
        return self.intake.upsert_kueue_topology(topology)

    def delete_kueue_topology(self, name: str) -> None:
        self.intake.delete_kueue_topology(name)

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
        """Validate and apply tenant-queue objects; returns the problems."""
        return self.intake.apply_queues(
            queues,
            elastic_quotas,
            bindings,
            pools,
            deleted_queues,
            deleted_bindings=deleted_bindings,
            deleted_pools=deleted_pools,
        )

    def set_namespace_labels(self, namespace: str, labels: dict[str, str]) -> None:
        self.intake.set_namespace_labels(namespace, labels)

    def notify(self, event: ClusterEvent) -> None:
        """A change the backend fed elsewhere than through this class (e.g. a storage
        object into `VolumeCatalog`)."""
        self.intake.notify(event)

    def bind_outcome(self, outcome: BindOutcome) -> None:
        """What became of a `Bind` (an event from the port)."""
        self.intake.bind_outcome(outcome)

    def bind_withdrawn(self, uid: str) -> str:
        """Why the bind of this pod must not be sent after all ("" when it stands)."""
        return self.bindings.withdrawn(uid)

    # ---- node shards (shard_loans.py) -----------------------------------------------

    def routing_key(self, pod: Pod) -> str:
        """What one replica must decide alone when several share the work."""
        return self.shard_loans.routing_key(pod)

    def set_node_shards(
        self,
        slots: int,
        held: frozenset[int] | None,
        holders: Mapping[int, str],
        me: str = "",
    ) -> None:
        """The node shards this replica may use (None: no fencing, every node), who
        holds each (`me`: this replica). Pods that found no room get another try when
        more nodes become usable."""
        if self.shard_loans.set_node_shards(slots, held, holders, me):
            self._event(ClusterEvent(EventResource.NODE, ActionType.ADD))

    @property
    def writes_status(self) -> Callable[[str, str], bool]:
        """Whether this replica writes the status of an object shared by replicas (by
        routing key and schedulerName); the driver sets it."""
        return self.shard_loans.writes_status

    @writes_status.setter
    def writes_status(self, writes: Callable[[str, str], bool]) -> None:
        self.shard_loans.writes_status = writes

    @property
    def borrow_shards(self) -> Callable[[str, frozenset[int]], None] | None:
        """How the driver borrows other replicas' shards for a gang (None: no borrowing)."""
        return self.shard_loans.borrow_shards

    @borrow_shards.setter
    def borrow_shards(self, borrow: Callable[[str, frozenset[int]], None] | None) -> None:
        self.shard_loans.borrow_shards = borrow

    @property
    def borrow_trials(self) -> int:
        """What-ifs run to find shards to borrow (tests)."""
        return self.shard_loans.borrow_trials

    def _event(self, event: ClusterEvent) -> None:
        self.scheduling_queue.on_event(event, self.clock.now())

    def _job_of(self, pod: PodInfo) -> str:
        group = self.gangs.group_of_uid(pod.uid)
        return group.key if group is not None else pod.uid

    def _sort_key(self, pod: PodInfo) -> tuple[object, ...]:
        return self.tenant_queues.order_key(pod, self._base_sort_key(pod))

    def announce_gated(self) -> None:
        """Say again why every gated pod waits (a new leader writes what a standby
        could not), at once."""
        self.gate.announce(self.scheduling_queue.gated())
        self.gate.say(at_once=True)

    # ---- driving -------------------------------------------------------------------

    def has_work(self) -> bool:
        return len(self.scheduling_queue) > 0

    def tick(self) -> None:
        """Let time pass: expire backoffs and Permit waits."""
        now = self.clock.now()
        update_reservation(self.gangs, self.handle, now, self.tenant_queues.beyond_max)
        self.cycles.release_held()
        if expire_holds(self.handle, now):  # room held for moved pods is free again
            self._event(ClusterEvent(EventResource.ASSIGNED_POD, ActionType.DELETE))
        for moves in defragment(self.handle, now):  # the Rescheduler's periodic pass
            commit_preemption(self.cluster, self.effects, moves.holds, moves.victims)
        self.scheduling_queue.flush(now)
        for waiting in self.handle.waiting_pods:
            if waiting.rejection is None and now >= waiting.deadline and waiting.pending:
                waiting.reject("", "rejected due to timeout after waiting at permit")
        self.bindings.settle_waiting()
        self.shard_loans.end_loans()
        self.publisher.publish(now)
        self.say_gated()

    def say_gated(self) -> None:
        """Pods gated for their grace and still gated say why (`QueueGate.say`); the
        driver calls it when a pass ends, and `next_wakeup` says when the next is due."""
        self.gate.say()

    def next_wakeup(self) -> float | None:
        """When `tick` next has something to do (None: only a new event can help)."""
        times = [w.deadline for w in self.handle.waiting_pods if w.pending]
        due = reservation_due(self.gangs)  # a head-of-line reservation starts or ends
        if due is not None:
            times.append(due)
        due = next_hold_expiry(self.handle)
        if due is not None:
            times.append(due)
        queue_time = self.scheduling_queue.next_wakeup()
        if queue_time is not None:
            times.append(queue_time)
        due = self.publisher.next_due()  # gang members' gate messages to bring up to date
        if due is not None:
            times.append(due)
        due = self.gate.next_due()  # a gated pod's grace ends: it says why it waits
        if due is not None:
            times.append(due)
        return min(times) if times else None

    def start_bindings(self) -> int:
        """Start the binding cycles that are ready (PreBind, then a `Bind` effect)."""
        return self.bindings.start_ready()

    @property
    def binding(self) -> Mapping[str, BindingTask]:
        """uid -> binding cycle ready or started, whose outcome is not known yet."""
        return self.bindings.binding

    @property
    def bound(self) -> int:
        """Binding cycles that ended bound."""
        return self.bindings.bound

    def schedule_one(self) -> CycleResult | None:
        """Run one scheduling cycle for the next pod in the active queue (for a gang
        member: for its whole gang). An unexpected error fails this pod's attempt (it
        backs off and is retried) and never the scheduler."""
        entry = self.scheduling_queue.pop()
        if entry is None:
            return None
        return self.cycles.attempt(entry)

    def attempt(self, uid: str) -> CycleResult | None:
        """Run a scheduling cycle for this pending pod now, ahead of the queue's order
        (None if it is not queued, or is gated: see `explain`). For `shoal explain`, on a
        scheduler of its own whose binding cycles never run."""
        taken = self.scheduling_queue.take([uid])
        return self.cycles.attempt(taken[0]) if taken else None

    def run_cycle(self, entry: QueuedPod) -> CycleResult:
        """A scheduling cycle for a pod already taken from the queue (`pop_pod`): the
        optimistic driver's serial lane (`shoal.drivers.optimistic`)."""
        return self.cycles.attempt(entry)

    def pop_pod(self) -> QueuedPod | None:
        """Take the next pod from the active queue without deciding it (the optimistic
        driver hands it to a worker, or back to `run_cycle`)."""
        return self.scheduling_queue.pop()

    def place(self, entry: QueuedPod, node: str) -> CycleResult:
        """Place a pod popped with `pop_pod` on a node decided elsewhere (an optimistic
        worker's proposal the committer validated): the tail of a cycle."""
        return self.cycles.place(entry, node)

    # ---- inspection ----------------------------------------------------------------

    def explain(self, uid: str) -> str:
        """Why a pod is still pending, or "" if it is not."""
        entry = self.scheduling_queue.get(uid)
        if entry is None:
            return ""
        if entry.gated_by:
            message = entry.message
            group = self.gangs.group_of_uid(uid)
            if group is not None and entry.gated_by == "Coscheduling":
                message = self.gangs.gate(group) or message  # membership may have grown
            return f"pod is gated by {entry.gated_by}: {message}"
        return entry.message
