"""PodTopologySpread (PreFilter, Filter, PreScore, Score, NormalizeScore): spread matching
pods evenly across topology domains, with kube-scheduler's (v1.30) semantics.

Hard constraints (`whenUnsatisfiable: DoNotSchedule`) are checked by Filter: for each
constraint, a node in domain D passes when
`matching pods in D + (1 if the pod matches its own selector) - global minimum <= maxSkew`.
Domains and counts come from every node that has *all* the constraints' topology keys and
passes the constraint's node inclusion policies (`nodeAffinityPolicy`, default Honor: the
pod's nodeSelector and required node affinity; `nodeTaintsPolicy`, default Ignore: taints
with NoSchedule/NoExecute effects the pod does not tolerate). When fewer than `minDomains`
domains are eligible the global minimum is 0. A node missing a constraint's topology key
is UnschedulableAndUnresolvable ("... (missing required label)"). Only pods in the
incoming pod's namespace count, terminating pods do not, and `matchLabelKeys` adds the
pod's own values for those keys to the selector.

Soft constraints (`ScheduleAnyway`) are scored: each feasible node gets
`sum(count * log(size + 2) + maxSkew - 1)` over constraints, where count is the matching
pods in the node's domain (on the node itself for `kubernetes.io/hostname`) and size the
number of domains among the feasible nodes; NormalizeScore maps min..max to 100..0.
Feasible nodes lacking a topology key score 0.

Counting uses the shared `PodTopologyIndex` (per-row counts kept incrementally) and
`np.bincount` over the label code columns, so a cycle costs a few numpy passes over the
node table, not a walk over the pods of every node.

Deviation from kube-scheduler: kube's default constraints take their selector from the
Services, ReplicaSets, ReplicationControllers and StatefulSets selecting the pod. Shoal
does not track those objects yet, so

* `defaultingType: System` applies no default constraints (kube would apply hostname
  maxSkew 3 and zone maxSkew 5, ScheduleAnyway), and
* with `defaultingType: List`, the `defaultConstraints` apply to a pod without
  constraints of its own only when it has an ownerReference with `controller: true`, and
  their selector is the pod's own labels (none if the pod has no labels).

When a pod has no constraints (and no defaults apply) PreFilter and PreScore return Skip.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from numpy.typing import NDArray

from shoal.api.objects import NodeSelectorRequirement, TopologySpreadConstraint
from shoal.api.podinfo import PodInfo
from shoal.api.selectors import (
    SelectorKey,
    key_matches,
    merge_match_labels,
    selector_from_labels,
    selector_key,
)
from shoal.cache.labels import MISSING
from shoal.cache.pod_topology import PodMatcher, PodTopologyIndex, per_node, sum_by_domain
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
from shoal.plugins.args import PodTopologySpreadArgs

__all__ = [
    "HOSTNAME_KEY",
    "NAME",
    "REASON",
    "REASON_MISSING_LABEL",
    "PodTopologySpread",
    "SpreadConstraint",
]

NAME = "PodTopologySpread"
REASON = "node(s) didn't match pod topology spread constraints"
REASON_MISSING_LABEL = REASON + " (missing required label)"
HOSTNAME_KEY = "kubernetes.io/hostname"

_PRE_FILTER_KEY = "PreFilter" + NAME
_PRE_SCORE_KEY = "PreScore" + NAME
_MAX_INT32 = 2**31 - 1
_DO_NOT_SCHEDULE_EFFECTS = ("NoSchedule", "NoExecute")

Action = Literal["DoNotSchedule", "ScheduleAnyway"]


@dataclass(frozen=True, slots=True)
class SpreadConstraint:
    """A TopologySpreadConstraint with defaults applied and its selector resolved."""

    max_skew: int
    topology_key: str
    selector: SelectorKey
    min_domains: int
    honor_node_affinity: bool
    honor_node_taints: bool
    matcher: PodMatcher


@dataclass(slots=True)
class _HardState:
    constraint: SpreadConstraint
    domain_counts: NDArray[np.int64]  # matching pods per label code of the topology key
    min_match: int
    self_match: int


@dataclass(slots=True)
class _SoftState:
    constraint: SpreadConstraint
    domain_counts: NDArray[np.int64] | None  # None: per-node counts (hostname key)
    weight: float


class PodTopologySpread:
    name = NAME
    # Optimistic workers may decide with it: the pods they take (no hard spread) pass it
    # on any node (shoal.scheduler.optimistic).
    row_local = True

    def __init__(
        self, handle: Handle, default_constraints: Sequence[TopologySpreadConstraint] = ()
    ) -> None:
        self.handle = handle
        self.default_constraints = tuple(default_constraints)
        self._index: PodTopologyIndex | None = None

    @property
    def index(self) -> PodTopologyIndex:
        if self._index is None:
            self._index = PodTopologyIndex.of(self.handle)
        return self._index

    # ---- constraints ---------------------------------------------------------------

    def constraints(self, pod: PodInfo, action: Action) -> list[SpreadConstraint]:
        """The pod's constraints of one kind (its own, else the applicable defaults)."""
        if pod.spread_constraints:
            return [
                _resolve(c, pod, None)
                for c in pod.spread_constraints
                if c.when_unsatisfiable == action
            ]
        if not self.default_constraints or not pod.labels:
            return []
        if not any(ref.controller for ref in pod.pod.metadata.owner_references):
            return []
        selector = selector_from_labels(pod.labels)
        return [
            _resolve(c, pod, selector)
            for c in self.default_constraints
            if c.when_unsatisfiable == action
        ]

    def _inclusion(
        self, pod: PodInfo, constraints: list[SpreadConstraint], index: slice
    ) -> tuple[NDArray[np.bool_] | None, NDArray[np.bool_] | None]:
        """Masks of nodes passing the pod's required node affinity / untolerated taints,
        over `index` (None: every node passes or no constraint honours the policy)."""
        snap = self.handle.snapshot
        affinity: NDArray[np.bool_] | None = None
        taints: NDArray[np.bool_] | None = None
        spec = pod.pod.spec
        if any(c.honor_node_affinity for c in constraints) and (
            spec.node_selector or pod.required_node_terms is not None
        ):
            names = snap.names[index]
            affinity = np.ones(len(names), dtype=bool)
            for key, value in spec.node_selector.items():
                req = NodeSelectorRequirement(key=key, operator="In", values=[value])
                affinity &= snap.labels.requirement_mask(req, index)
            if pod.required_node_terms is not None:
                affinity &= snap.labels.terms_mask(pod.required_node_terms, names, index)
        if any(c.honor_node_taints for c in constraints) and len(snap.taint_sets) > 1:
            tolerated = np.array(
                [
                    not any(
                        t.effect in _DO_NOT_SCHEDULE_EFFECTS and not pod.tolerates(t)
                        for t in taint_set
                    )
                    for taint_set in snap.taint_sets
                ]
            )
            if not tolerated.all():
                taints = tolerated[snap.taint_set[index]]
        return affinity, taints

    # ---- filtering -----------------------------------------------------------------

    def pre_filter(self, state: CycleState, pod: PodInfo) -> tuple[PreFilterResult | None, Status]:
        constraints = self.constraints(pod, "DoNotSchedule")
        if not constraints:
            return None, Status(Code.SKIP)
        snap = self.handle.snapshot
        labels = snap.labels
        every = slice(0, snap.n)
        codes = [labels.column(c.topology_key, every) for c in constraints]
        has_all = np.ones(snap.n, dtype=bool)
        for column in codes:
            has_all &= column != MISSING
        affinity, taints = self._inclusion(pod, constraints, every)
        hard: list[_HardState] = []
        for c, column in zip(constraints, codes, strict=True):
            included = has_all
            if c.honor_node_affinity and affinity is not None:
                included = included & affinity
            if c.honor_node_taints and taints is not None:
                included = included & taints
            size = len(labels.values.get(c.topology_key, ()))
            counts = self.index.counts(c.matcher)
            domain_counts = sum_by_domain(column, counts, size, included)
            present = np.bincount(column[included], minlength=size) > 0
            num_domains = int(present.sum())
            min_match = int(domain_counts[present].min()) if num_domains else _MAX_INT32
            if num_domains < c.min_domains:
                min_match = 0
            self_match = 1 if key_matches(c.selector, pod.labels) else 0
            hard.append(_HardState(c, domain_counts, min_match, self_match))
        state.write(_PRE_FILTER_KEY, hard)
        return None, Status()

    def filter(self, state: CycleState, pod: PodInfo, nodes: Candidates) -> FilterResult:
        hard: list[_HardState] = state.read(_PRE_FILTER_KEY)
        labels = self.handle.snapshot.labels
        undecided = np.ones(nodes.size, dtype=bool)
        missing_label = np.zeros(nodes.size, dtype=bool)
        skewed = np.zeros(nodes.size, dtype=bool)
        for s in hard:
            column = labels.column(s.constraint.topology_key, nodes.index)
            missing = column == MISSING
            missing_label |= undecided & missing
            undecided &= ~missing
            skew = per_node(s.domain_counts, column) + s.self_match - s.min_match
            bad = undecided & (skew > s.constraint.max_skew)
            skewed |= bad
            undecided &= ~bad
        failures: list[Failure] = []
        if missing_label.any():
            failures.append(
                Failure(REASON_MISSING_LABEL, missing_label, Code.UNSCHEDULABLE_AND_UNRESOLVABLE)
            )
        if skewed.any():
            failures.append(Failure(REASON, skewed, Code.UNSCHEDULABLE))
        return FilterResult(undecided, failures)

    # ---- scoring -------------------------------------------------------------------

    def _ignored(
        self, constraints: Sequence[SpreadConstraint], nodes: Candidates
    ) -> NDArray[np.bool_]:
        """Candidates lacking some constraint's topology key (they score 0)."""
        labels = self.handle.snapshot.labels
        ignored = np.zeros(nodes.size, dtype=bool)
        for c in constraints:
            ignored |= labels.column(c.topology_key, nodes.index) == MISSING
        return ignored

    def pre_score(self, state: CycleState, pod: PodInfo, nodes: Candidates) -> Status:
        constraints = self.constraints(pod, "ScheduleAnyway")
        snap = self.handle.snapshot
        if not constraints or snap.n == 0 or nodes.size == 0:
            return Status(Code.SKIP)
        labels = snap.labels
        every = slice(0, snap.n)
        ignored = self._ignored(constraints, nodes)
        scored = int(nodes.size - ignored.sum())
        all_codes = [labels.column(c.topology_key, every) for c in constraints]
        has_all = np.ones(snap.n, dtype=bool)
        for column in all_codes:
            has_all &= column != MISSING
        affinity, taints = self._inclusion(pod, constraints, every)
        soft: list[_SoftState] = []
        for c, column in zip(constraints, all_codes, strict=True):
            if c.topology_key == HOSTNAME_KEY:
                soft.append(_SoftState(c, None, math.log(scored + 2)))
                continue
            size = len(labels.values.get(c.topology_key, ()))
            candidate_codes = labels.column(c.topology_key, nodes.index)[~ignored]
            domains = int(np.count_nonzero(np.bincount(candidate_codes, minlength=size)))
            included = has_all
            if c.honor_node_affinity and affinity is not None:
                included = included & affinity
            if c.honor_node_taints and taints is not None:
                included = included & taints
            domain_counts = sum_by_domain(column, self.index.counts(c.matcher), size, included)
            soft.append(_SoftState(c, domain_counts, math.log(domains + 2)))
        state.write(_PRE_SCORE_KEY, soft)
        return Status()

    def score(self, state: CycleState, pod: PodInfo, nodes: Candidates) -> NDArray[np.int64]:
        soft: list[_SoftState] = state.read(_PRE_SCORE_KEY)
        labels = self.handle.snapshot.labels
        total = np.zeros(nodes.size, dtype=np.float64)
        for s in soft:
            c = s.constraint
            if s.domain_counts is None:
                counts = self.index.counts(c.matcher)[nodes.index]
            else:
                counts = per_node(s.domain_counts, labels.column(c.topology_key, nodes.index))
            total += counts * s.weight + float(c.max_skew - 1)
        scores = np.floor(total + 0.5).astype(np.int64)  # Go's math.Round (scores are >= 0)
        scores[self._ignored([s.constraint for s in soft], nodes)] = 0
        return scores

    def normalize_score(
        self, state: CycleState, pod: PodInfo, nodes: Candidates, scores: NDArray[np.int64]
    ) -> NDArray[np.int64]:
        soft: list[_SoftState] | None = state.get(_PRE_SCORE_KEY)
        if soft is None:
            return scores
        ignored = self._ignored([s.constraint for s in soft], nodes)
        valid = ~ignored
        out = np.zeros(scores.shape, dtype=np.int64)
        if not valid.any():
            return out
        min_score = int(scores[valid].min())
        max_score = max(int(scores[valid].max()), 0)
        if max_score == 0:
            out[valid] = MAX_NODE_SCORE
        else:
            out[valid] = MAX_NODE_SCORE * (max_score + min_score - scores[valid]) // max_score
        return out

    # ---- queueing ------------------------------------------------------------------

    def events_to_register(self) -> Sequence[ClusterEvent]:
        return [
            ClusterEvent(EventResource.ASSIGNED_POD, ActionType.ALL),
            ClusterEvent(
                EventResource.NODE,
                ActionType.ADD
                | ActionType.DELETE
                | ActionType.UPDATE_NODE_LABEL
                | ActionType.UPDATE_NODE_TAINT,
            ),
        ]

    @classmethod
    def new(cls, args: PodTopologySpreadArgs | None, handle: Handle) -> PodTopologySpread:
        defaults: list[TopologySpreadConstraint] = []
        if args is not None and args.defaulting_type == "List":
            defaults = args.constraints()
        return cls(handle, defaults)


def _resolve(
    c: TopologySpreadConstraint, pod: PodInfo, selector_override: SelectorKey
) -> SpreadConstraint:
    """Defaults applied; `selector_override` (default constraints) replaces the selector."""
    selector: SelectorKey
    if selector_override is not None:
        selector = selector_override
    else:
        selector = selector_key(c.label_selector)
        if c.match_label_keys:
            own = {k: pod.labels[k] for k in c.match_label_keys if k in pod.labels}
            selector = merge_match_labels(selector, own)
    return SpreadConstraint(
        max_skew=c.max_skew,
        topology_key=c.topology_key,
        selector=selector,
        min_domains=c.min_domains if c.min_domains is not None else 1,
        honor_node_affinity=c.node_affinity_policy == "Honor",
        honor_node_taints=c.node_taints_policy == "Honor",
        matcher=PodMatcher(((selector, frozenset((pod.namespace,))),), skip_terminating=True),
    )
