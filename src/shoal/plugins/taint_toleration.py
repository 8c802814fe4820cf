"""TaintToleration (Filter, PreScore, Score): NoSchedule/NoExecute taints must be
tolerated; untolerated PreferNoSchedule taints lower a node's score.

A rejected node is reported as kube-scheduler v1.34+ reports it, "node(s) had
untolerated taint(s)", without the taint: its key and value may be sensitive, and the
reason reaches the pod's status and events, which anyone who reads pods in the
namespace sees (kubernetes/kubernetes#134740). Operators get the taints from
`untolerated_taints` (`shoal explain`).

Nodes share a few distinct taint lists, so tolerations are checked once per distinct
list and the answer is broadcast to all nodes with `taint_set` codes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from shoal.api.objects import Taint, Toleration
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
)
from shoal.plugins.normalize import default_normalize_score

__all__ = ["NAME", "REASON_UNTOLERATED", "TaintToleration", "untolerated_taints"]

NAME = "TaintToleration"
REASON_UNTOLERATED = "node(s) had untolerated taint(s)"


def first_untolerated(
    taints: tuple[Taint, ...], tolerations: tuple[Toleration, ...]
) -> Taint | None:
    for taint in taints:
        if taint.effect == "PreferNoSchedule":
            continue
        if not any(t.tolerates(taint) for t in tolerations):
            return taint
    return None


def count_intolerable_prefer(taints: tuple[Taint, ...], tolerations: tuple[Toleration, ...]) -> int:
    relevant = [t for t in tolerations if t.effect in ("", "PreferNoSchedule")]
    return sum(
        1
        for taint in taints
        if taint.effect == "PreferNoSchedule" and not any(t.tolerates(taint) for t in relevant)
    )


class TaintToleration:
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

    def __init__(self, handle: Handle) -> None:
        self.handle = handle

    def filter(self, state: CycleState, pod: PodInfo, nodes: Candidates) -> FilterResult:
        snap = self.handle.snapshot
        sets = snap.taint_sets
        if len(sets) == 1:  # no node has taints
            return FilterResult.all_pass(nodes.size)
        blocking = [first_untolerated(taints, pod.tolerations) for taints in sets]
        if not any(blocking):
            return FilterResult.all_pass(nodes.size)
        set_ok = np.array([b is None for b in blocking])
        passed = set_ok[snap.taint_set[nodes.index]]
        if passed.all():
            return FilterResult.all_pass(nodes.size)
        return FilterResult(
            passed, [Failure(REASON_UNTOLERATED, ~passed, Code.UNSCHEDULABLE_AND_UNRESOLVABLE)]
        )

    def pre_score(self, state: CycleState, pod: PodInfo, nodes: Candidates) -> Status:
        if len(self.handle.snapshot.taint_sets) == 1:
            return Status(Code.SKIP)
        return Status()

    def score(self, state: CycleState, pod: PodInfo, nodes: Candidates) -> NDArray[np.int64]:
        snap = self.handle.snapshot
        per_set = np.array(
            [count_intolerable_prefer(taints, pod.tolerations) for taints in snap.taint_sets],
            dtype=np.int64,
        )
        return per_set[snap.taint_set[nodes.index]]

    def normalize_score(
        self, state: CycleState, pod: PodInfo, nodes: Candidates, scores: NDArray[np.int64]
    ) -> NDArray[np.int64]:
        return default_normalize_score(MAX_NODE_SCORE, True, scores)

    def events_to_register(self) -> Sequence[ClusterEvent]:
        return [ClusterEvent(EventResource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_TAINT)]

    @classmethod
    def new(cls, args: Any, handle: Handle) -> TaintToleration:
        return cls(handle)


def untolerated_taints(handle: Handle, pod: PodInfo, rows: NDArray[np.intp]) -> dict[str, int]:
    """For operators (the pod's status says only "untolerated taint(s)"): the first
    taint each of the nodes at `rows` has that the pod does not tolerate, as `kubectl
    taint` writes it (key=value:Effect), and on how many of those nodes."""
    snap = handle.snapshot
    blocking = [first_untolerated(taints, pod.tolerations) for taints in snap.taint_sets]
    counts = np.bincount(snap.taint_set[rows], minlength=len(blocking))
    found: dict[str, int] = {}
    for taint, count in zip(blocking, counts.tolist(), strict=True):
        if taint is not None and count:
            found[str(taint)] = found.get(str(taint), 0) + count
    return dict(sorted(found.items(), key=lambda kv: (-kv[1], kv[0])))
