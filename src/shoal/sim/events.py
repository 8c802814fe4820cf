"""Simulation events and the event queue (a heap ordered by time, priority, sequence).

Events due at the same virtual time are handled in a fixed order: first by kind (see
`Priority`), then in the order they were scheduled. Together with seeded random draws
this makes every run reproducible.
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass
from enum import IntEnum

from shoal.api.objects import Node
from shoal.sim.workload import PodSource

__all__ = [
    "BindingsDue",
    "Event",
    "EventQueue",
    "NodeAdd",
    "NodeRemove",
    "PodArrival",
    "PodFinish",
    "Priority",
]


class Priority(IntEnum):
    """Order of events due at the same instant (lower first)."""

    BINDINGS_DUE = 0  # a scheduling cycle that started earlier completes
    NODE_ADD = 1  # capacity appears before pods look for it
    POD_FINISH = 2  # pods free their resources before others arrive
    NODE_REMOVE = 3
    POD_ARRIVAL = 4


@dataclass(frozen=True, slots=True)
class PodArrival:
    source: PodSource


@dataclass(frozen=True, slots=True)
class PodFinish:
    uid: str


@dataclass(frozen=True, slots=True)
class NodeAdd:
    node: Node


@dataclass(frozen=True, slots=True)
class NodeRemove:
    name: str


@dataclass(frozen=True, slots=True)
class BindingsDue:
    """The scheduling cycle charged `--cycle-seconds` has ended: the binding cycles it
    made ready start now."""


Event = PodArrival | PodFinish | NodeAdd | NodeRemove | BindingsDue

_PRIORITY: dict[type, Priority] = {
    BindingsDue: Priority.BINDINGS_DUE,
    NodeAdd: Priority.NODE_ADD,
    PodFinish: Priority.POD_FINISH,
    NodeRemove: Priority.NODE_REMOVE,
    PodArrival: Priority.POD_ARRIVAL,
}


class EventQueue:
    """A heap of (time, priority, sequence, event): equal times have a fixed order."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, int, Event]] = []
        self._seq = itertools.count()
        self.scheduled = 0  # events ever pushed (for progress reporting)
        self._cancelled: set[str] = set()  # uids whose PodFinish no longer applies

    def push(self, time: float, event: Event) -> None:
        heapq.heappush(self._heap, (time, _PRIORITY[type(event)], next(self._seq), event))
        self.scheduled += 1

    def peek_time(self) -> float | None:
        self._drop_cancelled()
        return self._heap[0][0] if self._heap else None

    def cancel_finish(self, uid: str) -> None:
        """Forget a pod's pending PodFinish (the pod left early), so it cannot extend the run."""
        self._cancelled.add(uid)

    def _drop_cancelled(self) -> None:
        heap = self._heap
        while heap and isinstance(ev := heap[0][3], PodFinish) and ev.uid in self._cancelled:
            heapq.heappop(heap)
            self._cancelled.discard(ev.uid)

    def pop(self) -> tuple[float, Event]:
        self._drop_cancelled()
        time, _, _, event = heapq.heappop(self._heap)
        return time, event

    def pending_arrivals(self) -> int:
        return sum(1 for item in self._heap if isinstance(item[3], PodArrival))

    def __len__(self) -> int:
        return len(self._heap)
