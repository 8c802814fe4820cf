"""The features nodes declare (`status.declaredFeatures`), for NodeDeclaredFeatures.

Per feature, the node rows declaring it, kept in step with every node change by the
cluster state (as `shoal.cache.images` keeps images); `mask(feature)` gives a read-only
boolean column over the rows, built when first asked and kept until a node declaring or
dropping the feature changes it. A node whose declared features did not change costs
one tuple compare.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from shoal.cache.node_table import NodeTable

__all__ = ["DeclaredFeatures"]


class DeclaredFeatures:
    def __init__(self, table: NodeTable) -> None:
        self.table = table
        self._rows: dict[str, set[int]] = {}
        self._of_row: dict[int, tuple[str, ...]] = {}
        self._masks: dict[str, NDArray[np.bool_]] = {}

    def mask(self, feature: str) -> NDArray[np.bool_]:
        """Which node rows (0..n-1) declare `feature` (read-only)."""
        n = self.table.n
        mask = self._masks.get(feature)
        if mask is None or mask.size != n:
            mask = np.zeros(n, dtype=bool)
            rows = self._rows.get(feature)
            if rows:
                mask[np.fromiter(rows, dtype=np.intp, count=len(rows))] = True
            mask.flags.writeable = False
            self._masks[feature] = mask
        return mask

    # ---- kept in step by the cluster state -------------------------------------------

    def node_changed(self, row: int) -> None:
        declared = self.table.nodes[row].status.declared_features
        old = self._of_row.get(row, ())
        if declared == old:
            return
        for feature in set(old) - set(declared):
            self._drop(feature, row)
        for feature in set(declared) - set(old):
            self._rows.setdefault(feature, set()).add(row)
            self._masks.pop(feature, None)
        if declared:
            self._of_row[row] = declared
        else:
            self._of_row.pop(row, None)

    def node_removed(self, row: int, last: int) -> None:
        """The node at `row` is gone and the table's last row moved into its place."""
        for feature in self._of_row.pop(row, ()):
            self._drop(feature, row)
        if row == last:
            return
        moved = self._of_row.pop(last, ())
        for feature in moved:
            rows = self._rows[feature]
            rows.discard(last)
            rows.add(row)
            self._masks.pop(feature, None)
        if moved:
            self._of_row[row] = moved

    def _drop(self, feature: str, row: int) -> None:
        rows = self._rows[feature]
        rows.discard(row)
        if not rows:
            del self._rows[feature]
        self._masks.pop(feature, None)
