"""Per-node plugins: write a plain function of one node, let the framework vectorise it.

Filter and Score are vectorised in Shoal (`shoal.framework.interfaces`): one call sees
every candidate node as numpy columns. That is what makes a cycle over 5000 nodes cost
about a millisecond, but it is not how most people think about a rule. This module
adapts the per-node style kube-scheduler plugin authors know:

    @per_node_filter("HasScratchDisk")
    def has_scratch_disk(state: CycleState, pod: PodInfo, node: NodeView) -> Status:
        if node.labels.get("example.com/scratch") == "nvme":
            return Status()
        return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, "node(s) had no scratch disk")

    registry = default_registry()
    registry.register(has_scratch_disk.name, has_scratch_disk.spec())

The adapter calls the function once per candidate node and builds the `FilterResult`:
nodes whose Status is not SUCCESS fail, grouped into one `Failure` per (reason text,
code), so `Diagnosis` and the "0/N nodes are available: ..." message count them exactly
as for a vectorised plugin, and UNSCHEDULABLE_AND_UNRESOLVABLE still tells preemption
not to try those nodes. Score functions return an int per node; an optional `normalize`
maps the whole score array (e.g. `normalize_to_max`) before weights are applied.

Cost: one Python call (plus building a `NodeView`) per candidate node per scheduling
cycle. Filter runs on every candidate node (percentageOfNodesToScore only limits which
feasible nodes are scored), so a per-node Filter at 5000 nodes makes 5000 calls in every
cycle; a per-node Score makes one call per feasible node kept for scoring (500 at 5000
nodes with the adaptive default). `bench/per_node_adapter.py` measures a one-label
check at 5000 nodes: about 1-2 us per node, i.e. 6-11 ms per cycle through the adapter
against 6-15 us for the vectorised filter (450-970 times slower); in whole scheduling
cycles with the default plugins, throughput falls from 1,700-2,700 to 90-145 pods/s.
Use the adapter for prototypes, small clusters and rules that are hard to vectorise;
move hot plugins to columns.

Neighbours: reads `shoal.cache.Snapshot` rows, produces `shoal.framework.types` values;
plugins build on this module, never the other way round.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import overload

import numpy as np
from numpy.typing import NDArray

from shoal.api.objects import Node, Taint
from shoal.api.podinfo import PodInfo
from shoal.cache.snapshot import Snapshot
from shoal.framework.cycle_state import CycleState
from shoal.framework.handle import Handle
from shoal.framework.registry import PluginSpec
from shoal.framework.status import Code, Status
from shoal.framework.types import (
    MAX_NODE_SCORE,
    ActionType,
    Candidates,
    ClusterEvent,
    EventResource,
    Failure,
    FilterResult,
)

__all__ = [
    "NodeFilterFn",
    "NodeScoreFn",
    "NodeView",
    "PerNodeFilter",
    "PerNodeFilterScore",
    "PerNodeScore",
    "ScoreNormalizeFn",
    "normalize_to_max",
    "normalize_to_max_reversed",
    "per_node_filter",
    "per_node_plugin",
    "per_node_score",
]

NodeFilterFn = Callable[[CycleState, PodInfo, "NodeView"], Status]
"""A per-node Filter: SUCCESS, UNSCHEDULABLE or UNSCHEDULABLE_AND_UNRESOLVABLE."""

NodeScoreFn = Callable[[CycleState, PodInfo, "NodeView"], int]
"""A per-node Score: an int (0..MAX_NODE_SCORE after `normalize`, if any)."""

ScoreNormalizeFn = Callable[[NDArray[np.int64]], NDArray[np.int64]]
"""Maps all of a cycle's raw scores (one per feasible node) to 0..MAX_NODE_SCORE."""

# Codes a per-node Filter may return for a node it rejects (they become Failure codes).
_REJECT_CODES = frozenset({Code.UNSCHEDULABLE, Code.UNSCHEDULABLE_AND_UNRESOLVABLE, Code.PENDING})
# Without an explicit list, pods rejected by an adapter are retried on any cluster event.
_ANY_EVENT = (ClusterEvent(EventResource.WILDCARD, ActionType.ALL),)


class NodeView:
    """A read-only view of one node row of the snapshot, built lazily.

    Only what a function touches is computed: `free("cpu")` reads two numbers, while
    `allocatable` builds a dict of every resource column. Resource amounts are integers
    in Shoal's units (millicores for cpu, bytes for memory, devices for GPUs); the
    `allocatable`/`requested` dicts have one entry per resource column the cluster knows
    (0 where the node has none), and `requested` counts assumed pods and one `pods` slot
    per pod. Do not keep a view beyond the call: it reads the live snapshot.
    """

    __slots__ = ("_allocatable", "_requested", "_snapshot", "row")

    def __init__(self, snapshot: Snapshot, row: int) -> None:
        self._snapshot = snapshot
        self.row = row
        self._allocatable: dict[str, int] | None = None
        self._requested: dict[str, int] | None = None

    @property
    def name(self) -> str:
        return self._snapshot.node(self.row).metadata.name

    @property
    def node(self) -> Node:
        """The v1 Node object as last observed (do not mutate it)."""
        return self._snapshot.node(self.row)

    @property
    def labels(self) -> Mapping[str, str]:
        return self._snapshot.node(self.row).metadata.labels

    @property
    def taints(self) -> tuple[Taint, ...]:
        snap = self._snapshot
        return snap.taint_sets[int(snap.taint_set[self.row])]

    @property
    def unschedulable(self) -> bool:
        """spec.unschedulable (cordoned)."""
        return bool(self._snapshot.unschedulable[self.row])

    @property
    def allocatable(self) -> Mapping[str, int]:
        if self._allocatable is None:
            snap = self._snapshot
            self._allocatable = dict(
                zip(snap.resources, snap.allocatable[self.row].tolist(), strict=True)
            )
        return self._allocatable

    @property
    def requested(self) -> Mapping[str, int]:
        if self._requested is None:
            snap = self._snapshot
            self._requested = dict(
                zip(snap.resources, snap.requested[self.row].tolist(), strict=True)
            )
        return self._requested

    def free(self, resource: str) -> int:
        """Allocatable minus requested (0 for a resource no node has)."""
        snap = self._snapshot
        col = snap.resource_index.get(resource)
        if col is None:
            return 0
        return int(snap.free[self.row, col])

    @property
    def pods(self) -> tuple[PodInfo, ...]:
        """Pods bound or assumed on the node."""
        return tuple(self._snapshot.pods_on(self.row).values())

    def __repr__(self) -> str:
        return f"NodeView({self.name})"


def _default_reason(name: str) -> str:
    return f"node(s) didn't satisfy plugin {name}"


class _PerNode:
    """Shared by the adapters: a name, the handle (snapshot) and the events."""

    name: str

    def __init__(
        self,
        name: str,
        handle: Handle | None,
        events: Sequence[ClusterEvent] | None,
    ) -> None:
        if not name:
            raise ValueError("a plugin needs a name")
        self.name = name
        self.handle = handle
        self.events: tuple[ClusterEvent, ...] = _ANY_EVENT if events is None else tuple(events)

    def _snapshot(self) -> Snapshot:
        if self.handle is None:
            raise RuntimeError(
                f"per-node plugin {self.name!r} has no handle: register it with .spec() "
                "(the framework then builds it) or call .with_handle(handle) first"
            )
        return self.handle.snapshot

    def events_to_register(self) -> Sequence[ClusterEvent]:
        return self.events

    def spec(self) -> PluginSpec:
        """A PluginSpec whose factory binds this plugin to the profile's handle."""
        return PluginSpec(self._factory)

    def _factory(self, args: object, handle: Handle) -> _PerNode:
        return self.with_handle(handle)

    def with_handle(self, handle: Handle) -> _PerNode:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"


def _run_filter(
    name: str, fn: NodeFilterFn, snap: Snapshot, state: CycleState, pod: PodInfo, nodes: Candidates
) -> FilterResult:
    passed = np.ones(nodes.size, dtype=bool)
    # (reason, code) -> candidate positions, in first-seen order.
    groups: dict[tuple[str, Code], list[int]] = {}
    for i, row in enumerate(nodes.rows.tolist()):
        status = fn(state, pod, NodeView(snap, row))
        code = status.code
        if code == Code.SUCCESS:
            continue
        if code not in _REJECT_CODES:
            raise RuntimeError(
                f"per-node filter {name!r} returned {code.name} for node "
                f"{snap.node(row).metadata.name!r}: a Filter may only return SUCCESS, "
                "UNSCHEDULABLE, UNSCHEDULABLE_AND_UNRESOLVABLE or PENDING"
            )
        passed[i] = False
        for reason in status.reasons or (_default_reason(name),):
            groups.setdefault((reason, code), []).append(i)
    failures = []
    for (reason, code), positions in groups.items():
        mask = np.zeros(nodes.size, dtype=bool)
        mask[positions] = True
        failures.append(Failure(reason, mask, code))
    return FilterResult(passed, failures)


def _run_score(
    fn: NodeScoreFn, snap: Snapshot, state: CycleState, pod: PodInfo, nodes: Candidates
) -> NDArray[np.int64]:
    return np.fromiter(
        (fn(state, pod, NodeView(snap, row)) for row in nodes.rows.tolist()),
        dtype=np.int64,
        count=nodes.size,
    )


class PerNodeFilter(_PerNode):
    """A FilterPlugin that calls `fn(state, pod, node_view)` for each candidate node."""

    def __init__(
        self,
        name: str,
        fn: NodeFilterFn,
        *,
        events: Sequence[ClusterEvent] | None = None,
        handle: Handle | None = None,
    ) -> None:
        super().__init__(name, handle, events)
        self.filter_fn = fn

    def filter(self, state: CycleState, pod: PodInfo, nodes: Candidates) -> FilterResult:
        return _run_filter(self.name, self.filter_fn, self._snapshot(), state, pod, nodes)

    def with_handle(self, handle: Handle) -> PerNodeFilter:
        return PerNodeFilter(self.name, self.filter_fn, events=self.events, handle=handle)


class PerNodeScore(_PerNode):
    """A ScorePlugin that calls `fn(state, pod, node_view)` for each feasible node.

    Without `normalize` the function must return 0..MAX_NODE_SCORE itself (the
    framework clips anything outside); with it, `normalize(raw_scores)` does the mapping.
    """

    def __init__(
        self,
        name: str,
        fn: NodeScoreFn,
        *,
        normalize: ScoreNormalizeFn | None = None,
        events: Sequence[ClusterEvent] | None = None,
        handle: Handle | None = None,
    ) -> None:
        super().__init__(name, handle, events)
        self.score_fn = fn
        self.normalize = normalize

    def score(self, state: CycleState, pod: PodInfo, nodes: Candidates) -> NDArray[np.int64]:
        return _run_score(self.score_fn, self._snapshot(), state, pod, nodes)

    def normalize_score(
        self, state: CycleState, pod: PodInfo, nodes: Candidates, scores: NDArray[np.int64]
    ) -> NDArray[np.int64]:
        if self.normalize is None:
            return scores
        return np.asarray(self.normalize(scores), dtype=np.int64)

    def with_handle(self, handle: Handle) -> PerNodeScore:
        return PerNodeScore(
            self.name, self.score_fn, normalize=self.normalize, events=self.events, handle=handle
        )


class PerNodeFilterScore(PerNodeScore):
    """Filter and Score from two per-node functions, under one plugin name."""

    def __init__(
        self,
        name: str,
        filter_fn: NodeFilterFn,
        score_fn: NodeScoreFn,
        *,
        normalize: ScoreNormalizeFn | None = None,
        events: Sequence[ClusterEvent] | None = None,
        handle: Handle | None = None,
    ) -> None:
        super().__init__(name, score_fn, normalize=normalize, events=events, handle=handle)
        self.filter_fn = filter_fn

    def filter(self, state: CycleState, pod: PodInfo, nodes: Candidates) -> FilterResult:
        return _run_filter(self.name, self.filter_fn, self._snapshot(), state, pod, nodes)

    def with_handle(self, handle: Handle) -> PerNodeFilterScore:
        return PerNodeFilterScore(
            self.name,
            self.filter_fn,
            self.score_fn,
            normalize=self.normalize,
            events=self.events,
            handle=handle,
        )


@overload
def per_node_filter(
    name: str, fn: NodeFilterFn, *, events: Sequence[ClusterEvent] | None = None
) -> PerNodeFilter: ...


@overload
def per_node_filter(
    name: str, fn: None = None, *, events: Sequence[ClusterEvent] | None = None
) -> Callable[[NodeFilterFn], PerNodeFilter]: ...


def per_node_filter(
    name: str, fn: NodeFilterFn | None = None, *, events: Sequence[ClusterEvent] | None = None
) -> PerNodeFilter | Callable[[NodeFilterFn], PerNodeFilter]:
    """A FilterPlugin from a per-node function; without `fn`, a decorator.

    `events` are the cluster events after which pods this filter rejected are worth
    retrying (default: any event).
    """
    if fn is not None:
        return PerNodeFilter(name, fn, events=events)

    def decorate(f: NodeFilterFn) -> PerNodeFilter:
        return PerNodeFilter(name, f, events=events)

    return decorate


@overload
def per_node_score(
    name: str,
    fn: NodeScoreFn,
    *,
    normalize: ScoreNormalizeFn | None = None,
    events: Sequence[ClusterEvent] | None = None,
) -> PerNodeScore: ...


@overload
def per_node_score(
    name: str,
    fn: None = None,
    *,
    normalize: ScoreNormalizeFn | None = None,
    events: Sequence[ClusterEvent] | None = None,
) -> Callable[[NodeScoreFn], PerNodeScore]: ...


def per_node_score(
    name: str,
    fn: NodeScoreFn | None = None,
    *,
    normalize: ScoreNormalizeFn | None = None,
    events: Sequence[ClusterEvent] | None = None,
) -> PerNodeScore | Callable[[NodeScoreFn], PerNodeScore]:
    """A ScorePlugin from a per-node function; without `fn`, a decorator."""
    if fn is not None:
        return PerNodeScore(name, fn, normalize=normalize, events=events)

    def decorate(f: NodeScoreFn) -> PerNodeScore:
        return PerNodeScore(name, f, normalize=normalize, events=events)

    return decorate


def per_node_plugin(
    name: str,
    *,
    filter: NodeFilterFn,
    score: NodeScoreFn,
    normalize: ScoreNormalizeFn | None = None,
    events: Sequence[ClusterEvent] | None = None,
) -> PerNodeFilterScore:
    """One plugin implementing both Filter and Score from per-node functions."""
    return PerNodeFilterScore(name, filter, score, normalize=normalize, events=events)


def _scale(scores: NDArray[np.int64], reverse: bool) -> NDArray[np.int64]:
    scores = np.asarray(scores, dtype=np.int64)
    top = max(int(scores.max()), 0) if scores.size else 0  # kube starts maxCount at 0
    if top == 0:
        return np.full_like(scores, MAX_NODE_SCORE) if reverse else scores
    scaled = MAX_NODE_SCORE * scores
    # Truncate toward zero, as kube-scheduler's int64 division does.
    out: NDArray[np.int64] = (np.sign(scaled) * (np.abs(scaled) // top)).astype(np.int64)
    if reverse:
        out = MAX_NODE_SCORE - out
    return out


def normalize_to_max(scores: NDArray[np.int64]) -> NDArray[np.int64]:
    """kube's DefaultNormalizeScore: scale so the best node gets MAX_NODE_SCORE."""
    return _scale(scores, reverse=False)


def normalize_to_max_reversed(scores: NDArray[np.int64]) -> NDArray[np.int64]:
    """DefaultNormalizeScore with reverse=true: the lowest raw score ranks best."""
    return _scale(scores, reverse=True)
