"""What a profile's plugins are, and what callers outside the scheduler may run of them.

`ProfilePlugins` lists a profile's enabled plugins per extension point; `PluginRunner` is
the part of `shoal.framework.runtime.Framework` that what-ifs use through
`handle.runner(pod)` (re-run PreFilter and Filter with victims removed, ask which
plugins take part). The handle names this protocol instead of the Framework class, so
the handle does not depend on the runtime that is built on it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
from numpy.typing import NDArray

from shoal.api.podinfo import PodInfo
from shoal.framework.cycle_state import CycleState
from shoal.framework.interfaces import (
    BindPlugin,
    FilterPlugin,
    PermitPlugin,
    Plugin,
    PostBindPlugin,
    PostFilterPlugin,
    PreBindPlugin,
    PreEnqueuePlugin,
    PreFilterPlugin,
    PreScorePlugin,
    QueueSortPlugin,
    ReservePlugin,
    ScorePlugin,
)
from shoal.framework.status import Status
from shoal.framework.types import Candidates, FilterResult, PreFilterResult

__all__ = ["FilterOutcome", "PluginRunner", "ProfilePlugins"]


@dataclass
class ProfilePlugins:
    """The enabled plugins of a profile, per extension point, in order."""

    pre_enqueue: list[PreEnqueuePlugin] = field(default_factory=list)
    queue_sort: QueueSortPlugin | None = None
    pre_filter: list[PreFilterPlugin] = field(default_factory=list)
    filter: list[FilterPlugin] = field(default_factory=list)
    post_filter: list[PostFilterPlugin] = field(default_factory=list)
    pre_score: list[PreScorePlugin] = field(default_factory=list)
    score: list[tuple[ScorePlugin, int]] = field(default_factory=list)  # (plugin, weight)
    reserve: list[ReservePlugin] = field(default_factory=list)
    permit: list[PermitPlugin] = field(default_factory=list)
    pre_bind: list[PreBindPlugin] = field(default_factory=list)
    bind: list[BindPlugin] = field(default_factory=list)
    post_bind: list[PostBindPlugin] = field(default_factory=list)

    def all(self) -> list[Plugin]:
        seen: dict[str, Plugin] = {}
        groups: Sequence[Sequence[Plugin]] = (
            self.pre_enqueue,
            [self.queue_sort] if self.queue_sort else [],
            self.pre_filter,
            self.filter,
            self.post_filter,
            self.pre_score,
            [p for p, _ in self.score],
            self.reserve,
            self.permit,
            self.pre_bind,
            self.bind,
            self.post_bind,
        )
        for group in groups:
            for plugin in group:
                seen.setdefault(plugin.name, plugin)
        return list(seen.values())


@dataclass
class FilterOutcome:
    candidates: Candidates
    # Read-only when every candidate passed (a shared all-True mask): copy to change.
    passed: NDArray[np.bool_]
    results: list[tuple[str, FilterResult]]
    # Every candidate passed every filter (known without searching `passed`).
    all_passed: bool = False


class PluginRunner(Protocol):
    """A profile's plugin runner as what-ifs use it (see the module docstring)."""

    @property
    def plugins(self) -> ProfilePlugins: ...

    def has_filter(self, name: str) -> bool: ...

    def run_pre_filter(
        self, state: CycleState, pod: PodInfo
    ) -> tuple[PreFilterResult | None, Status]: ...

    def run_filters(self, state: CycleState, pod: PodInfo, nodes: Candidates) -> FilterOutcome: ...
