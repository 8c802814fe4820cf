"""NodeFence: the node rows this replica may place pods on.

Several `shoal run` replicas may decide at once (node shards, see
`shoal.drivers.kube.shards`). Nodes are split into `slots` shards by a hash of their
name (`NodeTable.name_hash % slots`); each replica holds some shards, and only places
pods, chooses victims and moves pods on nodes of the shards it holds. Every node is still
in the cache: pods bound elsewhere count for topology spread, affinity and queue usage.

The fence is state of the core, set by the driver through the inbox like any other
event; the simulator and the tests never set it (nothing fenced). The mask is vectorised
and cached per change of the nodes or of the shards held.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping

import numpy as np
from numpy.typing import NDArray

from shoal.cache.node_table import NodeTable

__all__ = ["FENCE_PLUGIN", "NodeFence"]

FENCE_PLUGIN = "NodeShard"  # the name failures are reported under


class NodeFence:
    def __init__(self, table: NodeTable) -> None:
        self._table = table
        self.slots = 1
        self.held: frozenset[int] | None = None  # None: no fencing (every node usable)
        self.holders: dict[int, str] = {}  # slot -> who holds it ("" = nobody), for messages
        self.me = ""  # this replica's identity among the holders
        self.version = 0
        self._key: tuple[int, int, int] = (-1, -1, -1)
        self._fenced: NDArray[np.bool_] = np.zeros(0, dtype=bool)
        self._any = False

    def set(
        self,
        slots: int,
        held: frozenset[int] | None,
        holders: Mapping[int, str],
        me: str = "",
    ) -> bool:
        """Use exactly `held` of `slots` shards (None: no fencing). `holders` says who
        holds each slot in the cluster's shard map, `me` which of them is this replica
        (a slot it holds but may not use yet is being taken over). True if that changed
        which nodes may be used."""
        if slots < 1:
            raise ValueError(f"node shards: slots must be >= 1, got {slots}")
        self.holders = dict(holders)
        self.me = me
        if slots == self.slots and held == self.held:
            return False
        self.slots, self.held = slots, held
        self.version += 1
        return True

    @contextlib.contextmanager
    def lifted(self) -> Iterator[None]:
        """Every node usable inside (a what-if: which shards would a gang need?)."""
        held = self.held
        self.held = None
        self.version += 1
        try:
            yield
        finally:
            self.held = held
            self.version += 1

    def slot_of(self, row: int) -> int:
        return int(self._table.name_hash[row]) % self.slots

    def fenced(self) -> NDArray[np.bool_] | None:
        """Rows `0..n-1` this replica must not use, or None when it may use them all."""
        table = self._table
        key = (self.version, table.nodes_version, table.n)
        if key != self._key:
            self._key = key
            if self.held is None:
                self._fenced, self._any = np.zeros(0, dtype=bool), False
            else:
                usable = np.zeros(self.slots, dtype=bool)
                usable[[s for s in self.held if 0 <= s < self.slots]] = True
                slots = table.name_hash[: table.n] % np.uint32(self.slots)
                self._fenced = ~usable[slots]
                self._any = bool(self._fenced.any())
        return self._fenced if self._any else None

    def reason(self) -> str:
        """The filter failure text for a fenced node (one text, so the diagnosis counts
        them together)."""
        held = self.held or ()
        fenced = {s: h for s, h in self.holders.items() if h and s not in held}
        others = sorted({h for h in fenced.values() if h != self.me})
        if not others:
            if self.me and self.me in fenced.values():
                # Held here in the map, not usable yet: until the pod watch shows the last
                # holder's binds (a restart, a failover, a shard handed over).
                return "node(s) are in node shards this replica is still taking over"
            return "node(s) are in node shards no replica holds yet"
        return (
            "node(s) are in node shards held by another Shoal replica ("
            + ", ".join(others[:3])
            + (", ..." if len(others) > 3 else "")
            + ")"
        )
