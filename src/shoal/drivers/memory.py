"""In-memory backend pieces used by the simulator and by tests."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from shoal.api.podinfo import PodInfo
from shoal.framework.handle import BindError

if TYPE_CHECKING:
    from shoal.scheduler.scheduler import Scheduler

__all__ = ["Eviction", "ManualClock", "MemoryBinder", "MemoryEvictor", "run_sync"]

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


class MemoryBinder:
    """Records binds; refuses a pod that is already bound (never double-binds)."""

    def __init__(self) -> None:
        self.bound: dict[str, str] = {}
        self.fail: set[str] = set()  # uids whose bind should fail (tests)

    async def bind(self, pod: PodInfo, node: str) -> None:
        if pod.uid in self.fail:
            raise BindError(f"pod {pod.key}: injected bind failure")
        if pod.uid in self.bound:
            raise BindError(f"pod {pod.key} is already bound to {self.bound[pod.uid]}")
        self.bound[pod.uid] = node


@dataclass(frozen=True)
class Eviction:
    uid: str
    pod: str  # namespace/name
    node: str
    reason: str
    at: float


class MemoryEvictor:
    """Evicts by deleting the pod from the scheduler at once (the simulator's kubelet
    honours evictions immediately) and records why. `on_evict` callbacks let the
    simulator re-create evicted pods the way their controllers would."""

    def __init__(self) -> None:
        self.scheduler: Scheduler | None = None
        self.evictions: list[Eviction] = []
        self.on_evict: list[Callable[[PodInfo, str], None]] = []

    def evict(self, pod: PodInfo, reason: str) -> None:
        sched = self.scheduler
        if sched is None:
            raise RuntimeError("MemoryEvictor is not attached to a scheduler")
        record = sched.cluster.placed.get(pod.uid)
        node = record.node if record is not None else ""
        self.evictions.append(Eviction(pod.uid, pod.key, node, reason, sched.clock.now()))
        sched.delete_pod(pod.uid)
        for callback in self.on_evict:
            callback(pod, reason)


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
