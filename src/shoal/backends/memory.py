"""In-memory backend pieces used by the simulator and by tests."""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any, TypeVar

from shoal.api.podinfo import PodInfo
from shoal.framework.handle import BindError

__all__ = ["ManualClock", "MemoryBinder", "run_sync"]

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
