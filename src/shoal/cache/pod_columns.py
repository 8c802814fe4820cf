"""The pods placed on node rows, as columns: one slot per pod.

Preemption asks, for every preemptor, which lower-priority pods sit on which nodes and
what they would free; reading that pod by pod from `NodeTable.pods` costs a Python loop
over the pods of every candidate node (thousands per preemptor on a large cluster). Here
the same facts are arrays indexed by slot (node row, priority, start order, requests),
so the victim search selects, sums and sorts them with numpy.

Kept by `NodeTable` (built on first use from its rows, then updated by every place,
unplace, replace and node removal), so a cluster that never preempts pays nothing.
Freed slots are reused; `row` is -1 for a free slot.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from shoal.api.podinfo import PodInfo

__all__ = ["PodColumns"]

_INITIAL_SLOTS = 1024


class PodColumns:
    """Slots of placed pods: `row`, `priority`, `timestamp`, `sequence` (the order pods
    were put on their row, as `NodeTable.pods[row]` iterates), `namespace` (an id from
    `namespace_id`) and `vector` (the pod's request vector over the table's columns).
    Only the first `size` slots can be in use."""

    def __init__(self, width: int) -> None:
        self.size = 0
        self._capacity = _INITIAL_SLOTS
        self.row = np.full(self._capacity, -1, dtype=np.intp)
        self.priority = np.zeros(self._capacity, dtype=np.int64)
        self.timestamp = np.zeros(self._capacity, dtype=np.float64)
        self.sequence = np.zeros(self._capacity, dtype=np.int64)
        self.namespace = np.zeros(self._capacity, dtype=np.int32)
        self.vector = np.zeros((self._capacity, width), dtype=np.int64)
        self.uids: NDArray[np.object_] = np.full(self._capacity, None, dtype=object)
        self.slot_of: dict[str, int] = {}
        self._free: list[int] = []
        self._next_sequence = 0
        self._namespaces: dict[str, int] = {}

    def namespace_id(self, namespace: str) -> int:
        found = self._namespaces.get(namespace)
        if found is None:
            found = self._namespaces[namespace] = len(self._namespaces)
        return found

    def known_namespace(self, namespace: str) -> int | None:
        """The id of a namespace some placed pod has had, else None."""
        return self._namespaces.get(namespace)

    def add(self, row: int, pod: PodInfo, vector: NDArray[np.int64]) -> None:
        slot = self._free.pop() if self._free else self._new_slot()
        self.slot_of[pod.uid] = slot
        self.uids[slot] = pod.uid
        self.row[slot] = row
        self.priority[slot] = pod.priority
        self.timestamp[slot] = pod.timestamp
        self.sequence[slot] = self._next_sequence
        self._next_sequence += 1
        self.namespace[slot] = self.namespace_id(pod.namespace)
        width = self.vector.shape[1]
        if vector.size > width:
            self.widen(vector.size)
        self.vector[slot, : vector.size] = vector

    def remove(self, uid: str) -> None:
        slot = self.slot_of.pop(uid, None)
        if slot is None:
            return
        self.row[slot] = -1
        self.uids[slot] = None
        self._free.append(slot)

    def replace(self, pod: PodInfo) -> None:
        """A new object of a placed pod that counts the same (the echo of a bind, a
        status update): only what may differ is written (its timestamp)."""
        slot = self.slot_of.get(pod.uid)
        if slot is not None:
            self.timestamp[slot] = pod.timestamp

    def move_row(self, src: int, dst: int) -> None:
        """The pods of row `src` now sit on row `dst` (the table filled a gap)."""
        rows = self.row[: self.size]
        rows[rows == src] = dst

    def widen(self, width: int) -> None:
        """Resource columns were added to the table: zero columns for them."""
        if width <= self.vector.shape[1]:
            return
        out = np.zeros((self._capacity, width), dtype=np.int64)
        out[:, : self.vector.shape[1]] = self.vector
        self.vector = out

    def _new_slot(self) -> int:
        if self.size == self._capacity:
            self._grow()
        slot = self.size
        self.size += 1
        return slot

    def _grow(self) -> None:
        cap = self._capacity * 2
        row = np.full(cap, -1, dtype=np.intp)
        row[: self._capacity] = self.row
        self.row = row
        for name in ("priority", "timestamp", "sequence", "namespace"):
            old = getattr(self, name)
            new = np.zeros(cap, dtype=old.dtype)
            new[: self._capacity] = old
            setattr(self, name, new)
        vector = np.zeros((cap, self.vector.shape[1]), dtype=np.int64)
        vector[: self._capacity] = self.vector
        self.vector = vector
        uids = np.full(cap, None, dtype=object)
        uids[: self._capacity] = self.uids
        self.uids = uids
        self._capacity = cap
