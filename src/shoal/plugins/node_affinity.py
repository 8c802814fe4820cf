"""NodeAffinity (PreFilter, Filter, PreScore, Score): nodeSelector and required node
affinity must match; preferred terms add their weights to a node's score.

Selectors are evaluated on integer label columns for all candidate nodes at once
(`shoal.cache.labels`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

from shoal.api.objects import NodeSelector, NodeSelectorRequirement, NodeSelectorTerm
from shoal.api.podinfo import PodInfo
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
from shoal.plugins.args import NodeAffinityArgs
from shoal.plugins.normalize import default_normalize_score

__all__ = ["NAME", "REASON", "NodeAffinity"]

NAME = "NodeAffinity"
REASON = "node(s) didn't match Pod's node affinity/selector"
REASON_ENFORCED = "node(s) didn't match scheduler-enforced node affinity"


class NodeAffinity:
    name = NAME
    # Optimistic workers may decide with it: its verdict reads only the node's row and
    # the pod (shoal.scheduler.optimistic).
    row_local = True
    # Its verdict on a node depends only on that node's pods and only improves as pods
    # leave: preemption may judge all candidate nodes at once (shoal.preemption).
    preemption_local = True
    # Its verdict does not depend on the pods on a node at all (labels, taints, the
    # node's own fields, reservations): preemption judges it once, with no victim gone.
    preemption_node_only = True

    def __init__(
        self,
        handle: Handle,
        added: NodeSelector | None = None,
        added_preferred: Sequence[tuple[int, NodeSelectorTerm]] = (),
    ) -> None:
        self.handle = handle
        self.added = added
        # The configuration's addedAffinity preferred terms: scored for every pod, beside
        # its own (kube's addedPrefSchedTerms); any weight, 0 counts nothing.
        self.added_preferred = tuple((w, t) for w, t in added_preferred if w != 0)

    def pre_filter(self, state: CycleState, pod: PodInfo) -> tuple[PreFilterResult | None, Status]:
        if (
            not pod.pod.spec.node_selector
            and pod.required_node_terms is None
            and self.added is None
        ):
            return None, Status(Code.SKIP)
        terms = pod.required_node_terms
        if not terms:
            return None, Status()
        # metadata.name In [...] in every term narrows the candidates up front.
        names: set[str] | None = set()
        for term in terms:
            term_names = _names_in(term)
            if term_names is None:
                names = None
                break
            assert names is not None
            names |= term_names
        if names is None:
            return None, Status()
        return PreFilterResult(frozenset(names)), Status()

    def filter(self, state: CycleState, pod: PodInfo, nodes: Candidates) -> FilterResult:
        snap = self.handle.snapshot
        labels = snap.labels
        names = snap.names[nodes.index]
        passed = np.ones(nodes.size, dtype=bool)
        for key, value in pod.pod.spec.node_selector.items():
            req = NodeSelectorRequirement(key=key, operator="In", values=[value])
            passed &= labels.requirement_mask(req, nodes.index)
        if pod.required_node_terms is not None:
            passed &= labels.terms_mask(pod.required_node_terms, names, nodes.index)
        if self.added is not None:
            enforced = labels.terms_mask(tuple(self.added.node_selector_terms), names, nodes.index)
            if not enforced.all():
                # Per node, kube checks the enforced affinity first, then the pod's own.
                failures = [
                    Failure(REASON_ENFORCED, ~enforced, Code.UNSCHEDULABLE_AND_UNRESOLVABLE)
                ]
                own = enforced & ~passed
                if own.any():
                    failures.append(Failure(REASON, own, Code.UNSCHEDULABLE_AND_UNRESOLVABLE))
                return FilterResult(passed & enforced, failures)
        return FilterResult.from_mask(passed, REASON, Code.UNSCHEDULABLE_AND_UNRESOLVABLE)

    def pre_score(self, state: CycleState, pod: PodInfo, nodes: Candidates) -> Status:
        if pod.preferred_node_terms or self.added_preferred:
            return Status()
        return Status(Code.SKIP)

    def score(self, state: CycleState, pod: PodInfo, nodes: Candidates) -> NDArray[np.int64]:
        snap = self.handle.snapshot
        names = snap.names[nodes.index]
        total = np.zeros(nodes.size, dtype=np.int64)
        weighted = [(t.weight, t.preference) for t in pod.preferred_node_terms]
        for weight, term in (*weighted, *self.added_preferred):
            if weight == 0:
                continue
            matched = snap.labels.term_mask(term, names, nodes.index)
            total += matched.astype(np.int64) * weight
        return total

    def normalize_score(
        self, state: CycleState, pod: PodInfo, nodes: Candidates, scores: NDArray[np.int64]
    ) -> NDArray[np.int64]:
        return default_normalize_score(MAX_NODE_SCORE, False, scores)

    def events_to_register(self) -> Sequence[ClusterEvent]:
        return [ClusterEvent(EventResource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_LABEL)]

    @classmethod
    def new(cls, args: NodeAffinityArgs | None, handle: Handle) -> NodeAffinity:
        if args is None:
            return cls(handle)
        return cls(handle, args.added_node_selector(), args.added_preferred_terms())


def _names_in(term: NodeSelectorTerm) -> set[str] | None:
    for req in term.match_fields:
        if req.key == "metadata.name" and req.operator == "In":
            return set(req.values)
    return None
