"""The vectorised topology computations agree with the straightforward ones they replaced.

`DomainIndex` (sums per domain, the outer domain each domain lies in) is held to the
masked `bincount` and the `np.minimum.at`/`np.maximum.at` pass over the labelled rows
that topology-aware gang placement computed per gang before; `members_per_node`
(column by column, clamped once) to the clamp-then-divide over all requested columns;
`choose_levels` over the index to the same choice made with the old per-gang
computations; and `Snapshot.domain_index` is rebuilt when a node's labels or the
HyperNodes change, never served stale.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from numpy.typing import NDArray

from shoal.api.hypernode import HyperNode, tier_key
from shoal.api.manifests import decode
from shoal.cache.domain_index import DomainIndex
from shoal.cache.labels import MISSING
from shoal.gang import topology
from shoal.gang.topology import DomainChoice, choose_levels, members_per_node
from shoal.testing import SchedulerHarness, make_node

SETTINGS = settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@st.composite
def levels(draw: st.DrawFn) -> tuple[NDArray[np.int32], list[str], NDArray[np.int64]]:
    """Codes of one level over n rows (MISSING included, in any order, some values no
    row has), its values, and a capacity per row."""
    n = draw(st.integers(0, 60))
    size = draw(st.integers(0, 12))
    codes = draw(st.lists(st.integers(-1, size - 1), min_size=n, max_size=n))
    capacity = draw(st.lists(st.integers(0, 40), min_size=n, max_size=n))
    values = [f"d{i}" for i in range(size)]
    return np.array(codes, dtype=np.int32), values, np.array(capacity, dtype=np.int64)


def old_sums(codes: NDArray[np.int32], size: int, capacity: NDArray[np.int64]) -> Any:
    labelled = codes != MISSING
    per = np.bincount(codes[labelled], weights=capacity[labelled], minlength=size)
    return per.astype(np.int64)


def old_parents(inner: NDArray[np.int32], size: int, outer: NDArray[np.int32]) -> Any:
    labelled = inner != MISSING
    lo = np.full(size, np.iinfo(np.int32).max, dtype=np.int64)
    hi = np.full(size, np.iinfo(np.int32).min, dtype=np.int64)
    np.minimum.at(lo, inner[labelled], outer[labelled])
    np.maximum.at(hi, inner[labelled], outer[labelled])
    return np.where((lo == hi) & (lo != MISSING), lo, MISSING)


@SETTINGS
@given(levels())
def test_sums_are_the_masked_bincount(level: Any) -> None:
    codes, values, capacity = level
    index = DomainIndex(codes, values)
    got = index.sums(capacity)
    assert got.dtype == np.int64
    assert got.tolist() == old_sums(codes, len(values), capacity).tolist()


@SETTINGS
@given(levels(), st.data())
def test_parents_are_the_min_max_pass(level: Any, data: st.DataObject) -> None:
    codes, values, _ = level
    outer_size = data.draw(st.integers(0, 5))
    n = codes.size
    outer_codes = data.draw(st.lists(st.integers(-1, outer_size - 1), min_size=n, max_size=n))
    outer = np.array(outer_codes, dtype=np.int32)
    outer_index = DomainIndex(outer, [f"o{i}" for i in range(outer_size)])
    index = DomainIndex(codes, values)
    got = index.parents(outer_index)
    assert got.tolist() == old_parents(codes, len(values), outer).tolist()
    assert index.parents(outer_index) is got  # kept per outer index


class _Frame:
    """The part of a Snapshot the topology functions read, over given columns."""

    def __init__(
        self,
        columns: dict[str, tuple[NDArray[np.int32], Sequence[str]]],
        free: NDArray[np.int64],
    ) -> None:
        self.columns = columns
        self.free = free
        self.n = free.shape[0]
        self.indexes: dict[str, DomainIndex] = {}

    def domain_column(self, key: str) -> tuple[NDArray[np.int32], Sequence[str]]:
        return self.columns[key]

    def domain_index(self, key: str) -> DomainIndex:
        if key not in self.indexes:
            self.indexes[key] = DomainIndex(*self.columns[key])
        return self.indexes[key]


def old_members_per_node(free: NDArray[np.int64], shape: NDArray[np.int64]) -> Any:
    cols = np.flatnonzero(shape)
    room = free[:, cols]
    return (np.maximum(room, 0) // shape[cols]).min(axis=1)


@SETTINGS
@given(st.data())
def test_members_per_node_is_the_clamped_division(data: st.DataObject) -> None:
    n = data.draw(st.integers(0, 30))
    width = data.draw(st.integers(1, 5))
    row = st.lists(st.integers(-(2**40), 2**40), min_size=width, max_size=width)
    free = np.array(data.draw(st.lists(row, min_size=n, max_size=n)), dtype=np.int64)
    free = free.reshape(n, width)
    free = np.asfortranarray(free) if data.draw(st.booleans()) else free
    amounts = st.sampled_from([0, 1, 1, 3, 100, 2**20])
    shape = np.array(data.draw(st.lists(amounts, min_size=width, max_size=width)), np.int64)
    shape[data.draw(st.integers(0, width - 1))] = 1  # a pod slot
    frame: Any = _Frame({}, free)
    got = members_per_node(frame, shape)
    assert got.dtype == np.int64
    assert got.tolist() == old_members_per_node(free, shape).tolist()
    given_free = free + 7
    assert members_per_node(frame, shape, given_free).tolist() == (
        old_members_per_node(given_free, shape).tolist()
    )


def old_smallest_inside(
    frame: _Frame, required_key: str, key: str, capacity: NDArray[np.int64], count: int
) -> DomainChoice | None:
    """`_smallest_inside` as it was: a masked bincount and a min/max pass per call."""
    codes, values = frame.domain_column(key)
    per_domain = old_sums(codes, len(values), capacity)
    fitting = np.flatnonzero(per_domain >= count)
    if fitting.size and required_key:
        req_codes, _ = frame.domain_column(required_key)
        parents = old_parents(codes, per_domain.size, req_codes)
        fitting = fitting[parents[fitting] != MISSING]
    if not fitting.size:
        return None
    best = int(fitting[np.argmin(per_domain[fitting])])
    return DomainChoice(codes == best, (values[best],))


@SETTINGS
@given(st.data())
def test_choose_levels_chooses_as_before(data: st.DataObject) -> None:
    n = data.draw(st.integers(1, 48))
    keys = ["leaf", "spine", "block"]
    columns: dict[str, tuple[NDArray[np.int32], Sequence[str]]] = {}
    for key in keys:
        size = data.draw(st.integers(1, 6))
        codes = data.draw(st.lists(st.integers(-1, size - 1), min_size=n, max_size=n))
        columns[key] = (np.array(codes, dtype=np.int32), [f"{key}{i}" for i in range(size)])
    capacity = np.array(data.draw(st.lists(st.integers(0, 6), min_size=n, max_size=n)), np.int64)
    count = data.draw(st.integers(1, 40))
    required = data.draw(st.sampled_from(["", "spine", "block"]))
    preferred = tuple(k for k in keys if k != required)[: data.draw(st.integers(1, 2))]
    frame: Any = _Frame(columns, np.zeros((n, 1), dtype=np.int64))

    def old(snap: Any, required_key: str, key: str, cap: Any, c: int) -> DomainChoice | None:
        return old_smallest_inside(frame, required_key, key, cap, c)

    def old_domains(snap: Any, key: str, cap: Any) -> tuple[Any, Sequence[str], Any]:
        codes, values = frame.domain_column(key)
        return codes, values, old_sums(codes, len(values), cap)

    # The old choice: the same function with the old per-gang computations under it.
    new_choice = choose_levels(frame, required, preferred, capacity, count)
    new_domains, new_smallest = topology._domains, topology._smallest_inside
    try:
        setattr(topology, "_domains", old_domains)  # noqa: B010
        setattr(topology, "_smallest_inside", old)  # noqa: B010
        old_choice = choose_levels(frame, required, preferred, capacity, count)
    finally:
        setattr(topology, "_domains", new_domains)  # noqa: B010
        setattr(topology, "_smallest_inside", new_smallest)  # noqa: B010
    assert new_choice.domains == old_choice.domains
    assert new_choice.message == old_choice.message
    if old_choice.rows is None:
        assert new_choice.rows is None
    else:
        assert new_choice.rows is not None
        assert new_choice.rows.tolist() == old_choice.rows.tolist()


def _hypernode(name: str, tier: int, members: list[dict[str, Any]]) -> HyperNode:
    raw = {"metadata": {"name": name}, "spec": {"tier": tier, "members": members}}
    return decode(raw, HyperNode)


def _nodes_member(*names: str) -> list[dict[str, Any]]:
    return [{"type": "Node", "selector": {"exactMatch": {"name": name}}} for name in names]


def test_domain_index_follows_node_and_hypernode_changes() -> None:
    h = SchedulerHarness(seed=1)
    for i in range(4):
        h.add_nodes(make_node(f"n{i}").capacity(cpu="2").labels(rack=f"r{i // 2}"))
    snap = h.scheduler.snapshot
    first = snap.domain_index("rack")
    assert snap.domain_index("rack") is first  # kept while nothing changes
    assert first.sums(np.ones(4, dtype=np.int64)).tolist() == [2, 2]
    h.update_node(make_node("n1").capacity(cpu="2").labels(rack="r1"))
    moved = snap.domain_index("rack")
    assert moved is not first
    assert moved.sums(np.ones(4, dtype=np.int64)).tolist() == [1, 3]
    h.add_nodes(make_node("n4").capacity(cpu="2").labels(rack="r2"))
    assert snap.domain_index("rack").sums(np.ones(5, dtype=np.int64)).tolist() == [1, 3, 1]

    h.scheduler.upsert_hypernode(_hypernode("leaf-a", 1, _nodes_member("n0", "n1")))
    key = tier_key(1)
    tier = snap.domain_index(key)
    assert tier.sums(np.ones(5, dtype=np.int64)).tolist() == [2]
    h.scheduler.upsert_hypernode(_hypernode("leaf-a", 1, _nodes_member("n0", "n1", "n2")))
    grown = snap.domain_index(key)
    assert grown is not tier
    assert grown.sums(np.ones(5, dtype=np.int64)).tolist() == [3]
