"""The in-memory cluster: a virtual clock and the in-memory side of the effects port.

Used by the simulator, the test harness and the openb experiments, with the very same
core and driver loop as a real cluster (`shoal.drivers.loop`). `MemoryEffects` does what
an API server and its kubelets would do with each effect, and queues the resulting
objects for the driver to feed back into the core (`drain`), the way a watch would:

* a bind succeeds unless the pod is already bound, the node is gone, or a test asked
  for it to fail (a binder extender's verb is called, over HTTP); its outcome comes back
  as a `BindOutcome` event, then the pod with `spec.nodeName` and the annotations
  written with the binding (e.g. `shoal.dev/gpu-index`), as a watch would bring it;
* an eviction deletes the pod (the simulator's kubelet honours it at once); the pod comes
  back deleted, and `on_evicted` callbacks (the simulator re-creating pods as their
  controllers would) run after that;
* volume bindings (`BindVolumes`) are done at once, as the PersistentVolume controller
  would: a claim and its chosen volume come back bound to each other, a claim to be
  provisioned comes back with `volume.kubernetes.io/selected-node` (nothing provisions
  it in memory: later pods sharing it follow it to that node);
* claim allocations (`AllocateClaims`) are written at once: each claim comes back with
  its `status.allocation` and the pod in `status.reservedFor`, before the bound pod;
* nominations, conditions, events and statuses are recorded for inspection.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec

from shoal.api.dra import ResourceClaim, with_allocation
from shoal.api.manifests import decode
from shoal.api.podinfo import PodInfo
from shoal.cache.dra import DeviceCatalog
from shoal.cache.volumes import VolumeCatalog
from shoal.framework.effects import (
    AllocateClaims,
    Bind,
    BindingExpected,
    BindingStatus,
    BindOutcome,
    BindVolumes,
    DeallocateClaim,
    Effect,
    Evict,
    GroupStatus,
    Nominate,
    QueueStatus,
)
from shoal.framework.handle import Clock
from shoal.framework.types import ActionType, ClusterEvent, EventResource

if TYPE_CHECKING:
    from shoal.scheduler.scheduler import Scheduler

__all__ = ["Eviction", "ManualClock", "MemoryEffects", "run_sync"]

T = TypeVar("T")


class ManualClock:
    """A clock that moves only when told to (virtual time)."""

    def __init__(self, start: float = 0.0) -> None:
        self._now = start

    def now(self) -> float:
        return self._now

    def advance_to(self, t: float) -> None:
        if t < self._now:
            raise ValueError(f"time cannot go back from {self._now} to {t}")
        self._now = t


@dataclass(frozen=True)
class Eviction:
    uid: str
    pod: str  # namespace/name
    node: str
    reason: str
    at: float


@dataclass(frozen=True, slots=True)
class _BindEcho:
    pod: PodInfo
    node: str
    annotations: dict[str, str]


@dataclass(frozen=True, slots=True)
class _VolumeEcho:
    bind: BindVolumes


@dataclass(frozen=True, slots=True)
class _ClaimEcho:
    allocate: AllocateClaims


@dataclass(frozen=True, slots=True)
class _DeleteEcho:
    pod: PodInfo
    reason: str


class MemoryEffects:
    """See the module docstring. `listeners` see every emitted effect as it is emitted
    (reports, recorders); `echo_binds=False` keeps bound pods as the core assumed them
    (no watch update), which some plugin tests want."""

    def __init__(self, clock: Clock | None = None, *, echo_binds: bool = True) -> None:
        self.clock: Clock = clock or ManualClock()
        self.echo_binds = echo_binds
        self.bound: dict[str, str] = {}  # uid -> node
        self.annotations: dict[str, dict[str, str]] = {}  # uid -> written with the bind
        self.fail: set[str] = set()  # uids whose bind should fail (tests)
        # Evicted pods stay (terminating) until the test deletes them, as a kubelet
        # would after the grace period; False: gone at once.
        self.hold_evictions = False
        self.node_exists: Callable[[str], bool] | None = None
        self.evictions: list[Eviction] = []
        self.nominated: dict[str, str] = {}  # uid -> node
        self.group_status: dict[str, GroupStatus] = {}
        self.queue_status: dict[str, QueueStatus] = {}
        self.binding_status: dict[str, BindingStatus] = {}
        self.listeners: list[Callable[[Effect], None]] = []
        self.on_evicted: list[Callable[[PodInfo, str], None]] = []
        self.volume_bindings: list[BindVolumes] = []
        self.binding_expected: list[BindingExpected] = []  # nominatedNodeName while binding
        self.claim_allocations: list[AllocateClaims] = []
        self.claim_deallocations: list[DeallocateClaim] = []
        self._echoes: deque[
            _BindEcho | _DeleteEcho | _VolumeEcho | _ClaimEcho | DeallocateClaim | BindOutcome
        ] = deque()

    # ---- the port ------------------------------------------------------------------

    def _bind(self, bind: Bind) -> None:
        """Carry out a `Bind` as an API server (or the extender) would, and queue its
        outcome, then the bound pod (the watch), for `drain`."""
        pod, node = bind.pod, bind.node
        error = ""
        if pod.uid in self.fail:
            error = f"pod {pod.key}: injected bind failure"
        elif pod.uid in self.bound:
            error = f"pod {pod.key} is already bound to {self.bound[pod.uid]}"
        elif self.node_exists is not None and not self.node_exists(node):
            error = f"node {node} no longer exists"
        elif bind.binder is not None:
            # An HTTP extender's bind verb: the extender writes the Binding (in a
            # cluster the watch then brings the pod back with its nodeName).
            try:
                run_sync(bind.binder.bind(pod, node))
            except Exception as err:
                error = str(err)
        else:
            self.bound[pod.uid] = node
            if bind.annotations:
                self.annotations[pod.uid] = dict(bind.annotations)
        self._echoes.append(BindOutcome(pod.uid, node, error))
        if not error and self.echo_binds:
            self._echoes.append(_BindEcho(pod, node, dict(bind.annotations)))

    def emit(self, effect: Effect) -> None:
        if isinstance(effect, Evict):
            pod = effect.pod
            self.evictions.append(
                Eviction(pod.uid, pod.key, effect.node, effect.reason, self.clock.now())
            )
            if not self.hold_evictions:
                self._echoes.append(_DeleteEcho(pod, effect.reason))
        elif isinstance(effect, Bind):
            self._bind(effect)
        elif isinstance(effect, Nominate):
            if effect.node:
                self.nominated[effect.pod.uid] = effect.node
            else:
                self.nominated.pop(effect.pod.uid, None)
        elif isinstance(effect, GroupStatus):
            self.group_status[f"{effect.namespace}/{effect.name}"] = effect
        elif isinstance(effect, QueueStatus):
            self.queue_status[effect.name] = effect
        elif isinstance(effect, BindingStatus):
            self.binding_status[effect.name] = effect
        elif isinstance(effect, BindingExpected):
            self.binding_expected.append(effect)
        elif isinstance(effect, BindVolumes):
            self.volume_bindings.append(effect)
            self._echoes.append(_VolumeEcho(effect))
        elif isinstance(effect, AllocateClaims):
            self.claim_allocations.append(effect)
            self._echoes.append(_ClaimEcho(effect))
        elif isinstance(effect, DeallocateClaim):
            self.claim_deallocations.append(effect)
            self._echoes.append(effect)
        for listener in self.listeners:
            listener(effect)

    # ---- the watch -----------------------------------------------------------------

    @property
    def pending(self) -> bool:
        return bool(self._echoes)

    def drain(self, scheduler: Scheduler) -> bool:
        """Feed the objects the effects produced back into the core. True if any."""
        applied = False
        while self._echoes:
            echo = self._echoes.popleft()
            applied = True
            if isinstance(echo, _BindEcho):
                current = scheduler.known_pod(echo.pod.uid)
                if current is None or (current.node_name and current.node_name != echo.node):
                    continue  # deleted (or moved) meanwhile
                obj = current.pod
                meta = obj.metadata
                if echo.annotations:
                    meta = msgspec.structs.replace(
                        meta, annotations={**meta.annotations, **echo.annotations}
                    )
                spec = msgspec.structs.replace(obj.spec, node_name=echo.node)
                # The kubelet starts it at once (there is none to be slow): Running, so
                # running and bound mean here what they mean on a cluster.
                status = msgspec.structs.replace(obj.status, phase="Running")
                scheduler.update_pod(
                    msgspec.structs.replace(obj, metadata=meta, spec=spec, status=status)
                )
            elif isinstance(echo, BindOutcome):
                scheduler.bind_outcome(echo)
            elif isinstance(echo, _VolumeEcho):
                _apply_volumes(scheduler, echo.bind)
            elif isinstance(echo, _ClaimEcho):
                _apply_claims(scheduler, echo.allocate)
            elif isinstance(echo, DeallocateClaim):
                _deallocate(scheduler, echo)
            else:
                pod = echo.pod
                self.bound.pop(pod.uid, None)
                self.nominated.pop(pod.uid, None)
                scheduler.delete_pod(pod.uid)
                for callback in self.on_evicted:
                    callback(pod, echo.reason)
        return applied


def _apply_volumes(scheduler: Scheduler, bind: BindVolumes) -> None:
    catalog = VolumeCatalog.of(scheduler.handle)
    for claim, volume in bind.static:
        catalog.bound_volume(claim, volume)
    for claim in bind.provision:
        catalog.selected(claim, bind.node)
    scheduler.notify(ClusterEvent(EventResource.PERSISTENT_VOLUME_CLAIM, ActionType.UPDATE))
    if bind.static:
        scheduler.notify(ClusterEvent(EventResource.PERSISTENT_VOLUME, ActionType.UPDATE))


def _deallocate(scheduler: Scheduler, effect: DeallocateClaim) -> None:
    from shoal.scheduler.dra import upsert_dra

    claim = DeviceCatalog.of(scheduler.handle).claims.get(effect.claim)
    if claim is None or (effect.seen and claim.metadata.resource_version != effect.seen):
        return
    status = msgspec.structs.replace(claim.status, allocation=None, reserved_for=[])
    upsert_dra(scheduler, msgspec.structs.replace(claim, status=status))


def _apply_claims(scheduler: Scheduler, allocate: AllocateClaims) -> None:
    from shoal.scheduler.dra import upsert_dra

    catalog = DeviceCatalog.of(scheduler.handle)
    pod = allocate.pod
    for entry in allocate.claims:
        claim = catalog.claims.get(entry.claim)
        if claim is None and entry.create is not None:
            # The claim for the pod's extended resources, created as the API would.
            claim = decode(entry.create, ResourceClaim)
        if claim is not None:
            upsert_dra(
                scheduler,
                with_allocation(
                    claim,
                    entry.results,
                    entry.node,
                    pod.name,
                    pod.uid,
                    entry.shares,
                    entry.selector,
                    entry.admin,
                    entry.config,
                    entry.binding,
                ),
            )


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine that never truly suspends (in-memory I/O) to completion.

    The simulator steps binding cycles this way: deterministic, with no event loop.
    """
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    coro.close()
    raise RuntimeError("a binding cycle suspended on real I/O inside the simulator")
