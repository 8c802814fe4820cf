"""Topology-aware gang placement: keep a gang in as few domains of one level as possible.

Nodes carry a topology label (a leaf switch, a rack, a spine). Given how many members a
node can still hold, the capacity of each domain is a `bincount` over the label codes.
To cover `count` members with the fewest domains, taking domains in decreasing capacity
is optimal; when one domain is enough, the smallest one that fits is chosen (best fit),
so large empty domains stay free for larger gangs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from shoal.cache.labels import MISSING
from shoal.cache.snapshot import Snapshot

__all__ = ["DomainChoice", "choose_domains", "members_per_node"]


@dataclass(frozen=True)
class DomainChoice:
    rows: NDArray[np.bool_] | None  # nodes the gang may use (None: no placement possible)
    domains: tuple[str, ...]
    message: str = ""


def members_per_node(snap: Snapshot, shape: NDArray[np.int64]) -> NDArray[np.int64]:
    """How many more pods of `shape` (a request vector incl. one pod slot) each node
    holds."""
    n = snap.n
    cols = np.flatnonzero(shape)
    free = snap.free[:n][:, cols]
    per: NDArray[np.int64] = (np.maximum(free, 0) // shape[cols]).min(axis=1)
    return per


def choose_domains(
    snap: Snapshot,
    key: str,
    capacity: NDArray[np.int64],
    count: int,
    required: bool,
) -> DomainChoice:
    """Pick domains of label `key` able to hold `count` members (capacity per node)."""
    n = snap.n
    codes = snap.labels.column(key, slice(0, n))
    labelled = codes != MISSING
    values = snap.labels.values.get(key, [])
    per_domain = np.bincount(codes[labelled], weights=capacity[labelled], minlength=len(values))
    per_domain = per_domain.astype(np.int64)
    if not per_domain.size or per_domain.max() <= 0:
        return DomainChoice(None, (), f"no node with label {key} can hold a member")
    fitting = np.flatnonzero(per_domain >= count)
    if fitting.size:
        best = int(fitting[np.argmin(per_domain[fitting])])
        return DomainChoice(codes == best, (values[best],))
    if required:
        return DomainChoice(
            None,
            (),
            f"no single {key} domain can hold {count} members "
            f"(the largest holds {int(per_domain.max())})",
        )
    order = np.argsort(-per_domain, kind="stable")
    covered = np.cumsum(per_domain[order])
    if covered[-1] < count:
        return DomainChoice(
            None, (), f"all {key} domains together hold {int(covered[-1])} of {count} members"
        )
    k = int(np.searchsorted(covered, count)) + 1
    chosen = order[:k]
    return DomainChoice(np.isin(codes, chosen), tuple(values[int(d)] for d in chosen))
