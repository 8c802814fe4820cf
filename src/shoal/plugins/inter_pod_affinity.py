"""InterPodAffinity (PreFilter, Filter, PreScore, Score, NormalizeScore): place pods
relative to other pods, with kube-scheduler's (v1.30) semantics.

Filter, in kube's order (a node is reported for the first rule it breaks):

1. Required pod affinity of the incoming pod: the node must have every term's topology
   key, and for every term its domain must hold a placed pod matching *all* the terms.
   Special case: if no placed pod matches all the terms anywhere (in nodes having the
   terms' keys) and the pod matches all its own terms, any node having the keys passes,
   so the first pod of a group with affinity to itself can land.
   -> "node(s) didn't match pod affinity rules", UnschedulableAndUnresolvable.
2. Required pod anti-affinity of the incoming pod: no term's domain on the node may hold
   a placed pod matching that term. -> "node(s) didn't match pod anti-affinity rules".
3. Symmetry: no placed pod whose required anti-affinity term matches the incoming pod
   may be in the node's domain for that term's key.
   -> "node(s) didn't satisfy existing pods anti-affinity rules".

Score: per topology domain, the incoming pod's preferred affinity (+weight) and
anti-affinity (-weight) terms count matching placed pods; placed pods' preferred
affinity (+weight) / anti-affinity (-weight) terms matching the incoming pod, and their
required affinity terms (+hardPodAffinityWeight), count for the domain they are in. A
node scores the sum over its domains; NormalizeScore maps min..max to 0..100.
`ignorePreferredTermsOfExistingPods` skips scoring for pods without preferred terms.

Namespaces of a term: the union of `namespaces` and the namespaces whose labels match
`namespaceSelector` (`{}`: every namespace); with neither set, the owner pod's namespace.
Namespace labels come from `Snapshot.namespaces`. As in kube, the incoming pod's
selectors are resolved to the namespaces they match now, and placed pods' terms are
judged against the incoming pod's namespace labels, so relabelling a namespace takes
effect from the next cycle. `matchLabelKeys` and `mismatchLabelKeys` are merged into the
selector as `key In/NotIn (owner's value)` (the behaviour kube enables by default from
v1.31).

Counting uses the shared `PodTopologyIndex`: matching-pod counts per node row are kept
incrementally, placed pods with (anti-)affinity are grouped per distinct term, and domain
totals are `np.bincount`s over the label code columns. PreFilter and PreScore return Skip
when neither the pod nor any placed pod has relevant terms.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from shoal.api.podinfo import PodInfo
from shoal.cache.labels import MISSING
from shoal.cache.pod_topology import (
    PREFERRED_AFFINITY,
    PREFERRED_ANTI_AFFINITY,
    REQUIRED_AFFINITY,
    REQUIRED_ANTI_AFFINITY,
    PodMatcher,
    PodTopologyIndex,
    per_node,
    resolve_term,
    sum_by_domain,
)
from shoal.framework.cycle_state import CycleState
from shoal.framework.handle import Handle
from shoal.framework.status import Code, Status
from shoal.framework.types import (
    MAX_NODE_SCORE,
    ActionType,
    Candidates,
    ClusterEvent,
    EventResource,
    Failure,
    FilterResult,
    PreFilterResult,
)
from shoal.plugins.args import InterPodAffinityArgs

__all__ = [
    "NAME",
    "REASON_AFFINITY",
    "REASON_ANTI_AFFINITY",
    "REASON_EXISTING_ANTI_AFFINITY",
    "InterPodAffinity",
]

NAME = "InterPodAffinity"
REASON_AFFINITY = "node(s) didn't match pod affinity rules"
REASON_ANTI_AFFINITY = "node(s) didn't match pod anti-affinity rules"
REASON_EXISTING_ANTI_AFFINITY = "node(s) didn't satisfy existing pods anti-affinity rules"

_PRE_FILTER_KEY = "PreFilter" + NAME
_PRE_SCORE_KEY = "PreScore" + NAME


@dataclass(slots=True)
class _FilterState:
    # Required affinity: per term, (topology key, domains holding a pod matching all terms).
    affinity: list[tuple[str, NDArray[np.bool_]]] = field(default_factory=list)
    # No placed pod matches all the affinity terms (in nodes having the terms' keys).
    no_affinity_matches: bool = False
    self_matches_affinity: bool = False
    # Per topology key: domains holding a pod matched by the incoming anti-affinity.
    anti_affinity: dict[str, NDArray[np.bool_]] = field(default_factory=dict)
    # Per topology key: domains whose placed pods' anti-affinity rejects the pod.
    existing_anti_affinity: dict[str, NDArray[np.bool_]] = field(default_factory=dict)


def _mark(blocked: dict[str, NDArray[np.bool_]], key: str, domains: NDArray[np.bool_]) -> None:
    previous = blocked.get(key)
    blocked[key] = domains if previous is None else previous | domains


def _per_node_bool(domains: NDArray[np.bool_], codes: NDArray[np.int32]) -> NDArray[np.bool_]:
    out = np.zeros(codes.shape, dtype=bool)
    ok = (codes != MISSING) & (codes < len(domains))
    out[ok] = domains[codes[ok]]
    return out


class InterPodAffinity:
    name = NAME
    # Optimistic workers may decide with it: the pods they take (no required pod affinity) pass it
    # on any node (shoal.scheduler.optimistic).
    row_local = True

    def __init__(self, handle: Handle, args: InterPodAffinityArgs | None = None) -> None:
        self.handle = handle
        self.args = args or InterPodAffinityArgs()
        self._index: PodTopologyIndex | None = None
        # Kinds of placed pods' terms that score the incoming pod.
        kinds = [PREFERRED_AFFINITY, PREFERRED_ANTI_AFFINITY]
        if self.args.hard_pod_affinity_weight > 0:
            kinds.append(REQUIRED_AFFINITY)
        self._existing_kinds = tuple(kinds)

    @property
    def index(self) -> PodTopologyIndex:
        if self._index is None:
            self._index = PodTopologyIndex.of(self.handle)
        return self._index

    def _vocab_size(self, key: str) -> int:
        return len(self.handle.snapshot.labels.values.get(key, ()))

    # ---- filtering -----------------------------------------------------------------

    def pre_filter(self, state: CycleState, pod: PodInfo) -> tuple[PreFilterResult | None, Status]:
        index = self.index
        if (
            not pod.affinity_terms
            and not pod.anti_affinity_terms
            and not index.has_groups(REQUIRED_ANTI_AFFINITY)
        ):
            return None, Status(Code.SKIP)
        snap = self.handle.snapshot
        labels = snap.labels
        n = snap.n
        every = slice(0, n)
        s = _FilterState()
        namespaces = self.handle.snapshot.namespaces
        ns_labels = namespaces.labels(pod.namespace)

        # Placed pods' required anti-affinity terms that match the incoming pod.
        for group in index.groups(REQUIRED_ANTI_AFFINITY):
            if not group.term.matches(pod, ns_labels):
                continue
            key = group.term.topology_key
            codes = labels.column(key, every)
            values = codes[(group.counts[:n] > 0) & (codes != MISSING)]
            if values.size:
                domains = np.zeros(self._vocab_size(key), dtype=bool)
                domains[values] = True
                _mark(s.existing_anti_affinity, key, domains)
        if not pod.affinity_terms and not pod.anti_affinity_terms and not s.existing_anti_affinity:
            return None, Status(Code.SKIP)

        if pod.affinity_terms:
            terms = [resolve_term(t, pod).unrolled(namespaces) for t in pod.affinity_terms]
            matcher = PodMatcher(tuple((t.selector, t.namespaces) for t in terms))
            counts = index.counts(matcher)
            total = 0
            for term in terms:
                key = term.topology_key
                per_domain = sum_by_domain(labels.column(key, every), counts, self._vocab_size(key))
                total += int(per_domain.sum())
                s.affinity.append((key, per_domain > 0))
            s.no_affinity_matches = total == 0
            s.self_matches_affinity = all(term.matches(pod, ns_labels) for term in terms)

        for raw in pod.anti_affinity_terms:
            term = resolve_term(raw, pod).unrolled(namespaces)
            key = term.topology_key
            counts = index.counts(term.matcher)
            per_domain = sum_by_domain(labels.column(key, every), counts, self._vocab_size(key))
            _mark(s.anti_affinity, key, per_domain > 0)

        state.write(_PRE_FILTER_KEY, s)
        return None, Status()

    def filter(self, state: CycleState, pod: PodInfo, nodes: Candidates) -> FilterResult:
        s: _FilterState = state.read(_PRE_FILTER_KEY)
        labels = self.handle.snapshot.labels
        passed = np.ones(nodes.size, dtype=bool)
        failures: list[Failure] = []

        if s.affinity:
            has_keys = np.ones(nodes.size, dtype=bool)
            pods_exist = np.ones(nodes.size, dtype=bool)
            for key, domains in s.affinity:
                codes = labels.column(key, nodes.index)
                has_keys &= codes != MISSING
                pods_exist &= _per_node_bool(domains, codes)
            if s.no_affinity_matches and s.self_matches_affinity:
                ok = has_keys
            else:
                ok = has_keys & pods_exist
            if not ok.all():
                failures.append(Failure(REASON_AFFINITY, ~ok, Code.UNSCHEDULABLE_AND_UNRESOLVABLE))
                passed &= ok

        for reason, blocked in (
            (REASON_ANTI_AFFINITY, s.anti_affinity),
            (REASON_EXISTING_ANTI_AFFINITY, s.existing_anti_affinity),
        ):
            if not blocked:
                continue
            hit = np.zeros(nodes.size, dtype=bool)
            for key, domains in blocked.items():
                hit |= _per_node_bool(domains, labels.column(key, nodes.index))
            hit &= passed
            if hit.any():
                failures.append(Failure(reason, hit, Code.UNSCHEDULABLE))
                passed &= ~hit
        return FilterResult(passed, failures)

    # ---- scoring -------------------------------------------------------------------

    def pre_score(self, state: CycleState, pod: PodInfo, nodes: Candidates) -> Status:
        has_preferred = bool(pod.preferred_affinity_terms or pod.preferred_anti_affinity_terms)
        index = self.index
        existing_kinds = self._existing_kinds
        if not has_preferred and (
            self.args.ignore_preferred_terms_of_existing_pods
            or not index.has_any_group(existing_kinds)
        ):
            return Status(Code.SKIP)
        if nodes.size == 0:
            return Status(Code.SKIP)
        hard_weight = self.args.hard_pod_affinity_weight

        snap = self.handle.snapshot
        labels = snap.labels
        n = snap.n
        every = slice(0, n)
        topology_score: dict[str, NDArray[np.int64]] = {}
        namespaces = self.handle.snapshot.namespaces
        ns_labels = namespaces.labels(pod.namespace)

        def add(key: str, per_row: NDArray[np.int64]) -> None:
            per_domain = sum_by_domain(labels.column(key, every), per_row, self._vocab_size(key))
            previous = topology_score.get(key)
            topology_score[key] = per_domain if previous is None else previous + per_domain

        for weighted in pod.preferred_affinity_terms:
            term = resolve_term(weighted.pod_affinity_term, pod).unrolled(namespaces)
            add(term.topology_key, index.counts(term.matcher) * weighted.weight)
        for weighted in pod.preferred_anti_affinity_terms:
            term = resolve_term(weighted.pod_affinity_term, pod).unrolled(namespaces)
            add(term.topology_key, index.counts(term.matcher) * -weighted.weight)
        for kind in existing_kinds:
            sign = -1 if kind == PREFERRED_ANTI_AFFINITY else 1
            for group in index.groups(kind):
                if group.term.matches(pod, ns_labels):
                    weight = hard_weight if kind == REQUIRED_AFFINITY else group.weight
                    add(group.term.topology_key, group.counts[:n] * (sign * weight))

        if not any(values.any() for values in topology_score.values()):
            return Status(Code.SKIP)  # every node would score the same
        state.write(_PRE_SCORE_KEY, topology_score)
        return Status()

    def score(self, state: CycleState, pod: PodInfo, nodes: Candidates) -> NDArray[np.int64]:
        topology_score: dict[str, NDArray[np.int64]] = state.read(_PRE_SCORE_KEY)
        labels = self.handle.snapshot.labels
        total = np.zeros(nodes.size, dtype=np.int64)
        for key, per_domain in topology_score.items():
            total += per_node(per_domain, labels.column(key, nodes.index))
        return total

    def normalize_score(
        self, state: CycleState, pod: PodInfo, nodes: Candidates, scores: NDArray[np.int64]
    ) -> NDArray[np.int64]:
        if scores.size == 0:
            return scores
        low, high = int(scores.min()), int(scores.max())
        if high - low <= 0:
            return np.zeros(scores.shape, dtype=np.int64)
        fraction = (scores - low).astype(np.float64) / float(high - low)
        return (float(MAX_NODE_SCORE) * fraction).astype(np.int64)

    # ---- queueing ------------------------------------------------------------------

    def events_to_register(self) -> Sequence[ClusterEvent]:
        return [
            ClusterEvent(EventResource.ASSIGNED_POD, ActionType.ALL),
            ClusterEvent(EventResource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_LABEL),
        ]

    @classmethod
    def new(cls, args: InterPodAffinityArgs | None, handle: Handle) -> InterPodAffinity:
        return cls(handle, args)
