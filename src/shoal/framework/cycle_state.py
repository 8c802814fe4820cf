"""CycleState: per-pod, per-cycle scratch space shared by the plugins of one profile.

Each plugin stores its data under a key of its own (by convention its name); a PreFilter
computes something once and its Filter/Score read it. The state is discarded when the
cycle ends, except that it travels with an assumed pod into its binding cycle.
"""

from __future__ import annotations

from typing import Any

__all__ = ["CycleState"]


class CycleState:
    __slots__ = ("_data", "dry_run", "sampled", "skip_filter", "skip_score")

    def __init__(self, dry_run: bool = False) -> None:
        self._data: dict[str, Any] = {}
        self.skip_filter: set[str] = set()  # plugins whose PreFilter returned Skip
        self.skip_score: set[str] = set()  # plugins whose PreScore returned Skip
        self.sampled = False  # this cycle's plugin calls are timed (framework/timing.py)
        # A what-if pass (preemption's victim search, a reservation's node mask), not a
        # scheduling cycle: not counted in the latency metrics, as in kube.
        self.dry_run = dry_run

    def write(self, key: str, value: Any) -> None:
        self._data[key] = value

    def read(self, key: str) -> Any:
        """Raises KeyError when the key was never written (a plugin-ordering bug)."""
        return self._data[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self._data.get(key, default)

    def delete(self, key: str) -> None:
        self._data.pop(key, None)

    def clone(self) -> CycleState:
        copy = CycleState(self.dry_run)
        copy._data = dict(self._data)
        copy.skip_filter = set(self.skip_filter)
        copy.skip_score = set(self.skip_score)
        copy.sampled = self.sampled
        return copy
