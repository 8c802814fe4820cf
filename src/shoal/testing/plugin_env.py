"""Call one plugin directly, the way kube-scheduler's plugin unit tests do.

    handle = make_handle(
        nodes=[make_node("n1").capacity(cpu="4", memory="10Gi")],
        pods=[make_pod("old").node("n1").req(cpu="3")],
    )
    fit = NodeResourcesFit.new(None, handle)
    report = run_filter(fit, make_pod("p").req(cpu="2"), handle)
    assert report.reasons == {"n1": ("Insufficient cpu",)}
    assert run_score(fit, make_pod("p").req(cpu="1"), handle) == {"n1": ...}

`pods` are existing pods and must name their node (`.node(...)`); they are counted in
the cluster state as bound. Plugins see nodes in the order they were added.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from shoal.api.objects import Node, Pod
from shoal.api.podinfo import PodInfo
from shoal.cache.cluster import ClusterState
from shoal.cache.snapshot import Snapshot
from shoal.drivers.memory import ManualClock, MemoryEffects
from shoal.framework.cycle_state import CycleState
from shoal.framework.handle import Handle
from shoal.framework.interfaces import Plugin
from shoal.framework.status import Code, Status
from shoal.framework.types import Candidates, PreFilterResult
from shoal.testing.builders import NodeBuilder, PodBuilder

__all__ = ["FilterReport", "as_pod_info", "make_handle", "run_filter", "run_score"]

PodLike = Pod | PodBuilder | PodInfo


def as_pod_info(pod: PodLike, timestamp: float = 0.0) -> PodInfo:
    """A PodInfo from a Pod, a builder, or a PodInfo (returned as is)."""
    if isinstance(pod, PodInfo):
        return pod
    obj = pod.obj() if isinstance(pod, PodBuilder) else pod
    return PodInfo(obj, timestamp)


def make_handle(
    nodes: Iterable[Node | NodeBuilder] = (),
    pods: Iterable[Pod | PodBuilder] = (),
    *,
    seed: int = 0,
    now: float = 0.0,
) -> Handle:
    """A Handle over a fresh ClusterState holding `nodes` and the bound `pods`."""
    cluster = ClusterState()
    for node in nodes:
        cluster.add_node(node.obj() if isinstance(node, NodeBuilder) else node)
    for i, pod in enumerate(pods):
        info = as_pod_info(pod)
        if not info.node_name:
            raise ValueError(f"existing pod #{i} ({info.key}) must name its node: .node(...)")
        cluster.add_bound_pod(info, info.node_name)
    clock = ManualClock(now)
    return Handle(
        cluster=cluster,
        snapshot=Snapshot(cluster),
        clock=clock,
        rng=np.random.default_rng(seed),
        effects=MemoryEffects(clock),
    )


@dataclass
class FilterReport:
    """What PreFilter and Filter said about every node."""

    pre_filter: Status
    pre_filter_result: PreFilterResult | None = None
    # Per node (in table order): the reasons it was rejected; () where it passes.
    reasons: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # Per rejected node: UNSCHEDULABLE_AND_UNRESOLVABLE if any of its failures is, else
    # the code of its first (as the framework reads a node).
    codes: dict[str, Code] = field(default_factory=dict)

    @property
    def passed(self) -> list[str]:
        return [name for name, why in self.reasons.items() if not why]

    @property
    def failed(self) -> dict[str, tuple[str, ...]]:
        return {name: why for name, why in self.reasons.items() if why}


def run_filter(
    plugin: Plugin, pod: PodLike, handle: Handle, state: CycleState | None = None
) -> FilterReport:
    """PreFilter (when the plugin has one), then Filter on every node.

    A PreFilter that returns SKIP means Filter is not called (every node passes); one
    that rejects the pod marks every node with its message. Nodes outside a
    PreFilterResult are still filtered, so the report shows the plugin's own verdict.
    """
    info = as_pod_info(pod)
    state = state or CycleState()
    snap = handle.snapshot
    snap.refresh()
    names = [str(snap.names[i]) for i in range(snap.n)]
    report = FilterReport(Status())
    pre_filter = getattr(plugin, "pre_filter", None)
    if pre_filter is not None:
        result, status = pre_filter(state, info)
        report.pre_filter, report.pre_filter_result = status, result
        if status.code == Code.SKIP:
            report.reasons = {name: () for name in names}
            return report
        if not status.ok:
            report.reasons = {name: status.reasons or (status.code.name,) for name in names}
            report.codes = {name: status.code for name in names}
            return report
    filter_fn = getattr(plugin, "filter", None)
    if filter_fn is None:
        report.reasons = {name: () for name in names}
        return report
    snap.refresh()
    outcome = filter_fn(state, info, Candidates.all(snap.n))
    reasons: list[tuple[str, ...]] = [() for _ in names]
    codes: dict[str, Code] = {}
    for failure in outcome.failures:
        for row in np.flatnonzero(failure.nodes):
            reasons[row] = (*reasons[row], failure.reason)
            # As the framework reads it: a node is unresolvable when any of its
            # failures is (kube: the status of the whole node).
            if failure.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE or names[row] not in codes:
                codes[names[row]] = failure.code
    for row in np.flatnonzero(~outcome.passed):
        if not reasons[row]:
            reasons[row] = ("<rejected without a reason>",)
    report.reasons = dict(zip(names, reasons, strict=True))
    report.codes = codes
    return report


def run_score(
    plugin: Plugin,
    pod: PodLike,
    handle: Handle,
    state: CycleState | None = None,
    *,
    normalize: bool = True,
) -> dict[str, int] | None:
    """PreScore (when present), Score on every node and NormalizeScore (when present and
    `normalize`). Returns {node: score}, or None when PreScore returned SKIP."""
    info = as_pod_info(pod)
    state = state or CycleState()
    snap = handle.snapshot
    snap.refresh()
    nodes = Candidates.all(snap.n)
    pre_score = getattr(plugin, "pre_score", None)
    if pre_score is not None:
        status = pre_score(state, info, nodes)
        if status.code == Code.SKIP:
            return None
        if not status.ok:
            raise AssertionError(f"PreScore failed: {status!r}")
    scores = plugin.score(state, info, nodes)  # type: ignore[attr-defined]
    normalizer = getattr(plugin, "normalize_score", None)
    if normalize and normalizer is not None:
        scores = normalizer(state, info, nodes, scores)
    return {str(snap.names[i]): int(scores[i]) for i in range(snap.n)}
