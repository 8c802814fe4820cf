"""Can a pod's device requests be allocated on each node, and which devices exactly.

Pure functions over the device table (`shoal.cache.dra`): a device is a row, with the
node row it is on (`GLOBAL` for slices with `allNodes`, `-1` for nodes not in the
cache), whether it is free, and per request whether it matches.

* `feasible` answers for every node at once. Requests need distinct devices, so a
  node passes exactly when Hall's condition holds: for every set S of requests, the
  free devices matching some request of S are at least the devices S needs. That is
  one `bincount` per subset (pods ask for few requests; up to `MAX_SUBSETS_REQUESTS`
  are checked exhaustively). One `matchAttribute` constraint is checked the same way
  over (node, attribute value) groups. Pods beyond that (several constraints, many
  requests, `All` under a constraint) get the necessary checks vectorised and the
  exact search (`allocate`) on the nodes that pass them.
* `allocate` picks the devices on one node: for each choice of constrained attribute
  values, `All` requests take every matching device and the others are matched by
  augmenting paths; the first complete assignment wins (devices in table order, so
  the choice is deterministic).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

__all__ = ["GLOBAL", "MAX_SUBSETS_REQUESTS", "Constraint", "Req", "Verdict", "allocate", "feasible"]

GLOBAL = -2
MAX_SUBSETS_REQUESTS = 8
_MAX_VALUE_CHOICES = 4096


@dataclass
class Req:
    """One request of one unallocated claim."""

    claim: str  # claim key
    name: str  # request name
    class_name: str
    match: NDArray[np.bool_]  # per device: class and request selectors match
    all_mode: bool = False
    count: int = 1
    has_selectors: bool = False


@dataclass
class Constraint:
    claim: str
    attribute: str  # qualified: domain/name
    requests: list[int]  # indexes into the pod's request list
    codes: NDArray[np.int64]  # per device: value code of the attribute, -1 if missing


@dataclass
class Verdict:
    passed: NDArray[np.bool_]
    reasons: list[tuple[str, NDArray[np.bool_]]] = field(default_factory=list)


def _count(mask: NDArray[np.bool_], rows: NDArray[np.intp], n: int) -> NDArray[np.int64]:
    local = mask & (rows >= 0)
    out = np.bincount(rows[local], minlength=n)[:n].astype(np.int64)
    out += int(np.count_nonzero(mask & (rows == GLOBAL)))
    return out


def _need_vectors(
    reqs: Sequence[Req], totals: list[NDArray[np.int64]], n: int
) -> list[NDArray[np.int64]]:
    return [
        totals[i] if r.all_mode else np.full(n, r.count, dtype=np.int64) for i, r in enumerate(reqs)
    ]


def feasible(
    reqs: Sequence[Req],
    constraints: Sequence[Constraint],
    rows: NDArray[np.intp],
    free: NDArray[np.bool_],
    n: int,
    exact: Callable[[int], bool],
) -> Verdict:
    """Per node row 0..n-1: can every request get its devices? `exact(row)` is the
    per-node search, called only where the vectorised checks are not exact."""
    passed = np.ones(n, dtype=bool)
    reasons: list[tuple[str, NDArray[np.bool_]]] = []

    def fail(mask: NDArray[np.bool_], reason: str) -> None:
        new = mask & passed
        if new.any():
            reasons.append((reason, new))
            passed[new] = False

    totals = [_count(r.match, rows, n) for r in reqs]
    frees = [_count(r.match & free, rows, n) for r in reqs]
    for i, r in enumerate(reqs):
        what = f"{r.claim.partition('/')[2]}/{r.name}"
        selectors = " and its selectors" if r.has_selectors else ""
        fail(totals[i] == 0, f"no device of class {r.class_name}{selectors} for request {what}")
        if r.all_mode:
            fail(
                frees[i] < totals[i],
                f"not all devices for request {what} (allocationMode All) are free",
            )
        else:
            for have in np.unique(frees[i][passed & (frees[i] < r.count)]):
                fail(
                    passed & (frees[i] == have),
                    f"only {have} of {r.count} requested devices free for {what}",
                )
    needs = _need_vectors(reqs, totals, n)
    k = len(reqs)
    if k > 1:
        subsets: list[tuple[int, ...]]
        if k <= MAX_SUBSETS_REQUESTS:
            subsets = [
                s for size in range(2, k + 1) for s in itertools.combinations(range(k), size)
            ]
        else:
            subsets = [tuple(range(k))]
        for subset in subsets:
            union = np.zeros_like(free)
            need = np.zeros(n, dtype=np.int64)
            for i in subset:
                union |= reqs[i].match
                need += needs[i]
            fail(
                _count(union & free, rows, n) < need,
                "not enough free devices for all of the pod's device requests",
            )
    all_constrained = any(reqs[i].all_mode for c in constraints for i in c.requests)
    approximate = k > MAX_SUBSETS_REQUESTS or len(constraints) > 1 or all_constrained
    if len(constraints) == 1 and not all_constrained:
        c = constraints[0]
        ok = _one_constraint(reqs, c, rows, free, n, needs)
        fail(~ok, f"cannot satisfy matchAttribute {c.attribute} for claim {_name(c.claim)}")
    if approximate:
        for row in np.flatnonzero(passed):
            if not exact(int(row)):
                mask = np.zeros(n, dtype=bool)
                mask[row] = True
                what = constraints[0].attribute if constraints else ""
                reason = (
                    f"cannot satisfy matchAttribute {what} together with the other requests"
                    if constraints
                    else "not enough free devices for all of the pod's device requests"
                )
                fail(mask, reason)
    return Verdict(passed, reasons)


def _name(key: str) -> str:
    return key.partition("/")[2]


def _one_constraint(
    reqs: Sequence[Req],
    c: Constraint,
    rows: NDArray[np.intp],
    free: NDArray[np.bool_],
    n: int,
    needs: list[NDArray[np.int64]],
) -> NDArray[np.bool_]:
    """Hall's condition over (node, value) groups: constrained requests take devices
    whose attribute has the group's value, the others any device of the node."""
    constrained = set(c.requests)
    codes = c.codes
    any_c = np.zeros_like(free)
    for i in constrained:
        any_c |= reqs[i].match
    valued = any_c & free & (codes >= 0)
    if not valued.any():
        return np.zeros(n, dtype=bool)
    width = int(codes.max()) + 1
    local = valued & (rows >= 0)
    keys = np.unique(rows[local].astype(np.int64) * width + codes[local])
    global_values = np.unique(codes[valued & (rows == GLOBAL)])
    if global_values.size:
        extra = (np.arange(n, dtype=np.int64)[:, None] * width + global_values[None, :]).ravel()
        keys = np.union1d(keys, extra)
    unit_row = keys // width
    unit_value = keys % width
    ok = np.ones(keys.size, dtype=bool)
    k = len(reqs)
    subsets = [s for size in range(1, k + 1) for s in itertools.combinations(range(k), size)]
    for subset in subsets:
        s_c = [i for i in subset if i in constrained]
        if not s_c:
            continue  # checked per node already
        union_u = np.zeros_like(free)
        for i in subset:
            if i not in constrained:
                union_u |= reqs[i].match
        union_c = np.zeros_like(free)
        for i in s_c:
            union_c |= reqs[i].match
        a = union_u & free
        b = union_c & free & ~a & (codes >= 0)
        count_a = _count(a, rows, n)[unit_row]
        count_b = _group_count(b, rows, codes, width, keys, n)
        need = np.zeros(keys.size, dtype=np.int64)
        for i in subset:
            need += needs[i][unit_row]
        ok &= count_a + count_b >= need
    del unit_value
    out = np.zeros(n, dtype=bool)
    np.logical_or.at(out, unit_row, ok)
    return out


def _group_count(
    mask: NDArray[np.bool_],
    rows: NDArray[np.intp],
    codes: NDArray[np.int64],
    width: int,
    keys: NDArray[np.int64],
    n: int,
) -> NDArray[np.int64]:
    out = np.zeros(keys.size, dtype=np.int64)
    local = mask & (rows >= 0)
    if local.any():
        dev_keys = rows[local].astype(np.int64) * width + codes[local]
        at = np.searchsorted(keys, dev_keys)
        np.add.at(out, at, 1)
    glob = mask & (rows == GLOBAL)
    if glob.any():
        per_value = np.bincount(codes[glob], minlength=width)
        out += per_value[keys % width]
    return out


def allocate(
    reqs: Sequence[Req],
    constraints: Sequence[Constraint],
    devices: NDArray[np.intp],
    free: NDArray[np.bool_],
) -> list[list[int]] | None:
    """Devices (table indexes) per request on one node, or None. `devices` are the
    node's devices (node-local and reachable from every node), in table order."""
    choices: list[list[int]] = []
    for c in constraints:
        values: set[int] = set()
        for i in c.requests:
            cand = devices[reqs[i].match[devices]]
            values.update(int(v) for v in c.codes[cand] if v >= 0)
        choices.append(sorted(values))
    combos = itertools.islice(itertools.product(*choices), _MAX_VALUE_CHOICES)
    for combo in combos:
        found = _assign(reqs, constraints, combo, devices, free)
        if found is not None:
            return found
    return None


def _assign(
    reqs: Sequence[Req],
    constraints: Sequence[Constraint],
    combo: tuple[int, ...],
    devices: NDArray[np.intp],
    free: NDArray[np.bool_],
) -> list[list[int]] | None:
    candidates: list[list[int]] = []
    for i, r in enumerate(reqs):
        mask = r.match[devices]
        if r.all_mode:
            # Every matching device of the node; a constraint cannot narrow that set,
            # all of them must have its value.
            cand = devices[mask]
            if cand.size == 0 or not free[cand].all():
                return None
            for c, value in zip(constraints, combo, strict=True):
                if i in c.requests and not (c.codes[cand] == value).all():
                    return None
            candidates.append([int(d) for d in cand])
            continue
        for c, value in zip(constraints, combo, strict=True):
            if i in c.requests:
                mask = mask & (c.codes[devices] == value)
        cand = devices[mask]
        candidates.append([int(d) for d in cand if free[d]])
    owner: dict[int, int] = {}  # device -> slot
    out: list[list[int]] = [[] for _ in reqs]
    for i, r in enumerate(reqs):
        if r.all_mode:
            for d in candidates[i]:
                if d in owner:
                    return None
                owner[d] = -1 - i
            out[i] = list(candidates[i])
    slots = [i for i, r in enumerate(reqs) if not r.all_mode for _ in range(r.count)]
    slot_of: dict[int, int] = {}

    def augment(slot: int, seen: set[int]) -> bool:
        for d in candidates[slots[slot]]:
            if d in seen:
                continue
            seen.add(d)
            holder = slot_of.get(d)
            if holder is None and d not in owner:
                slot_of[d] = slot
                return True
            if holder is not None and augment(holder, seen):
                slot_of[d] = slot
                return True
        return False

    for slot in range(len(slots)):
        if not augment(slot, set()):
            return None
    for d, slot in sorted(slot_of.items()):
        out[slots[slot]].append(d)
    return out
