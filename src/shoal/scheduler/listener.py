"""What the scheduler tells its backend about outcomes (events, conditions, results)."""

from __future__ import annotations

from typing import Protocol

from shoal.api.podinfo import PodInfo
from shoal.framework.status import Status

__all__ = ["NullListener", "SchedulerListener"]


class SchedulerListener(Protocol):
    def pod_bound(self, pod: PodInfo, node: str) -> None:
        """The binding cycle succeeded."""

    def pod_unschedulable(self, pod: PodInfo, status: Status, message: str) -> None:
        """A scheduling attempt failed; `message` is the kube-style explanation."""

    def pod_bind_failed(self, pod: PodInfo, node: str, status: Status) -> None:
        """Permit, PreBind or Bind failed after the pod was assumed."""


class NullListener:
    def pod_bound(self, pod: PodInfo, node: str) -> None:
        pass

    def pod_unschedulable(self, pod: PodInfo, status: Status, message: str) -> None:
        pass

    def pod_bind_failed(self, pod: PodInfo, node: str, status: Status) -> None:
        pass
