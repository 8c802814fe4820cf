"""NodeDeclaredFeatures (PreFilter, Filter): a pod that needs newer node features goes
only to nodes whose kubelet declares them all (`status.declaredFeatures`), as
kube-scheduler's plugin of that name (beta and in the default profile since 1.36) keeps
pods off nodes of older versions or configurations. Which features a pod needs:
`shoal.api.node_features`. Nodes that lack one fail with kube's "node(s) didn't match
Pod's required features" (unresolvable: preemption does not help). Pods that need none
(nearly all) skip the plugin in PreFilter.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from shoal.api.node_features import required_features
from shoal.api.podinfo import PodInfo
from shoal.framework.cycle_state import CycleState
from shoal.framework.handle import Handle
from shoal.framework.status import Code, Status
from shoal.framework.types import (
    ActionType,
    Candidates,
    ClusterEvent,
    EventResource,
    FilterResult,
    PreFilterResult,
)

__all__ = ["NAME", "REASON", "NodeDeclaredFeatures"]

NAME = "NodeDeclaredFeatures"
REASON = "node(s) didn't match Pod's required features"
_STATE = NAME
_SKIP = Status(Code.SKIP)  # nearly every pod: shared, never changed


class NodeDeclaredFeatures:
    name = NAME
    # Optimistic workers may decide with it: its verdict reads only the node's row and
    # the pod (shoal.scheduler.optimistic).
    row_local = True
    # The verdict depends on the node alone, never on its pods.
    preemption_local = True
    preemption_node_only = True

    def __init__(self, handle: Handle) -> None:
        self.handle = handle

    def pre_filter(self, state: CycleState, pod: PodInfo) -> tuple[PreFilterResult | None, Status]:
        needed = required_features(pod.pod.spec)
        if not needed:
            return None, _SKIP
        state.write(_STATE, needed)
        return None, Status()

    def filter(self, state: CycleState, pod: PodInfo, nodes: Candidates) -> FilterResult:
        needed: frozenset[str] = state.read(_STATE)
        declared = self.handle.snapshot.declared_features
        n = self.handle.snapshot.n
        have = np.ones(n, dtype=bool)
        for feature in needed:
            have &= declared.mask(feature)
        passed = have[nodes.index]
        if passed.all():
            return FilterResult.all_pass(nodes.size)
        return FilterResult.from_mask(passed, REASON, Code.UNSCHEDULABLE_AND_UNRESOLVABLE)

    def events_to_register(self) -> Sequence[ClusterEvent]:
        # A node added, or one declaring other features (kube: Add | UpdateNodeDeclaredFeature).
        return [ClusterEvent(EventResource.NODE, ActionType.ADD | ActionType.UPDATE)]

    @classmethod
    def new(cls, args: Any, handle: Handle) -> NodeDeclaredFeatures:
        return cls(handle)
