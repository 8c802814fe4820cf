"""Binding cycles: a pod between Permit and the cluster's word on its bind.

After Permit an assumed pod is *waiting* (a Permit plugin said WAIT), *ready*, or
*binding* (its `Bind` effect went out). Nothing here awaits: `start` runs PreBind and
emits the `Bind` (through an interested binder extender first, as kube's
extendersBinding, else the Bind plugins), and the cycle ends when the outcome comes back
as an event, whichever comes first:

* `outcome(BindOutcome)`: the port's answer (an ignorable extender's failure hands the
  bind to the next binder);
* `settled_by_watch(uid, node)`: the watch shows the pod bound; to our node that is
  success, to another node (someone else's bind won) our reservation is released and
  the pod counts where the cluster says.

A later answer for a cycle that has ended finds nothing to settle. On success the pod is
confirmed in the cache, its gang counts it, `Bound` is emitted and PostBind runs; on
failure Unreserve runs, the pod is forgotten and the scheduler requeues it (`undone`).
A pod deleted meanwhile is unreserved at once (`cancel`); a gang member deleted while
the gang binds withdraws the unsent binds of the rest when they no longer make
minMember (`withdraw_gang`; the binder checks `withdrawn` right before it sends).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from shoal.api.gpu import ANNOTATION_GPU_INDEX, format_gpu_index
from shoal.api.podinfo import PodInfo
from shoal.cache.device_plugin_writes import device_plugin_write
from shoal.framework.cycle_state import CycleState
from shoal.framework.effects import (
    Bind,
    BindingExpected,
    BindOutcome,
    Bound,
    annotate,
    annotations_of,
)
from shoal.framework.extender import EXTENDER_NAME, Extender, binder_extenders
from shoal.framework.handle import Handle, WaitingPod
from shoal.framework.runtime import Framework
from shoal.framework.status import Code, Status
from shoal.framework.types import ActionType, ClusterEvent, EventResource
from shoal.gang.manager import GangManager, Group
from shoal.scheduling_queue.queue import QueuedPod

__all__ = ["BindingCycles", "BindingTask"]


@dataclass(eq=False)
class BindingTask:
    pod: PodInfo
    node: str
    state: CycleState
    framework: Framework
    entry: QueuedPod
    # Why the bind must not be sent after all ("" when it stands): a member of its gang
    # vanished while the gang was binding, so the gang would run below minMember.
    withdrawn: str = ""
    # Who is binding it now (a Bind plugin's name, or an extender's) and the binder
    # extenders not tried yet (kube: an ignorable one that fails hands over).
    binder: str = ""
    via_extender: Extender | None = None
    extenders_left: list[Extender] | None = None
    # What the pod's device plugin will miss ("" when nothing): said with `Bound`.
    note: str = ""


class BindingCycles:
    """The assumed pods past Permit, until their bind's outcome is known."""

    def __init__(
        self,
        handle: Handle,
        gangs: GangManager,
        notify: Callable[[ClusterEvent], None],
        admitted: Callable[[str], None],
        undone: Callable[[QueuedPod, str, Status], None],
    ) -> None:
        self.handle = handle
        self.cluster = handle.cluster
        self.effects = handle.effects
        self.gangs = gangs
        self._notify = notify  # a cluster event for the scheduling queue
        self._admitted = admitted  # the pod leaves the scheduling queue
        self._undone = undone  # the pod goes back to it, the failure reported
        self._ready: deque[BindingTask] = deque()
        self._waiting: dict[str, BindingTask] = {}
        self._binding: dict[str, BindingTask] = {}
        self.bound = 0  # cycles that ended bound

    @property
    def binding(self) -> Mapping[str, BindingTask]:
        """uid -> cycle ready or binding, whose outcome is not known yet."""
        return self._binding

    def holds(self, uid: str) -> bool:
        """Is the pod past Permit with its outcome unknown (waiting, ready, binding)?"""
        return uid in self._binding or uid in self._waiting

    def withdrawn(self, uid: str) -> str:
        """Why the bind of this pod must not be sent after all ("" when it stands)."""
        task = self._binding.get(uid)
        return task.withdrawn if task is not None else ""

    # ---- from Permit to binding ------------------------------------------------------

    def admit(
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
        task = BindingTask(pod, node, state, fwk, entry)
        if status.code not in (Code.SUCCESS, Code.WAIT):
            self._undo(task, status)
            return False
        self._admitted(pod.uid)
        if status.code == Code.WAIT:
            self._waiting[pod.uid] = task
            self.handle.waiting_pods.by_uid[pod.uid] = WaitingPod(
                pod, node, now + timeout, waiting_on
            )
            # kube's NominatedNodeNameForExpectation: a pod held at Permit says where
            # it is going meanwhile.
            self.effects.emit(BindingExpected(pod, node))
        else:
            self._ready.append(task)
            self._binding[pod.uid] = task  # tracked until its outcome is known
        return True

    def settle_waiting(self) -> None:
        """Waiting pods that Permit plugins allowed become ready; rejected ones undone."""
        for waiting in self.handle.waiting_pods:
            task = self._waiting.get(waiting.pod.uid)
            if task is None:
                continue
            if waiting.rejection is not None:
                del self.handle.waiting_pods.by_uid[waiting.pod.uid]
                del self._waiting[waiting.pod.uid]
                self._undo(task, waiting.rejection)
            elif waiting.allowed:
                del self.handle.waiting_pods.by_uid[waiting.pod.uid]
                del self._waiting[waiting.pod.uid]
                self._ready.append(task)
                self._binding[waiting.pod.uid] = task

    def start_ready(self) -> int:
        """Start every cycle that is ready; how many."""
        self.settle_waiting()
        started = 0
        while self._ready:
            self.start(self._ready.popleft())
            started += 1
        return started

    def start(self, task: BindingTask) -> None:
        """PreBind, then a `Bind` effect; the cycle ends when the outcome comes back."""
        fwk, pod, node = task.framework, task.pod, task.node
        self._binding[pod.uid] = task
        devices = self.cluster.gpu_devices
        held = devices.devices_of(pod.uid) if devices is not None else None
        if held:
            # The GPU devices the cache chose at assume go out with the binding, in every
            # profile, so the node's device plugin exposes exactly those and a restart
            # reads them back; in the vocabulary of the pod's device plugin too.
            assert devices is not None
            annotate(task.state, ANNOTATION_GPU_INDEX, format_gpu_index(held))
            written = device_plugin_write(pod, held, devices, node, self.handle.clock.now())
            for key, value in written.annotations.items():
                annotate(task.state, key, value)
            task.note = written.note
        try:
            status = fwk.run_pre_bind_pre_flight(task.state, pod, node)
            if status.ok:
                # PreBind will delay the bind (claims to provision, devices to write):
                # the pod says where it is going meanwhile, as kube-scheduler's does.
                self.effects.emit(BindingExpected(pod, node))
            if status.code == Code.SKIP:
                status = Status()
            if status.ok:
                status = fwk.run_pre_bind(task.state, pod, node)
            if status.ok:
                if task.withdrawn:
                    status = Status(Code.UNSCHEDULABLE, task.withdrawn, plugin="Coscheduling")
                else:
                    task.extenders_left = binder_extenders(self.handle.extenders, pod)
                    status = self._send(task)
        except Exception as err:  # a plugin failed: never lose the pod
            status = Status.error(f"binding failed: {err}")
        if status.code != Code.WAIT:
            self._finish(task, status)

    def _send(self, task: BindingTask) -> Status:
        """kube's bind: the next interested binder extender, else the Bind plugins.
        WAIT: a `Bind` effect went out."""
        left = task.extenders_left
        if left:
            extender = left.pop(0)
            task.binder, task.via_extender = extender.name, extender
            self.effects.emit(
                Bind(task.pod, task.node, annotations_of(task.state), binder=extender)
            )
            return Status(Code.WAIT)
        task.via_extender = None
        status = task.framework.run_bind(task.state, task.pod, task.node)
        task.binder = status.plugin
        return status

    # ---- outcomes (events) ------------------------------------------------------------

    def outcome(self, outcome: BindOutcome) -> None:
        """What became of a `Bind`. Nothing to do when the cycle already ended (the pod
        was deleted, or the watch showed it bound)."""
        task = self._binding.get(outcome.uid)
        if task is None or task.node != outcome.node:
            return
        if not outcome.error:
            self._finish(task, Status())
            return
        extender = task.via_extender
        if extender is None:
            status = Status(Code.ERROR, f"binding rejected: {outcome.error}", plugin=task.binder)
        else:
            status = Status.error(
                f"extender {extender.name} failed to bind pod {task.pod.key} to "
                f"{task.node}: {outcome.error}",
                plugin=EXTENDER_NAME,
            )
            if extender.ignorable:
                # kube's extendersBinding: an ignorable extender's failure hands the
                # bind to the next binder.
                try:
                    status = self._send(task)
                except Exception as err:
                    status = Status.error(f"binding failed: {err}")
                if status.code == Code.WAIT:
                    return
        self._finish(task, status)

    def settled_by_watch(self, uid: str, node: str) -> None:
        """The watch shows the pod bound to `node`: if its cycle is still open, that is
        its outcome."""
        task = self._binding.get(uid)
        if task is None:
            return
        if node == task.node:
            self._finish(task, Status())
            return
        # Bound elsewhere (by someone else): our reservation is void; the update that
        # told us places the pod where it is.
        self._release(task)
        self.cluster.forget(task.pod)

    def cancel(self, uid: str) -> None:
        """The pod was deleted: release what Reserve claimed (the caller removes the
        cache entry). A bind still on its way finds the pod gone, and its outcome finds
        nothing to settle."""
        if self.handle.waiting_pods.by_uid.pop(uid, None) is not None:
            waiting = self._waiting.pop(uid)
            waiting.framework.run_unreserve(waiting.state, waiting.pod, waiting.node)
        binding = self._binding.get(uid)
        if binding is not None:
            self._release(binding)

    def _release(self, task: BindingTask) -> None:
        """The cycle ends without a bind of ours (deleted, or bound by someone else):
        it leaves the ready list and what Reserve claimed is released."""
        del self._binding[task.pod.uid]
        if task in self._ready:
            self._ready.remove(task)
        task.framework.run_unreserve(task.state, task.pod, task.node)

    def withdraw_gang(self, group: Group, gone: str) -> None:
        """A member of `group` vanished: if the rest no longer make minMember, the binds
        of its members not sent yet are withdrawn, so the gang waits whole instead of
        running short."""
        existing = len(group.members) + len(group.succeeded)
        if existing >= group.min_member:
            return
        reason = (
            f"gang {group.key}: a member (uid {gone}) was deleted while the gang was binding; "
            f"{existing}/{group.min_member} members exist, the gang waits whole"
        )
        for member in group.members:
            task = self._binding.get(member)
            if task is not None:
                task.withdrawn = reason

    def withdraw_members(self, group: Group, reason: str) -> None:
        """The binds of `group`'s members not sent yet are withdrawn (the gang was
        suspended): they are retried, and wait, like any pod whose bind was refused."""
        for member in group.members:
            task = self._binding.get(member)
            if task is not None:
                task.withdrawn = reason

    # ---- the end of a cycle -----------------------------------------------------------

    def _finish(self, task: BindingTask, status: Status) -> None:
        """Confirmed and PostBind, or undone and retried."""
        fwk, pod, node = task.framework, task.pod, task.node
        if self._binding.pop(pod.uid, None) is None:
            return  # ended already
        if not status.ok:
            self._undo(task, status)
            return
        self.cluster.confirm(pod.uid)
        self.gangs.member_bound(pod.uid)
        pod.node_name = node  # the core's own view; the API object comes back by watch
        # A pod landing may satisfy others' (anti-)affinity or spread rules.
        self._notify(ClusterEvent(EventResource.ASSIGNED_POD, ActionType.ADD))
        self.effects.emit(Bound(pod, node, task.note))
        self.bound += 1
        fwk.run_post_bind(task.state, pod, node)  # last: the cycle's state is settled

    def _undo(self, task: BindingTask, status: Status) -> None:
        """Permit, PreBind or Bind failed for an assumed pod: Unreserve, forget, retry."""
        task.framework.run_unreserve(task.state, task.pod, task.node)
        self.cluster.forget(task.pod)
        self.gangs.member_unbound(task.pod.uid)
        # The freed resources may let other pods fit.
        self._notify(ClusterEvent(EventResource.ASSIGNED_POD, ActionType.DELETE))
        self._undone(task.entry, task.node, status)
