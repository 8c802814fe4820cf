"""Intake: what the cluster says, applied to the core's state.

A driver reports every object it observes (pods, nodes, PriorityClasses, PodGroups,
Volcano HyperNodes, Kueue Topologies, tenant-queue objects, namespace labels) and the
outcome of each bind; `ClusterIntake` applies each to the cache, the gangs, the tenant
queues and the scheduling queue, and tells the queue which cluster event happened, so
pods that plugins rejected are retried when something they registered for changes.

What an object means to the core is decided here once, for every driver: admission
defaults of a pod (priority from its PriorityClass), which pods join gangs (those of a
profile with a gang plugin), a pod bound by the cluster or by us, a finished pod still
counting for its gang, a suspended gang evicted whole, a preemptor woken when the last
of its victims is gone. `Scheduler` delegates its intake methods here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np

from shoal.api.hypernode import HyperNode, Topology
from shoal.api.objects import Node, Pod, PriorityClass
from shoal.api.podgroup import SUSPENDED, PodGroup, UpstreamPodGroup, VolcanoPodGroup
from shoal.api.podinfo import PodInfo
from shoal.api.queue import ElasticQuota, NodePool, Queue, QueueBinding
from shoal.cache.dra import DeviceCatalog
from shoal.framework.effects import BindOutcome
from shoal.framework.handle import Handle
from shoal.framework.interfaces import Victim
from shoal.framework.runtime import Framework
from shoal.framework.types import ActionType, ClusterEvent, EventResource
from shoal.gang.manager import GangManager, Group
from shoal.rescheduler.commit import claim_hold
from shoal.scheduler.binding import BindingCycles
from shoal.scheduler.victims import awaiting_victims, commit_preemption
from shoal.scheduling_queue.queue import SchedulingQueue
from shoal.tenancy.manager import QueueManager

__all__ = ["FINISHED_PHASES", "ClusterIntake"]

FINISHED_PHASES = ("Succeeded", "Failed")


class ClusterIntake:
    def __init__(
        self,
        profiles: Mapping[str, Framework],
        handle: Handle,
        pods: dict[str, PodInfo],
        gangs: GangManager,
        tenant_queues: QueueManager,
        scheduling_queue: SchedulingQueue,
        bindings: BindingCycles,
    ) -> None:
        self.profiles = profiles
        self.handle = handle
        self.cluster = handle.cluster
        self.clock = handle.clock
        self.effects = handle.effects
        self.pods = pods  # every pod we know, by uid (the requeuer reads it too)
        self.priority_classes: dict[str, PriorityClass] = {}
        self.gangs = gangs
        self.tenant_queues = tenant_queues
        self.scheduling_queue = scheduling_queue
        self.bindings = bindings

    def _event(self, event: ClusterEvent) -> None:
        self.scheduling_queue.on_event(event, self.clock.now())

    def add_priority_class(self, pc: PriorityClass) -> None:
        self.priority_classes[pc.metadata.name] = pc

    def pod_info(
        self, pod: Pod, timestamp: float | None = None, previous: PodInfo | None = None
    ) -> PodInfo:
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
        return PodInfo(pod, timestamp=now, previous=previous)

    def known_pod(self, uid: str) -> PodInfo | None:
        """The core's current view of a pod it was told about (None once deleted)."""
        return self.pods.get(uid)

    def is_ours(self, pod: PodInfo) -> bool:
        return pod.scheduler_name in self.profiles

    def add_pod(self, pod: Pod | PodInfo) -> PodInfo:
        info = pod if isinstance(pod, PodInfo) else self.pod_info(pod)
        now = self.clock.now()
        phase = info.pod.status.phase
        if phase in FINISHED_PHASES:
            # A finished pod holds nothing; a finished gang member still counts for its
            # group (minMember of an elastic job, dependencies between jobs).
            self._join_group(info, now)
            self.gangs.member_finished(info.uid, succeeded=phase == "Succeeded")
            self._wake_dependents(phase == "Succeeded")
            return info
        self.pods[info.uid] = info
        self._join_group(info, now)
        if info.node_name:
            self.cluster.add_bound_pod(info, info.node_name)
            self.cluster.clear_nomination(info.uid)
            self._event(ClusterEvent(EventResource.ASSIGNED_POD, ActionType.ADD))
        elif self.is_ours(info):
            claim_hold(self.handle, info, now)  # a pod re-created by a migration plan
            self._follow_nomination(None, info)
            self.scheduling_queue.add(info, now)
        return info

    def _follow_nomination(self, old: PodInfo | None, info: PodInfo) -> None:
        """A pending pod of ours whose `status.nominatedNodeName` names a node is
        nominated there, as kube-scheduler's nominator reads it (so a restarted or new
        leader keeps holding the room a preemption freed, and a placement another
        component suggests is tried first): set or changed, it is followed; taken away,
        the nomination goes; absent before and after, the one in memory stays (the
        update may predate our own write)."""
        named = info.pod.status.nominated_node_name
        held = self.cluster.nominations.get(info.uid)
        if named:
            self.cluster.nominate(info, named)
        elif old is not None and old.pod.status.nominated_node_name:
            self.cluster.clear_nomination(info.uid)
        elif held is not None and held[1] is not info:
            self.cluster.nominate(info, held[0])  # the same node, the newer pod

    def _join_group(self, info: PodInfo, now: float) -> None:
        # Only pods of a profile with a gang plugin (Coscheduling, `ProfilePolicy`) join
        # groups and go through the gang cycle; elsewhere group keys are plain labels.
        config = self.gangs.profile_config(info.scheduler_name)
        try:
            ref = self.gangs.ref(info.pod)
        except ValueError:
            return  # Coscheduling's PreEnqueue keeps it out, naming the key
        if ref is None:
            return
        if config is None:
            # Not placed as a member (another scheduler's pod, or a profile without
            # Coscheduling), yet it names the gang: the members say why it is not counted.
            why = (
                f"schedulerName {info.scheduler_name}, a profile without Coscheduling"
                if self.is_ours(info)
                else f"schedulerName {info.scheduler_name}, not served by this scheduler"
            )
            self.gangs.outsider_named(info, ref, why)
            return
        group = self.gangs.member_added(info, ref, now, config)
        if group.kueue_votes and group.kueue_conflict():
            # Its Kueue topology differs from the other members': they wait too, saying so.
            self.scheduling_queue.recheck([uid for uid in group.members if uid != info.uid])
        elif not self.gangs.gate(group):
            self.scheduling_queue.regate([uid for uid in group.members if uid != info.uid])

    def add_pod_group(self, obj: PodGroup | VolcanoPodGroup | UpstreamPodGroup) -> None:
        """A PodGroup object (scheduler-plugins, Volcano or Kubernetes' own) was created
        or updated."""
        old = self.gangs.groups.get(f"{obj.metadata.namespace or 'default'}/{obj.metadata.name}")
        was_suspended = old is not None and old.suspended
        group = self.gangs.add_pod_group(obj, self.clock.now())
        self._set_group_queue(group.key, obj.spec.queue if isinstance(obj, VolcanoPodGroup) else "")
        if group.suspended:
            self._suspend(group)
        elif was_suspended:
            group.reason = ""
        if group.suspended != was_suspended:
            # Members waiting in the queue leave it (suspended) or come back (resumed).
            self.scheduling_queue.recheck(list(group.members))
        else:
            self.scheduling_queue.regate(list(group.members))
        self._wake_dependents(group.phase == "Finished")

    def _suspend(self, group: Group) -> None:
        """A suspended gang runs nothing: binds not sent yet are withdrawn and placed
        members are evicted, all of them (a gang is never left running short). Members
        whose bind is already out are evicted when it lands (`bind_outcome`)."""
        reason = (
            f"gang {group.key} was suspended (its PodGroup has {SUSPENDED}=true; "
            f"shoal resume podgroup {group.key} resumes it)"
        )
        group.reason = reason
        self.gangs.dirty.add(group.key)
        self.bindings.withdraw_members(group, reason)
        victims = [
            Victim(record.pod, reason)
            for uid in sorted(group.bound)
            if (record := self.cluster.placed.get(uid)) is not None and not record.assumed
        ]
        if victims:
            commit_preemption(self.cluster, self.effects, [], victims)

    def delete_pod_group(self, namespace: str, name: str, source: str = "") -> None:
        """A PodGroup object was deleted: its members wait for it again (if their keys
        still name it), and a Volcano group's queue no longer applies to them."""
        key = f"{namespace or 'default'}/{name}"
        if source == "volcano":
            self.clear_group_queue(key)
        group = self.gangs.groups.get(key)
        members = list(group.members) if group is not None else []
        self.gangs.delete_pod_group(namespace or "default", name)
        self.scheduling_queue.regate(members)

    def clear_group_queue(self, key: str) -> None:
        """The group's `spec.queue` went with its Volcano object: its members (running
        or pending) are charged to their own queue again."""
        self._set_group_queue(key, "")

    def _set_group_queue(self, key: str, queue: str) -> None:
        """The group names `queue` ("" for none): its members move there, and those
        waiting in the scheduling queue go to their new queue's partition."""
        group = self.gangs.groups.get(key)
        members = list(group.members.values()) if group is not None else []
        if self.tenant_queues.set_group_queue(key, queue, members):
            now = self.clock.now()
            for member in members:
                if self.scheduling_queue.get(member.uid) is not None:
                    self.scheduling_queue.update(member, now)

    def finish_pod(self, uid: str, succeeded: bool = True) -> None:
        """A bound pod ran to completion (Succeeded or Failed): free it, count it."""
        self.gangs.member_finished(uid, succeeded)
        self.delete_pod(uid)
        self._wake_dependents(succeeded)

    def _wake_dependents(self, succeeded: bool) -> None:
        if succeeded:
            # Dependent gangs may now start.
            for other in self.gangs.groups.values():
                if other.depends_on and not self.gangs.gate(other):
                    self.scheduling_queue.regate(list(other.members))

    def update_pod(self, pod: Pod) -> PodInfo:
        old = self.pods.get(
            pod.metadata.uid or f"{pod.metadata.namespace or 'default'}/{pod.metadata.name}"
        )
        info = self.pod_info(pod, timestamp=old.timestamp if old else None, previous=old)
        if info.pod.status.phase in FINISHED_PHASES:
            if old is not None:
                self.finish_pod(info.uid, succeeded=info.pod.status.phase == "Succeeded")
            return info
        if old is not None and old.node_name and not info.node_name:
            # A pod is never unbound: this copy predates our bind (e.g. a status write
            # seen after the Binding), kube's IsAssumedPod case. Keep ours.
            return old
        if old is not None and old.initial_attempt_time is not None:
            info.initial_attempt_time = old.initial_attempt_time
        if old is not None and not old.node_name and info.node_name:
            # Our bind landed (or someone else bound it).
            self.scheduling_queue.delete(info.uid)
        if info.node_name:
            # The cluster says where the pod is: if its bind's outcome has not come back,
            # that is the outcome (the later answer, if any, finds nothing to settle).
            self.bindings.settled_by_watch(info.uid, info.node_name)
        self.pods[info.uid] = info
        group = self.gangs.group_of_uid(info.uid)
        if group is not None:
            asked = group.kueue.get(info.uid)
            self.gangs.member_updated(group, info)
            if group.kueue.get(info.uid) != asked:
                # Its Kueue topology changed: the members may agree now, or no longer.
                self.scheduling_queue.recheck([m for m in group.members if m != info.uid])
            if old is None or old.pod.status.phase != info.pod.status.phase:
                self.gangs.dirty.add(group.key)  # its running count may have changed
        if info.node_name:
            self.cluster.add_bound_pod(info, info.node_name)
            self.cluster.clear_nomination(info.uid)  # placed: it holds real room now
            action = ActionType.UPDATE_POD_LABEL
            if old is not None and any(
                info.requests.get(name, 0) < amount for name, amount in old.requests.items()
            ):
                # It asks less now (an in-place resize done): kube's UpdatePodScaleDown.
                action |= ActionType.UPDATE_POD_SCALE_DOWN
            self._event(ClusterEvent(EventResource.ASSIGNED_POD, action))
        elif self._assumed(info.uid):
            # Assumed and being (or just) bound: an update that does not show the node
            # yet is stale (kube's IsAssumedPod check), never a reason to schedule again.
            pass
        elif self.is_ours(info):
            self._follow_nomination(old, info)
            self.scheduling_queue.update(info, self.clock.now())
        return info

    def _assumed(self, uid: str) -> bool:
        if self.bindings.holds(uid):
            return True
        record = self.cluster.placed.get(uid)
        return record is not None and record.assumed

    def delete_pod(self, uid: str) -> None:
        info = self.pods.pop(uid, None)
        if info is not None and info.pod.spec.resource_claims:
            # DynamicResources' per-pod state (PreFilter's plan, a failed assume): a
            # pending pod deleted before it is placed has no placement to release it.
            DeviceCatalog.of(self.handle).forget_pod(uid)
        self.cluster.clear_nomination(uid)
        # Ours to evict, or being deleted (a victim an earlier leader evicted, which a
        # preemptor nominated from its status waits for: `awaiting_victims`).
        was_evicting = uid in self.cluster.evicting or (
            info is not None and info.pod.metadata.deletion_timestamp is not None
        )
        self.cluster.evicting.discard(uid)
        group = self.gangs.group_of_uid(uid)
        disagreed = group is not None and bool(group.kueue_conflict())
        self.gangs.member_removed(uid)
        if group is not None:
            self.bindings.withdraw_gang(group, uid)
            if disagreed:
                # The member that disagreed on the Kueue topology may be this one.
                self.scheduling_queue.recheck([m for m in group.members if m != uid])
        self.scheduling_queue.delete(uid)
        self.bindings.cancel(uid)  # Unreserve; the cache entry goes below
        record = self.cluster.placed.get(uid)
        removed = self.cluster.remove_pod(uid)
        if removed is not None:
            self._event(ClusterEvent(EventResource.ASSIGNED_POD, ActionType.DELETE))
        if was_evicting and record is not None:
            self._victim_gone(record.node)

    def eviction_failed(self, uid: str) -> None:
        """An eviction we sent did not happen (refused by a disruption budget, or an
        error): the pod keeps running and may be chosen again later."""
        if uid in self.cluster.evicting:
            self.cluster.evicting.discard(uid)
            record = self.cluster.placed.get(uid)
            if record is not None:
                self._victim_gone(record.node)
        self._event(ClusterEvent(EventResource.ASSIGNED_POD, ActionType.DELETE))

    def _victim_gone(self, node: str) -> None:
        """A pod evicted from `node` is gone (or its eviction failed): preemptors
        nominated there that no longer wait for any victim are tried again at once."""
        row = self.cluster.table.row_of.get(node)
        nominated = self.cluster.nominated
        nominated.sync(self.cluster.table)
        if row is None or not nominated.size:
            return
        here = np.flatnonzero(nominated.row[: nominated.size] == row).tolist()
        ready = [
            nominated.uids[i] for i in here if not awaiting_victims(self.cluster, nominated.pods[i])
        ]
        if ready:
            # Also out of backoff: a preemptor backs off when its preemption left no
            # victim terminating to wait for (or an event came during its cycle); once
            # they are gone its room is there, whatever its backoff (after a reclaim
            # delay's attempts, the maximum).
            self.scheduling_queue.hurry(ready)

    def add_node(self, node: Node) -> None:
        self.cluster.add_node(node)
        self._event(ClusterEvent(EventResource.NODE, ActionType.ADD))

    def update_node(self, node: Node) -> None:
        self.cluster.update_node(node)
        self._event(ClusterEvent(EventResource.NODE, ActionType.UPDATE))

    def delete_node(self, name: str) -> None:
        self.cluster.remove_node(name)
        self._event(ClusterEvent(EventResource.NODE, ActionType.DELETE))

    def upsert_hypernode(self, hypernode: HyperNode) -> None:
        """A Volcano HyperNode created or changed (`hypernode_problems` says which are
        skipped as malformed)."""
        if self.cluster.hypernodes.upsert(hypernode):
            # Gangs held by a tier may fit now (Coscheduling retries on node updates).
            self._event(ClusterEvent(EventResource.NODE, ActionType.UPDATE))

    def delete_hypernode(self, name: str) -> None:
        """A Volcano HyperNode deleted."""
        if self.cluster.hypernodes.remove(name):
            self._event(ClusterEvent(EventResource.NODE, ActionType.UPDATE))

    def hypernode_problems(self) -> dict[str, str]:
        """Every HyperNode skipped as malformed, by name, with why (naming the field):
        one HyperNode may make another wrong (a cycle, a tier) or right again. Checked
        when asked (ask once after a batch of changes, not after each)."""
        return self.cluster.hypernodes.problems()

    def upsert_kueue_topology(self, topology: Topology) -> str:
        """A Kueue Topology created or changed: what is wrong with it ("" when nothing;
        a malformed one is skipped, naming the field)."""
        topologies = self.cluster.kueue_topologies
        if topologies.upsert(topology):
            # Gangs preferring a level it lists are placed differently from now on.
            self._event(ClusterEvent(EventResource.NODE, ActionType.UPDATE))
        return topologies.problems().get(topology.metadata.name, "")

    def delete_kueue_topology(self, name: str) -> None:
        """A Kueue Topology deleted."""
        if self.cluster.kueue_topologies.remove(name):
            self._event(ClusterEvent(EventResource.NODE, ActionType.UPDATE))

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
        closed = self.tenant_queues.closed_queues
        problems = self.tenant_queues.apply(
            queues,
            elastic_quotas,
            deleted_queues,
            bindings=bindings,
            pools=pools,
            deleted_bindings=deleted_bindings,
            deleted_pools=deleted_pools,
        )
        if self.tenant_queues.closed_queues != closed:
            # Pods of a queue just closed leave the queue (gated, saying why); those of
            # one opened again come back.
            self.scheduling_queue.recheck()
        self._event(ClusterEvent(EventResource.QUEUE, ActionType.ALL))
        return problems

    def set_namespace_labels(self, namespace: str, labels: dict[str, str]) -> None:
        self.cluster.namespaces.set(namespace, labels)
        if self.tenant_queues.set_namespace_labels(namespace, labels):
            self._event(ClusterEvent(EventResource.QUEUE, ActionType.ALL))

    def notify(self, event: ClusterEvent) -> None:
        """A change the backend fed elsewhere than through this class (e.g. a storage
        object into `VolumeCatalog`): pods rejected by plugins that registered for it
        are retried."""
        self._event(event)

    def bind_outcome(self, outcome: BindOutcome) -> None:
        """What became of a `Bind` (an event from the port)."""
        self.bindings.outcome(outcome)
        group = self.gangs.group_of_uid(outcome.uid)
        if group is not None and group.suspended and outcome.uid in group.bound:
            self._suspend(group)  # a bind that was already out when the gang was suspended
