"""RowSets: which node rows carry each key (an image name, a declared feature).

Kept in step by its owner as nodes change: `add` / `discard` one key on one row, and
`moved` when the table moves its last row into a removed node's place. `mask(key)` is a
read-only boolean column over the rows (0..n-1), built when first asked and kept until a
row gains or loses the key.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
from numpy.typing import NDArray

from shoal.cache.node_table import NodeTable

__all__ = ["RowSets"]


class RowSets:
    def __init__(self, table: NodeTable) -> None:
        self.table = table
        self._rows: dict[str, set[int]] = {}
        self._masks: dict[str, NDArray[np.bool_]] = {}

    def __bool__(self) -> bool:
        return bool(self._rows)

    def count(self, key: str) -> int:
        """How many rows carry `key` (0: none)."""
        rows = self._rows.get(key)
        return 0 if rows is None else len(rows)

    def mask(self, key: str) -> NDArray[np.bool_]:
        """Which node rows (0..n-1) carry `key` (read-only)."""
        n = self.table.n
        mask = self._masks.get(key)
        if mask is None or mask.size != n:
            mask = np.zeros(n, dtype=bool)
            rows = self._rows.get(key)
            if rows:
                mask[np.fromiter(rows, dtype=np.intp, count=len(rows))] = True
            mask.flags.writeable = False
            self._masks[key] = mask
        return mask

    def add(self, key: str, row: int) -> bool:
        """`row` carries `key`; True when `key` is new (no row carried it)."""
        rows = self._rows.get(key)
        new = rows is None
        if rows is None:
            rows = self._rows[key] = set()
        if row not in rows:
            rows.add(row)
            self._masks.pop(key, None)
        return new

    def discard(self, key: str, row: int) -> bool:
        """`row` no longer carries `key`; True when no row carries it any more."""
        rows = self._rows[key]
        rows.discard(row)
        self._masks.pop(key, None)
        if rows:
            return False
        del self._rows[key]
        return True

    def moved(self, keys: Iterable[str], last: int, row: int) -> None:
        """The table's last row moved to `row`: its keys go with it."""
        for key in keys:
            rows = self._rows[key]
            rows.discard(last)
            rows.add(row)
            self._masks.pop(key, None)
