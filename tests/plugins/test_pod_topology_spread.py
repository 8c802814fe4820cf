"""PodTopologySpread: cases ported from kube-scheduler's podtopologyspread filtering_test.go
and scoring_test.go, plus Shoal specifics (default constraints, the shared index)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest

from shoal.api.objects import (
    Affinity,
    Container,
    LabelSelector,
    LabelSelectorRequirement,
    Node,
    NodeAffinity,
    NodeSelector,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    NodeSpec,
    NodeStatus,
    ObjectMeta,
    OwnerReference,
    Pod,
    PodSpec,
    ResourceRequirements,
    Taint,
    TopologySpreadConstraint,
)
from shoal.api.podinfo import PodInfo
from shoal.cache.cluster import ClusterState
from shoal.cache.snapshot import Snapshot
from shoal.config import KubeSchedulerConfiguration
from shoal.drivers.memory import ManualClock, MemoryEffects
from shoal.framework.cycle_state import CycleState
from shoal.framework.handle import Handle
from shoal.framework.status import Code
from shoal.framework.types import Candidates, FilterResult
from shoal.plugins import DEFAULT_MULTI_POINT, IN_TREE
from shoal.plugins.args import PodTopologySpreadArgs
from shoal.plugins.pod_topology_spread import (
    REASON,
    REASON_MISSING_LABEL,
    PodTopologySpread,
)
from shoal.scheduler import new_scheduler

HOST = "kubernetes.io/hostname"
OK = Code.SUCCESS
UNSCHED = Code.UNSCHEDULABLE
UNRES = Code.UNSCHEDULABLE_AND_UNRESOLVABLE

# ---- builders --------------------------------------------------------------------------


def exists(key: str) -> LabelSelector:
    return LabelSelector(match_expressions=[LabelSelectorRequirement(key=key, operator="Exists")])


FOO = exists("foo")
BAR = exists("bar")


def tsc(
    max_skew: int,
    key: str,
    when: str = "DoNotSchedule",
    selector: LabelSelector | None = FOO,
    **extra: object,
) -> TopologySpreadConstraint:
    return TopologySpreadConstraint(
        max_skew=max_skew,
        topology_key=key,
        when_unsatisfiable=when,  # type: ignore[arg-type]
        label_selector=selector,
        **extra,  # type: ignore[arg-type]
    )


def node(name: str, taints: list[Taint] | None = None, **labels: str) -> Node:
    return Node(
        metadata=ObjectMeta(name=name, labels=dict(labels)),
        spec=NodeSpec(taints=taints or []),
        status=NodeStatus(allocatable={"cpu": "4", "memory": "32Gi", "pods": "110"}),
    )


def zn(name: str, zone: str) -> Node:
    """kube tests' nodes: zone + node labels."""
    return node(name, zone=zone, node=name)


def hn(name: str, **labels: str) -> Node:
    return node(name, **{HOST: name}, **labels)


def pod(
    name: str,
    labels: dict[str, str] | None = None,
    on: str = "",
    ns: str = "default",
    constraints: list[TopologySpreadConstraint] | None = None,
    node_in: tuple[str, list[str]] | None = None,
    terminating: bool = False,
    controller: bool = False,
) -> Pod:
    affinity = None
    if node_in is not None:
        key, values = node_in
        affinity = Affinity(
            node_affinity=NodeAffinity(
                required_during_scheduling_ignored_during_execution=NodeSelector(
                    node_selector_terms=[
                        NodeSelectorTerm(
                            match_expressions=[
                                NodeSelectorRequirement(key=key, operator="In", values=values)
                            ]
                        )
                    ]
                )
            )
        )
    return Pod(
        metadata=ObjectMeta(
            name=name,
            namespace=ns,
            uid=f"{ns}/{name}",
            labels=labels if labels is not None else {"foo": ""},
            deletion_timestamp="2024-01-01T00:00:00Z" if terminating else None,
            owner_references=(
                [OwnerReference(kind="ReplicaSet", name="rs", uid="rs", controller=True)]
                if controller
                else []
            ),
        ),
        spec=PodSpec(
            node_name=on,
            topology_spread_constraints=constraints or [],
            affinity=affinity,
            containers=[
                Container(
                    name="c",
                    resources=ResourceRequirements(requests={"cpu": "100m", "memory": "100Mi"}),
                )
            ],
        ),
    )


def existing(n: str, count: int = 1, **kw: object) -> list[Pod]:
    """`count` matching (label foo) pods on node `n`."""
    return [pod(f"p-{n}-{i}", on=n, **kw) for i in range(count)]  # type: ignore[arg-type]


@dataclass
class Env:
    handle: Handle
    plugin: PodTopologySpread
    names: list[str] = field(default_factory=list)

    def rows(self, names: list[str]) -> Candidates:
        return Candidates.of(np.array([self.names.index(n) for n in names], dtype=np.intp))


def build(
    nodes: list[Node],
    pods: list[Pod],
    args: PodTopologySpreadArgs | None = None,
    index_first: bool = True,
) -> Env:
    """A handle with nodes and bound pods; `index_first` creates the plugin (and so the
    shared index) before the pods are placed, exercising the incremental path; otherwise
    after, exercising the initial scan."""
    cluster = ClusterState()
    handle = Handle(
        cluster, Snapshot(cluster), ManualClock(), np.random.default_rng(0), MemoryEffects()
    )
    for n in nodes:
        cluster.add_node(n)
    plugin = PodTopologySpread.new(args, handle)
    if index_first:
        _ = plugin.index
    for p in pods:
        cluster.add_bound_pod(PodInfo(p), p.spec.node_name)
    handle.snapshot.refresh()
    return Env(handle, plugin, [n.metadata.name for n in nodes])


def codes_of(result: FilterResult, names: list[str]) -> dict[str, Code]:
    out: dict[str, Code] = {}
    for i, name in enumerate(names):
        if result.passed[i]:
            out[name] = OK
            continue
        failing = [f for f in result.failures if f.nodes[i]]
        assert failing, f"{name} failed without a reason"
        out[name] = failing[0].code
    return out


def run_filter(env: Env, incoming: Pod) -> dict[str, Code]:
    info = PodInfo(incoming)
    state = CycleState()
    _, status = env.plugin.pre_filter(state, info)
    assert status.ok, status
    result = env.plugin.filter(state, info, Candidates.all(len(env.names)))
    return codes_of(result, env.names)


FOUR_ZONED = [
    zn("node-a", "zone1"),
    zn("node-b", "zone1"),
    zn("node-x", "zone2"),
    zn("node-y", "zone2"),
]

# ---- Filter ----------------------------------------------------------------------------

SINGLE = [
    (
        "no existing pods",
        pod("p", constraints=[tsc(1, "zone")]),
        FOUR_ZONED,
        [],
        {"node-a": OK, "node-b": OK, "node-x": OK, "node-y": OK},
    ),
    (
        "no existing pods, incoming pod doesn't match itself",
        pod("p", constraints=[tsc(1, "zone", selector=BAR)]),
        FOUR_ZONED,
        [],
        {"node-a": OK, "node-b": OK, "node-x": OK, "node-y": OK},
    ),
    (
        "existing pods in a different namespace do not count",
        pod("p", constraints=[tsc(1, "zone")]),
        FOUR_ZONED,
        [
            pod("p-a1", on="node-a", ns="ns1"),
            pod("p-b1", on="node-a", ns="ns2"),
            pod("p-x1", on="node-x"),
            pod("p-y1", on="node-y"),
        ],
        {"node-a": OK, "node-b": OK, "node-x": UNSCHED, "node-y": UNSCHED},
    ),
    (
        "pods spread across zones as 3/3, all nodes fit",
        pod("p", constraints=[tsc(1, "zone")]),
        FOUR_ZONED,
        existing("node-a", 2) + existing("node-b") + existing("node-y", 3),
        {"node-a": OK, "node-b": OK, "node-x": OK, "node-y": OK},
    ),
    (
        "pods spread across zones as 1/2 due to absence of label 'zone' on node-b",
        pod("p", constraints=[tsc(1, "zone")]),
        [
            zn("node-a", "zone1"),
            node("node-b", zon="zone1", node="node-b"),
            zn("node-x", "zone2"),
            zn("node-y", "zone2"),
        ],
        existing("node-a") + existing("node-b") + existing("node-x") + existing("node-y"),
        {"node-a": OK, "node-b": UNRES, "node-x": UNSCHED, "node-y": UNSCHED},
    ),
    (
        "pod cannot be scheduled as all nodes don't have label 'rack'",
        pod("p", constraints=[tsc(1, "rack")]),
        [zn("node-a", "zone1"), zn("node-x", "zone2")],
        [],
        {"node-a": UNRES, "node-x": UNRES},
    ),
    (
        "pods spread across nodes as 2/1/0/3, only node-x fits",
        pod("p", constraints=[tsc(1, "node")]),
        FOUR_ZONED,
        existing("node-a", 2) + existing("node-b") + existing("node-y", 3),
        {"node-a": UNSCHED, "node-b": UNSCHED, "node-x": OK, "node-y": UNSCHED},
    ),
    (
        "pods spread across nodes as 2/1/0/3, maxSkew is 2, node-b and node-x fit",
        pod("p", constraints=[tsc(2, "node")]),
        FOUR_ZONED,
        existing("node-a", 2) + existing("node-b") + existing("node-y", 3),
        {"node-a": UNSCHED, "node-b": OK, "node-x": OK, "node-y": UNSCHED},
    ),
    (
        "pods spread across nodes as 2/1/0/3, but pod doesn't match itself",
        pod("p", labels={"bar": ""}, constraints=[tsc(1, "node")]),
        FOUR_ZONED,
        existing("node-a", 2) + existing("node-b") + existing("node-y", 3),
        {"node-a": UNSCHED, "node-b": OK, "node-x": OK, "node-y": UNSCHED},
    ),
    (
        # Only node-a and node-y count (nodeAffinityPolicy Honor): spread 2/~1~/~0~/3.
        "incoming pod has nodeAffinity, pods spread as 2/~1~/~0~/3, hence node-a fits",
        pod("p", constraints=[tsc(1, "node")], node_in=("node", ["node-a", "node-y"])),
        FOUR_ZONED,
        existing("node-a", 2) + existing("node-b") + existing("node-y", 3),
        {"node-a": OK, "node-b": OK, "node-x": OK, "node-y": UNSCHED},
    ),
    (
        "nodeAffinityPolicy Ignore counts every node: 2/1/0/3, only node-x fits",
        pod(
            "p",
            constraints=[tsc(1, "node", node_affinity_policy="Ignore")],
            node_in=("node", ["node-a", "node-y"]),
        ),
        FOUR_ZONED,
        existing("node-a", 2) + existing("node-b") + existing("node-y", 3),
        {"node-a": UNSCHED, "node-b": UNSCHED, "node-x": OK, "node-y": UNSCHED},
    ),
    (
        "terminating Pods should be excluded",
        pod("p", constraints=[tsc(1, "node")]),
        [node("node-a", node="node-a"), node("node-b", node="node-b")],
        [pod("p-a", on="node-a", terminating=True), pod("p-b", on="node-b")],
        {"node-a": OK, "node-b": UNSCHED},
    ),
    (
        "minDomains 3 > 2 eligible domains: global minimum is 0, 1/1 spread blocks all",
        pod("p", constraints=[tsc(1, "zone", min_domains=3)]),
        FOUR_ZONED,
        existing("node-a") + existing("node-x"),
        {"node-a": UNSCHED, "node-b": UNSCHED, "node-x": UNSCHED, "node-y": UNSCHED},
    ),
    (
        "minDomains 2 is met: global minimum is 1, 1/1 spread lets all fit",
        pod("p", constraints=[tsc(1, "zone", min_domains=2)]),
        FOUR_ZONED,
        existing("node-a") + existing("node-x"),
        {"node-a": OK, "node-b": OK, "node-x": OK, "node-y": OK},
    ),
    (
        "minDomains 3 with maxSkew 2: 2/1 spread, only zone2 fits",
        pod("p", constraints=[tsc(2, "zone", min_domains=3)]),
        FOUR_ZONED,
        existing("node-a", 2) + existing("node-x"),
        {"node-a": UNSCHED, "node-b": UNSCHED, "node-x": OK, "node-y": OK},
    ),
    (
        "nodeTaintsPolicy Ignore: the tainted empty node is a domain with 0 pods",
        pod("p", constraints=[tsc(1, "node")]),
        [
            node("node-a", node="node-a"),
            node("node-b", node="node-b"),
            node("node-y", taints=[Taint(key="t", effect="NoSchedule")], node="node-y"),
        ],
        existing("node-a") + existing("node-b"),
        {"node-a": UNSCHED, "node-b": UNSCHED, "node-y": OK},
    ),
    (
        "nodeTaintsPolicy Honor: the untolerated tainted node is not a domain",
        pod("p", constraints=[tsc(1, "node", node_taints_policy="Honor")]),
        [
            node("node-a", node="node-a"),
            node("node-b", node="node-b"),
            node("node-y", taints=[Taint(key="t", effect="NoSchedule")], node="node-y"),
        ],
        existing("node-a") + existing("node-b"),
        {"node-a": OK, "node-b": OK, "node-y": OK},
    ),
    (
        "matchLabelKeys narrows the selector to the pod's own version",
        pod(
            "p",
            labels={"foo": "", "version": "v2"},
            constraints=[tsc(1, "node", match_label_keys=["version"])],
        ),
        FOUR_ZONED,
        existing("node-a", 2, labels={"foo": "", "version": "v1"}),
        {"node-a": OK, "node-b": OK, "node-x": OK, "node-y": OK},
    ),
    (
        "without matchLabelKeys the other version counts",
        pod("p", labels={"foo": "", "version": "v2"}, constraints=[tsc(1, "node")]),
        FOUR_ZONED,
        existing("node-a", 2, labels={"foo": "", "version": "v1"}),
        {"node-a": UNSCHED, "node-b": OK, "node-x": OK, "node-y": OK},
    ),
    (
        "ScheduleAnyway constraints are not filtered on",
        pod("p", constraints=[tsc(1, "node"), tsc(1, "rack", when="ScheduleAnyway")]),
        FOUR_ZONED,
        existing("node-a", 2),
        {"node-a": UNSCHED, "node-b": OK, "node-x": OK, "node-y": OK},
    ),
]

MULTIPLE = [
    (
        "two constraints on zone and node, spreads = [3/3, 2/1/0/3]",
        pod("p", constraints=[tsc(1, "zone"), tsc(1, "node")]),
        FOUR_ZONED,
        existing("node-a", 2) + existing("node-b") + existing("node-y", 3),
        {"node-a": UNSCHED, "node-b": UNSCHED, "node-x": OK, "node-y": UNSCHED},
    ),
    (
        "two constraints on zone and node, spreads = [3/4, 2/1/0/4]",
        pod("p", constraints=[tsc(1, "zone"), tsc(1, "node")]),
        FOUR_ZONED,
        existing("node-a", 2) + existing("node-b") + existing("node-y", 4),
        {"node-a": UNSCHED, "node-b": UNSCHED, "node-x": UNSCHED, "node-y": UNSCHED},
    ),
    (
        "constraints hold different labelSelectors, spreads = [1/0, 1/0/0/1]",
        pod(
            "p",
            labels={"foo": "", "bar": ""},
            constraints=[tsc(1, "zone", selector=FOO), tsc(1, "node", selector=BAR)],
        ),
        FOUR_ZONED,
        [pod("p-a1", on="node-a"), pod("p-y1", on="node-y", labels={"bar": ""})],
        {"node-a": UNSCHED, "node-b": UNSCHED, "node-x": OK, "node-y": UNSCHED},
    ),
    (
        "constraints hold different labelSelectors, spreads = [2/3, 1/0/0/1]",
        pod(
            "p",
            labels={"foo": "", "bar": ""},
            constraints=[tsc(1, "zone", selector=FOO), tsc(1, "node", selector=BAR)],
        ),
        FOUR_ZONED,
        [
            pod("p-a1", on="node-a"),
            pod("p-a2", on="node-a", labels={"foo": "", "bar": ""}),
            pod("p-y1", on="node-y"),
            pod("p-y2", on="node-y", labels={"foo": "", "bar": ""}),
            pod("p-y3", on="node-y"),
        ],
        {"node-a": UNSCHED, "node-b": OK, "node-x": UNSCHED, "node-y": UNSCHED},
    ),
    (
        "two constraints on zone and node, absence of label 'node' on node-x",
        pod("p", constraints=[tsc(1, "zone"), tsc(1, "node")]),
        [
            zn("node-a", "zone1"),
            zn("node-b", "zone1"),
            node("node-x", zone="zone2"),
            zn("node-y", "zone2"),
        ],
        existing("node-a") + existing("node-y"),
        {"node-a": UNSCHED, "node-b": OK, "node-x": UNRES, "node-y": UNSCHED},
    ),
]


@pytest.mark.parametrize("index_first", [True, False], ids=["incremental", "scan"])
@pytest.mark.parametrize(
    ("incoming", "nodes", "pods", "want"),
    [case[1:] for case in SINGLE + MULTIPLE],
    ids=[case[0] for case in SINGLE + MULTIPLE],
)
def test_filter(
    incoming: Pod, nodes: list[Node], pods: list[Pod], want: dict[str, Code], index_first: bool
) -> None:
    env = build(nodes, pods, index_first=index_first)
    assert run_filter(env, incoming) == want


def test_filter_reasons() -> None:
    env = build(
        [zn("node-a", "zone1"), node("node-b", zon="zone1"), zn("node-x", "zone2")],
        existing("node-a", 2),
    )
    info = PodInfo(pod("p", constraints=[tsc(1, "zone")]))
    state = CycleState()
    env.plugin.pre_filter(state, info)
    result = env.plugin.filter(state, info, Candidates.all(3))
    reasons = {(f.reason, f.code): list(f.nodes) for f in result.failures}
    assert reasons == {
        (REASON_MISSING_LABEL, UNRES): [False, True, False],
        (REASON, UNSCHED): [True, False, False],
    }
    assert REASON_MISSING_LABEL == (
        "node(s) didn't match pod topology spread constraints (missing required label)"
    )


def test_filter_on_candidate_subset() -> None:
    env = build(FOUR_ZONED, existing("node-a", 2) + existing("node-b") + existing("node-y", 3))
    info = PodInfo(pod("p", constraints=[tsc(1, "node")]))
    state = CycleState()
    env.plugin.pre_filter(state, info)
    # Domains come from all nodes even though only two are candidates.
    result = env.plugin.filter(state, info, env.rows(["node-y", "node-x"]))
    assert list(result.passed) == [False, True]


def test_skip_without_constraints() -> None:
    env = build(FOUR_ZONED, [])
    info = PodInfo(pod("p"))
    state = CycleState()
    _, status = env.plugin.pre_filter(state, info)
    assert status.code == Code.SKIP
    assert env.plugin.pre_score(state, info, Candidates.all(4)).code == Code.SKIP
    # Only soft constraints: nothing to filter.
    soft = PodInfo(pod("p", constraints=[tsc(1, "zone", when="ScheduleAnyway")]))
    _, status = env.plugin.pre_filter(state, soft)
    assert status.code == Code.SKIP


# ---- Score -----------------------------------------------------------------------------

SCORE = [
    (
        "one constraint on node, no existing pods",
        pod("p", constraints=[tsc(1, HOST, "ScheduleAnyway")]),
        [hn("node-a"), hn("node-b")],
        [],
        [],
        [100, 100],
    ),
    (
        "one constraint on node, only one node is candidate",
        pod("p", constraints=[tsc(1, HOST, "ScheduleAnyway")]),
        [hn("node-a")],
        [hn("node-b")],
        existing("node-a", 2) + existing("node-b"),
        [100],
    ),
    (
        "one constraint on node, all 4 nodes are candidates (2/1/0/3)",
        pod("p", constraints=[tsc(1, HOST, "ScheduleAnyway")]),
        [hn("node-a"), hn("node-b"), hn("node-c"), hn("node-d")],
        [],
        existing("node-a", 2) + existing("node-b") + existing("node-d", 3),
        [20, 60, 100, 0],
    ),
    (
        "one constraint on node, null selector",
        pod("p", constraints=[tsc(1, HOST, "ScheduleAnyway", selector=None)]),
        [hn("node-a"), hn("node-b"), hn("node-c"), hn("node-d")],
        [],
        existing("node-a", 2) + existing("node-b") + existing("node-d", 3),
        [100, 100, 100, 100],
    ),
    (
        "one constraint on node, all 4 nodes are candidates, maxSkew=2",
        pod("p", constraints=[tsc(2, HOST, "ScheduleAnyway")]),
        [hn("node-a"), hn("node-b"), hn("node-c"), hn("node-d")],
        [],
        existing("node-a", 2) + existing("node-b") + existing("node-d", 3),
        [33, 66, 100, 16],
    ),
    (
        "one constraint on node, all 4 nodes are candidates, maxSkew=3 (4/3/2/1)",
        pod("p", constraints=[tsc(3, HOST, "ScheduleAnyway")]),
        [hn("node-a"), hn("node-b"), hn("node-c"), hn("node-d")],
        [],
        existing("node-a", 4) + existing("node-b", 3) + existing("node-c", 2) + existing("node-d"),
        [44, 66, 77, 100],
    ),
    (
        "one constraint on node, 3 out of 4 nodes are candidates (4/2/1/~3~)",
        pod("p", constraints=[tsc(1, HOST, "ScheduleAnyway")]),
        [hn("node-a"), hn("node-b"), hn("node-x")],
        [hn("node-y")],
        existing("node-a", 4) + existing("node-b", 2) + existing("node-x") + existing("node-y", 3),
        [33, 83, 100],
    ),
    (
        "one constraint on node, 3 out of 4 candidates, one node doesn't match topology key",
        pod("p", constraints=[tsc(1, HOST, "ScheduleAnyway")]),
        [hn("node-a"), node("node-b", n="node-b"), hn("node-x")],
        [hn("node-y")],
        existing("node-a", 4) + existing("node-b", 2) + existing("node-x") + existing("node-y", 3),
        [16, 0, 100],
    ),
    (
        "one constraint on zone, 3 out of 4 nodes are candidates",
        pod("p", constraints=[tsc(1, "zone", "ScheduleAnyway")]),
        [hn("node-a", zone="zone1"), hn("node-b", zone="zone1"), hn("node-x", zone="zone2")],
        [hn("node-y", zone="zone2")],
        existing("node-a", 4) + existing("node-b", 2) + existing("node-x") + existing("node-y", 3),
        [75, 75, 100],
    ),
    (
        "two constraints on zone and node, 2 out of 4 nodes are candidates",
        pod(
            "p",
            constraints=[tsc(1, "zone", "ScheduleAnyway"), tsc(1, HOST, "ScheduleAnyway")],
        ),
        [hn("node-a", zone="zone1"), hn("node-x", zone="zone2")],
        [hn("node-b", zone="zone1"), hn("node-y", zone="zone2")],
        existing("node-a", 2) + existing("node-b") + existing("node-x", 2) + existing("node-y", 4),
        [100, 63],
    ),
    (
        "two constraints on zone, 2 out of 4 nodes are candidates",
        pod(
            "p",
            labels={"foo": "", "bar": ""},
            constraints=[
                tsc(1, "zone", "ScheduleAnyway", selector=FOO),
                tsc(1, "zone", "ScheduleAnyway", selector=BAR),
            ],
        ),
        [node("node-a", zone="zone1"), node("node-x", zone="zone2")],
        [node("node-b", zone="zone1"), node("node-y", zone="zone2")],
        [
            pod("p-a1", on="node-a", labels={"foo": "", "bar": ""}),
            pod("p-a2", on="node-a"),
            pod("p-b1", on="node-b", labels={"foo": "", "bar": ""}),
            pod("p-y1", on="node-y"),
            pod("p-y2", on="node-y", labels={"foo": "", "bar": ""}),
            pod("p-y3", on="node-y"),
        ],
        [85, 100],
    ),
    (
        "two constraints on zone and node, with different labelSelectors",
        pod(
            "p",
            labels={"foo": "", "bar": ""},
            constraints=[
                tsc(1, "zone", "ScheduleAnyway", selector=FOO),
                tsc(1, HOST, "ScheduleAnyway", selector=BAR),
            ],
        ),
        [
            hn("node-a", zone="zone1"),
            hn("node-b", zone="zone1"),
            hn("node-x", zone="zone2"),
            hn("node-y", zone="zone2"),
        ],
        [],
        [
            pod("p-a1", on="node-a"),
            pod("p-b1", on="node-b", labels={"foo": "", "bar": ""}),
            pod("p-y1", on="node-y"),
            pod("p-y2", on="node-y", labels={"bar": ""}),
        ],
        [60, 20, 100, 60],
    ),
    (
        "existing pods in a different namespace do not count",
        pod("p", constraints=[tsc(1, HOST, "ScheduleAnyway")]),
        [hn("node-a"), hn("node-b")],
        [],
        [pod("p-a1", on="node-a", ns="ns1"), *existing("node-a"), *existing("node-b", 2)],
        [100, 33],
    ),
    (
        "terminating Pods should be excluded",
        pod("p", constraints=[tsc(1, HOST, "ScheduleAnyway")]),
        [hn("node-a"), hn("node-b")],
        [],
        [pod("p-a", on="node-a", terminating=True), pod("p-b", on="node-b")],
        [100, 0],
    ),
]


@pytest.mark.parametrize("index_first", [True, False], ids=["incremental", "scan"])
@pytest.mark.parametrize(
    ("incoming", "nodes", "failed", "pods", "want"),
    [case[1:] for case in SCORE],
    ids=[case[0] for case in SCORE],
)
def test_score(
    incoming: Pod,
    nodes: list[Node],
    failed: list[Node],
    pods: list[Pod],
    want: list[int],
    index_first: bool,
) -> None:
    env = build(nodes + failed, pods, index_first=index_first)
    info = PodInfo(incoming)
    candidates = env.rows([n.metadata.name for n in nodes])
    state = CycleState()
    assert env.plugin.pre_score(state, info, candidates).ok
    raw = env.plugin.score(state, info, candidates)
    got = env.plugin.normalize_score(state, info, candidates, raw)
    assert got.tolist() == want


# ---- default constraints (Shoal's deviation) --------------------------------------------

LIST_DEFAULTS = PodTopologySpreadArgs(
    default_constraints=[
        {"maxSkew": 1, "topologyKey": "node", "whenUnsatisfiable": "DoNotSchedule"}
    ],
    defaulting_type="List",
)


def test_list_defaults_apply_to_controlled_pods_with_own_labels() -> None:
    env = build(FOUR_ZONED, existing("node-a", 2, labels={"app": "web"}), LIST_DEFAULTS)
    controlled = PodInfo(pod("p", labels={"app": "web"}, controller=True))
    state = CycleState()
    _, status = env.plugin.pre_filter(state, controlled)
    assert status.ok
    result = env.plugin.filter(state, controlled, Candidates.all(4))
    assert list(result.passed) == [False, True, True, True]


@pytest.mark.parametrize(
    ("args", "incoming"),
    [
        (LIST_DEFAULTS, pod("p", labels={"app": "web"})),  # no controller
        (LIST_DEFAULTS, pod("p", labels={}, controller=True)),  # no labels to select on
        (PodTopologySpreadArgs(), pod("p", labels={"app": "web"}, controller=True)),  # System
        (  # own constraints replace the defaults (here: only soft ones)
            LIST_DEFAULTS,
            pod(
                "p",
                labels={"app": "web"},
                controller=True,
                constraints=[tsc(1, "zone", "ScheduleAnyway")],
            ),
        ),
    ],
    ids=["no-controller", "no-labels", "system-defaulting", "own-constraints"],
)
def test_defaults_do_not_apply(args: PodTopologySpreadArgs, incoming: Pod) -> None:
    env = build(FOUR_ZONED, [], args)
    _, status = env.plugin.pre_filter(CycleState(), PodInfo(incoming))
    assert status.code == Code.SKIP


def test_registered_in_default_profile() -> None:
    assert IN_TREE["PodTopologySpread"].args is PodTopologySpreadArgs
    names = [name for name, _ in DEFAULT_MULTI_POINT]
    fit = names.index("NodeResourcesFit")
    # kube's order: the volume plugins sit between NodeResourcesFit and PodTopologySpread.
    assert names[fit + 1 : fit + 10] == [
        "VolumeRestrictions",
        "NodeVolumeLimits",
        "VolumeBinding",
        "VolumeZone",
        "PodTopologySpread",
        "InterPodAffinity",
        "DynamicResources",
        "DefaultPreemption",
        "NodeResourcesBalancedAllocation",
    ]
    assert dict(DEFAULT_MULTI_POINT)["PodTopologySpread"] == 2


# ---- end to end ------------------------------------------------------------------------


def schedule_all(sched, effects: MemoryEffects) -> list:  # type: ignore[no-untyped-def]
    results = []
    while sched.has_work():
        result = sched.schedule_one()
        sched.start_bindings()
        sched.handle.effects.drain(sched)  # type: ignore[attr-defined]
        if result is not None:
            results.append(result)
    return results


def test_deployment_spreads_evenly_over_three_zones() -> None:
    effects = MemoryEffects()
    sched = new_scheduler(KubeSchedulerConfiguration(), clock=ManualClock(), effects=effects)
    zones = {}
    for i in range(9):
        name = f"n{i}"
        zones[name] = f"zone-{i % 3}"
        sched.add_node(hn(name, **{"topology.kubernetes.io/zone": zones[name]}))
    selector = LabelSelector(match_labels={"app": "web"})
    for i in range(9):
        sched.add_pod(
            pod(
                f"web-{i}",
                labels={"app": "web"},
                constraints=[tsc(1, "topology.kubernetes.io/zone", selector=selector)],
            )
        )
    results = schedule_all(sched, effects)
    assert all(r.node is not None for r in results)
    per_zone: dict[str, int] = {}
    for node_name in effects.bound.values():
        per_zone[zones[node_name]] = per_zone.get(zones[node_name], 0) + 1
    assert per_zone == {"zone-0": 3, "zone-1": 3, "zone-2": 3}


def test_unschedulable_message_lists_reasons() -> None:
    effects = MemoryEffects()
    sched = new_scheduler(KubeSchedulerConfiguration(), clock=ManualClock(), effects=effects)
    sched.add_node(node("a", zone="z1"))
    sched.add_node(node("b"))
    sched.add_pod(pod("x1", on="a"))
    sched.add_pod(pod("p", constraints=[tsc(1, "zone", min_domains=2)]))
    (result,) = schedule_all(sched, effects)
    assert result.node is None
    assert result.message == (
        "0/2 nodes are available: 1 node(s) didn't match pod topology spread constraints, "
        "1 node(s) didn't match pod topology spread constraints (missing required label)."
        " preemption: 0/2 nodes are available: 1 No preemption victims found for "
        "incoming pod, 1 Preemption is not helpful for scheduling."
    )


def test_a_pod_that_starts_terminating_leaves_the_counts_and_is_never_counted_again() -> None:
    """The API server sends a deleted pod's deletionTimestamp (a watch update) before the
    deletion, even at grace 0. The update counted as "the same pod", so the index kept
    counting it while the spread filter's matchers skip terminating pods on removal:
    each deleted pod stayed counted forever. Found against the real API server by
    differential testing with kube-scheduler: after four probes were bound to m1 and
    deleted, the fifth went to m4 (zones 1 and 4 pods: skew 3 > maxSkew 2)."""
    import copy

    from shoal.testing import SchedulerHarness, make_node, make_pod

    zone = "topology.kubernetes.io/zone"
    h = SchedulerHarness()
    for name, z in (("m1", "z1"), ("m2", "z1"), ("m3", "z2"), ("m4", "z2")):
        h.add_nodes(make_node(name).capacity(cpu="8", memory="16Gi").label(zone, z))
    for name, node in (("f0", "m2"), ("f1", "m3"), ("f2", "m3"), ("f3", "m4")):
        h.add_pods(make_pod(name).label("app", "c").node(node).req(cpu="100m"))
    h.run()
    for i in range(6):
        (probe,) = h.add_pods(
            make_pod(f"t{i}")
            .label("app", "c")
            .req(cpu="100m")
            .spread(2, zone, selector={"app": "c"})
        )
        h.run()
        node = h.node_of(f"t{i}")
        assert node == "m1", f"t{i} on {node}"  # z1 has 1 pod, z2 has 3: only z1 keeps skew <= 2
        terminating = copy.deepcopy(probe.pod)
        terminating.spec.node_name = node
        terminating.metadata.deletion_timestamp = "2026-11-29T00:00:00Z"
        h.scheduler.update_pod(terminating)  # the watch: deletionTimestamp set
        h.delete_pod(f"t{i}")  # then deleted
        h.advance(1)
