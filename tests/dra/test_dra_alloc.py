"""The vectorised verdict (`feasible`, every node at once) agrees with the exact
per-node search (`allocate`) that picks the devices, and what `allocate` picks keeps
every rule: distinct free devices, counts, All, matchAttribute."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from shoal.cache.dra_alloc import GLOBAL, Constraint, Req, allocate, feasible


@st.composite
def _cases(draw: st.DrawFn) -> tuple[list[Req], list[Constraint], np.ndarray, np.ndarray, int]:
    n = draw(st.integers(min_value=1, max_value=4))
    d = draw(st.integers(min_value=0, max_value=14))
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
        constraints.append(Constraint("default/c", "x/attr", members, codes))
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
            values = {int(c.codes[dev]) for i in c.requests for dev in chosen[i]}
            assert len(values) == 1 and -1 not in values
