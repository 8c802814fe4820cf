"""A topology level's domains as an index over node rows, for sums per domain.

Topology-aware gang placement asks, for every gang, how many members each domain of a
level holds: a sum of a per-node capacity over each domain's nodes. The label (or
HyperNode tier) codes change only when nodes do, while the capacities change with every
placement, so the work that depends on the codes alone is done once per level and node
change (`Snapshot.domain_index` keeps it): the rows of each domain next to each other
(`order`), where each domain's run starts (`starts`), and, per level above, the domain
of that level each domain lies inside (`parents`). A sum per domain is then one gather
and one `np.add.reduceat`, integer arithmetic over the labelled rows only; no loop over
domains and no mask over the unlabelled rows per gang.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

from shoal.cache.labels import MISSING

__all__ = ["DomainIndex"]


class DomainIndex:
    """The domains of one level over node rows 0..n-1 (`codes[row]`: the row's domain,
    MISSING: in none; `values[code]`: the domain's name)."""

    __slots__ = (
        "_parents",
        "codes",
        "contiguous",
        "order",
        "present",
        "size",
        "starts",
        "values",
    )

    def __init__(self, codes: NDArray[np.int32], values: Sequence[str]) -> None:
        # A copy: the index describes the codes as they were when it was built.
        self.codes: NDArray[np.int32] = np.array(codes, dtype=np.int32)
        self.codes.flags.writeable = False
        self.values = values
        self.size = len(values)
        labelled = np.flatnonzero(codes != MISSING)
        # Labelled rows grouped by domain (stable: rows ascending inside a domain).
        order = labelled[np.argsort(codes[labelled], kind="stable")]
        sorted_codes = codes[order]
        if order.size:
            cut = np.flatnonzero(sorted_codes[1:] != sorted_codes[:-1]) + 1
            starts = np.concatenate(([0], cut)).astype(np.intp)
        else:
            starts = np.zeros(0, dtype=np.intp)
        self.order: NDArray[np.intp] = order
        self.starts: NDArray[np.intp] = starts
        # The domain of each run (domains no row is in have none: their sum is 0).
        self.present: NDArray[np.int32] = sorted_codes[starts]
        # Every row labelled, already grouped, every domain present: the sums need no
        # gather and no scatter (a fabric labelled in row order, as nodes often are).
        self.contiguous = bool(
            order.size == codes.size
            and self.present.size == self.size
            and np.array_equal(order, np.arange(order.size))
        )
        # id(outer) -> (outer, parents): the reference keeps the id from being reused.
        self._parents: dict[int, tuple[DomainIndex, NDArray[np.int32]]] = {}

    def sums(self, per_node: NDArray[np.int64]) -> NDArray[np.int64]:
        """Per domain code (0..size-1): the sum of `per_node` (integers, one per
        row 0..n-1) over the domain's rows."""
        if self.contiguous:
            total: NDArray[np.int64] = np.add.reduceat(per_node, self.starts)
            return total
        out = np.zeros(self.size, dtype=np.int64)
        if self.order.size:
            out[self.present] = np.add.reduceat(per_node[self.order], self.starts)
        return out

    def parents(self, outer: DomainIndex) -> NDArray[np.int32]:
        """Per domain code of this level: the code of the one domain of `outer` holding
        all of its rows, MISSING when its rows span several of `outer`'s domains, any of
        them lies in none, or no row is in it. Kept per `outer` index (both are of the
        same node rows: the owner builds new ones when nodes change)."""
        found = self._parents.get(id(outer))
        if found is not None and found[0] is outer:
            return found[1]
        out = np.full(self.size, MISSING, dtype=np.int32)
        if self.order.size:
            inner = outer.codes[self.order].astype(np.int64)
            lo = np.minimum.reduceat(inner, self.starts)
            hi = np.maximum.reduceat(inner, self.starts)
            one = (lo == hi) & (lo != MISSING)
            out[self.present[one]] = lo[one]
        if len(self._parents) >= 8:
            self._parents.clear()  # outer levels rebuilt many times (HyperNode churn)
        out.flags.writeable = False
        self._parents[id(outer)] = (outer, out)
        return out
