"""Handle: what the scheduler gives plugins besides the pod (kube's framework.Handle).

Time, randomness and the effects port are injected here, never read by plugins from the
environment, so the same plugin is deterministic in the simulator and real against a
cluster. Plugins read the cache through the snapshot, ask what-ifs through a
`Transaction` (`handle.transaction()`) and a profile's `PluginsRunner`
(`handle.runner(pod)`: re-run the filters with victims removed), and never perform I/O:
what must leave the core goes through `handle.effects`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from shoal.api.podinfo import PodInfo
from shoal.cache.cluster import ClusterState
from shoal.cache.snapshot import Snapshot
from shoal.cache.transaction import Transaction
from shoal.framework.effects import BindError, Effects
from shoal.framework.extender import Extender
from shoal.framework.runner import PluginRunner
from shoal.framework.status import Code, Status

__all__ = ["BindError", "Clock", "Handle", "WaitingPod", "WaitingPods"]


class Clock(Protocol):
    """Seconds on the scheduler's clock: virtual in the simulator, wall time in a cluster."""

    def now(self) -> float: ...


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
    effects: Effects
    waiting_pods: WaitingPods = field(default_factory=WaitingPods)
    # Shared per-scheduler services that plugins create lazily (e.g. the pod topology
    # index used by InterPodAffinity and PodTopologySpread), keyed by a stable name.
    services: dict[str, object] = field(default_factory=dict)
    # One plugin runner per profile (schedulerName), filled in when profiles are built.
    frameworks: dict[str, PluginRunner] = field(default_factory=dict)
    # HTTP extenders (KubeSchedulerConfiguration `extenders`), in kube's calling order
    # (see `shoal.framework.extender`); shared by every profile, as in kube-scheduler.
    extenders: list[Extender] = field(default_factory=list)

    def transaction(self) -> Transaction:
        """A new what-if over the cache (see `shoal.cache.transaction`)."""
        return Transaction(self.cluster)

    def runner(self, pod: PodInfo) -> PluginRunner:
        """The plugins of the pod's profile, to re-run PreFilter/Filter in a what-if."""
        return self.frameworks[pod.scheduler_name]
