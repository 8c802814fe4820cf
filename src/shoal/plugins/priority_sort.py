"""PrioritySort (QueueSort): higher priority first, then earlier arrival.

Gang-aware: members of a pod group sort by the group's priority and creation time and
then by group name, so a group's pods sit together in the queue and are tried as one
unit (scheduler-plugins' coscheduling order). Pods outside groups keep kube-scheduler's
order exactly.
"""

from __future__ import annotations

from typing import Any

from shoal.api.podinfo import PodInfo
from shoal.framework.handle import Handle
from shoal.gang.manager import GangManager

__all__ = ["NAME", "PrioritySort"]

NAME = "PrioritySort"


class PrioritySort:
    name = NAME

    def __init__(self, gangs: GangManager | None = None) -> None:
        self.gangs = gangs

    def less(self, a: PodInfo, b: PodInfo) -> bool:
        return self.sort_key(a) < self.sort_key(b)

    def sort_key(self, pod: PodInfo) -> tuple[object, ...]:
        if self.gangs is None:
            return (-pod.priority, pod.timestamp, pod.key)
        return self.gangs.sort_key(pod)

    @classmethod
    def new(cls, args: Any, handle: Handle) -> PrioritySort:
        return cls(GangManager.of(handle))
