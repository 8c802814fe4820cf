"""Can a pod's device requests be allocated on each node, and which devices exactly.

Pure functions over the device table (`shoal.cache.dra`): a device is a row, with the
node row it is on (`GLOBAL` for slices with `allNodes`, `-1` for nodes not in the
cache), whether it is free, and per request whether it matches. `Devices` is the
state of the devices: free (not allocated whole), and where the table has them, the
shares of devices that allow multiple allocations with the capacity they consume, and
the pools' shared counters (`shoal.cache.dra_capacity`).

* `available` says per device whether a request can take it now: free, matching, with
  capacity left for the request on a shared device, with the counters it consumes left
  in its pool.
* `feasible` answers for every node at once. Requests need distinct devices, so a
  node passes exactly when Hall's condition holds: for every set S of requests, the
  available devices of some request of S are at least the devices S needs. That is
  one `bincount` per subset (pods ask for few requests; up to `MAX_SUBSETS_REQUESTS`
  are checked exhaustively). One `matchAttribute` constraint is checked the same way
  over (node, attribute value) groups. A shared device can serve several requests (it
  counts once per request in the subsets, a necessary condition), and devices taking
  shared counters may exclude each other: a node where the pod could use such devices
  and needs more than one device gets the exact search, as do pods beyond the exact
  vectorised checks (several constraints, many requests, `All` under a constraint);
  a pod asking one device of one request is judged exactly by the columns alone.
* `allocate` picks the devices on one node: for each choice of constrained attribute
  values, `All` requests take every matching device and the others are matched by
  augmenting paths; where shared devices or counters are among the candidates, a
  depth-first search in table order (kube's allocator's order) that tracks the
  capacity and counters taken so far, bounded by `SEARCH_LIMIT` steps (past that the
  node is refused: never an allocation over capacity). The first complete assignment
  wins (devices in table order, so the choice is deterministic).
* Taints are folded into `Req.match` by the plugin (a device whose NoSchedule or
  NoExecute taint the request does not tolerate does not match; `untolerated` keeps
  them for the explanation and for `All`, which fails on a node with such a device).
* `choices` lists the pod's requests with each `firstAvailable` request replaced by
  one of its sub-requests, in kube's order; each choice is judged like plain requests.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np
from numpy.typing import NDArray

from shoal.cache.dra_capacity import Demand

__all__ = [
    "GLOBAL",
    "MAX_SUBSETS_REQUESTS",
    "SEARCH_LIMIT",
    "SELECTED",
    "Constraint",
    "Counters",
    "Devices",
    "Prepared",
    "Reach",
    "Req",
    "Verdict",
    "allocate",
    "available",
    "choices",
    "feasible",
    "prepare",
]

GLOBAL = -2
# The row of a device of a slice that selects its nodes (`nodeSelector`, a network-
# attached pool): which nodes reach it is in `Reach`.
SELECTED = -3
MAX_SUBSETS_REQUESTS = 8
SEARCH_LIMIT = 20000
_MAX_VALUE_CHOICES = 4096


@dataclass(frozen=True)
class Reach:
    """Devices reachable from the nodes a node selector picks (row `SELECTED`): each
    such device's selector group, and per group the node rows it reaches."""

    group: NDArray[np.intp]  # per device: its group, -1 for devices of one or all nodes
    nodes: NDArray[np.bool_]  # [groups, node rows]

    def count(self, mask: NDArray[np.bool_], n: int) -> NDArray[np.int64]:
        """Per node row 0..n-1: how many devices of `mask` it reaches this way."""
        picked = self.group[mask & (self.group >= 0)]
        if not picked.size:
            return np.zeros(n, dtype=np.int64)
        per_group = np.bincount(picked, minlength=self.nodes.shape[0]).astype(np.int64)
        return (per_group @ self.nodes[:, :n].astype(np.int64)).astype(np.int64)

    def of(self, row: int) -> NDArray[np.intp]:
        """The devices node `row` reaches this way, in table order."""
        if row < 0 or row >= self.nodes.shape[1]:
            return np.zeros(0, np.intp)
        grouped = self.group >= 0
        ok = np.zeros(self.group.size, dtype=bool)
        ok[grouped] = self.nodes[self.group[grouped], row]
        return np.flatnonzero(ok).astype(np.intp)

    def rows_of(self, device: int, n: int) -> NDArray[np.bool_]:
        """The node rows 0..n-1 that reach `device`."""
        g = int(self.group[device])
        if g < 0:
            return np.zeros(n, dtype=bool)
        return self.nodes[g, :n].copy()


@dataclass
class Req:
    """One request of one unallocated claim."""

    claim: str  # claim key
    name: str  # request name
    class_name: str
    match: NDArray[np.bool_]  # per device: class and request selectors (and capacity) match
    all_mode: bool = False
    count: int = 1
    has_selectors: bool = False
    demand: Demand | None = None  # what it takes of capacities (tables with shared devices)
    # Devices the selectors match but whose taints the request does not tolerate (None:
    # none), and one such taint, named in the explanation.
    untolerated: NDArray[np.bool_] | None = None
    taint: str = ""
    # adminAccess: any matching device, in use or not; it takes nothing from others.
    admin: bool = False


@dataclass
class Constraint:
    claim: str
    attribute: str  # qualified: domain/name
    requests: list[int]  # indexes into the pod's request list
    codes: NDArray[np.int64]  # per device: value code of the attribute, -1 if missing
    # Members named only as `<request>/<subrequest>`: the index -> those names; the
    # member counts only when one of those sub-requests is the one chosen.
    only: dict[int, frozenset[str]] = field(default_factory=dict)
    # distinctAttribute (KEP-5075) instead of matchAttribute: every device of the listed
    # requests has the attribute, each with a value of its own (e.g. shares of
    # different physical GPUs). Judged by the exact search only.
    distinct: bool = False


@dataclass
class Counters:
    """The pools' shared counters now: what each device takes (entries of device d at
    `start[d]:start[d+1]`), what is left of each counter, and per device whether its
    take fits what is left (False for devices naming unknown counters)."""

    dev: NDArray[np.intp]
    ctr: NDArray[np.intp]
    amt: NDArray[np.int64]
    start: NDArray[np.intp]
    consumes: NDArray[np.bool_]
    broken: NDArray[np.bool_]
    remaining: NDArray[np.int64]
    takes: dict[int, tuple[tuple[int, int], ...]] | None = None  # device -> (counter, amount)
    fit: NDArray[np.bool_] = field(init=False)

    def __post_init__(self) -> None:
        fit = ~self.broken
        short = self.amt > self.remaining[self.ctr]
        fit[self.dev[short]] = False
        self.fit = fit


@dataclass
class Devices:
    """The devices' state: `free` (not allocated whole). Where the table has devices
    that allow multiple allocations: which (`multi`), their shares and the capacity
    consumed (`used`, of `cap`, scaled columns). Where devices consume shared counters:
    `counters`."""

    free: NDArray[np.bool_]
    multi: NDArray[np.bool_] | None = None
    shares: NDArray[np.int32] | None = None
    used: NDArray[np.int64] | None = None
    cap: NDArray[np.int64] | None = None
    counters: Counters | None = None
    _special: NDArray[np.bool_] | None = field(default=None, init=False, repr=False)
    _multi_rows: NDArray[np.intp] | None = field(default=None, init=False, repr=False)

    def with_free(self, free: NDArray[np.bool_]) -> Devices:
        return replace(self, free=free)

    def holding(self, held: NDArray[np.bool_]) -> Devices:
        """The state with the `held` devices kept for someone else: not free, and the
        counters of those not in use yet taken."""
        counters = self.counters
        if counters is not None:
            in_use = ~self.free
            if self.shares is not None:
                in_use = in_use | (self.shares > 0)
            new = held & ~in_use
            if new.any():
                spent = np.zeros_like(counters.remaining)
                taking = new[counters.dev]
                np.add.at(spent, counters.ctr[taking], counters.amt[taking])
                counters = replace(counters, remaining=counters.remaining - spent)
        return replace(self, free=self.free & ~held, counters=counters)

    @property
    def special(self) -> NDArray[np.bool_] | None:
        """Per device: shared by capacity or taking counters (None: no such device)."""
        if self._special is None and (self.multi is not None or self.counters is not None):
            special = np.zeros_like(self.free)
            if self.multi is not None:
                special |= self.multi
            if self.counters is not None:
                special |= self.counters.consumes
            self._special = special
        return self._special

    @property
    def multi_rows(self) -> NDArray[np.intp]:
        if self._multi_rows is None:
            self._multi_rows = (
                np.flatnonzero(self.multi).astype(np.intp)
                if self.multi is not None
                else np.zeros(0, np.intp)
            )
        return self._multi_rows


def _as_devices(state: Devices | NDArray[np.bool_]) -> Devices:
    return state if isinstance(state, Devices) else Devices(state)


def _fits(r: Req, state: Devices) -> NDArray[np.bool_] | None:
    """Per device: room left for the request's consumption (shared devices), or None
    when nothing limits it."""
    demand = r.demand
    if demand is None or demand.cons is None or state.used is None or state.cap is None:
        return None
    if state.used.shape[1] == 0:
        return None
    rows = state.multi_rows
    out = np.ones(state.free.size, dtype=bool)
    out[rows] = ((state.used[rows] + demand.cons[rows]) <= state.cap[rows]).all(axis=1)
    return out


def available(r: Req, state: Devices | NDArray[np.bool_]) -> NDArray[np.bool_]:
    """Per device: can the request take it now (free and matching; capacity left on a
    shared device; its counters left, unless it is a shared device in use already)."""
    state = _as_devices(state)
    if r.admin:
        return r.match.copy()
    mask = r.match & state.free
    fits = _fits(r, state)
    if fits is not None:
        mask &= fits
    counters = state.counters
    if counters is not None:
        ok = counters.fit
        if state.multi is not None and state.shares is not None:
            ok = ok | (state.multi & (state.shares > 0) & ~counters.broken)
        mask &= ok
    return mask


def _all_set(r: Req, state: Devices) -> NDArray[np.bool_]:
    """The devices an `All` request takes: every matching device (a shared device only
    while it has room for the request, as kube's allocator lists them)."""
    fits = _fits(r, state)
    return r.match if fits is None else r.match & fits


@dataclass
class Prepared:
    """Per request: the devices it can take now (`avail`) and, for `All`, the devices it
    must take (`sets`; the same as `avail` for the other requests)."""

    avail: list[NDArray[np.bool_]]
    sets: list[NDArray[np.bool_]]


def prepare(reqs: Sequence[Req], state: Devices | NDArray[np.bool_]) -> Prepared:
    state = _as_devices(state)
    avail = [available(r, state) for r in reqs]
    return Prepared(
        avail,
        [_all_set(r, state) if r.all_mode else a for r, a in zip(reqs, avail, strict=True)],
    )


@dataclass
class Verdict:
    passed: NDArray[np.bool_]
    reasons: list[tuple[str, NDArray[np.bool_]]] = field(default_factory=list)


MAX_CHOICES = 64


def choices(
    reqs: list[Req], constraints: list[Constraint], options: dict[int, list[Req]]
) -> list[tuple[list[Req], list[Constraint]]]:
    """The pod's requests once each request with `firstAvailable` sub-requests
    (`options`: request index -> its sub-requests, in order) is replaced by one of
    them, in kube's order: the first request's sub-requests outermost, each in list
    order (at most `MAX_CHOICES`). A constraint member naming one sub-request counts
    only where it is chosen; a constraint left without members is dropped."""
    if not options:
        return [(reqs, constraints)]
    at = sorted(options)
    out: list[tuple[list[Req], list[Constraint]]] = []
    for picked in itertools.product(*(options[i] for i in at)):
        chosen = list(reqs)
        for i, sub in zip(at, picked, strict=True):
            chosen[i] = sub
        kept: list[Constraint] = []
        for c in constraints:
            if not c.only:
                kept.append(c)
                continue
            members = [i for i in c.requests if i not in c.only or chosen[i].name in c.only[i]]
            if members:
                kept.append(replace(c, requests=members, only={}))
        out.append((chosen, kept))
        if len(out) >= MAX_CHOICES:
            break
    return out


def _count(
    mask: NDArray[np.bool_], rows: NDArray[np.intp], n: int, reach: Reach | None = None
) -> NDArray[np.int64]:
    local = mask & (rows >= 0)
    out = np.bincount(rows[local], minlength=n)[:n].astype(np.int64)
    out += int(np.count_nonzero(mask & (rows == GLOBAL)))
    if reach is not None:
        out += reach.count(mask, n)
    return out


def feasible(
    reqs: Sequence[Req],
    constraints: Sequence[Constraint],
    rows: NDArray[np.intp],
    state: Devices | NDArray[np.bool_],
    n: int,
    exact: Callable[[int], bool],
    prepared: Prepared | None = None,
    reach: Reach | None = None,
) -> Verdict:
    """Per node row 0..n-1: can every request get its devices? `exact(row)` is the
    per-node search, called only where the vectorised checks are not exact."""
    state = _as_devices(state)
    prep = prepared if prepared is not None else prepare(reqs, state)
    passed = np.ones(n, dtype=bool)
    reasons: list[tuple[str, NDArray[np.bool_]]] = []

    def fail(mask: NDArray[np.bool_], reason: str) -> None:
        new = mask & passed
        if new.any():
            reasons.append((reason, new))
            passed[new] = False

    special = state.special
    multi = state.multi if state.multi is not None and state.multi.any() else None
    totals = [_count(r.match, rows, n, reach) for r in reqs]
    frees = [_count(a, rows, n, reach) for a in prep.avail]
    needs: list[NDArray[np.int64]] = []
    for i, r in enumerate(reqs):
        what = f"{r.claim.partition('/')[2]}/{r.name}"
        wanted = " and its selectors" if r.has_selectors else ""
        if r.demand is not None and r.demand.requested:
            wanted += " and capacity requests"
        if r.untolerated is not None:
            fail(
                (totals[i] == 0) & (_count(r.untolerated, rows, n, reach) > 0),
                f"no device of class {r.class_name}{wanted} for request {what} "
                f"tolerates its taints ({r.taint})",
            )
        fail(totals[i] == 0, f"no device of class {r.class_name}{wanted} for request {what}")
        shared = special is not None and bool((r.match & special).any())
        room = " (with the capacity and shared counters it takes left)" if shared else ""
        if r.all_mode:
            if r.untolerated is not None:
                # kube: every matching device must be allocated, a tainted one too.
                fail(
                    _count(r.untolerated, rows, n, reach) > 0,
                    f"no device set for request {what} (allocationMode All): "
                    f"{r.taint}, not tolerated",
                )
            need = _count(prep.sets[i], rows, n, reach)
            fail(need == 0, f"no device for request {what} (allocationMode All) has room left")
            fail(
                frees[i] < need,
                f"not all devices for request {what} (allocationMode All) are free{room}",
            )
            needs.append(need)
        else:
            for have in np.unique(frees[i][passed & (frees[i] < r.count)]):
                fail(
                    passed & (frees[i] == have),
                    f"only {have} of {r.count} requested devices free for {what}{room}",
                )
            needs.append(np.full(n, r.count, dtype=np.int64))
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
            union = np.zeros_like(state.free)
            need = np.zeros(n, dtype=np.int64)
            for i in subset:
                union |= prep.avail[i]
                need += needs[i]
            if multi is None:
                have = _count(union, rows, n, reach)
            else:
                # A shared device may serve each request of the subset once.
                have = _count(union & ~multi, rows, n, reach)
                for i in subset:
                    have += _count(prep.avail[i] & multi, rows, n, reach)
            fail(have < need, "not enough free devices for all of the pod's device requests")
    # Nodes where the pod needs more than one device and could use shared devices or
    # devices taking counters that may not all fit together: the columns are not exact
    # there.
    single = k == 1 and not reqs[0].all_mode and reqs[0].count == 1
    tangled = np.zeros(n, dtype=bool)
    if special is not None and not single:
        tight = _tight(reqs, prep, state, bool(constraints))
        if tight.any():
            tangled = _count(tight, rows, n, reach) > 0
    distinct = [c for c in constraints if c.distinct]
    constraints = [c for c in constraints if not c.distinct]
    all_constrained = any(reqs[i].all_mode for c in constraints for i in c.requests)
    approximate = (
        k > MAX_SUBSETS_REQUESTS or len(constraints) > 1 or all_constrained or bool(distinct)
    )
    if len(constraints) == 1 and not all_constrained:
        c = constraints[0]
        ok = _one_constraint(reqs, c, rows, prep.avail, n, needs, reach) | tangled
        fail(~ok, f"cannot satisfy matchAttribute {c.attribute} for claim {_name(c.claim)}")
    search = passed & tangled if not approximate else passed.copy()
    for row in np.flatnonzero(search):
        if not exact(int(row)):
            mask = np.zeros(n, dtype=bool)
            mask[row] = True
            what = constraints[0].attribute if constraints else ""
            if constraints:
                reason = f"cannot satisfy matchAttribute {what} together with the other requests"
            elif distinct:
                reason = (
                    f"cannot satisfy distinctAttribute {distinct[0].attribute} for claim "
                    f"{_name(distinct[0].claim)} (each device with a value of its own)"
                )
            elif tangled[row]:
                reason = (
                    "the pod's device requests do not fit together in the free devices, "
                    "capacity and shared counters left"
                )
            else:
                reason = "not enough free devices for all of the pod's device requests"
            fail(mask, reason)
    return Verdict(passed, reasons)


def _name(key: str) -> str:
    return key.partition("/")[2]


def _tight(
    reqs: Sequence[Req], prep: Prepared, state: Devices, constrained: bool
) -> NDArray[np.bool_]:
    """Per device: a shared device or a device taking counters the pod could use, where
    its choices might not all fit together. Where every such candidate of a node has
    room for all the requests that could take it, and every counter for all candidates
    taking it, any choice fits, and Hall's condition (a shared device counted once per
    request) is exact."""
    candidates = np.zeros_like(state.free)
    for i in range(len(reqs)):
        candidates |= prep.avail[i] | prep.sets[i]
    special = state.special
    assert special is not None
    if not (candidates & special).any():
        return np.zeros_like(state.free)
    tight = np.zeros_like(state.free)
    multi = state.multi
    in_use = np.zeros_like(state.free)
    if multi is not None and state.shares is not None:
        in_use = multi & (state.shares > 0)
        shared = candidates & multi
        if shared.any():
            if constrained:
                tight |= shared  # (node, value) groups count a shared device once
            elif state.used is not None and state.cap is not None and state.used.shape[1]:
                rows = np.flatnonzero(shared)
                total = state.used[rows].copy()
                for i, r in enumerate(reqs):
                    if r.demand is not None and r.demand.cons is not None:
                        takes = (prep.avail[i] | prep.sets[i])[rows]
                        total += r.demand.cons[rows] * takes[:, None]
                tight[rows[(total > state.cap[rows]).any(axis=1)]] = True
    counters = state.counters
    if counters is not None:
        taking = (candidates & counters.consumes & ~in_use)[counters.dev]
        spend = np.zeros_like(counters.remaining)
        np.add.at(spend, counters.ctr[taking], counters.amt[taking])
        over = taking & (spend > counters.remaining)[counters.ctr]
        tight[counters.dev[over]] = True
        tight |= candidates & counters.broken
    return tight


def _one_constraint(
    reqs: Sequence[Req],
    c: Constraint,
    rows: NDArray[np.intp],
    avail: Sequence[NDArray[np.bool_]],
    n: int,
    needs: list[NDArray[np.int64]],
    reach: Reach | None = None,
) -> NDArray[np.bool_]:
    """Hall's condition over (node, value) groups: constrained requests take devices
    whose attribute has the group's value, the others any device of the node."""
    constrained = set(c.requests)
    codes = c.codes
    any_c = np.zeros_like(avail[0])
    for i in constrained:
        any_c |= avail[i]
    valued = any_c & (codes >= 0)
    if not valued.any():
        return np.zeros(n, dtype=bool)
    width = int(codes.max()) + 1
    local = valued & (rows >= 0)
    keys = np.unique(rows[local].astype(np.int64) * width + codes[local])
    global_values = np.unique(codes[valued & (rows == GLOBAL)])
    if global_values.size:
        extra = (np.arange(n, dtype=np.int64)[:, None] * width + global_values[None, :]).ravel()
        keys = np.union1d(keys, extra)
    if reach is not None:
        selected = valued & (reach.group >= 0)
        for g in np.unique(reach.group[selected]).tolist():
            values = np.unique(codes[selected & (reach.group == g)])
            nodes = np.flatnonzero(reach.nodes[g, :n]).astype(np.int64)
            extra = (nodes[:, None] * width + values[None, :]).ravel()
            keys = np.union1d(keys, extra)
    unit_row = keys // width
    ok = np.ones(keys.size, dtype=bool)
    k = len(reqs)
    subsets = [s for size in range(1, k + 1) for s in itertools.combinations(range(k), size)]
    for subset in subsets:
        s_c = [i for i in subset if i in constrained]
        if not s_c:
            continue  # checked per node already
        union_u = np.zeros_like(any_c)
        for i in subset:
            if i not in constrained:
                union_u |= avail[i]
        union_c = np.zeros_like(any_c)
        for i in s_c:
            union_c |= avail[i]
        a = union_u
        b = union_c & ~a & (codes >= 0)
        count_a = _count(a, rows, n, reach)[unit_row]
        count_b = _group_count(b, rows, codes, width, keys, n, reach)
        need = np.zeros(keys.size, dtype=np.int64)
        for i in subset:
            need += needs[i][unit_row]
        ok &= count_a + count_b >= need
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
    reach: Reach | None = None,
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
    if reach is not None:
        selected = mask & (reach.group >= 0)
        if selected.any():
            per_group_value = np.zeros((reach.nodes.shape[0], width), dtype=np.int64)
            np.add.at(per_group_value, (reach.group[selected], codes[selected]), 1)
            key_rows = keys // width
            out += (
                reach.nodes[:, key_rows].astype(np.int64) * per_group_value[:, keys % width]
            ).sum(axis=0)
    return out


def allocate(
    reqs: Sequence[Req],
    constraints: Sequence[Constraint],
    devices: NDArray[np.intp],
    state: Devices | NDArray[np.bool_],
    prepared: Prepared | None = None,
) -> list[list[int]] | None:
    """Devices (table indexes) per request on one node, or None. `devices` are the
    node's devices (node-local and reachable from every node), in table order."""
    state = _as_devices(state)
    for r in reqs:
        if r.all_mode and r.untolerated is not None and r.untolerated[devices].any():
            return None  # All must take a matching device whose taint it does not tolerate
    prep = prepared if prepared is not None else prepare(reqs, state)
    distinct = [c for c in constraints if c.distinct]
    if distinct:
        constraints = [c for c in constraints if not c.distinct]
    special = state.special
    tangled = bool(distinct) or (
        special is not None
        and bool(special[devices].any())
        and any(
            bool((prep.avail[i] | prep.sets[i])[devices][special[devices]].any())
            for i in range(len(reqs))
        )
    )
    choices: list[list[int]] = []
    for c in constraints:
        values: set[int] = set()
        for i in c.requests:
            cand = devices[reqs[i].match[devices]]
            values.update(int(v) for v in c.codes[cand] if v >= 0)
        choices.append(sorted(values))
    combos = itertools.islice(itertools.product(*choices), _MAX_VALUE_CHOICES)
    for combo in combos:
        candidates = _candidates(reqs, constraints, combo, devices, prep)
        if candidates is None:
            continue
        found = _search(reqs, candidates, state, distinct) if tangled else _assign(reqs, candidates)
        if found is not None:
            return found
    return None


def _candidates(
    reqs: Sequence[Req],
    constraints: Sequence[Constraint],
    combo: tuple[int, ...],
    devices: NDArray[np.intp],
    prep: Prepared,
) -> list[list[int]] | None:
    """Per request, the node's devices it may take for these attribute values (for
    `All`: the devices it must take, all available), or None when `All` cannot be met."""
    out: list[list[int]] = []
    for i, r in enumerate(reqs):
        if r.all_mode:
            # Every matching device of the node; a constraint cannot narrow that set,
            # all of them must have its value.
            cand = devices[prep.sets[i][devices]]
            if cand.size == 0 or not prep.avail[i][cand].all():
                return None
            for c, value in zip(constraints, combo, strict=True):
                if i in c.requests and not (c.codes[cand] == value).all():
                    return None
            out.append([int(d) for d in cand])
            continue
        mask = prep.avail[i][devices]
        for c, value in zip(constraints, combo, strict=True):
            if i in c.requests:
                mask = mask & (c.codes[devices] == value)
        out.append([int(d) for d in devices[mask]])
    return out


def _assign(reqs: Sequence[Req], candidates: list[list[int]]) -> list[list[int]] | None:
    """Distinct devices for every request (no device shared, no counters): `All`
    requests take theirs, the others are matched by augmenting paths."""
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


class _Search:
    """Depth-first search for devices that fit together: what this assignment takes of
    shared devices' capacity and of counters is tracked as devices are tried."""

    def __init__(
        self, reqs: Sequence[Req], state: Devices, distinct: Sequence[Constraint] = ()
    ) -> None:
        self.reqs = reqs
        self.state = state
        # distinctAttribute constraints: per constraint, the values taken here.
        self.distinct = [(c, set(c.requests), set[int]()) for c in distinct]
        self.whole: set[int] = set()  # devices allocated whole here
        self.extra: dict[int, NDArray[np.int64]] = {}  # shared device -> capacity taken here
        self.sharing: dict[int, int] = {}  # shared device -> shares taken here
        self.taken: dict[int, int] = {}  # counter -> amount taken here
        self.left: dict[int, int] = {}  # counter -> what was left before (read lazily)
        self.steps = SEARCH_LIMIT

    def _takes(self, d: int) -> tuple[tuple[int, int], ...]:
        counters = self.state.counters
        assert counters is not None
        if counters.takes is not None:
            return counters.takes.get(d, ())
        lo, hi = int(counters.start[d]), int(counters.start[d + 1])
        return tuple(zip(counters.ctr[lo:hi].tolist(), counters.amt[lo:hi].tolist(), strict=True))

    def _counters(self, d: int) -> list[tuple[int, int]] | None:
        counters = self.state.counters
        if counters is None or not counters.consumes[d]:
            return []
        if counters.broken[d]:
            return None
        got: list[tuple[int, int]] = []
        for c, a in self._takes(d):
            left = self.left.get(c)
            if left is None:
                left = self.left[c] = int(counters.remaining[c])
            if left - self.taken.get(c, 0) < a:
                self._give_back(got)
                return None
            self.taken[c] = self.taken.get(c, 0) + a
            got.append((c, a))
        return got

    def _give_back(self, got: list[tuple[int, int]]) -> None:
        for c, a in got:
            self.taken[c] -= a

    def place(self, i: int, d: int) -> tuple[bool, list[tuple[int, int]]] | None:
        """Take device d for request i; (shared?, counters taken) to undo, or None."""
        if self.distinct:
            values = self._values(i, d)
            if values is None:
                return None
            done = self._place(i, d)
            if done is not None:
                for taken, value in values:
                    taken.add(value)
            return done
        return self._place(i, d)

    def _values(self, i: int, d: int) -> list[tuple[set[int], int]] | None:
        """The distinct values device d would take for request i, or None if one is
        missing or taken already."""
        out: list[tuple[set[int], int]] = []
        for c, members, taken in self.distinct:
            if i not in members:
                continue
            value = int(c.codes[d])
            if value < 0 or value in taken:
                return None
            out.append((taken, value))
        return out

    def _place(self, i: int, d: int) -> tuple[bool, list[tuple[int, int]]] | None:
        state = self.state
        if state.multi is not None and state.multi[d]:
            demand = self.reqs[i].demand
            cons = demand.cons[d] if demand is not None and demand.cons is not None else None
            if cons is not None and cons.size and state.used is not None and state.cap is not None:
                total = state.used[d] + cons
                extra = self.extra.get(d)
                if extra is not None:
                    total = total + extra
                if (total > state.cap[d]).any():
                    return None
            first = self.sharing.get(d, 0) == 0 and (
                state.shares is None or int(state.shares[d]) == 0
            )
            got = self._counters(d) if first else []
            if got is None:
                return None
            if cons is not None and cons.size:
                extra = self.extra.get(d)
                self.extra[d] = cons.copy() if extra is None else extra + cons
            self.sharing[d] = self.sharing.get(d, 0) + 1
            return True, got
        if d in self.whole:
            return None
        got = self._counters(d)
        if got is None:
            return None
        self.whole.add(d)
        return False, got

    def undo(self, i: int, d: int, done: tuple[bool, list[tuple[int, int]]]) -> None:
        for c, members, taken in self.distinct:
            if i in members:
                taken.discard(int(c.codes[d]))
        shared, got = done
        self._give_back(got)
        if not shared:
            self.whole.discard(d)
            return
        self.sharing[d] -= 1
        demand = self.reqs[i].demand
        cons = demand.cons[d] if demand is not None and demand.cons is not None else None
        if cons is not None and cons.size:
            self.extra[d] = self.extra[d] - cons


def _search(
    reqs: Sequence[Req],
    candidates: list[list[int]],
    state: Devices,
    distinct: Sequence[Constraint] = (),
) -> list[list[int]] | None:
    search = _Search(reqs, state, distinct)
    out: list[list[int]] = [[] for _ in reqs]
    for i, r in enumerate(reqs):
        if r.all_mode:
            for d in candidates[i]:
                if search.place(i, d) is None:
                    return None
                out[i].append(d)
    slots = [i for i, r in enumerate(reqs) if not r.all_mode for _ in range(r.count)]
    # How many slots of the same request are still to fill, this one included.
    left = [slots[s:].count(slots[s]) for s in range(len(slots))]

    def go(s: int, start: int) -> bool:
        if s == len(slots):
            return True
        i = slots[s]
        cands = candidates[i]
        for p in range(start, len(cands) - left[s] + 1):
            search.steps -= 1
            if search.steps < 0:
                return False
            d = cands[p]
            done = search.place(i, d)
            if done is None:
                continue
            out[i].append(d)
            following = s + 1 < len(slots) and slots[s + 1] == i
            if go(s + 1, p + 1 if following else 0):
                return True
            out[i].pop()
            search.undo(i, d, done)
        return False

    return out if go(0, 0) else None
