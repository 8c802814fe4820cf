"""A pod that was not placed goes back to the scheduling queue, saying why.

Three ways back, one place each: a cycle found no node (or its gang did not fit):
`unschedulable`, with the plugins that rejected it so the queue knows which events may
help; Reserve failed, or a binding cycle was undone (Permit, PreBind or Bind failed):
`bind_failed` and `undone`. A pod deleted meanwhile does not come back, but the failure
is still reported. The binding cycles and the scheduling cycles both use it, which is why
it is neither's.
"""

from __future__ import annotations

from collections.abc import Mapping

from shoal.api.podinfo import PodInfo
from shoal.framework.effects import BindFailed, Effects, Unschedulable
from shoal.framework.handle import Clock
from shoal.framework.status import Code, Status
from shoal.scheduling_queue.queue import QueuedPod, SchedulingQueue

__all__ = ["Requeuer", "retry_by"]


def retry_by(status: Status, now: float) -> float | None:
    """When a PENDING answer changes by time alone (`Status.retry_after`), else None."""
    if status.code != Code.PENDING or status.retry_after is None:
        return None
    return now + max(status.retry_after, 0.0)


class Requeuer:
    def __init__(
        self,
        scheduling_queue: SchedulingQueue,
        pods: Mapping[str, PodInfo],
        clock: Clock,
        effects: Effects,
    ) -> None:
        self.scheduling_queue = scheduling_queue
        self.pods = pods  # every pod the core knows (the intake's), by uid
        self.clock = clock
        self.effects = effects

    def unschedulable(
        self,
        entry: QueuedPod,
        now: float,
        rejectors: frozenset[str],
        status: Status,
        message: str,
        retry_soon: bool = False,
        nominated: str = "",
        retry_by: float | None = None,
    ) -> None:
        self.scheduling_queue.requeue_unschedulable(
            entry, now, rejectors, status, message, retry_soon=retry_soon, retry_by=retry_by
        )
        self.effects.emit(Unschedulable(entry.pod, status, message, nominated))

    def bind_failed(self, entry: QueuedPod, node: str, status: Status) -> None:
        if entry.pod.uid in self.pods:
            self.scheduling_queue.requeue_unschedulable(
                entry, self.clock.now(), frozenset({status.plugin}), status, status.message
            )
        self.effects.emit(BindFailed(entry.pod, node, status))

    def undone(self, entry: QueuedPod, node: str, status: Status) -> None:
        """A binding cycle was undone (Permit, PreBind or Bind failed): the pod goes back
        to the queue, if it still exists, and the failure is reported."""
        if entry.pod.uid in self.pods:
            self.scheduling_queue.readd(entry)
        self.bind_failed(entry, node, status)
