"""SchedulerHarness: a whole scheduler on virtual time, for tests and plugin authors.

It wires `new_scheduler` with a `ManualClock` and the in-memory effects port
(`MemoryEffects`), feeds it nodes and pods, and runs it with the same driver loop as the
simulator and the Kubernetes backend (`shoal.drivers.loop.Driver`): scheduling cycles
while there is work, binding cycles stepped to completion, and the objects the effects
produce fed back as a watch would deliver them (a bound pod with `spec.nodeName` and its
annotations; an evicted pod deleted), so the cache confirms placements exactly as in a
cluster.

    h = SchedulerHarness()
    h.add_nodes(make_node("n1").capacity(cpu="2", memory="4Gi"))
    h.add_pods(make_pod("a").req(cpu="1"), make_pod("b").req(cpu="3"))
    placements, messages = h.run()
    assert placements == {"default/a": "n1", "default/b": None}
    assert messages["default/b"] == "0/1 nodes are available: 1 Insufficient cpu."
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from shoal.api.dra import claims_from_templates
from shoal.api.objects import Node, Pod
from shoal.api.podinfo import PodInfo, pod_key
from shoal.cache.dra import DeviceCatalog
from shoal.config.load import parse_config
from shoal.config.types import KubeSchedulerConfiguration
from shoal.drivers.extenders import http_extenders
from shoal.drivers.loop import Driver
from shoal.drivers.memory import ManualClock, MemoryEffects
from shoal.framework.effects import BindFailed, Bound, Effect, Evict, Unschedulable
from shoal.framework.extender import Extender
from shoal.framework.registry import PluginSpec
from shoal.scheduler import new_scheduler
from shoal.scheduler.dra import DraObject, delete_dra, upsert_dra
from shoal.scheduler.scheduler import CycleResult, Scheduler
from shoal.scheduler.volumes import StorageObject, delete_storage, upsert_storage
from shoal.testing.builders import NodeBuilder, PodBuilder
from shoal.testing.volumes import (
    CapacityBuilder,
    ClaimBuilder,
    CSIDriverBuilder,
    CSINodeBuilder,
    StorageClassBuilder,
    VolumeBuilder,
)

StorageBuilder = (
    ClaimBuilder
    | VolumeBuilder
    | StorageClassBuilder
    | CSINodeBuilder
    | CSIDriverBuilder
    | CapacityBuilder
)

__all__ = ["HarnessEvent", "RunResult", "SchedulerHarness"]


class RunResult(NamedTuple):
    """Outcome of `SchedulerHarness.run`: unpack as `placements, messages = h.run()`."""

    placements: dict[str, str | None]
    """Every pod added through the harness (and not deleted or evicted), by
    `namespace/name`: the node it is bound to, or None while it is pending."""
    messages: dict[str, str]
    """Pending pods only: why the last attempt failed (kube's FitError text for filter
    failures), or why the pod is gated."""


@dataclass(frozen=True)
class HarnessEvent:
    """One thing that happened, in order: "bound", "unschedulable", "bind_failed" or
    "evicted" (preempted or reclaimed: the pod is deleted, as the API server would)."""

    kind: str
    pod: str
    node: str
    message: str
    time: float


@dataclass
class _Recorder:
    """Listens to the effects port: remembers outcomes per pod key."""

    clock: ManualClock
    bound: dict[str, str] = field(default_factory=dict)
    messages: dict[str, str] = field(default_factory=dict)
    events: list[HarnessEvent] = field(default_factory=list)
    evicted: dict[str, str] = field(default_factory=dict)

    def __call__(self, effect: Effect) -> None:
        now = self.clock.now()
        if isinstance(effect, Bound):
            key = effect.pod.key
            self.bound[key] = effect.node
            self.messages.pop(key, None)
            self.events.append(HarnessEvent("bound", key, effect.node, effect.note, now))
        elif isinstance(effect, Unschedulable):
            key = effect.pod.key
            self.messages[key] = effect.message
            self.events.append(HarnessEvent("unschedulable", key, "", effect.message, now))
        elif isinstance(effect, BindFailed):
            key = effect.pod.key
            self.messages[key] = effect.status.message
            self.events.append(
                HarnessEvent("bind_failed", key, effect.node, effect.status.message, now)
            )
        elif isinstance(effect, Evict):
            key = effect.pod.key
            self.evicted[key] = effect.reason
            self.bound.pop(key, None)
            self.messages.pop(key, None)
            self.events.append(HarnessEvent("evicted", key, effect.node, effect.reason, now))


class SchedulerHarness:
    """A scheduler with virtual time and in-memory effects, run to quiescence by `run`.

    `config` is a `KubeSchedulerConfiguration`, a raw mapping (validated with
    `parse_config`, so mistakes raise `ConfigError`), or None for the default profile.
    `echo_binds=False` skips the post-bind pod update (the cache then keeps pods as
    bound-but-unconfirmed-by-watch, which is enough for most plugin tests).
    `extenders`: the configuration's `extenders:` with their transports (default: over
    HTTP, as configured; pass in-process ones, see `shoal.framework.extender`, to test
    without a server).
    """

    def __init__(
        self,
        config: KubeSchedulerConfiguration | Mapping[str, Any] | None = None,
        *,
        seed: int = 0,
        registry: Mapping[str, PluginSpec] | None = None,
        start: float = 0.0,
        echo_binds: bool = True,
        extenders: Sequence[Extender] | None = None,
    ) -> None:
        if config is None:
            config = KubeSchedulerConfiguration()
        elif not isinstance(config, KubeSchedulerConfiguration):
            from shoal.scheduler import default_registry, with_profile_check

            registry = default_registry() if registry is None else with_profile_check(registry)
            config = parse_config(config, source="harness config", registry=registry)
        self.config = config
        self.clock = ManualClock(start)
        self.effects = MemoryEffects(self.clock, echo_binds=echo_binds)
        self._recorder = _Recorder(self.clock)
        self.effects.listeners.append(self._recorder)
        self.effects.on_evicted.append(self._on_evicted)
        self.scheduler: Scheduler = new_scheduler(
            config,
            clock=self.clock,
            effects=self.effects,
            seed=seed,
            registry=registry,
            extenders=http_extenders(config) if extenders is None else extenders,
        )
        self.echo_binds = echo_binds
        self.cycles: list[CycleResult] = []
        self.driver = Driver(self.scheduler, inbox=self.effects, on_cycle=self.cycles.append)
        self._uids: dict[str, str] = {}  # pod key -> uid, in the order pods were added

    @property
    def evicted(self) -> dict[str, str]:
        """Pods evicted by preemption or reclaim (deleted, as in Kubernetes): key -> reason."""
        return self._recorder.evicted

    def _on_evicted(self, pod: PodInfo, reason: str) -> None:
        self._uids.pop(pod.key, None)

    # ---- feeding objects -----------------------------------------------------------

    def add_nodes(self, *nodes: Node | NodeBuilder) -> list[Node]:
        out = []
        for node in nodes:
            obj = node.obj() if isinstance(node, NodeBuilder) else node
            self.scheduler.add_node(obj)
            out.append(obj)
        return out

    def update_node(self, node: Node | NodeBuilder) -> Node:
        obj = node.obj() if isinstance(node, NodeBuilder) else node
        self.scheduler.update_node(obj)
        return obj

    def delete_node(self, name: str) -> None:
        self.scheduler.delete_node(name)

    def add_storage(self, *objects: StorageObject | StorageBuilder) -> None:
        """Add or update PersistentVolumeClaims, PersistentVolumes, StorageClasses,
        CSINodes, CSIDrivers and CSIStorageCapacities (objects or builders from
        `shoal.testing.volumes`)."""
        for obj in objects:
            upsert_storage(self.scheduler, obj if isinstance(obj, StorageObject) else obj.obj())

    def delete_storage(self, kind: str, name: str, namespace: str = "default") -> None:
        """Delete a storage object by kind ("PersistentVolumeClaim", ...) and name."""
        delete_storage(self.scheduler, kind, namespace, name)

    def add_dra(self, *objects: DraObject) -> None:
        """Add or update DeviceClasses, ResourceSlices, ResourceClaims and
        ResourceClaimTemplates (see `shoal.testing.dra` for builders)."""
        for obj in objects:
            upsert_dra(self.scheduler, obj)

    def delete_dra(self, kind: str, name: str, namespace: str = "default") -> None:
        """Delete a DRA object by kind ("ResourceClaim", "ResourceSlice", ...) and name."""
        delete_dra(self.scheduler, kind, namespace, name)

    def add_pods(self, *pods: Pod | PodBuilder) -> list[PodInfo]:
        """Add pods (pending ones are queued; ones with spec.nodeName count as bound).
        For `resourceClaimTemplateName` entries the harness plays the resource-claim
        controller: it creates the pod's claim and names it in the pod's status."""
        out = []
        for pod in pods:
            obj = pod.obj() if isinstance(pod, PodBuilder) else pod
            if obj.spec.resource_claims:
                templates = DeviceCatalog.of(self.scheduler.handle).templates
                obj, created = claims_from_templates(obj, templates)
                for claim in created:
                    upsert_dra(self.scheduler, claim)
            info = self.scheduler.add_pod(obj)
            self._uids[info.key] = info.uid
            if info.node_name:
                self._recorder.bound[info.key] = info.node_name
            out.append(info)
        return out

    def update_pod(self, pod: Pod | PodBuilder) -> PodInfo:
        """A pod changed (e.g. its scheduling gates were removed)."""
        obj = pod.obj() if isinstance(pod, PodBuilder) else pod
        info = self.scheduler.update_pod(obj)
        self._uids[info.key] = info.uid
        return info

    def delete_pod(self, key: str) -> None:
        """Delete a pod by `namespace/name` (a bare name means namespace "default")."""
        key = key if "/" in key else pod_key("default", key)
        uid = self._uids.pop(key, key)
        self.scheduler.delete_pod(uid)
        self._recorder.bound.pop(key, None)
        self._recorder.messages.pop(key, None)

    # ---- driving -------------------------------------------------------------------

    def run(self, max_cycles: int = 100_000) -> RunResult:
        """Schedule until nothing is left to do at the current time; bind as we go."""
        self.driver.run(max_cycles=max_cycles)
        return self.result()

    def advance(self, seconds: float, max_cycles: int = 100_000) -> RunResult:
        """Let `seconds` of virtual time pass, waking at every backoff expiry and Permit
        deadline on the way, and run the scheduler at each."""
        target = self.clock.now() + seconds
        self.run(max_cycles)
        while True:
            wake = self.driver.next_wakeup()
            if wake is None or wake > target:
                break
            self.clock.advance_to(max(wake, self.clock.now()))
            self.run(max_cycles)
            if self.driver.next_wakeup() == wake:
                break  # nothing moved at that instant; avoid spinning
        self.clock.advance_to(target)
        return self.run(max_cycles)

    # ---- inspection ----------------------------------------------------------------

    def result(self) -> RunResult:
        rec = self._recorder
        placements = {key: rec.bound.get(key) for key in self._uids}
        messages = {}
        for key, uid in self._uids.items():
            if key in rec.bound:
                continue
            text = self.scheduler.explain(uid)
            entry = self.scheduler.scheduling_queue.get(uid)
            if entry is not None and entry.gated_by:
                messages[key] = text
            elif key in rec.messages:
                messages[key] = rec.messages[key]
            elif text:
                messages[key] = text
        return RunResult(placements, messages)

    def node_of(self, key: str) -> str | None:
        key = key if "/" in key else pod_key("default", key)
        return self._recorder.bound.get(key)

    def message(self, key: str) -> str:
        key = key if "/" in key else pod_key("default", key)
        return self.result().messages.get(key, "")

    @property
    def events(self) -> list[HarnessEvent]:
        return self._recorder.events

    def pods_on(self, node: str) -> list[str]:
        """Keys of the pods the cache counts on `node` (assumed or bound)."""
        return sorted(p.key for p in self.scheduler.cluster.pods_on(node))
