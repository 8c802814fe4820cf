"""PrioritySort (QueueSort): higher priority first, then earlier arrival."""

from __future__ import annotations

from typing import Any

from shoal.api.podinfo import PodInfo
from shoal.framework.handle import Handle

__all__ = ["NAME", "PrioritySort"]

NAME = "PrioritySort"


class PrioritySort:
    name = NAME

    def less(self, a: PodInfo, b: PodInfo) -> bool:
        return self.sort_key(a) < self.sort_key(b)

    def sort_key(self, pod: PodInfo) -> tuple[object, ...]:
        return (-pod.priority, pod.timestamp)

    @classmethod
    def new(cls, args: Any, handle: Handle) -> PrioritySort:
        return cls()
