"""The vectorised verdict (`feasible`, every node at once) agrees with the exact
per-node search (`allocate`) that picks the devices, and what `allocate` picks keeps
every rule: distinct free devices, counts, All, matchAttribute; with devices shared by
capacity and devices taking shared counters, also capacity and counters."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from shoal.cache.dra_alloc import (
    GLOBAL,
    SELECTED,
    Constraint,
    Counters,
    Devices,
    Reach,
    Req,
    allocate,
    feasible,
)
from shoal.cache.dra_capacity import Demand


@st.composite
def _cases(
    draw: st.DrawFn, max_devices: int = 14
) -> tuple[list[Req], list[Constraint], np.ndarray, np.ndarray, int]:
    n = draw(st.integers(min_value=1, max_value=4))
    d = draw(st.integers(min_value=0, max_value=max_devices))
    rows = np.array(
        draw(st.lists(st.sampled_from([*range(n), GLOBAL, -1]), min_size=d, max_size=d)),
        dtype=np.intp,
    )
    free = np.array(draw(st.lists(st.booleans(), min_size=d, max_size=d)), dtype=bool)
    codes = np.array(
        draw(st.lists(st.integers(min_value=-1, max_value=2), min_size=d, max_size=d)),
        dtype=np.int64,
    )
    k = draw(st.integers(min_value=1, max_value=3))
    reqs = []
    for i in range(k):
        match = np.array(draw(st.lists(st.booleans(), min_size=d, max_size=d)), dtype=bool)
        all_mode = draw(st.booleans()) and draw(st.booleans())
        count = draw(st.integers(min_value=1, max_value=3))
        reqs.append(Req("default/c", f"r{i}", "cls", match, all_mode=all_mode, count=count))
    constraints = []
    if draw(st.booleans()):
        members = sorted(draw(st.sets(st.integers(min_value=0, max_value=k - 1), min_size=1)))
        distinct = draw(st.booleans()) and draw(st.booleans())
        constraints.append(Constraint("default/c", "x/attr", members, codes, distinct=distinct))
    return reqs, constraints, rows, free, n


@settings(max_examples=400, deadline=None)
@given(_cases())
def test_the_verdict_is_the_exact_search(
    case: tuple[list[Req], list[Constraint], np.ndarray, np.ndarray, int],
) -> None:
    reqs, constraints, rows, free, n = case

    def devices(row: int) -> np.ndarray:
        return np.flatnonzero((rows == row) | (rows == GLOBAL)).astype(np.intp)

    def exact(row: int) -> bool:
        return allocate(reqs, constraints, devices(row), free) is not None

    verdict = feasible(reqs, constraints, rows, free, n, exact)
    for row in range(n):
        chosen = allocate(reqs, constraints, devices(row), free)
        assert verdict.passed[row] == (chosen is not None), (row, chosen)
        failing = [reason for reason, mask in verdict.reasons if mask[row]]
        assert (len(failing) > 0) == (chosen is None)
        if chosen is None:
            continue
        flat = [dev for devs in chosen for dev in devs]
        assert len(flat) == len(set(flat))
        assert all(free[dev] and rows[dev] in (row, GLOBAL) for dev in flat)
        for req, devs in zip(reqs, chosen, strict=True):
            assert all(req.match[dev] for dev in devs)
            if not req.all_mode:
                assert len(devs) == req.count
        for c in constraints:
            taken = [int(c.codes[dev]) for i in c.requests for dev in chosen[i]]
            if c.distinct:
                assert -1 not in taken and len(set(taken)) == len(taken), taken
                continue
            values = set(taken)
            assert len(values) == 1 and -1 not in values


@settings(max_examples=400, deadline=None)
@given(_cases(), st.data())
def test_with_network_attached_devices_the_verdict_is_the_exact_search(
    case: tuple[list[Req], list[Constraint], np.ndarray, np.ndarray, int], data: st.DataObject
) -> None:
    """Some devices are reachable from the nodes a selector group picks (`Reach`):
    counted for those nodes, in the (node, value) groups of a constraint too."""
    reqs, constraints, rows, free, n = case
    d = rows.size
    groups = data.draw(st.integers(min_value=1, max_value=3))
    group = np.array(
        data.draw(st.lists(st.integers(-1, groups - 1), min_size=d, max_size=d)), dtype=np.intp
    )
    rows = np.where(group >= 0, SELECTED, rows).astype(np.intp)
    nodes = np.array(
        data.draw(st.lists(st.booleans(), min_size=groups * n, max_size=groups * n)), dtype=bool
    ).reshape(groups, n)
    reach = Reach(group, nodes)

    def devices(row: int) -> np.ndarray:
        mask = (rows == row) | (rows == GLOBAL)
        mask[reach.of(row)] = True
        return np.flatnonzero(mask).astype(np.intp)

    def exact(row: int) -> bool:
        return allocate(reqs, constraints, devices(row), free) is not None

    verdict = feasible(reqs, constraints, rows, free, n, exact, reach=reach)
    for row in range(n):
        chosen = allocate(reqs, constraints, devices(row), free)
        assert verdict.passed[row] == (chosen is not None), (row, chosen)
        if chosen is not None:
            flat = [dev for devs in chosen for dev in devs]
            assert all(
                rows[dev] in (row, GLOBAL) or (group[dev] >= 0 and nodes[group[dev], row])
                for dev in flat
            )


@st.composite
def _shared_cases(
    draw: st.DrawFn,
) -> tuple[list[Req], list[Constraint], np.ndarray, Devices, int]:
    """Devices shared by capacity (one capacity column) and devices taking counters;
    mostly free, matching and taking counters, so that they compete."""
    reqs, constraints, rows, free, n = draw(_cases(max_devices=7))
    d = free.size
    likely = st.sampled_from([True, True, True, False])

    def flags(choice: st.SearchStrategy[bool]) -> np.ndarray:
        return np.array(draw(st.lists(choice, min_size=d, max_size=d)), dtype=bool)

    free = flags(likely)
    for r in reqs:
        r.match = flags(likely)
    multi = flags(st.sampled_from([True, False, False]))
    cap = np.array(
        draw(st.lists(st.integers(min_value=0, max_value=6), min_size=d, max_size=d)),
        dtype=np.int64,
    ).reshape(d, 1)
    used = np.array(
        [draw(st.integers(min_value=0, max_value=int(c))) for c in cap[:, 0]], dtype=np.int64
    ).reshape(d, 1)
    used[~multi] = 0
    shares = np.where(multi & (used[:, 0] > 0), 1, 0).astype(np.int32)
    for r in reqs:
        cons = np.array(
            draw(st.lists(st.integers(min_value=0, max_value=4), min_size=d, max_size=d)),
            dtype=np.int64,
        ).reshape(d, 1)
        r.demand = Demand(np.ones(d, bool), cons, [], np.zeros(d, np.intp), True)
    width = draw(st.integers(min_value=1, max_value=2))
    entries = [
        (i, draw(st.integers(min_value=0, max_value=width - 1)), draw(st.integers(1, 3)))
        for i in range(d)
        if draw(likely)
    ]
    dev = np.array([e[0] for e in entries], dtype=np.intp)
    ctr = np.array([e[1] for e in entries], dtype=np.intp)
    amt = np.array([e[2] for e in entries], dtype=np.int64)
    consumes = np.zeros(d, dtype=bool)
    consumes[dev] = True
    remaining = np.array(
        draw(st.lists(st.integers(0, 5), min_size=width, max_size=width)), dtype=np.int64
    )
    start = np.searchsorted(dev, np.arange(d + 1)).astype(np.intp)
    counters = Counters(dev, ctr, amt, start, consumes, np.zeros(d, bool), remaining)
    state = Devices(free | multi, multi, shares, used, cap, counters)
    return reqs, constraints, rows, state, n


@settings(max_examples=600, deadline=None)
@given(_shared_cases())
def test_with_shared_devices_and_counters_the_verdict_is_the_exact_search(
    case: tuple[list[Req], list[Constraint], np.ndarray, Devices, int],
) -> None:
    reqs, constraints, rows, state, n = case
    assert state.multi is not None and state.used is not None and state.cap is not None
    assert state.shares is not None and state.counters is not None
    counters = state.counters

    def devices(row: int) -> np.ndarray:
        return np.flatnonzero((rows == row) | (rows == GLOBAL)).astype(np.intp)

    def exact(row: int) -> bool:
        return allocate(reqs, constraints, devices(row), state) is not None

    verdict = feasible(reqs, constraints, rows, state, n, exact)
    for row in range(n):
        chosen = allocate(reqs, constraints, devices(row), state)
        assert verdict.passed[row] == (chosen is not None), (row, chosen)
        if chosen is None:
            continue
        whole = [dev for devs in chosen for dev in devs if not state.multi[dev]]
        assert len(whole) == len(set(whole))
        assert all(state.free[dev] for dev in whole)
        extra = np.zeros_like(state.used)
        new: set[int] = set(whole)
        for req, devs in zip(reqs, chosen, strict=True):
            assert len(devs) == len(set(devs))  # a request never takes a device twice
            assert all(req.match[dev] and rows[dev] in (row, GLOBAL) for dev in devs)
            if not req.all_mode:
                assert len(devs) == req.count
            assert req.demand is not None and req.demand.cons is not None
            for dev in devs:
                if state.multi[dev]:
                    extra[dev] += req.demand.cons[dev]
                    if state.shares[dev] == 0:
                        new.add(dev)
        assert (state.used + extra <= state.cap).all()
        spent = np.zeros_like(counters.remaining)
        for dev in new:
            lo, hi = counters.start[dev], counters.start[dev + 1]
            np.add.at(spent, counters.ctr[lo:hi], counters.amt[lo:hi])
        assert (spent <= counters.remaining).all()
        for c in constraints:
            taken = [int(c.codes[dev]) for i in c.requests for dev in chosen[i]]
            if c.distinct:
                assert -1 not in taken and len(set(taken)) == len(taken), taken
                continue
            values = set(taken)
            assert len(values) == 1 and -1 not in values
