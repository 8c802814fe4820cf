"""Victim search through the framework: kube-scheduler's preemption Evaluator.

Shared by priority preemption (DefaultPreemption), quota reclaim (QueueCapacity) and
job-level preemption of gangs. The caller says which running pods may be taken at all
(`pool`) and whether a whole victim set is acceptable (`budget`, e.g. "no queue pushed
below its guarantee"); the search does the rest the way kube-scheduler does:

1. Candidate nodes are those where the pod's rejection is *resolvable* (the filters said
   Unschedulable, not UnschedulableAndUnresolvable) and that hold eligible victims.
   They are visited in chunks from a random offset until enough candidates are found;
   when the pool is a test rather than a list, only the visited nodes' pods are read.
   A vectorised necessary check drops visited nodes where even removing every eligible
   victim would not free enough resources (only when the profile filters on resources).
2. On each candidate (`select_on_node`, kube's SelectVictimsOnNode), inside a
   `Transaction`: every eligible victim is evicted tentatively, then *every* PreFilter
   and Filter plugin of the pod's profile is re-run against the cache, so affinity,
   spread, ports, GPU devices and queue limits are judged with the victims gone; then
   victims are reprieved (put back) one by one, PDB-violating ones first, most
   important first, keeping each that still lets the pod fit (one whose requests
   plainly leave too little room is not put back at all). The transaction is always
   discarded: nothing is decided here.
3. Nodes are ranked by kube's criteria (fewest PDB violations, lowest highest victim
   priority, smallest priority sum, fewest victims, latest start) over up to
   `max_candidates` valid candidates, starting at a random offset as kube does.

Gangs (`GroupUnits`, e.g. `shoal.gang.units.GangUnits`): a victim whose group would fall
below its minMember takes the whole group with it (a partial gang is never left
running); members above the minimum go one by one. How many may go one by one is counted
against the cache as it is during the search: members already being evicted, or taken
off earlier in the same transaction (the gang cycle's job-level preemption), no longer
count as running. When the minimal set on a node would take more of a group's members
than it can spare, the group becomes one unit and the node's search is run again.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from itertools import chain
from typing import Any, Final, Protocol, cast

import numpy as np
from numpy.typing import NDArray

from shoal.api.podinfo import PodInfo
from shoal.api.resources import PODS
from shoal.cache.cluster import ClusterState, PodRecord
from shoal.cache.transaction import Transaction
from shoal.framework.cycle_state import CycleState
from shoal.framework.diagnosis import Diagnosis
from shoal.framework.extender import NodeVictims, preempt_with_extenders
from shoal.framework.handle import Handle
from shoal.framework.interfaces import NodeFilterStatuses
from shoal.framework.runner import PluginRunner
from shoal.framework.types import Candidates

__all__ = [
    "MAX_CANDIDATE_NODES",
    "Candidate",
    "GroupUnits",
    "LowerPriority",
    "VictimSearch",
    "more_important",
    "no_violations",
]

MAX_CANDIDATE_NODES = 100  # kube's minCandidateNodesAbsolute
RESOURCE_FILTER = "NodeResourcesFit"

Units = Callable[[PodInfo], list[PodInfo]]
"""The pods that must go together with a victim (its gang when at minMember)."""
Budget = Callable[[list[list[PodInfo]]], bool]
"""Whether a node's victims, as the units that go together, may be taken."""


class GroupUnits(Protocol):
    """Eviction units that know about groups (see `shoal.gang.units.GangUnits`): the
    search asks how many members of a victim's group may still go one by one."""

    def __call__(self, pod: PodInfo) -> list[PodInfo]: ...

    def running(self, pod: PodInfo) -> tuple[str, int, list[PodInfo]] | None:
        """(group key, members that may go one by one, the running members), or None
        for a pod outside any group."""
        ...

    def any_grouped(self, uids: Iterable[str]) -> bool:
        """Is any of these pods a member of some group (its units may be more than
        itself)?"""
        ...


@dataclass(frozen=True)
class LowerPriority:
    """The pool of priority preemption as a test: running pods of lower priority than
    `priority`, and when `uids` is given only those (the preemptor's leaf queue). Being
    this plain, the search can also apply it to the pods as columns at once."""

    priority: int
    uids: Collection[str] | None = None

    def __call__(self, record: PodRecord) -> bool:
        pod = record.pod
        return pod.priority < self.priority and (self.uids is None or pod.uid in self.uids)


def no_violations(victims: Iterable[PodInfo]) -> int:
    """The PDB check when no disruption budget selects any pod."""
    return 0


class _Fallback:
    """The columnar search does not apply: search pod by pod."""


_FALLBACK: Final = _Fallback()


def more_important(pod: PodInfo) -> tuple[int, float]:
    """Sort key, most important first: higher priority, then earlier start."""
    return (-pod.priority, pod.timestamp)


@dataclass
class Candidate:
    node: str
    victims: list[PodInfo] = field(default_factory=list)
    pdb_violations: int = 0

    def rank(self) -> tuple[int, int, int, int, float]:
        prios = [p.priority for p in self.victims] or [0]
        latest = max((p.timestamp for p in self.victims), default=0.0)
        return (self.pdb_violations, max(prios), sum(prios), len(self.victims), -latest)


class VictimSearch:
    """One preemption attempt's search (see the module docstring)."""

    def __init__(
        self,
        handle: Handle,
        units: Units | GroupUnits | None = None,
        pdb_violations: Callable[[Iterable[PodInfo]], int] | None = None,
    ) -> None:
        self.handle = handle
        self.units: Units = units or (lambda pod: [pod])
        self.gangs: GroupUnits | None = (
            cast(GroupUnits, units) if units is not None and hasattr(units, "running") else None
        )
        # Every victim is a unit of its own unless groups say otherwise.
        self._units_known = units is None or self.gangs is not None
        self.pdb_violations = pdb_violations or no_violations
        self.extender_error = ""  # why preemption stopped at an extender, if it did
        # (rows, free room on the checked columns with every takeable pod gone) from the
        # columnar search, for the message when it found nothing (one search, one pod).
        self._gone: tuple[NDArray[np.intp], NDArray[np.int64]] | None = None

    def best(
        self,
        pod: PodInfo,
        statuses: NodeFilterStatuses,
        pool: Iterable[PodRecord] | Callable[[PodRecord], bool],
        *,
        budget: Budget | None = None,
        max_candidates: int = MAX_CANDIDATE_NODES,
    ) -> Candidate | None:
        """The best node and its minimal victims, or None when preemption cannot help.

        `pool`: the running pods that may be taken, or a test of whether one may; with a
        test, only the pods on the nodes the search visits are looked at (as kube's dry
        run does), instead of every pod in the pool on every attempt."""
        handle = self.handle
        cluster = handle.cluster
        table = cluster.table
        eligible: Mapping[str, PodRecord]
        by_row: Mapping[int, list[PodInfo]]
        if callable(pool):
            lazy = _EligibleOnVisit(cluster, pool)
            eligible, by_row = lazy, lazy.rows
            rows = np.arange(table.n, dtype=np.intp)
        else:
            found_pool: dict[str, PodRecord] = {}
            pool_rows: dict[int, list[PodInfo]] = {}
            for record in pool:
                uid = record.pod.uid
                if record.assumed or uid in cluster.evicting:
                    continue
                row = table.row_of.get(record.node)
                if row is None:
                    continue
                found_pool[uid] = record
                pool_rows.setdefault(row, []).append(record.pod)
            if not pool_rows:
                return None
            eligible, by_row = found_pool, pool_rows
            rows = np.fromiter(pool_rows, dtype=np.intp, count=len(pool_rows))
        if not statuses.pre_filter_resolvable:
            rows = rows[statuses.resolvable(rows)]
        if not rows.size:
            return None
        runner = handle.runner(pod)
        check_resources = runner.has_filter(RESOURCE_FILTER)
        rows.sort()
        offset = int(handle.rng.integers(rows.size)) if rows.size > 1 else 0
        order = np.concatenate([rows[offset:], rows[:offset]])
        if isinstance(pool, LowerPriority) and budget is None:
            columnar = self._best_by_columns(runner, pod, order, pool, max_candidates)
            if not isinstance(columnar, _Fallback):
                return columnar
        local = self.node_local(runner, pod)
        best: Candidate | None = None
        best_rank: tuple[int, int, int, int, float] = (0, 0, 0, 0, 0.0)
        found_all: list[Candidate] = []
        found = 0
        position = 0
        while position < len(order) and found < max_candidates:
            at = order[position : position + max_candidates - found]
            position += len(at)
            if check_resources:
                # Only the nodes this chunk visits (kube's dry run stops after enough
                # candidates; on a large cluster most nodes are never looked at).
                at = at[self._could_fit(pod, at, by_row)]
            chunk: list[int] = at.tolist()
            units_of = {row: self._units_on(by_row[row], eligible) for row in chunk}
            chunk = [row for row in chunk if units_of[row]]
            results: dict[int, list[list[PodInfo]] | None] = {}
            if local:
                # Units confined to their node can be judged for all nodes at once.
                # (A unit of one pod is a pod of this row: only groups need looking at.)
                alone = [
                    row
                    for row in chunk
                    if all(
                        len(u) == 1 or table.row_of.get(eligible[p.uid].node) == row
                        for u in units_of[row]
                        for p in u
                    )
                ]
                results = self.select_on_nodes(runner, pod, alone, units_of)
                if self.gangs is not None:
                    for row, chosen in list(results.items()):
                        if chosen is not None and self._beyond_spare(chosen, set()):
                            del results[row]  # a group goes whole: judged on its own
            for row in chunk:
                if row not in results:
                    results[row] = self.select_on_node(runner, pod, row, units_of[row], eligible)
            for row in chunk:
                chosen = results[row]
                if chosen is None or (budget is not None and not budget(chosen)):
                    continue
                victims = [v for unit in chosen for v in unit]
                candidate = Candidate(str(table.names[row]), victims, self.pdb_violations(victims))
                found += 1
                found_all.append(candidate)
                rank = candidate.rank()
                if best is None or rank < best_rank:
                    best, best_rank = candidate, rank
                if found >= max_candidates:
                    break
        if best is not None and any(
            e.supports_preemption and e.is_interested(pod) for e in handle.extenders
        ):
            return self._through_extenders(pod, found_all)
        return best

    def rows_with_victims(self, pool: LowerPriority) -> NDArray[np.bool_]:
        """Per node row: does it run a pod the pool may take (not one still being bound
        or already being evicted)? Read from the pods as columns, no loop over nodes."""
        table = self.handle.cluster.table
        holds = np.zeros(table.n, dtype=bool)
        holds[table.pod_columns().row[self._takeable_slots(pool)]] = True
        return holds

    def reasons_without_victims(
        self,
        pod: PodInfo,
        rows: NDArray[np.intp],
        pool: LowerPriority,
        statuses: NodeFilterStatuses,
    ) -> Counter[str]:
        """Why the pod still fails on these rows with every pod the pool may take off
        them (kube's SelectVictimsOnNode when removing all its potential victims is not
        enough: the Filter status of that what-if), counted as in the pod's message.

        Rows NodeResourcesFit rejected first and where the resources the victims would
        free are still too few are answered by arithmetic on the pods as columns: the
        filters before it passed with the victims present (removing pods does not make
        them fail), so its reasons are kube's. Only the other rows re-run the filters
        with the victims gone (most often none: a big pod among full nodes is the case
        that must stay cheap)."""
        if not rows.size:
            return Counter()
        cluster = self.handle.cluster
        table = cluster.table
        columns = table.pod_columns()
        slots = self._takeable_slots(pool)
        on_rows = np.zeros(table.n, dtype=bool)
        on_rows[rows] = True
        slots = slots[on_rows[columns.row[slots]]]
        found: Counter[str] = Counter()
        cols, need = self._checked_request(pod)
        first = statuses.rejected_first_by(RESOURCE_FILTER, rows)
        if cols.size and first.any():
            short = self._free_when_gone(pod, rows[first], slots, cols) < need
            names = [str(table.resources[c]) for c in cols.tolist()]
            for name, count in zip(names, short.sum(axis=0).tolist(), strict=True):
                if count:
                    found["Too many pods" if name == PODS else f"Insufficient {name}"] += count
            answered = np.zeros(rows.size, dtype=bool)
            answered[np.flatnonzero(first)[short.any(axis=1)]] = True
            rows = rows[~answered]
            if not rows.size:
                return found
            on_rows[:] = False
            on_rows[rows] = True
            slots = slots[on_rows[columns.row[slots]]]
        runner = self.handle.runner(pod)
        # Judged on the rows alone and always undone: no cluster-wide tallies.
        with Transaction(cluster, what_if=True) as tx:
            for uid in columns.uids[slots].tolist():
                tx.evict(cluster.placed[uid].pod)
            state = CycleState(dry_run=True)
            _, status = runner.run_pre_filter(state, pod)
            if not status.ok:
                found[status.message] += int(rows.size)
                return found
            candidates = Candidates.of(rows)
            outcome = runner.run_filters(state, pod, candidates)
            found.update(Diagnosis.from_filters(table.n, candidates, outcome.results).reasons)
            return found

    def _free_when_gone(
        self,
        pod: PodInfo,
        rows: NDArray[np.intp],
        slots: NDArray[np.intp],
        cols: NDArray[np.intp],
    ) -> NDArray[np.int64]:
        """Free room for the pod on each row's checked columns with the pods of `slots`
        (every takeable pod on the rows, at least) off their nodes; what the search
        worked out is reused for the message when it found nothing."""
        table = self.handle.cluster.table
        if self._gone is not None:
            known_rows, known_free = self._gone
            position = np.full(table.n, -1, dtype=np.intp)
            position[known_rows] = np.arange(known_rows.size, dtype=np.intp)
            at = position[rows]
            if (at >= 0).all():
                return known_free[at]
        columns = table.pod_columns()
        slot_rows = columns.row[slots]
        freed = np.stack(
            [
                np.bincount(slot_rows, weights=columns.vector[slots, c], minlength=table.n)[rows]
                for c in cols.tolist()
            ],
            axis=1,
        ).astype(np.int64)
        free: NDArray[np.int64] = self.handle.snapshot.free_for(pod, rows)[:, cols] + freed
        self._gone = (rows.copy(), free)
        return free

    def _takeable_slots(self, pool: LowerPriority) -> NDArray[np.intp]:
        """The pod-column slots of the pods the pool may take: placed, of lower priority,
        in the pool's uids if it names them, neither being bound nor being evicted."""
        cluster = self.handle.cluster
        columns = cluster.table.pod_columns()
        size = columns.size
        slot_of = columns.slot_of
        takeable = (columns.row[:size] >= 0) & (columns.priority[:size] < pool.priority)
        if pool.uids is not None:
            allowed = np.zeros(size, dtype=bool)
            allowed[[slot for uid in pool.uids if (slot := slot_of.get(uid)) is not None]] = True
            takeable &= allowed
        busy = [
            slot
            for uid in chain(cluster.evicting, cluster.assumed)
            if (slot := slot_of.get(uid)) is not None
        ]
        takeable[busy] = False
        slots: NDArray[np.intp] = np.flatnonzero(takeable)
        return slots

    def _through_extenders(self, pod: PodInfo, candidates: list[Candidate]) -> Candidate | None:
        """kube's callExtenders: preempting extenders narrow the candidates (and their
        victims) before the best is picked; when one fails, nobody is preempted."""
        offered = {c.node: NodeVictims(c.victims, c.pdb_violations) for c in candidates}
        left, error = preempt_with_extenders(self.handle.extenders, pod, offered)
        if error:
            self.extender_error = error
            return None
        kept = [Candidate(node, v.pods, v.pdb_violations) for node, v in left.items()]
        return min(kept, key=Candidate.rank, default=None)

    def node_local(self, runner: PluginRunner, pod: PodInfo) -> bool:
        """May every node be judged with all candidates' victims gone at once? Yes when
        each PreFilter and Filter plugin that takes part for this pod declares
        `preemption_local` (its verdict on a node depends only on the pods on that node,
        and only improves when pods go: resources, ports, taints, node affinity, GPU
        devices), or skips the pod. Otherwise nodes are judged one by one, as in kube."""
        state = CycleState(dry_run=True)
        _, status = runner.run_pre_filter(state, pod)
        if not status.ok:
            return False
        plugins = runner.plugins
        return all(
            p.name in state.skip_filter or getattr(p, "preemption_local", False)
            for p in (*plugins.pre_filter, *plugins.filter)
        )

    def select_on_nodes(
        self,
        runner: PluginRunner,
        pod: PodInfo,
        rows: list[int],
        units_of: dict[int, list[list[PodInfo]]],
    ) -> dict[int, list[list[PodInfo]] | None]:
        """`select_on_node` for many nodes at once, exact when `node_local` holds: all
        their victims go in one transaction, the filters run once over all the nodes,
        then reprieve proceeds in rounds (the k-th victim unit of every node together).
        Returns the victim units per node."""
        out: dict[int, list[list[PodInfo]] | None] = {}
        if not rows:
            return out
        arithmetic = self._select_by_arithmetic(runner, pod, rows, units_of)
        if arithmetic is not None:
            return arithmetic
        check_resources = runner.has_filter(RESOURCE_FILTER)
        ordered: dict[int, list[list[PodInfo]]] = {}
        victims: dict[int, list[list[PodInfo]]] = {}
        cluster = self.handle.cluster
        # Every judge here reads per-node state only (node_local), and a what-if is
        # always undone: cluster-wide tallies (queue usage) need not follow it.
        with Transaction(cluster, what_if=True) as tx:
            for row in rows:
                for unit in units_of[row]:
                    for victim in unit:
                        tx.evict(victim)
            passed = self.fits_rows(runner, pod, np.array(rows, dtype=np.intp))
            for row, ok in zip(rows, passed.tolist(), strict=True):
                if not ok:
                    out[row] = None
                    continue
                ordered[row] = self._reprieve_order(units_of[row])
                victims[row] = []
            k = 0
            while True:
                batch = [row for row, units in ordered.items() if k < len(units)]
                if not batch:
                    break
                at = np.array(batch, dtype=np.intp)
                # Units whose return plainly leaves too little room stay off without
                # being put back and taken off again (most of them, on a full cluster).
                fits = (
                    self._resources_fit_back(pod, at, [ordered[row][k] for row in batch])
                    if check_resources
                    else np.ones(at.size, bool)
                )
                restored = fits.copy()
                for row, ok in zip(batch, fits.tolist(), strict=True):
                    if ok:
                        for victim in ordered[row][k]:
                            tx.restore(victim)
                if fits.any():
                    fits[fits] = self.fits_rows(runner, pod, at[fits])
                for row, ok, back in zip(batch, fits.tolist(), restored.tolist(), strict=True):
                    if not ok:
                        if back:
                            for victim in ordered[row][k]:
                                tx.evict(victim)
                        victims[row].append(ordered[row][k])
                k += 1
        for row in ordered:
            out[row] = victims[row] or None
        return out

    def _arithmetic_setup(
        self, runner: PluginRunner, pod: PodInfo
    ) -> tuple[CycleState, Any, Any] | None:
        """(cycle state, PreFilter result, NodeResourcesFit) when NodeResourcesFit is the
        only filter taking part whose verdict depends on the pods on a node (the others,
        `preemption_node_only`, are judged once with no victim gone), else None."""
        state = CycleState(dry_run=True)
        pre, status = runner.run_pre_filter(state, pod)
        if not status.ok:
            return None
        plugins = runner.plugins
        fit = next((p for p in plugins.filter if p.name == RESOURCE_FILTER), None)
        if fit is None or fit.name in state.skip_filter or not hasattr(fit, "fits_after"):
            return None
        if not all(
            p is fit or p.name in state.skip_filter or getattr(p, "preemption_node_only", False)
            for p in (*plugins.pre_filter, *plugins.filter)
        ):
            return None
        return state, pre, fit

    def _select_by_arithmetic(
        self,
        runner: PluginRunner,
        pod: PodInfo,
        rows: list[int],
        units_of: dict[int, list[list[PodInfo]]],
    ) -> dict[int, list[list[PodInfo]] | None] | None:
        """`select_on_nodes` without touching the cache, when `_arithmetic_setup`
        applies: every victim's requests are taken off in arrays, then reprieve proceeds
        in the same rounds with NodeResourcesFit's own arithmetic (`fits_after`). The
        same victims as the transaction path; None when it does not apply (another
        filter reads pods, whole GPUs judged per device)."""
        setup = self._arithmetic_setup(runner, pod)
        if setup is None:
            return None
        table = self.handle.cluster.table
        ordered = [self._reprieve_order(units_of[row]) for row in rows]
        flat = [unit for units in ordered for unit in units]
        owner = np.repeat(np.arange(len(rows), dtype=np.intp), [len(u) for u in ordered])
        # Placed pods' columns all exist already: every vector has the table's width.
        width = len(table.resources)
        vectors = (
            np.stack(
                [
                    np.sum([table.pod_vector(v) for v in unit], axis=0)
                    if len(unit) > 1
                    else table.pod_vector(unit[0])
                    for unit in flat
                ]
            )
            if flat
            else np.zeros((0, width), dtype=np.int64)
        )
        judged = self._reprieve_by_arithmetic(
            setup, pod, np.array(rows, dtype=np.intp), owner, vectors
        )
        if judged is None:
            return None
        passed, victim = judged
        out: dict[int, list[list[PodInfo]] | None] = {row: None for row in rows}
        for j in np.flatnonzero(victim & passed[owner]).tolist():
            chosen = out[rows[int(owner[j])]]
            if chosen is None:
                chosen = out[rows[int(owner[j])]] = []
            chosen.append(flat[j])
        return out

    def _reprieve_by_arithmetic(
        self,
        setup: tuple[CycleState, Any, Any],
        pod: PodInfo,
        at: NDArray[np.intp],
        owner: NDArray[np.intp],
        vectors: NDArray[np.int64],
    ) -> tuple[NDArray[np.bool_], NDArray[np.bool_]] | None:
        """kube's SelectVictimsOnNode for the rows `at` at once, in arrays: victim unit j
        sits on row `at[owner[j]]`, frees `vectors[j]`, and the units of a row come in
        reprieve order (`owner` ascending). All of a row's units are taken off, the row
        is judged, then the k-th unit of every row is put back together while the pod
        still fits (NodeResourcesFit's `fits_after`). Returns (rows where the pod fits
        with every unit gone, units that stay victims), or None when `fits_after` cannot
        judge this pod."""
        state, pre, fit = setup
        runner = self.handle.runner(pod)
        freed = np.zeros((at.size, vectors.shape[1]), dtype=np.int64)
        np.add.at(freed, owner, vectors)
        # The verdict of every other filter, once: it does not change as pods go.
        state.skip_filter.add(fit.name)
        passed: NDArray[np.bool_] = runner.run_filters(state, pod, Candidates.of(at)).passed.copy()
        state.skip_filter.discard(fit.name)
        if pre is not None and pre.node_names is not None:
            names = self.handle.cluster.table.names
            passed &= np.array([str(names[r]) in pre.node_names for r in at.tolist()], bool)
        fits = fit.fits_after(state, pod, at, freed)
        if fits is None:
            return None
        passed &= fits
        victim = np.zeros(owner.size, dtype=bool)
        # Rank of each unit within its row; round k puts back the k-th unit of each row.
        first = np.searchsorted(owner, np.arange(at.size, dtype=np.intp))
        rank = np.arange(owner.size, dtype=np.intp) - first[owner]
        live = np.flatnonzero(passed[owner])
        by_round = live[np.argsort(rank[live], kind="stable")]
        bounds = np.searchsorted(rank[by_round], np.arange(int(rank.max(initial=-1)) + 2))
        for k in range(bounds.size - 1):
            batch = by_round[bounds[k] : bounds[k + 1]]
            if not batch.size:
                continue
            where = owner[batch]
            back = freed[where] - vectors[batch]
            ok = fit.fits_after(state, pod, at[where], back)
            freed[where[ok]] = back[ok]
            victim[batch[~ok]] = True
        return passed, victim

    def _best_by_columns(
        self,
        runner: PluginRunner,
        pod: PodInfo,
        order: NDArray[np.intp],
        pool: LowerPriority,
        max_candidates: int,
    ) -> Candidate | _Fallback | None:
        """`best` over the pods as columns (`NodeTable.pod_columns`): the same nodes
        visited in the same order, the same victims and the same choice as the search
        pod by pod, with no Python loop over the candidate nodes' pods. Applies when
        every victim is a unit of its own (no group member among them), none is in a
        namespace a disruption budget selects pods in, no extender takes part in
        preemption and `_arithmetic_setup` holds; `_FALLBACK` otherwise."""
        handle = self.handle
        # Disruption budgets: columnar while no candidate victim is in a namespace one
        # selects pods in (checked per chunk below); a checker that says nothing of
        # where it looks: pod by pod.
        budget_namespaces: frozenset[str] = frozenset()
        if self.pdb_violations is not no_violations:
            found = getattr(self.pdb_violations, "namespaces", None)
            if not isinstance(found, frozenset):
                return _FALLBACK
            budget_namespaces = found
        if not self._units_known:
            return _FALLBACK
        if any(e.supports_preemption and e.is_interested(pod) for e in handle.extenders):
            return _FALLBACK
        # Every plugin taking part is NodeResourcesFit or `preemption_node_only` (whose
        # verdict depends on the node alone: local too), so no `node_local` check.
        setup = self._arithmetic_setup(runner, pod)
        if setup is None:
            return _FALLBACK
        cluster = handle.cluster
        table = cluster.table
        columns = table.pod_columns()
        # Pods still being bound or already being evicted are never victims.
        slots = self._takeable_slots(pool)
        if not slots.size:
            return None
        guarded = [i for ns in budget_namespaces if (i := columns.known_namespace(ns)) is not None]
        slot_rows = columns.row[slots]
        holds = np.zeros(table.n, dtype=bool)
        holds[slot_rows] = True
        order = order[holds[order]]
        # Rows where removing every takeable pod would free enough (`_could_fit`).
        cols, need = self._checked_request(pod)
        if cols.size and order.size:
            free = self._free_when_gone(pod, order, slots, cols)
            order = order[np.all(free >= need, axis=1)]
        best: Candidate | None = None
        best_rank: tuple[int, int, int, int, float] = (0, 0, 0, 0, 0.0)
        position_of = np.full(table.n, -1, dtype=np.intp)
        found = 0
        position = 0
        while position < order.size and found < max_candidates:
            at = order[position : position + max_candidates - found]
            position += at.size
            position_of[at] = np.arange(at.size, dtype=np.intp)
            owner = position_of[slot_rows]
            position_of[at] = -1
            mine, owner = slots[owner >= 0], owner[owner >= 0]
            if self.gangs is not None and self.gangs.any_grouped(columns.uids[mine].tolist()):
                return _FALLBACK
            if guarded and np.isin(columns.namespace[mine], guarded).any():
                return _FALLBACK  # a victim a disruption budget may protect
            # Per row, most important first (higher priority, earlier start), then the
            # order the row holds its pods in: `_reprieve_order` without budgets.
            sort = np.lexsort(
                (columns.sequence[mine], columns.timestamp[mine], -columns.priority[mine], owner)
            )
            mine, owner = mine[sort], owner[sort]
            judged = self._reprieve_by_arithmetic(setup, pod, at, owner, columns.vector[mine])
            if judged is None:
                return _FALLBACK
            passed, victim = judged
            mine, owner = mine[victim], owner[victim]
            count = np.bincount(owner, minlength=at.size)
            valid = np.flatnonzero(passed & (count > 0))[: max_candidates - found]
            found += valid.size
            if not valid.size:
                continue
            priority = columns.priority[mine]
            highest = np.full(at.size, np.iinfo(np.int64).min, dtype=np.int64)
            np.maximum.at(highest, owner, priority)
            total = np.zeros(at.size, dtype=np.int64)
            np.add.at(total, owner, priority)
            latest = np.full(at.size, -np.inf)
            np.maximum.at(latest, owner, columns.timestamp[mine])
            # Candidate.rank, first in visiting order among equals.
            pick = int(
                valid[
                    np.lexsort((valid, -latest[valid], count[valid], total[valid], highest[valid]))[
                        0
                    ]
                ]
            )
            rank = (
                0,
                int(highest[pick]),
                int(total[pick]),
                int(count[pick]),
                -float(latest[pick]),
            )
            if best is None or rank < best_rank:
                row = int(at[pick])
                on_row = table.pods[row]
                victims = [on_row[uid] for uid in columns.uids[mine[owner == pick]].tolist()]
                best, best_rank = Candidate(str(table.names[row]), victims, 0), rank
        return best

    def fits_rows(
        self, runner: PluginRunner, pod: PodInfo, rows: NDArray[np.intp]
    ) -> NDArray[np.bool_]:
        """`fits` for several rows with one PreFilter and one Filter pass."""
        state = CycleState(dry_run=True)
        pre, status = runner.run_pre_filter(state, pod)
        if not status.ok or not rows.size:
            return np.zeros(rows.size, dtype=bool)
        outcome = runner.run_filters(state, pod, Candidates.of(rows))
        passed: NDArray[np.bool_] = outcome.passed.copy()
        if pre is not None and pre.node_names is not None:
            names = self.handle.cluster.table.names
            passed &= np.array([str(names[r]) in pre.node_names for r in rows.tolist()], bool)
        return passed

    def _resources_fit_back(
        self, pod: PodInfo, rows: NDArray[np.intp], back: list[list[PodInfo]]
    ) -> NDArray[np.bool_]:
        """A cheap necessary condition for NodeResourcesFit (nominated room included) on
        each row if the pods `back[i]` (off that row now) were put back on it: reprieve
        skips putting back, and re-running every filter for, a victim that plainly does
        not leave room."""
        table = self.handle.cluster.table
        free = self.handle.snapshot.free_for(pod, rows)
        for i, pods in enumerate(back):
            for victim in pods:
                free[i] -= table.pod_vector(victim)
        cols, need = self._checked_request(pod)
        fits: NDArray[np.bool_] = np.all(free[:, cols] >= need, axis=1)
        return fits

    def _checked_request(self, pod: PodInfo) -> tuple[NDArray[np.intp], NDArray[np.int64]]:
        """The columns NodeResourcesFit's Filter checks for the pod and the amounts: it
        leaves out ignored resources and sizes of one device (vGPU memory and compute,
        judged per device by GpuShare), which no node reports as a column. The whole
        request vector when the profile has no such plugin."""
        fit = next(
            (p for p in self.handle.runner(pod).plugins.filter if p.name == RESOURCE_FILTER),
            None,
        )
        checked = getattr(fit, "checked_request", None)
        if checked is not None:
            found: tuple[NDArray[np.intp], NDArray[np.int64]] = checked(pod)
            return found
        vector = self.handle.cluster.table.pod_vector(pod)
        cols = np.flatnonzero(vector)
        return cols, vector[cols]

    def _could_fit(
        self, pod: PodInfo, rows: NDArray[np.intp], by_row: Mapping[int, list[PodInfo]]
    ) -> NDArray[np.bool_]:
        """Rows where removing every eligible victim would free enough resources."""
        table = self.handle.cluster.table
        cols, need = self._checked_request(pod)
        if not cols.size:
            return np.ones(rows.size, dtype=bool)
        free = self.handle.snapshot.free_for(pod, rows)[:, cols]
        at = [i for i, row in enumerate(rows.tolist()) for _ in by_row[row]]
        if at:
            vectors = np.stack([table.pod_vector(v) for row in rows.tolist() for v in by_row[row]])
            np.add.at(free, np.array(at, dtype=np.intp), vectors[:, cols])
        fits: NDArray[np.bool_] = np.all(free >= need, axis=1)
        return fits

    def _units_on(
        self, victims: list[PodInfo], eligible: Mapping[str, PodRecord]
    ) -> list[list[PodInfo]]:
        """The node's victims grouped into units that go together; a unit with a pod
        that may not be taken is not a victim at all."""
        seen: set[str] = set()
        out: list[list[PodInfo]] = []
        for victim in victims:
            if victim.uid in seen:
                continue
            unit = self.units(victim)
            seen.update(p.uid for p in unit)
            if all(p.uid in eligible for p in unit):
                out.append(unit)
        return out

    def select_on_node(
        self,
        runner: PluginRunner,
        pod: PodInfo,
        row: int,
        units: list[list[PodInfo]],
        eligible: Collection[str] | None = None,
    ) -> list[list[PodInfo]] | None:
        """kube's SelectVictimsOnNode over a transaction: the victim units, or None when
        the pod does not fit even with every unit gone, or fits with none gone. A group
        whose members would go one by one beyond what it can spare goes whole instead
        (only `eligible` pods may be taken), and the search is run again."""
        whole: set[str] = set()
        while True:
            chosen = self._reprieve(runner, pod, row, units)
            if chosen is None or self.gangs is None:
                return chosen
            over = self._beyond_spare(chosen, whole)
            if not over:
                return chosen
            whole.update(over)
            going = {p.uid for members in over.values() for p in members}
            units = [u for u in units if not any(p.uid in going for p in u)]
            for members in over.values():
                if eligible is None or all(p.uid in eligible for p in members):
                    units.append(members)
            if not units:
                return None

    def _beyond_spare(
        self, chosen: list[list[PodInfo]], whole: set[str]
    ) -> dict[str, list[PodInfo]]:
        """Groups (not yet whole) that `chosen` takes more members of than they can
        spare, with their running members."""
        assert self.gangs is not None
        taken: dict[str, int] = {}
        over: dict[str, list[PodInfo]] = {}
        for unit in chosen:
            for victim in unit:
                found = self.gangs.running(victim)
                if found is None or found[0] in whole:
                    continue
                key, spare, members = found
                if spare <= 0:
                    continue  # its units are the whole group already
                taken[key] = taken.get(key, 0) + 1
                if taken[key] > spare:
                    over[key] = members
        return over

    def _reprieve(
        self, runner: PluginRunner, pod: PodInfo, row: int, units: list[list[PodInfo]]
    ) -> list[list[PodInfo]] | None:
        """Evict every unit, then put units back, most important first, while the pod
        still fits; the units that could not be put back are the victims."""
        check_resources = runner.has_filter(RESOURCE_FILTER)
        with Transaction(self.handle.cluster) as tx:
            for unit in units:
                for victim in unit:
                    if not tx.is_evicted(victim.uid):
                        tx.evict(victim)
            if not self.fits(runner, pod, row):
                return None
            ordered = self._reprieve_order(units)
            victims: list[list[PodInfo]] = []
            one = np.array([row], dtype=np.intp)
            name = str(self.handle.cluster.table.names[row])
            for unit in ordered:
                back = [v for v in unit if tx.is_evicted(v.uid)]
                here = [v for v in back if tx.node_of_evicted(v.uid) == name]
                if check_resources and not self._resources_fit_back(pod, one, [here])[0]:
                    victims.append(unit)  # no room for it: not put back at all
                    continue
                mark = tx.mark()
                for victim in back:
                    tx.restore(victim)
                if not self.fits(runner, pod, row):
                    tx.rollback(mark)
                    victims.append(unit)
        return victims or None

    def _reprieve_order(self, units: list[list[PodInfo]]) -> list[list[PodInfo]]:
        """kube's order for putting victims back: PDB-violating ones first, then the
        rest, each most important first."""
        violating = [u for u in units if self.pdb_violations(u) > 0]
        keeping = [u for u in units if self.pdb_violations(u) == 0]
        return sorted(violating, key=_unit_importance) + sorted(keeping, key=_unit_importance)

    def fits(self, runner: PluginRunner, pod: PodInfo, row: int) -> bool:
        """Does the pod pass every PreFilter and Filter on `row`, against the cache as
        it is now (a transaction may have victims off their nodes)?"""
        state = CycleState(dry_run=True)
        pre, status = runner.run_pre_filter(state, pod)
        if not status.ok:
            return False
        if pre is not None and pre.node_names is not None:
            name = str(self.handle.cluster.table.names[row])
            if name not in pre.node_names:
                return False
        outcome = runner.run_filters(state, pod, Candidates.of(np.array([row], dtype=np.intp)))
        return bool(outcome.passed[0])


class _EligibleOnVisit(Mapping[str, PodRecord]):
    """The takeable running pods, found as the search asks for them: a pod is in when it
    is bound (not assumed), not already being evicted, and passes the pool's test;
    `rows[row]` lists a node's takeable pods. Answers are memoised for the attempt."""

    def __init__(self, cluster: ClusterState, takeable: Callable[[PodRecord], bool]) -> None:
        self.cluster = cluster
        self.takeable = takeable
        self._seen: dict[str, PodRecord | None] = {}
        self.rows = _RowsOnVisit(self)

    def _lookup(self, uid: str) -> PodRecord | None:
        if uid in self._seen:
            return self._seen[uid]
        cluster = self.cluster
        record = cluster.placed.get(uid)
        if (
            record is None
            or record.assumed
            or uid in cluster.evicting
            or record.node not in cluster.table.row_of
            or not self.takeable(record)
        ):
            record = None
        self._seen[uid] = record
        return record

    def __getitem__(self, uid: str) -> PodRecord:
        record = self._lookup(uid)
        if record is None:
            raise KeyError(uid)
        return record

    def __contains__(self, uid: object) -> bool:
        return isinstance(uid, str) and self._lookup(uid) is not None

    def __iter__(self) -> Iterator[str]:
        return (uid for uid, record in self._seen.items() if record is not None)

    def __len__(self) -> int:
        return sum(record is not None for record in self._seen.values())


class _RowsOnVisit(Mapping[int, list[PodInfo]]):
    """row -> the takeable pods on that node, built on first use."""

    def __init__(self, eligible: _EligibleOnVisit) -> None:
        self.eligible = eligible
        self._rows: dict[int, list[PodInfo]] = {}

    def __getitem__(self, row: int) -> list[PodInfo]:
        found = self._rows.get(row)
        if found is None:
            pods = self.eligible.cluster.table.pods[row]
            found = self._rows[row] = [p for uid, p in pods.items() if uid in self.eligible]
        return found

    def __iter__(self) -> Iterator[int]:
        return iter(self._rows)

    def __len__(self) -> int:
        return len(self._rows)


def _unit_importance(unit: list[PodInfo]) -> tuple[int, float]:
    return min(more_important(p) for p in unit)
