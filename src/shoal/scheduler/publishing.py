"""What the scheduler tells the cluster about its gangs and tenant queues.

Once per tick (`Scheduler.tick`), `StatusPublisher` emits a `GroupStatus` effect for
every pod group whose observable state changed, and, at most once per
`QUEUE_STATUS_SECONDS`, a `QueueStatus` (and `BindingStatus`) effect for every tenant
queue (QueueBinding) whose status changed. It remembers what it sent, so an unchanged
status is never sent again, and forgets objects that are gone (one created again under
the same name gets its status). With node shards, only the replica that decides an
object's pods writes its status (`writes_status`).

It also brings the gate message of gang members up to date ("2/3 members exist", not
the count when each arrived), at most once per `GATE_REFRESH_SECONDS` for each group: every
refresh re-gates every waiting member, and each says it again (a condition write and an
event in a cluster), so refreshing at every arrival made a gang of n members arriving
one by one say it about n^2/2 times (1783 events for 64 pods). A refresh put off is done
when it is due (`next_due`); a gang complete is let through at once all the same
(`Scheduler._join_group`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from shoal.api.objects import Pod
from shoal.cache.cluster import ClusterState
from shoal.framework.effects import BindingStatus, Effects, GroupStatus, QueueStatus
from shoal.gang.manager import GangManager, Group
from shoal.scheduling_queue.queue import SchedulingQueue
from shoal.tenancy.manager import QueueManager

__all__ = ["GATE_REFRESH_SECONDS", "QUEUE_STATUS_SECONDS", "StatusOwner", "StatusPublisher"]

QUEUE_STATUS_SECONDS = 1.0  # queue statuses are published at most this often
GATE_REFRESH_SECONDS = 2.0  # a gang's members' gate messages are refreshed at most this often


class StatusOwner(Protocol):
    """The scheduler, as the publisher asks it which statuses this replica writes."""

    writes_status: Callable[[str, str], bool]

    def routing_key(self, pod: Pod) -> str: ...


class StatusPublisher:
    def __init__(
        self,
        owner: StatusOwner,
        gangs: GangManager,
        queues: QueueManager,
        scheduling_queue: SchedulingQueue,
        cluster: ClusterState,
        effects: Effects,
    ) -> None:
        self.owner = owner
        self.gangs = gangs
        self.queues = queues
        self.scheduling_queue = scheduling_queue
        self.cluster = cluster
        self.effects = effects
        self._groups: dict[str, GroupStatus] = {}  # key -> last GroupStatus sent
        self._queues: dict[str, QueueStatus] = {}  # name -> last QueueStatus sent
        self._bindings: dict[str, BindingStatus] = {}  # QueueBinding statuses sent
        self._queues_due = 0.0  # when queue statuses may be published next
        self._gates_due: dict[str, float] = {}  # group -> when its gates may be refreshed
        self._stale_gates: set[str] = set()  # groups whose refresh was put off

    def next_due(self) -> float | None:
        """When a gate refresh put off is due (None: none is)."""
        if not self._stale_gates:
            return None
        return min(self._gates_due.get(key, 0.0) for key in self._stale_gates)

    def publish(self, now: float) -> None:
        self.publish_groups(now)
        self.publish_queues(now)

    def publish_queues(self, now: float) -> None:
        """A QueueStatus effect for every tenant queue whose status changed, at most once
        per `QUEUE_STATUS_SECONDS` (the fair share is computed only then)."""
        manager = self.queues
        if now < self._queues_due or len(manager.tree.names) <= 1:
            return
        objects = manager.objects
        if not (
            objects.queues
            or objects.elastic
            or objects.bindings
            or manager.rejected
            or self._queues
        ):
            # No Queue, ElasticQuota or QueueBinding object to carry a status (only the
            # implicit default queue): the O(placed pods) count is not made every second.
            return
        self._queues_due = now + QUEUE_STATUS_SECONDS
        queues = manager.queue_statuses(self.cluster.table)
        bindings = manager.binding_statuses()
        # Objects gone are forgotten: one created again under that name gets its status.
        for gone in self._queues.keys() - {q.name for q in queues}:
            del self._queues[gone]
        for gone in self._bindings.keys() - {b.name for b in bindings}:
            del self._bindings[gone]
        writes_status = self.owner.writes_status
        for status in queues:
            if not writes_status(f"queue/{status.name}", ""):
                continue
            if self._queues.get(status.name) != status:
                self._queues[status.name] = status
                self.effects.emit(status)
        for binding in bindings:
            if self._bindings.get(binding.name) != binding:
                self._bindings[binding.name] = binding
                self.effects.emit(binding)

    def publish_groups(self, now: float) -> None:
        """A GroupStatus effect for every group whose observable state changed."""
        gangs = self.gangs
        for key in sorted(self._stale_gates - gangs.dirty):
            if now >= self._gates_due.get(key, 0.0):
                self._stale_gates.discard(key)
                group = gangs.groups.get(key)
                if group is not None:
                    self._refresh_gate_messages(group, now)
        if not gangs.dirty:
            return
        for key in sorted(gangs.dirty):
            group = gangs.groups.get(key)
            if group is None:
                self._groups.pop(key, None)
                self._gates_due.pop(key, None)
                self._stale_gates.discard(key)
                continue
            if now >= self._gates_due.get(key, 0.0):
                self._stale_gates.discard(key)
                self._refresh_gate_messages(group, now)
            else:
                self._stale_gates.add(key)
            member = next(iter(group.members.values()), None)
            if member is not None and not self.owner.writes_status(
                self.owner.routing_key(member.pod), member.scheduler_name
            ):
                continue
            status = GroupStatus(
                namespace=group.namespace,
                name=group.name,
                source=group.source,
                has_object=group.has_object,
                phase=gangs.observed_phase(group),
                min_member=group.min_member,
                scheduled=len(group.bound),
                running=gangs.started(group),
                succeeded=len(group.succeeded),
                failed=len(group.failed),
                reason=group.reason,
                sub_groups=gangs.sub_group_status(group),
            )
            if self._groups.get(key) != status:
                self._groups[key] = status
                self.effects.emit(status)
        gangs.dirty.clear()

    def _refresh_gate_messages(self, group: Group, now: float) -> None:
        """Members gated by the gang say what holds it now (O(members) each)."""
        gate = self.gangs.gate(group)
        if not gate:
            return
        stale = [
            uid
            for uid in group.members
            if (entry := self.scheduling_queue.get(uid)) is not None
            and entry.gated_by == "Coscheduling"
            and entry.message != gate
        ]
        if stale:
            self._gates_due[group.key] = now + GATE_REFRESH_SECONDS
            self.scheduling_queue.regate(stale)
