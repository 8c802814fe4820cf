"""The effects port for a cluster: what the core decided, as API calls.

* `Bind`: the `pods/binding` subresource, carrying the pod's annotations (e.g. GPU
  device indices) for the API server to copy onto the pod (`KubeBinder`), or a binder
  extender's bind verb; run as a task, its outcome handed to `on_bind_outcome` (the
  backend posts it into the core's inbox);
* `Evict`: the Eviction API, so PodDisruptionBudgets are enforced by the API server
  (`KubeEvictor`); an eviction that does not happen is reported back to the core;
* `Unschedulable`: the PodScheduled=False condition with kube's explanation and the
  nominated node, plus a FailedScheduling event (`PodStatusWriter`, `EventRecorder`);
  for a gated pod (not tried yet: gang members, PodGroup, dependency, scheduling gates)
  reason SchedulingGated and a Normal event;
* `Bound`, `BindFailed`: Scheduled / FailedScheduling events;
* `GroupStatus`: the status subresource of the group's PodGroup object(s), in
  scheduler-plugins' or Volcano's terms (`PodGroupStatusWriter`); groups named by pod
  labels only have no object and nothing is written;
* `QueueStatus`: the status subresource of the Queue object (allocated, guaranteed,
  fair share, borrowed, pending and running pods and jobs; `QueueStatusWriter`), or of
  the ElasticQuota behind the queue (`status.used`).
* `BindingStatus`: the status subresource of the QueueBinding object (pods and running
  jobs in its namespaces; `BindingStatusWriter`).
* `BindVolumes`: claims' selected node and volumes' claimRef (`VolumeWriter`), started
  at once and awaited by the pod's `bind`, which fails if they did.
* `AllocateClaims`: ResourceClaims' allocation and reservedFor (`ClaimWriter`), started
  at once and awaited by the pod's `bind` likewise.
* `DeallocateClaim`: a claim's allocation and reservedFor cleared (`ClaimWriter`), on
  its own: nothing waits for it, the claim's watch update requeues the pod.

Everything is queued: `emit` never blocks and never raises.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping

from shoal.api.podinfo import PodInfo
from shoal.drivers.kube.binder import KubeBinder, KubeEvictor
from shoal.drivers.kube.dra import ClaimWriter
from shoal.drivers.kube.status import (
    BindingStatusWriter,
    EventRecorder,
    PodGroupStatusWriter,
    PodStatusWriter,
    QueueStatusWriter,
    pod_ref,
)
from shoal.drivers.kube.volumes import VolumeWriter
from shoal.framework.effects import (
    AllocateClaims,
    Bind,
    BindFailed,
    BindingExpected,
    BindingStatus,
    BindOutcome,
    BindVolumes,
    Bound,
    DeallocateClaim,
    Effect,
    Evict,
    GroupStatus,
    Nominate,
    QueueStatus,
    Unschedulable,
)
from shoal.framework.status import Code, Status
from shoal.web.metrics import SchedulerMetrics

__all__ = ["KubeEffects"]

log = logging.getLogger("shoal.kube.effects")


class KubeEffects:
    """The effects port against a cluster: binds through `pods/binding` (annotations
    first), evictions through the Eviction API, conditions, nominations, events,
    PodGroup status and Queue status.

    `emit` is called from inside scheduling and binding cycles, so it must never raise:
    a failure here is logged and swallowed (the pod's state is the core's business).
    """

    def __init__(
        self,
        binder: KubeBinder,
        evictor: KubeEvictor,
        status: PodStatusWriter,
        events: EventRecorder,
        metrics: SchedulerMetrics,
        on_eviction_failed: Callable[[PodInfo], None] | None = None,
        groups: PodGroupStatusWriter | None = None,
        queues: QueueStatusWriter | None = None,
        bindings: BindingStatusWriter | None = None,
        volumes: VolumeWriter | None = None,
        claims: ClaimWriter | None = None,
    ) -> None:
        self.binder = binder
        self.volumes = volumes
        self.claims = claims
        self.groups = groups
        self.queues = queues
        self.bindings = bindings
        self.evictor = evictor
        self.status = status
        self.events = events
        self.metrics = metrics
        self.on_eviction_failed = on_eviction_failed
        # Where a `Bind`'s outcome goes (called on this loop); wired by the backend.
        self.on_bind_outcome: Callable[[BindOutcome], None] = lambda outcome: None
        self.binds: set[asyncio.Task[None]] = set()  # `Bind` effects in flight

    async def bind(self, pod: PodInfo, node: str, annotations: Mapping[str, str]) -> None:
        """Bind through the API now (VolumeBinding's writes first); BindError if it did
        not happen. (`shoal extender` awaits this; the core emits `Bind`.)"""
        await self._prebind_writes(pod)
        await self.binder.bind(pod, node, annotations)

    async def _prebind_writes(self, pod: PodInfo) -> None:
        """VolumeBinding's and DynamicResources' writes land before the Binding."""
        if self.volumes is not None:
            await self.volumes.wait(pod.uid)
        if self.claims is not None:
            await self.claims.wait(pod.uid)

    def _start_bind(self, bind: Bind) -> None:
        task = asyncio.get_running_loop().create_task(self._carry_bind(bind))
        self.binds.add(task)
        task.add_done_callback(self.binds.discard)

    async def _carry_bind(self, bind: Bind) -> None:
        pod, node = bind.pod, bind.node
        error = ""
        try:
            if bind.binder is not None:
                await self._prebind_writes(pod)
                await bind.binder.bind(pod, node)
            else:
                await self.bind(pod, node, bind.annotations)
        except Exception as err:  # the outcome says why; never lost
            error = str(err) or type(err).__name__
        # Cancelled (shutdown): no outcome; the pod is assumed in a core that is going.
        self.on_bind_outcome(BindOutcome(pod.uid, node, error))

    def emit(self, effect: Effect) -> None:
        try:
            self._emit(effect)
        except Exception:
            log.exception("carrying out %s failed", type(effect).__name__)

    def _emit(self, effect: Effect) -> None:
        if isinstance(effect, Bind):
            self._start_bind(effect)
        elif isinstance(effect, Bound):
            self._bound(effect.pod, effect.node, effect.note)
        elif isinstance(effect, Unschedulable) and effect.gated:
            self._gated(effect.pod, effect.message)
        elif isinstance(effect, Unschedulable):
            self._unschedulable(effect.pod, effect.status, effect.message, effect.nominated)
        elif isinstance(effect, BindFailed):
            if self.volumes is not None:
                self.volumes.forget(effect.pod.uid)
            if self.claims is not None:
                self.claims.forget(effect.pod.uid)
            self._bind_failed(effect.pod, effect.node, effect.status)
        elif isinstance(effect, BindVolumes):
            if self.volumes is None:
                raise RuntimeError("no VolumeWriter: volume bindings cannot be written")
            self.volumes.start(effect)
        elif isinstance(effect, AllocateClaims):
            if self.claims is None:
                raise RuntimeError("no ClaimWriter: claim allocations cannot be written")
            self.claims.start(effect)
        elif isinstance(effect, DeallocateClaim):
            if self.claims is not None:
                self.claims.deallocate(effect)
        elif isinstance(effect, Evict):
            self.evictor.evict(effect.pod, effect.reason, self.on_eviction_failed)
        elif isinstance(effect, GroupStatus):
            if self.groups is not None:
                self.groups.update(effect)
        elif isinstance(effect, QueueStatus):
            if self.queues is not None:
                self.queues.update(effect)
        elif isinstance(effect, BindingStatus):
            if self.bindings is not None:
                self.bindings.update(effect)
        elif isinstance(effect, Nominate):
            pass  # written with the preemptor's PodScheduled=False condition (Unschedulable)
        elif isinstance(effect, BindingExpected):
            self.status.set_nominated(effect.pod, effect.node)

    def _bound(self, pod: PodInfo, node: str, note: str = "") -> None:
        self.metrics.pod_scheduling_attempts.observe(max(1, pod.attempts))
        message = f"Successfully assigned {pod.key} to {node}"
        if note:
            # Bound, but its device plugin will miss what it reads from the pod: said
            # where the user looks (the Scheduled event) and in the log.
            message = f"{message}; {note}"
            log.warning("pod %s bound to %s: %s", pod.key, node, note)
        self.events.record(
            pod_ref(pod), "Normal", "Scheduled", "Binding", message, pod.scheduler_name
        )

    def _unschedulable(
        self, pod: PodInfo, status: Status, message: str, nominated: str = ""
    ) -> None:
        reason = "SchedulerError" if status.code == Code.ERROR else "Unschedulable"
        message = message or status.message or "the pod could not be scheduled"
        # nominated "": the pod's nominatedNodeName is left as it is.
        self.status.set_unschedulable(pod, reason, message, nominated)
        new = self.events.record(
            pod_ref(pod), "Warning", "FailedScheduling", "Scheduling", message, pod.scheduler_name
        )
        if new:  # logged once per distinct explanation, like the event
            log.info(
                "pod %s is unschedulable: %s",
                pod.key,
                message,
                extra={"pod": pod.key, "reason": reason},
            )

    def _gated(self, pod: PodInfo, message: str) -> None:
        """Not tried yet (waiting for gang members, a PodGroup, a dependency, or
        scheduling gates): PodScheduled=False with kube's SchedulingGated reason and a
        Normal event, so `kubectl describe` says what the pod waits for. Only the
        leader writes (gating happens as soon as pods are read, also on a standby; the
        new leader announces every gated pod again)."""
        if not self.events.enabled:
            return
        self.status.set_unschedulable(pod, "SchedulingGated", message, "")
        self.events.record(
            pod_ref(pod), "Normal", "SchedulingGated", "Scheduling", message, pod.scheduler_name
        )

    def _bind_failed(self, pod: PodInfo, node: str, status: Status) -> None:
        # kube clears nominatedNodeName when a binding cycle fails (set by
        # `BindingExpected`, or the nomination preemption gave).
        self.status.set_nominated(pod, "")
        message = f"Binding rejected: {status.message}" if status.message else "Binding rejected"
        # A warning, as the FailedScheduling event is: the pod goes back to the queue.
        log.warning(
            "binding pod %s to %s failed: %s",
            pod.key,
            node,
            status.message,
            extra={"pod": pod.key, "node": node, "error": status.message},
        )
        self.events.record(
            pod_ref(pod), "Warning", "FailedScheduling", "Binding", message, pod.scheduler_name
        )
