"""QoSSort (QueueSort): priority, then QoS class (Guaranteed > Burstable > BestEffort),
then arrival. Gang members stay together (group creation time and name after the QoS
class), like PrioritySort."""

from __future__ import annotations

from typing import Any

from shoal.api.podinfo import PodInfo
from shoal.framework.handle import Handle
from shoal.gang.manager import GangManager
from shoal.tenancy.manager import qos_rank

__all__ = ["NAME", "QoSSort"]

NAME = "QoSSort"


class QoSSort:
    name = NAME

    def __init__(self, gangs: GangManager) -> None:
        self.gangs = gangs

    def less(self, a: PodInfo, b: PodInfo) -> bool:
        return self.sort_key(a) < self.sort_key(b)

    def sort_key(self, pod: PodInfo) -> tuple[object, ...]:
        base = self.gangs.sort_key(pod)
        return (base[0], qos_rank(pod), *base[1:])

    @classmethod
    def new(cls, args: Any, handle: Handle) -> QoSSort:
        return cls(GangManager.of(handle))
