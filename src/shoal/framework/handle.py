"""Handle: what the scheduler gives plugins besides the pod (kube's framework.Handle).

Time, randomness and I/O are injected here, never read by plugins from the environment,
so the same plugin is deterministic in the simulator and real against a cluster.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from shoal.api.podinfo import PodInfo
from shoal.cache.cluster import ClusterState
from shoal.cache.snapshot import Snapshot
from shoal.framework.status import Code, Status

__all__ = ["BindError", "Binder", "Clock", "Evictor", "Handle", "WaitingPod", "WaitingPods"]


class Clock(Protocol):
    """Seconds on the scheduler's clock: virtual in the simulator, wall time in a cluster."""

    def now(self) -> float: ...


class BindError(Exception):
    """Binding failed (conflict, pod deleted, API error); the pod is forgotten and retried."""


class Binder(Protocol):
    """Carries out a bind: in-memory in the simulator, a POST to pods/binding in a cluster."""

    async def bind(self, pod: PodInfo, node: str) -> None: ...


class Evictor(Protocol):
    """Removes a running pod (preemption, reclaim) with a reason the owner can read."""

    def evict(self, pod: PodInfo, reason: str) -> None: ...


@dataclass(eq=False)
class WaitingPod:
    """A pod that passed Reserve and waits at Permit for every listed plugin to allow it."""

    pod: PodInfo
    node: str
    deadline: float
    pending: set[str]
    rejection: Status | None = None

    def allow(self, plugin: str) -> None:
        self.pending.discard(plugin)

    def reject(self, plugin: str, message: str) -> None:
        if self.rejection is None:
            self.rejection = Status(Code.UNSCHEDULABLE, message, plugin=plugin)

    @property
    def allowed(self) -> bool:
        return not self.pending and self.rejection is None


@dataclass
class WaitingPods:
    by_uid: dict[str, WaitingPod] = field(default_factory=dict)

    def get(self, uid: str) -> WaitingPod | None:
        return self.by_uid.get(uid)

    def __iter__(self) -> Iterator[WaitingPod]:
        return iter(list(self.by_uid.values()))

    def __len__(self) -> int:
        return len(self.by_uid)


@dataclass(eq=False)
class Handle:
    cluster: ClusterState
    snapshot: Snapshot
    clock: Clock
    rng: np.random.Generator
    binder: Binder
    evictor: Evictor | None = None
    waiting_pods: WaitingPods = field(default_factory=WaitingPods)
    # Shared per-scheduler services that plugins create lazily (e.g. the pod topology
    # index used by InterPodAffinity and PodTopologySpread), keyed by a stable name.
    services: dict[str, object] = field(default_factory=dict)
