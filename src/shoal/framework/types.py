"""Value types passed across the plugin contract."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Flag, auto

import numpy as np
from numpy.typing import NDArray

from shoal.framework.status import Code

__all__ = [
    "MAX_NODE_SCORE",
    "ActionType",
    "Candidates",
    "ClusterEvent",
    "EventResource",
    "Failure",
    "FilterResult",
    "PreFilterResult",
    "all_true",
]

MAX_NODE_SCORE = 100
"""Score plugins return (after NormalizeScore) values in 0..MAX_NODE_SCORE."""


class Candidates:
    """The node rows a Filter or Score call works on.

    `index` is a slice (all nodes: a cheap view) or an int array of rows; use it to index
    snapshot columns: `snapshot.allocatable[nodes.index]`. Results are arrays aligned with
    `rows`.
    """

    __slots__ = ("_rows", "index", "size")

    def __init__(self, index: slice | NDArray[np.intp], size: int) -> None:
        self.index = index
        self.size = size
        self._rows: NDArray[np.intp] | None = None if isinstance(index, slice) else index

    @classmethod
    def all(cls, n: int) -> Candidates:
        return cls(slice(0, n), n)

    @classmethod
    def of(cls, rows: NDArray[np.intp]) -> Candidates:
        return cls(np.asarray(rows, dtype=np.intp), len(rows))

    @property
    def rows(self) -> NDArray[np.intp]:
        """Row numbers as an array (materialised on first use for slices)."""
        if self._rows is None:
            assert isinstance(self.index, slice)
            self._rows = np.arange(self.index.start or 0, self.index.stop, dtype=np.intp)
        return self._rows

    def subset(self, mask: NDArray[np.bool_]) -> Candidates:
        return Candidates.of(self.rows[mask])

    def __len__(self) -> int:
        return self.size


@dataclass(frozen=True, slots=True)
class Failure:
    """Why some candidates failed a filter: the reason text counts once per node."""

    reason: str
    nodes: NDArray[np.bool_]  # aligned with the candidates
    code: Code = Code.UNSCHEDULABLE


@dataclass(slots=True)
class FilterResult:
    """`passed[i]` tells whether candidate i passes; failures explain the others.

    A node that fails must be covered by at least one Failure; it may appear in several
    (NodeResourcesFit reports both "Insufficient cpu" and "Insufficient memory").
    """

    passed: NDArray[np.bool_]
    failures: list[Failure] = field(default_factory=list)

    @classmethod
    def all_pass(cls, size: int) -> FilterResult:
        return cls(all_true(size))

    @classmethod
    def from_mask(
        cls, passed: NDArray[np.bool_], reason: str, code: Code = Code.UNSCHEDULABLE
    ) -> FilterResult:
        if passed.all():
            return cls(passed)
        return cls(passed, [Failure(reason, ~passed, code)])


@dataclass(frozen=True, slots=True)
class PreFilterResult:
    """A PreFilter may narrow the nodes worth filtering (None = all nodes)."""

    node_names: frozenset[str] | None = None
    # The plugins that narrowed the nodes (filled in by the framework; kube's
    # pluginsWithNodes): nodes left out are reported as not satisfying them.
    plugins: frozenset[str] = frozenset()

    def merge(self, other: PreFilterResult | None) -> PreFilterResult:
        if other is None or other.node_names is None:
            return self
        if self.node_names is None:
            return other
        return PreFilterResult(self.node_names & other.node_names, self.plugins | other.plugins)


class EventResource(Flag):
    POD = auto()
    ASSIGNED_POD = auto()
    NODE = auto()
    POD_GROUP = auto()
    QUEUE = auto()
    PERSISTENT_VOLUME_CLAIM = auto()
    PERSISTENT_VOLUME = auto()
    STORAGE_CLASS = auto()
    CSI_NODE = auto()
    CSI_DRIVER = auto()
    CSI_STORAGE_CAPACITY = auto()
    RESOURCE_CLAIM = auto()
    RESOURCE_SLICE = auto()
    DEVICE_CLASS = auto()
    WILDCARD = (
        POD
        | ASSIGNED_POD
        | NODE
        | POD_GROUP
        | QUEUE
        | PERSISTENT_VOLUME_CLAIM
        | PERSISTENT_VOLUME
        | STORAGE_CLASS
        | CSI_NODE
        | CSI_DRIVER
        | CSI_STORAGE_CAPACITY
        | RESOURCE_CLAIM
        | RESOURCE_SLICE
        | DEVICE_CLASS
    )


class ActionType(Flag):
    ADD = auto()
    DELETE = auto()
    UPDATE_NODE_ALLOCATABLE = auto()
    UPDATE_NODE_LABEL = auto()
    UPDATE_NODE_TAINT = auto()
    UPDATE_NODE_CONDITION = auto()
    UPDATE_POD_LABEL = auto()
    UPDATE_POD_SCALE_DOWN = auto()
    UPDATE = (
        UPDATE_NODE_ALLOCATABLE
        | UPDATE_NODE_LABEL
        | UPDATE_NODE_TAINT
        | UPDATE_NODE_CONDITION
        | UPDATE_POD_LABEL
        | UPDATE_POD_SCALE_DOWN
    )
    ALL = ADD | DELETE | UPDATE


@dataclass(frozen=True, slots=True)
class ClusterEvent:
    """A change that may make rejected pods schedulable (kube's framework.ClusterEvent)."""

    resource: EventResource
    action: ActionType

    def matches(self, other: ClusterEvent) -> bool:
        return bool(self.resource & other.resource) and bool(self.action & other.action)


_ALL_TRUE: dict[int, NDArray[np.bool_]] = {}
_ALL_TRUE_KEPT = 64  # distinct sizes (node counts, preemption's one-row checks, ...)


def all_true(size: int) -> NDArray[np.bool_]:
    """A read-only all-True mask of `size`, shared: filters that pass everything skip
    an allocation each (most calls ask for the node count again and again)."""
    mask = _ALL_TRUE.get(size)
    if mask is None:
        if len(_ALL_TRUE) >= _ALL_TRUE_KEPT:
            _ALL_TRUE.clear()
        mask = np.ones(size, dtype=bool)
        mask.flags.writeable = False
        _ALL_TRUE[size] = mask
    return mask
