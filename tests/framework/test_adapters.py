"""Per-node adapters: NodeView, Filter reasons/codes, Score normalisation, real profiles."""

from __future__ import annotations

import numpy as np
import pytest

from shoal.api.objects import (
    Container,
    Node,
    NodeSpec,
    NodeStatus,
    ObjectMeta,
    Pod,
    PodSpec,
    ResourceRequirements,
    Taint,
)
from shoal.api.podinfo import PodInfo
from shoal.cache.cluster import ClusterState
from shoal.cache.snapshot import Snapshot
from shoal.config import KubeSchedulerConfiguration
from shoal.drivers.memory import ManualClock, MemoryEffects
from shoal.framework import (
    MAX_NODE_SCORE,
    ActionType,
    Candidates,
    ClusterEvent,
    Code,
    CycleState,
    Diagnosis,
    EnqueueExtensions,
    EventResource,
    FilterPlugin,
    Handle,
    NodeView,
    PerNodeFilter,
    PerNodeFilterScore,
    PerNodeScore,
    ScoreNormalizer,
    ScorePlugin,
    Status,
    normalize_to_max,
    normalize_to_max_reversed,
    per_node_filter,
    per_node_plugin,
    per_node_score,
)
from shoal.scheduler import Scheduler, default_registry, new_scheduler

# ---- small builders (kept local: these tests only need nodes with labels) ------------


def node(
    name: str,
    cpu: str = "4",
    labels: dict[str, str] | None = None,
    taints: list[Taint] | None = None,
    unschedulable: bool = False,
) -> Node:
    return Node(
        metadata=ObjectMeta(name=name, labels=labels or {}),
        spec=NodeSpec(unschedulable=unschedulable, taints=taints or []),
        status=NodeStatus(allocatable={"cpu": cpu, "memory": "8Gi", "pods": "10"}),
    )


def pod(name: str, cpu: str = "500m", labels: dict[str, str] | None = None) -> Pod:
    return Pod(
        metadata=ObjectMeta(name=name, uid=name, namespace="default", labels=labels or {}),
        spec=PodSpec(containers=[Container(resources=ResourceRequirements(requests={"cpu": cpu}))]),
    )


def handle_with(*nodes: Node) -> Handle:
    cluster = ClusterState()
    for n in nodes:
        cluster.add_node(n)
    return Handle(
        cluster, Snapshot(cluster), ManualClock(), np.random.default_rng(0), MemoryEffects()
    )


def drain(sched: Scheduler) -> None:
    while sched.has_work():
        sched.schedule_one()
        sched.start_bindings()
        sched.handle.effects.drain(sched)  # type: ignore[attr-defined]


POD = PodInfo(pod("p"))

# ---- NodeView ----------------------------------------------------------------------


def test_node_view_reads_one_snapshot_row() -> None:
    taint = Taint(key="dedicated", value="infer", effect="NoSchedule")
    handle = handle_with(
        node("a", labels={"zone": "z1"}),
        node("b", cpu="8", labels={"zone": "z2"}, taints=[taint], unschedulable=True),
    )
    bound = PodInfo(pod("running", cpu="1500m"))
    handle.cluster.add_bound_pod(bound, "b")
    snap = handle.snapshot
    view = NodeView(snap, snap.row("b") or 0)

    assert view.name == "b"
    assert view.node.metadata.name == "b"
    assert view.labels == {"zone": "z2"}
    assert view.taints == (taint,)
    assert view.unschedulable
    assert view.allocatable["cpu"] == 8000
    assert view.requested["cpu"] == 1500
    assert view.requested["pods"] == 1
    assert view.free("cpu") == 6500
    assert view.free("nvidia.com/gpu") == 0  # a resource no node has
    assert view.pods == (bound,)
    assert set(view.allocatable) == set(snap.resources)
    assert repr(view) == "NodeView(b)"


def test_node_view_counts_assumed_pods() -> None:
    handle = handle_with(node("a"))
    handle.cluster.assume(PodInfo(pod("x", cpu="1")), "a")
    view = NodeView(handle.snapshot, 0)
    assert view.free("cpu") == 3000
    assert [p.name for p in view.pods] == ["x"]


# ---- Filter ------------------------------------------------------------------------


def zone_filter(state: CycleState, pod: PodInfo, node: NodeView) -> Status:
    zone = node.labels.get("zone")
    if zone == "z1":
        return Status()
    if zone is None:
        return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, "node(s) had no zone label")
    if zone == "full":
        # Two reasons for one node: each counts once, like "Insufficient cpu, memory".
        return Status(Code.UNSCHEDULABLE, "node(s) were full", "node(s) were busy")
    return Status(Code.UNSCHEDULABLE, f"node(s) were in zone {zone}")


FILTER_NODES = [
    node("ok-1", labels={"zone": "z1"}),
    node("bare-1"),
    node("z2-1", labels={"zone": "z2"}),
    node("bare-2"),
    node("full-1", labels={"zone": "full"}),
    node("z2-2", labels={"zone": "z2"}),
    node("ok-2", labels={"zone": "z1"}),
]


def test_filter_groups_failures_by_reason_and_keeps_codes() -> None:
    handle = handle_with(*FILTER_NODES)
    plugin = per_node_filter("Zone", zone_filter).with_handle(handle)
    nodes = Candidates.all(handle.snapshot.n)

    result = plugin.filter(CycleState(), POD, nodes)

    assert result.passed.tolist() == [True, False, False, False, False, False, True]
    by_reason = {f.reason: (f.nodes.tolist(), f.code) for f in result.failures}
    assert by_reason == {
        "node(s) had no zone label": (
            [False, True, False, True, False, False, False],
            Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
        ),
        "node(s) were in zone z2": (
            [False, False, True, False, False, True, False],
            Code.UNSCHEDULABLE,
        ),
        "node(s) were full": ([False, False, False, False, True, False, False], Code.UNSCHEDULABLE),
        "node(s) were busy": ([False, False, False, False, True, False, False], Code.UNSCHEDULABLE),
    }
    # Every failing node is covered by at least one Failure.
    covered = np.zeros(nodes.size, dtype=bool)
    for failure in result.failures:
        covered |= failure.nodes
    assert (covered == ~result.passed).all()


def test_filter_reasons_flow_into_the_fit_error_message() -> None:
    handle = handle_with(*FILTER_NODES)
    plugin = per_node_filter("Zone", zone_filter).with_handle(handle)
    nodes = Candidates.all(handle.snapshot.n)
    result = plugin.filter(CycleState(), POD, nodes)

    diagnosis = Diagnosis.from_filters(handle.snapshot.n, nodes, [("Zone", result)])

    assert diagnosis.message() == (
        "0/7 nodes are available: 1 node(s) were busy, 1 node(s) were full, "
        "2 node(s) had no zone label, 2 node(s) were in zone z2."
    )
    assert diagnosis.unschedulable_plugins == {"Zone"}
    assert diagnosis.unresolvable is not None
    assert diagnosis.unresolvable.tolist() == [False, True, False, True, False, False, False]
    assert diagnosis.node_reasons[4] == ("node(s) were full", "node(s) were busy")


def test_same_reason_with_different_codes_stays_separate() -> None:
    def fn(state: CycleState, pod: PodInfo, node: NodeView) -> Status:
        code = Code.UNSCHEDULABLE if node.name == "a" else Code.UNSCHEDULABLE_AND_UNRESOLVABLE
        return Status(code, "node(s) said no")

    handle = handle_with(node("a"), node("b"), node("c"))
    nodes = Candidates.all(3)
    result = per_node_filter("No", fn).with_handle(handle).filter(CycleState(), POD, nodes)
    codes = sorted((f.code, int(f.nodes.sum())) for f in result.failures)
    assert codes == [(Code.UNSCHEDULABLE, 1), (Code.UNSCHEDULABLE_AND_UNRESOLVABLE, 2)]
    diagnosis = Diagnosis.from_filters(3, nodes, [("No", result)])
    assert diagnosis.message() == "0/3 nodes are available: 3 node(s) said no."


def test_filter_on_a_subset_of_rows_aligns_with_the_candidates() -> None:
    handle = handle_with(*FILTER_NODES)
    plugin = per_node_filter("Zone", zone_filter).with_handle(handle)
    nodes = Candidates.of(np.array([6, 1, 2], dtype=np.intp))  # ok-2, bare-1, z2-1

    result = plugin.filter(CycleState(), POD, nodes)

    assert result.passed.tolist() == [True, False, False]
    assert {f.reason: f.nodes.tolist() for f in result.failures} == {
        "node(s) had no zone label": [False, True, False],
        "node(s) were in zone z2": [False, False, True],
    }


def test_a_failure_without_reasons_gets_a_default_one() -> None:
    handle = handle_with(node("a"))
    plugin = per_node_filter("Silent", lambda s, p, n: Status(Code.UNSCHEDULABLE))
    result = plugin.with_handle(handle).filter(CycleState(), POD, Candidates.all(1))
    assert [f.reason for f in result.failures] == ["node(s) didn't satisfy plugin Silent"]


@pytest.mark.parametrize("code", [Code.ERROR, Code.WAIT, Code.SKIP])
def test_codes_a_filter_may_not_return_are_an_error(code: Code) -> None:
    handle = handle_with(node("a"))
    plugin = per_node_filter("Bad", lambda s, p, n: Status(code, "boom")).with_handle(handle)
    with pytest.raises(RuntimeError, match=f"'Bad' returned {code.name} for node 'a'"):
        plugin.filter(CycleState(), POD, Candidates.all(1))


def test_an_unbound_adapter_says_how_to_bind_it() -> None:
    plugin = per_node_filter("Zone", zone_filter)
    with pytest.raises(RuntimeError, match=r"register it with \.spec\(\)"):
        plugin.filter(CycleState(), POD, Candidates.all(0))


def test_decorator_form_and_protocols() -> None:
    @per_node_filter("Deco")
    def deco(state: CycleState, pod: PodInfo, node: NodeView) -> Status:
        return Status()

    @per_node_score("DecoScore", normalize=normalize_to_max)
    def deco_score(state: CycleState, pod: PodInfo, node: NodeView) -> int:
        return 1

    both = per_node_plugin("Both", filter=zone_filter, score=lambda s, p, n: 0)

    assert isinstance(deco, PerNodeFilter) and deco.name == "Deco"
    assert isinstance(deco_score, PerNodeScore) and deco_score.normalize is normalize_to_max
    assert isinstance(both, PerNodeFilterScore)
    assert isinstance(deco, FilterPlugin) and not isinstance(deco, ScorePlugin)
    assert isinstance(deco_score, ScorePlugin) and isinstance(deco_score, ScoreNormalizer)
    assert not isinstance(deco_score, FilterPlugin)
    assert isinstance(both, FilterPlugin) and isinstance(both, ScorePlugin)
    for plugin in (deco, deco_score, both):
        assert isinstance(plugin, EnqueueExtensions)
        # An adapter must not look like a Bind plugin (multiPoint expands by method name).
        assert not hasattr(plugin, "bind")


def test_events_default_to_any_and_can_be_narrowed() -> None:
    label_change = ClusterEvent(EventResource.NODE, ActionType.UPDATE_NODE_LABEL)
    plugin = per_node_filter("Zone", zone_filter)
    assert any(e.matches(label_change) for e in plugin.events_to_register())
    narrow = per_node_filter("Zone", zone_filter, events=[label_change])
    assert list(narrow.events_to_register()) == [label_change]
    assert narrow.with_handle(handle_with()).events_to_register() == (label_change,)


# ---- Score -------------------------------------------------------------------------


def rank(state: CycleState, pod: PodInfo, node: NodeView) -> int:
    return int(node.labels.get("rank", "0"))


def test_score_calls_the_function_per_candidate() -> None:
    handle = handle_with(*(node(f"n{i}", labels={"rank": str(i * 10)}) for i in range(5)))
    plugin = per_node_score("Rank", rank).with_handle(handle)
    nodes = Candidates.of(np.array([4, 0, 2], dtype=np.intp))
    scores = plugin.score(CycleState(), POD, nodes)
    assert scores.dtype == np.int64
    assert scores.tolist() == [40, 0, 20]
    # No normalize: normalize_score passes the scores through.
    assert plugin.normalize_score(CycleState(), POD, nodes, scores).tolist() == [40, 0, 20]


def test_score_normalisation() -> None:
    raw = np.array([0, 5, 10, 20], dtype=np.int64)
    assert normalize_to_max(raw).tolist() == [0, 25, 50, 100]
    assert normalize_to_max_reversed(raw).tolist() == [100, 75, 50, 0]
    zeros = np.zeros(3, dtype=np.int64)
    assert normalize_to_max(zeros).tolist() == [0, 0, 0]
    assert normalize_to_max_reversed(zeros).tolist() == [MAX_NODE_SCORE] * 3
    assert normalize_to_max(np.array([3, 7], dtype=np.int64)).tolist() == [42, 100]

    handle = handle_with(*(node(f"n{i}", labels={"rank": str(i)}) for i in range(3)))
    plugin = per_node_score("Rank", rank, normalize=normalize_to_max).with_handle(handle)
    nodes = Candidates.all(3)
    scores = plugin.score(CycleState(), POD, nodes)
    assert plugin.normalize_score(CycleState(), POD, nodes, scores).tolist() == [0, 50, 100]


# ---- inside a real profile -----------------------------------------------------------


def scheduler_with(*plugins: PerNodeFilter | PerNodeScore, weight: int | None = None) -> Scheduler:
    registry = default_registry(include_entry_points=False)
    for plugin in plugins:
        registry.register(plugin.name, plugin.spec())
    enabled = [{"name": p.name, **({"weight": weight} if weight else {})} for p in plugins]
    config = KubeSchedulerConfiguration.model_validate(
        {"profiles": [{"plugins": {"multiPoint": {"enabled": enabled}}}]}
    )
    return new_scheduler(config, clock=ManualClock(), effects=MemoryEffects(), registry=registry)


def test_filter_adapter_in_a_profile_places_and_explains() -> None:
    sched = scheduler_with(per_node_filter("Zone", zone_filter))
    fwk = sched.profiles["default-scheduler"]
    assert [p.name for p in fwk.plugins.filter][-1] == "Zone"
    assert "Zone" not in [p.name for p, _ in fwk.plugins.score]
    for n in FILTER_NODES:
        sched.add_node(n)
    for i in range(4):
        sched.add_pod(pod(f"web-{i}", cpu="1"))
    drain(sched)
    assert set(sched.handle.effects.bound.values()) <= {"ok-1", "ok-2"}  # type: ignore[attr-defined]
    assert len(sched.handle.effects.bound) == 4  # type: ignore[attr-defined]

    # The two z1 nodes have 2 cpu left each; every other node is rejected by Zone.
    sched.add_pod(pod("big", cpu="3"))
    result = sched.schedule_one()
    assert result is not None and result.node is None
    assert result.message == (
        "0/7 nodes are available: 1 node(s) were busy, 1 node(s) were full, "
        "2 Insufficient cpu, 2 node(s) had no zone label, 2 node(s) were in zone z2."
        " preemption: 0/7 nodes are available: 2 Preemption is not helpful for "
        "scheduling, 5 No preemption victims found for incoming pod."
    )
    assert sched.explain("big") == result.message


def test_score_adapter_in_a_profile_steers_placement() -> None:
    # Prefer the node with the highest `rank` label; weight 10 outweighs the defaults.
    plugin = per_node_score("Rank", rank, normalize=normalize_to_max)
    sched = scheduler_with(plugin, weight=10)
    fwk = sched.profiles["default-scheduler"]
    assert ("Rank", 10) in [(p.name, w) for p, w in fwk.plugins.score]
    for i in range(6):
        sched.add_node(node(f"n{i}", labels={"rank": str(i)}))
    sched.add_pod(pod("p1"))
    drain(sched)
    assert sched.handle.effects.bound == {"p1": "n5"}  # type: ignore[attr-defined]


def test_filter_and_score_under_one_name() -> None:
    def only_ranked(state: CycleState, pod: PodInfo, node: NodeView) -> Status:
        if "rank" in node.labels:
            return Status()
        return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, "node(s) had no rank")

    def low_rank_first(state: CycleState, pod: PodInfo, node: NodeView) -> int:
        return rank(state, pod, node)

    plugin = per_node_plugin(
        "Ranked", filter=only_ranked, score=low_rank_first, normalize=normalize_to_max_reversed
    )
    sched = scheduler_with(plugin, weight=20)
    for i in range(1, 4):
        sched.add_node(node(f"n{i}", labels={"rank": str(i)}))
    sched.add_node(node("unranked"))
    sched.add_pod(pod("p1"))
    drain(sched)
    assert sched.handle.effects.bound == {"p1": "n1"}  # type: ignore[attr-defined]
