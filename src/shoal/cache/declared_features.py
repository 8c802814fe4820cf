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
from shoal.cache.row_sets import RowSets

__all__ = ["DeclaredFeatures"]


class DeclaredFeatures:
    def __init__(self, table: NodeTable) -> None:
        self.table = table
        self._rows = RowSets(table)  # feature -> the rows declaring it
        self._of_row: dict[int, tuple[str, ...]] = {}

    def mask(self, feature: str) -> NDArray[np.bool_]:
        """Which node rows (0..n-1) declare `feature` (read-only)."""
        return self._rows.mask(feature)

    # ---- kept in step by the cluster state -------------------------------------------

    def node_changed(self, row: int) -> None:
        declared = self.table.nodes[row].status.declared_features
        old = self._of_row.get(row, ())
        if declared == old:
            return
        for feature in set(old) - set(declared):
            self._rows.discard(feature, row)
        for feature in set(declared) - set(old):
            self._rows.add(feature, row)
        if declared:
            self._of_row[row] = declared
        else:
            self._of_row.pop(row, None)

    def node_removed(self, row: int, last: int) -> None:
        """The node at `row` is gone and the table's last row moved into its place."""
        for feature in self._of_row.pop(row, ()):
            self._rows.discard(feature, row)
        if row == last:
            return
        moved = self._of_row.pop(last, ())
        self._rows.moved(moved, last, row)
        if moved:
            self._of_row[row] = moved
