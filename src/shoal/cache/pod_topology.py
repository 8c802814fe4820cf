"""The pod topology index: incremental per-node counts of placed pods, shared by
PodTopologySpread and InterPodAffinity.

Both plugins ask the same question many times: "how many placed pods matching this label
selector (in these namespaces) are in each topology domain?". Answering it by walking the
pods of every node in every scheduling cycle is what makes these plugins slow in
kube-scheduler. Here the answer is kept incrementally:

* **Matchers.** For every `PodMatcher` (a conjunction of selector + namespace-set clauses)
  that a plugin has asked about, an int64 array holds the number of matching placed pods
  per node row. The first request initialises it with one scan over placed pods; after
  that `pod_placed` / `pod_unplaced` keep it current. Matchers are bucketed by one
  `key=value` label they require, so a placement only evaluates the matchers that can
  possibly select the pod. Matchers nobody asked about for a while are dropped.
* **Affinity carriers.** Placed pods that carry (anti-)affinity terms are grouped by
  (kind, resolved term, weight); each group holds the number of carrier pods per node
  row. Symmetry checks ("does an existing pod's anti-affinity reject the incoming pod?")
  and existing pods' score contributions then cost one numpy pass per *distinct term*,
  not per pod.

Domain counts for a topology key are derived with numpy: `np.bincount` of the node label
codes (`snapshot.labels.column(key, ...)`) weighted by the per-row counts (see
`sum_by_domain`).

Arrays are indexed by node row and follow `ClusterState.remove_node`, which moves the
last row into the removed slot (`row_moved`). Views returned by `counts` are only valid
until the next cluster mutation: use them within one scheduling cycle.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
from numpy.typing import NDArray

from shoal.api.objects import PodAffinityTerm
from shoal.api.podinfo import PodInfo
from shoal.api.selectors import (
    Requirement,
    SelectorKey,
    add_requirements,
    key_matches,
    selector_key,
)
from shoal.cache.cluster import ClusterState
from shoal.cache.labels import MISSING
from shoal.cache.namespaces import NamespaceLabels

__all__ = [
    "PREFERRED_AFFINITY",
    "PREFERRED_ANTI_AFFINITY",
    "REQUIRED_AFFINITY",
    "REQUIRED_ANTI_AFFINITY",
    "SERVICE_NAME",
    "NamespaceSet",
    "PodMatcher",
    "PodTopologyIndex",
    "ResolvedTerm",
    "TermGroup",
    "per_node",
    "resolve_term",
    "sum_by_domain",
    "term_namespaces",
]

SERVICE_NAME = "shoal.pod_topology"
"""The key of the shared index in `Handle.services`."""

NamespaceSet = frozenset[str] | None
"""Namespaces a term applies to; None means every namespace."""

REQUIRED_AFFINITY = "required-affinity"
REQUIRED_ANTI_AFFINITY = "required-anti-affinity"
PREFERRED_AFFINITY = "preferred-affinity"
PREFERRED_ANTI_AFFINITY = "preferred-anti-affinity"
_KINDS = (REQUIRED_AFFINITY, REQUIRED_ANTI_AFFINITY, PREFERRED_AFFINITY, PREFERRED_ANTI_AFFINITY)

# Matchers unused for this many `counts` requests are dropped (checked every _PRUNE_EVERY).
_MATCHER_TTL = 4096
_PRUNE_EVERY = 1024


def _terminating(pod: PodInfo) -> bool:
    return pod.pod.metadata.deletion_timestamp is not None


@dataclass(frozen=True, slots=True)
class PodMatcher:
    """Selects pods matching every (selector, namespaces) clause.

    `skip_terminating` leaves out pods with a deletionTimestamp (PodTopologySpread does).
    """

    clauses: tuple[tuple[SelectorKey, NamespaceSet], ...]
    skip_terminating: bool = False

    def matches(self, pod: PodInfo) -> bool:
        if self.skip_terminating and _terminating(pod):
            return False
        for selector, namespaces in self.clauses:
            if namespaces is not None and pod.namespace not in namespaces:
                return False
            if not key_matches(selector, pod.labels):
                return False
        return True

    def anchor(self) -> tuple[str, str] | None:
        """A label `key=value` every matching pod must have (None if there is none)."""
        for selector, _ in self.clauses:
            for name, op, values in selector or ():
                if op == "In" and len(values) == 1:
                    return name, values[0]
        return None

    def never_matches(self) -> bool:
        return any(sel is None or ns == frozenset() for sel, ns in self.clauses)


@dataclass(frozen=True, slots=True)
class ResolvedTerm:
    """A PodAffinityTerm resolved against the pod that owns it (namespaces defaulted,
    matchLabelKeys / mismatchLabelKeys merged into the selector).

    The term applies to pods in `namespaces` (None: every namespace) and, when
    `namespace_selector` is set, to pods in namespaces whose labels it matches. The
    selector is kept as such for placed pods' terms, which are judged against the
    incoming pod's namespace labels at query time (kube's `AffinityTerm.Matches`), so a
    relabelled namespace needs no bookkeeping; the incoming pod's own terms are
    `unrolled` into plain namespace sets, which is what the matchers count by.
    """

    selector: SelectorKey
    namespaces: NamespaceSet
    topology_key: str
    namespace_selector: SelectorKey = None

    def matches(self, pod: PodInfo, namespace_labels: Mapping[str, str]) -> bool:
        """kube's AffinityTerm.Matches: namespace first, then the label selector.
        `namespace_labels` are the labels of `pod`'s namespace."""
        namespaces = self.namespaces
        if namespaces is not None and pod.namespace not in namespaces:
            ns_selector = self.namespace_selector
            if ns_selector is None or not key_matches(ns_selector, namespace_labels):
                return False
        return key_matches(self.selector, pod.labels)

    def unrolled(self, namespaces: NamespaceLabels) -> ResolvedTerm:
        """The term with its namespace selector replaced by the namespaces it selects
        now (kube's mergeAffinityTermNamespacesIfNotEmpty, for the incoming pod)."""
        ns_selector = self.namespace_selector
        if ns_selector is None:
            return self
        selected = namespaces.selected(ns_selector)
        listed = self.namespaces
        assert listed is not None  # an empty selector is stored as namespaces=None
        merged = selected if not listed else listed | selected
        return ResolvedTerm(self.selector, merged, self.topology_key)

    @property
    def matcher(self) -> PodMatcher:
        if self.namespace_selector is not None:
            raise ValueError("a term with a namespace selector must be unrolled first")
        return PodMatcher(((self.selector, self.namespaces),))


def term_namespaces(
    term: PodAffinityTerm, owner_namespace: str
) -> tuple[NamespaceSet, SelectorKey]:
    """The namespaces a term selects pods from: (listed namespaces, namespace selector).

    kube: the union of `namespaces` and the namespaces `namespaceSelector` matches; an
    empty selector (`{}`) matches every namespace (returned as None, None); with neither
    field set, the owner's namespace.
    """
    ns_selector = selector_key(term.namespace_selector)
    if ns_selector == ():
        return None, None
    if not term.namespaces and ns_selector is None:
        return frozenset((owner_namespace,)), None
    return frozenset(term.namespaces), ns_selector


def resolve_term(term: PodAffinityTerm, owner: PodInfo) -> ResolvedTerm:
    selector = selector_key(term.label_selector)
    if selector is not None and (term.match_label_keys or term.mismatch_label_keys):
        labels = owner.labels
        extra: list[Requirement] = [
            (k, "In", (labels[k],)) for k in term.match_label_keys if k in labels
        ]
        extra += [(k, "NotIn", (labels[k],)) for k in term.mismatch_label_keys if k in labels]
        selector = add_requirements(selector, tuple(extra))
    namespaces, ns_selector = term_namespaces(term, owner.namespace)
    return ResolvedTerm(selector, namespaces, term.topology_key, ns_selector)


def sum_by_domain(
    codes: NDArray[np.int32],
    weights: NDArray[np.int64],
    size: int,
    include: NDArray[np.bool_] | None = None,
) -> NDArray[np.int64]:
    """Per topology value (label code), the sum of `weights` over rows having the key
    (and, if given, `include`). `size` is the key's vocabulary size."""
    keep = codes != MISSING
    if include is not None:
        keep &= include
    sums = np.bincount(codes[keep], weights=weights[keep], minlength=size)
    return sums.astype(np.int64)


def per_node(domain_values: NDArray[np.int64], codes: NDArray[np.int32]) -> NDArray[np.int64]:
    """Broadcast per-domain values back to rows (0 where the row lacks the key)."""
    out = np.zeros(codes.shape, dtype=np.int64)
    ok = (codes != MISSING) & (codes < len(domain_values))
    out[ok] = domain_values[codes[ok]]
    return out


@dataclass(eq=False, slots=True)
class _Counts:
    counts: NDArray[np.int64]
    last_used: int


@dataclass(eq=False)
class TermGroup:
    """Placed pods carrying one (kind, term, weight): how many per node row."""

    kind: str
    term: ResolvedTerm
    weight: int
    counts: NDArray[np.int64]  # capacity-sized; rows 0..n-1 are live
    total: int = 0


GroupKey = tuple[str, ResolvedTerm, int]


class _HasClusterAndServices(Protocol):
    """What `PodTopologyIndex.of` needs from a Handle (structural)."""

    cluster: ClusterState
    services: dict[str, object]


@dataclass(eq=False)
class PodTopologyIndex:
    """A `PlacementObserver` keeping matching-pod counts per node row."""

    cluster: ClusterState
    _cap: int = 0
    _tick: int = 0
    _matchers: dict[PodMatcher, _Counts] = field(default_factory=dict)
    _by_anchor: dict[tuple[str, str], list[PodMatcher]] = field(default_factory=dict)
    _unanchored: list[PodMatcher] = field(default_factory=list)
    _groups: dict[str, dict[tuple[ResolvedTerm, int], TermGroup]] = field(
        default_factory=lambda: {kind: {} for kind in _KINDS}
    )
    _carrier_keys: dict[str, list[GroupKey]] = field(default_factory=dict)

    # ---- setup ---------------------------------------------------------------------

    @classmethod
    def of(cls, handle: _HasClusterAndServices) -> PodTopologyIndex:
        """The handle's shared index, created and subscribed on first use."""
        found = handle.services.get(SERVICE_NAME)
        if isinstance(found, PodTopologyIndex):
            return found
        index = cls(handle.cluster)
        index._scan_carriers()
        handle.cluster.observers.append(index)
        handle.services[SERVICE_NAME] = index
        return index

    def _placed_pods(self) -> Iterator[tuple[int, PodInfo]]:
        table = self.cluster.table
        for row in range(table.n):
            for pod in table.pods[row].values():
                yield row, pod

    def _scan_carriers(self) -> None:
        self._ensure(self.cluster.table.n)
        for row, pod in self._placed_pods():
            if pod.has_pod_affinity:
                self._add_carrier(row, pod)

    def _ensure(self, size: int) -> None:
        if size <= self._cap:
            return
        cap = max(size, 2 * self._cap, 64)

        def grown(a: NDArray[np.int64]) -> NDArray[np.int64]:
            out = np.zeros(cap, dtype=np.int64)
            out[: len(a)] = a
            return out

        for entry in self._matchers.values():
            entry.counts = grown(entry.counts)
        for groups in self._groups.values():
            for group in groups.values():
                group.counts = grown(group.counts)
        self._cap = cap

    # ---- queries -------------------------------------------------------------------

    def counts(self, matcher: PodMatcher) -> NDArray[np.int64]:
        """Matching placed pods per node row, rows 0..n-1 (a view: do not modify)."""
        n = self.cluster.table.n
        self._ensure(n)
        self._tick += 1
        entry = self._matchers.get(matcher)
        if entry is None:
            entry = self._register(matcher)
        entry.last_used = self._tick
        if self._tick % _PRUNE_EVERY == 0:
            self._prune()
        return entry.counts[:n]

    def groups(self, kind: str) -> Collection[TermGroup]:
        """Terms of `kind` carried by placed pods (only groups with carriers)."""
        return self._groups[kind].values()

    def has_groups(self, kind: str) -> bool:
        return bool(self._groups[kind])

    def has_any_group(self, kinds: Iterable[str]) -> bool:
        groups = self._groups
        for kind in kinds:  # noqa: SIM110 (a loop, not any(genexpr): asked per pod and plugin)
            if groups[kind]:
                return True
        return False

    @property
    def matcher_count(self) -> int:
        return len(self._matchers)

    def _register(self, matcher: PodMatcher) -> _Counts:
        counts = np.zeros(self._cap, dtype=np.int64)
        if not matcher.never_matches():
            for row, pod in self._placed_pods():
                if matcher.matches(pod):
                    counts[row] += 1
        entry = _Counts(counts, self._tick)
        self._matchers[matcher] = entry
        if matcher.never_matches():
            return entry  # nothing to keep current
        anchor = matcher.anchor()
        if anchor is None:
            self._unanchored.append(matcher)
        else:
            self._by_anchor.setdefault(anchor, []).append(matcher)
        return entry

    def _prune(self) -> None:
        horizon = self._tick - _MATCHER_TTL
        stale = [m for m, e in self._matchers.items() if e.last_used < horizon]
        for matcher in stale:
            del self._matchers[matcher]
            anchor = matcher.anchor()
            if matcher.never_matches():
                continue
            if anchor is None:
                self._unanchored.remove(matcher)
            else:
                bucket = self._by_anchor[anchor]
                bucket.remove(matcher)
                if not bucket:
                    del self._by_anchor[anchor]

    # ---- PlacementObserver ---------------------------------------------------------

    def pod_placed(self, row: int, pod: PodInfo) -> None:
        if row >= self._cap:
            self._ensure(row + 1)
        if self._matchers:
            self._count(row, pod, 1)
        if pod.has_pod_affinity:
            self._add_carrier(row, pod)

    def pod_unplaced(self, row: int, pod: PodInfo) -> None:
        if self._matchers:
            self._count(row, pod, -1)
        keys = self._carrier_keys.pop(pod.uid, None)
        if keys is not None:
            self._update_groups(row, keys, -1)

    def row_moved(self, src: int, dst: int) -> None:
        self._ensure(max(src, dst) + 1)
        for entry in self._matchers.values():
            entry.counts[dst] = entry.counts[src]
            entry.counts[src] = 0
        for groups in self._groups.values():
            for group in groups.values():
                group.counts[dst] = group.counts[src]
                group.counts[src] = 0

    def node_changed(self, row: int) -> None:
        # Counts are per row; topology values are read from the label columns at query
        # time, so a relabelled node needs no update here.
        if row >= self._cap:
            self._ensure(row + 1)

    # ---- internals -----------------------------------------------------------------

    def _count(self, row: int, pod: PodInfo, delta: int) -> None:
        matchers = self._matchers
        for matcher in self._unanchored:
            if matcher.matches(pod):
                matchers[matcher].counts[row] += delta
        if self._by_anchor:
            for item in pod.labels.items():
                bucket = self._by_anchor.get(item)
                if bucket is not None:
                    for matcher in bucket:
                        if matcher.matches(pod):
                            matchers[matcher].counts[row] += delta

    def _add_carrier(self, row: int, pod: PodInfo) -> None:
        keys: list[GroupKey] = []
        keys += [(REQUIRED_AFFINITY, resolve_term(t, pod), 0) for t in pod.affinity_terms]
        keys += [(REQUIRED_ANTI_AFFINITY, resolve_term(t, pod), 0) for t in pod.anti_affinity_terms]
        keys += [
            (PREFERRED_AFFINITY, resolve_term(w.pod_affinity_term, pod), w.weight)
            for w in pod.preferred_affinity_terms
        ]
        keys += [
            (PREFERRED_ANTI_AFFINITY, resolve_term(w.pod_affinity_term, pod), w.weight)
            for w in pod.preferred_anti_affinity_terms
        ]
        previous = self._carrier_keys.pop(pod.uid, None)
        if previous is not None:  # placed twice without being unplaced: count it once
            self._update_groups(row, previous, -1)
        self._carrier_keys[pod.uid] = keys
        self._update_groups(row, keys, 1)

    def _update_groups(self, row: int, keys: list[GroupKey], delta: int) -> None:
        for kind, term, weight in keys:
            groups = self._groups[kind]
            group = groups.get((term, weight))
            if group is None:
                if delta < 0:
                    continue
                group = groups[(term, weight)] = TermGroup(
                    kind, term, weight, np.zeros(self._cap, dtype=np.int64)
                )
            group.counts[row] += delta
            group.total += delta
            if group.total <= 0:
                del groups[(term, weight)]
