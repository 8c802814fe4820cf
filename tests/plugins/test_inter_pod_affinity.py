"""InterPodAffinity: cases ported from kube-scheduler's interpodaffinity filtering_test.go
and scoring_test.go, plus the shared index's bookkeeping and end-to-end placement."""

from __future__ import annotations

import random

import numpy as np
import pytest

from shoal.api.objects import (
    Affinity,
    Container,
    LabelSelector,
    LabelSelectorRequirement,
    Node,
    NodeStatus,
    ObjectMeta,
    Pod,
    PodAffinity,
    PodAffinityTerm,
    PodAntiAffinity,
    PodSpec,
    ResourceRequirements,
    WeightedPodAffinityTerm,
)
from shoal.api.podinfo import PodInfo
from shoal.api.selectors import label_selector_matches, selector_key
from shoal.cache.cluster import ClusterState
from shoal.cache.pod_topology import (
    REQUIRED_ANTI_AFFINITY,
    SERVICE_NAME,
    PodMatcher,
    PodTopologyIndex,
)
from shoal.cache.snapshot import Snapshot
from shoal.config import KubeSchedulerConfiguration
from shoal.drivers.memory import ManualClock, MemoryEffects
from shoal.framework.cycle_state import CycleState
from shoal.framework.handle import Handle
from shoal.framework.status import Code
from shoal.framework.types import Candidates, FilterResult
from shoal.plugins import IN_TREE
from shoal.plugins.args import InterPodAffinityArgs
from shoal.plugins.inter_pod_affinity import (
    REASON_AFFINITY,
    REASON_ANTI_AFFINITY,
    REASON_EXISTING_ANTI_AFFINITY,
    InterPodAffinity,
)
from shoal.scheduler import new_scheduler

HOST = "kubernetes.io/hostname"
OK = Code.SUCCESS
UNSCHED = Code.UNSCHEDULABLE
UNRES = Code.UNSCHEDULABLE_AND_UNRESOLVABLE

# ---- builders --------------------------------------------------------------------------


def sel_in(key: str, *values: str) -> LabelSelector:
    return LabelSelector(
        match_expressions=[LabelSelectorRequirement(key=key, operator="In", values=list(values))]
    )


def term(
    selector: LabelSelector | None,
    key: str,
    namespaces: list[str] | None = None,
    namespace_selector: LabelSelector | None = None,
    **extra: list[str],
) -> PodAffinityTerm:
    return PodAffinityTerm(
        topology_key=key,
        label_selector=selector,
        namespaces=namespaces or [],
        namespace_selector=namespace_selector,
        **extra,
    )


def weighted(weight: int, t: PodAffinityTerm) -> WeightedPodAffinityTerm:
    return WeightedPodAffinityTerm(weight=weight, pod_affinity_term=t)


def affinity(
    required: list[PodAffinityTerm] | None = None,
    anti: list[PodAffinityTerm] | None = None,
    preferred: list[WeightedPodAffinityTerm] | None = None,
    preferred_anti: list[WeightedPodAffinityTerm] | None = None,
) -> Affinity:
    return Affinity(
        pod_affinity=PodAffinity(
            required_during_scheduling_ignored_during_execution=required or [],
            preferred_during_scheduling_ignored_during_execution=preferred or [],
        ),
        pod_anti_affinity=PodAntiAffinity(
            required_during_scheduling_ignored_during_execution=anti or [],
            preferred_during_scheduling_ignored_during_execution=preferred_anti or [],
        ),
    )


_seq = iter(range(10**9))


def pod(
    labels: dict[str, str] | None = None,
    on: str = "",
    ns: str = "default",
    aff: Affinity | None = None,
    name: str = "",
) -> Pod:
    name = name or f"pod-{next(_seq)}"
    return Pod(
        metadata=ObjectMeta(name=name, namespace=ns, uid=f"{ns}/{name}", labels=labels or {}),
        spec=PodSpec(
            node_name=on,
            affinity=aff,
            containers=[
                Container(
                    name="c",
                    resources=ResourceRequirements(requests={"cpu": "100m", "memory": "100Mi"}),
                )
            ],
        ),
    )


def node(name: str, **labels: str) -> Node:
    return Node(
        metadata=ObjectMeta(name=name, labels=dict(labels)),
        status=NodeStatus(allocatable={"cpu": "4", "memory": "32Gi", "pods": "110"}),
    )


def build(
    nodes: list[Node],
    pods: list[Pod],
    args: InterPodAffinityArgs | None = None,
    index_first: bool = True,
) -> tuple[Handle, InterPodAffinity]:
    cluster = ClusterState()
    handle = Handle(
        cluster, Snapshot(cluster), ManualClock(), np.random.default_rng(0), MemoryEffects()
    )
    for n in nodes:
        cluster.add_node(n)
    plugin = InterPodAffinity.new(args, handle)
    if index_first:
        _ = plugin.index
    for p in pods:
        cluster.add_bound_pod(PodInfo(p), p.spec.node_name)
    handle.snapshot.refresh()
    return handle, plugin


def codes_of(result: FilterResult, names: list[str]) -> dict[str, tuple[Code, str]]:
    out: dict[str, tuple[Code, str]] = {}
    for i, name in enumerate(names):
        if result.passed[i]:
            out[name] = (OK, "")
            continue
        failing = [f for f in result.failures if f.nodes[i]]
        assert len(failing) == 1, f"{name}: one reason per node, got {failing}"
        out[name] = (failing[0].code, failing[0].reason)
    return out


AFF = (UNRES, REASON_AFFINITY)
ANTI = (UNSCHED, REASON_ANTI_AFFINITY)
EXISTING = (UNSCHED, REASON_EXISTING_ANTI_AFFINITY)
PASS = (OK, "")

# ---- Filter ----------------------------------------------------------------------------

SECURITY_S1 = {"security": "S1"}
ZONED = [
    node("n1", zone="z1", **{HOST: "n1"}),
    node("n2", zone="z1", **{HOST: "n2"}),
    node("n3", zone="z2", **{HOST: "n3"}),
]

FILTER = [
    (
        "required affinity: nodes in the matching pod's zone fit",
        pod(aff=affinity(required=[term(sel_in("security", "S1"), "zone")])),
        ZONED,
        [pod(SECURITY_S1, on="n1")],
        {"n1": PASS, "n2": PASS, "n3": AFF},
    ),
    (
        "required affinity: nodes without the topology key never fit",
        pod(aff=affinity(required=[term(sel_in("security", "S1"), "zone")])),
        [*ZONED, node("n4")],
        [pod(SECURITY_S1, on="n1")],
        {"n1": PASS, "n2": PASS, "n3": AFF, "n4": AFF},
    ),
    (
        "required affinity: the matching pod is in another namespace",
        pod(aff=affinity(required=[term(sel_in("security", "S1"), "zone")])),
        ZONED,
        [pod(SECURITY_S1, on="n1", ns="other")],
        {"n1": AFF, "n2": AFF, "n3": AFF},
    ),
    (
        "required affinity: term.namespaces selects the other namespace",
        pod(aff=affinity(required=[term(sel_in("security", "S1"), "zone", ["other"])])),
        ZONED,
        [pod(SECURITY_S1, on="n1", ns="other")],
        {"n1": PASS, "n2": PASS, "n3": AFF},
    ),
    (
        "required affinity: empty namespaceSelector selects all namespaces",
        pod(
            aff=affinity(
                required=[
                    term(sel_in("security", "S1"), "zone", namespace_selector=LabelSelector())
                ]
            )
        ),
        ZONED,
        [pod(SECURITY_S1, on="n3", ns="other")],
        {"n1": AFF, "n2": AFF, "n3": PASS},
    ),
    (
        "required affinity: a namespaceSelector no namespace's labels match selects none",
        pod(
            aff=affinity(
                required=[
                    term(
                        sel_in("security", "S1"),
                        "zone",
                        namespace_selector=LabelSelector(match_labels={"team": "a"}),
                    )
                ]
            )
        ),
        ZONED,
        [pod(SECURITY_S1, on="n3", ns="other")],
        {"n1": AFF, "n2": AFF, "n3": AFF},
    ),
    (
        "required affinity: an existing pod must match all terms",
        pod(
            aff=affinity(
                required=[
                    term(sel_in("security", "S1"), "zone"),
                    term(sel_in("tier", "backend"), HOST),
                ]
            )
        ),
        ZONED,
        [
            pod({"security": "S1", "tier": "backend"}, on="n1"),
            pod({"security": "S1"}, on="n3"),
            pod({"tier": "backend"}, on="n3"),
        ],
        {"n1": PASS, "n2": AFF, "n3": AFF},
    ),
    (
        "self-affinity: the first pod of a group may go to any node with the key",
        pod({"app": "web"}, aff=affinity(required=[term(sel_in("app", "web"), "zone")])),
        [*ZONED, node("n4")],
        [pod({"app": "db"}, on="n1")],
        {"n1": PASS, "n2": PASS, "n3": PASS, "n4": AFF},
    ),
    (
        "self-affinity: once a matching pod exists, only its domain fits",
        pod({"app": "web"}, aff=affinity(required=[term(sel_in("app", "web"), "zone")])),
        ZONED,
        [pod({"app": "web"}, on="n3")],
        {"n1": AFF, "n2": AFF, "n3": PASS},
    ),
    (
        "affinity to pods that don't exist, and the pod doesn't match itself",
        pod({"app": "web"}, aff=affinity(required=[term(sel_in("app", "db"), "zone")])),
        ZONED,
        [],
        {"n1": AFF, "n2": AFF, "n3": AFF},
    ),
    (
        "nil label selector in an affinity term matches nothing",
        pod({"app": "web"}, aff=affinity(required=[term(None, "zone")])),
        ZONED,
        [pod({"app": "web"}, on="n1")],
        {"n1": AFF, "n2": AFF, "n3": AFF},
    ),
    (
        "required anti-affinity on hostname",
        pod(aff=affinity(anti=[term(sel_in("security", "S1"), HOST)])),
        ZONED,
        [pod(SECURITY_S1, on="n1")],
        {"n1": ANTI, "n2": PASS, "n3": PASS},
    ),
    (
        "required anti-affinity on zone; a node without the key passes",
        pod(aff=affinity(anti=[term(sel_in("security", "S1"), "zone")])),
        [*ZONED, node("n4")],
        [pod(SECURITY_S1, on="n1")],
        {"n1": ANTI, "n2": ANTI, "n3": PASS, "n4": PASS},
    ),
    (
        "required anti-affinity: empty selector matches every pod in the namespace",
        pod(aff=affinity(anti=[term(LabelSelector(), HOST)])),
        ZONED,
        [pod({"x": "y"}, on="n2"), pod({"x": "y"}, on="n3", ns="other")],
        {"n1": PASS, "n2": ANTI, "n3": PASS},
    ),
    (
        "symmetry: an existing pod's anti-affinity rejects the incoming pod",
        pod(SECURITY_S1),
        ZONED,
        [
            pod(
                {"app": "guard"},
                on="n1",
                aff=affinity(anti=[term(sel_in("security", "S1"), "zone")]),
            )
        ],
        {"n1": EXISTING, "n2": EXISTING, "n3": PASS},
    ),
    (
        "symmetry: the existing pod's term defaults to its own namespace",
        pod(SECURITY_S1, ns="other"),
        ZONED,
        [
            pod(
                {"app": "guard"},
                on="n1",
                aff=affinity(anti=[term(sel_in("security", "S1"), "zone")]),
            )
        ],
        {"n1": PASS, "n2": PASS, "n3": PASS},
    ),
    (
        "affinity is reported before anti-affinity and existing anti-affinity",
        pod(
            SECURITY_S1,
            aff=affinity(
                required=[term(sel_in("app", "db"), "zone")],
                anti=[term(sel_in("app", "web"), HOST)],
            ),
        ),
        ZONED,
        [
            pod({"app": "db"}, on="n1"),
            pod({"app": "web"}, on="n2"),
            pod({"app": "web"}, on="n3"),
            pod(
                {"app": "guard"}, on="n1", aff=affinity(anti=[term(sel_in("security", "S1"), HOST)])
            ),
        ],
        {"n1": EXISTING, "n2": ANTI, "n3": AFF},
    ),
    (
        "matchLabelKeys: only pods of the same version count for anti-affinity",
        pod(
            {"app": "web", "version": "v2"},
            aff=affinity(anti=[term(sel_in("app", "web"), HOST, match_label_keys=["version"])]),
        ),
        ZONED,
        [
            pod({"app": "web", "version": "v1"}, on="n1"),
            pod({"app": "web", "version": "v2"}, on="n2"),
        ],
        {"n1": PASS, "n2": ANTI, "n3": PASS},
    ),
]


@pytest.mark.parametrize("index_first", [True, False], ids=["incremental", "scan"])
@pytest.mark.parametrize(
    ("incoming", "nodes", "pods", "want"),
    [case[1:] for case in FILTER],
    ids=[case[0] for case in FILTER],
)
def test_filter(
    incoming: Pod,
    nodes: list[Node],
    pods: list[Pod],
    want: dict[str, tuple[Code, str]],
    index_first: bool,
) -> None:
    _, plugin = build(nodes, pods, index_first=index_first)
    info = PodInfo(incoming)
    state = CycleState()
    _, status = plugin.pre_filter(state, info)
    if status.code == Code.SKIP:  # nothing to check: every node passes
        result = FilterResult.all_pass(len(nodes))
    else:
        assert status.ok, status
        result = plugin.filter(state, info, Candidates.all(len(nodes)))
    assert codes_of(result, [n.metadata.name for n in nodes]) == want


def test_pre_filter_skips() -> None:
    guard = pod({"app": "guard"}, on="n1", aff=affinity(anti=[term(sel_in("app", "web"), HOST)]))
    _, plugin = build(ZONED, [pod({"app": "web"}, on="n2")])
    # No terms anywhere.
    assert plugin.pre_filter(CycleState(), PodInfo(pod({"app": "web"})))[1].code == Code.SKIP
    _, plugin = build(ZONED, [guard])
    # An existing pod has anti-affinity, but it does not match this pod.
    assert plugin.pre_filter(CycleState(), PodInfo(pod({"app": "db"})))[1].code == Code.SKIP
    # ... and it does match this one.
    assert plugin.pre_filter(CycleState(), PodInfo(pod({"app": "web"})))[1].ok


# ---- Score -----------------------------------------------------------------------------

S1, S2 = {"security": "S1"}, {"security": "S2"}
CHINA, INDIA = {"region": "China"}, {"region": "India"}
AZ1, AZ2 = {"az": "az1"}, {"az": "az2"}
CHINA_AZ1 = {"region": "China", "az": "az1"}

STAY_WITH_S1_IN_REGION = affinity(preferred=[weighted(5, term(sel_in("security", "S1"), "region"))])
STAY_WITH_S2_IN_REGION = affinity(preferred=[weighted(6, term(sel_in("security", "S2"), "region"))])
AFFINITY3 = affinity(
    preferred=[
        weighted(
            8,
            term(
                LabelSelector(
                    match_expressions=[
                        LabelSelectorRequirement(key="security", operator="NotIn", values=["S1"]),
                        LabelSelectorRequirement(key="security", operator="In", values=["S2"]),
                    ]
                ),
                "region",
            ),
        ),
        weighted(
            2,
            term(
                LabelSelector(
                    match_expressions=[
                        LabelSelectorRequirement(key="security", operator="Exists"),
                        LabelSelectorRequirement(key="wrongkey", operator="DoesNotExist"),
                    ]
                ),
                "region",
            ),
        ),
    ]
)
HARD_AFFINITY = affinity(
    required=[
        term(sel_in("security", "S1", "value2"), "region"),
        term(
            LabelSelector(
                match_expressions=[
                    LabelSelectorRequirement(key="security", operator="Exists"),
                    LabelSelectorRequirement(key="wrongkey", operator="DoesNotExist"),
                ]
            ),
            "region",
        ),
    ]
)
AWAY_FROM_S1_IN_AZ = affinity(preferred_anti=[weighted(5, term(sel_in("security", "S1"), "az"))])
AWAY_FROM_S2_IN_AZ = affinity(preferred_anti=[weighted(5, term(sel_in("security", "S2"), "az"))])
STAY_S1_REGION_AWAY_S2_AZ = affinity(
    preferred=[weighted(8, term(sel_in("security", "S1"), "region"))],
    preferred_anti=[weighted(5, term(sel_in("security", "S2"), "az"))],
)


def nodes_of(*labels: dict[str, str]) -> list[Node]:
    return [node(f"node{i + 1}", **lab) for i, lab in enumerate(labels)]


SCORE = [
    (
        "Affinity: pods matching the topology key and selector get the high score",
        pod(S1, aff=STAY_WITH_S1_IN_REGION),
        [pod(S1, on="node1"), pod(S2, on="node2"), pod(S1, on="node3")],
        nodes_of(CHINA, INDIA, AZ1),
        [100, 0, 0],
    ),
    (
        "Affinity: nodes sharing the topology value with a matching pod score the same",
        pod(aff=STAY_WITH_S1_IN_REGION),
        [pod(S1, on="node1")],
        nodes_of(CHINA, CHINA_AZ1, INDIA),
        [100, 100, 0],
    ),
    (
        "Affinity: the region with more matching pods scores higher",
        pod(S1, aff=STAY_WITH_S2_IN_REGION),
        [pod(S2, on=f"node{i}") for i in (1, 1, 2, 3, 4, 5)],
        nodes_of(CHINA, INDIA, CHINA, CHINA, INDIA),
        [100, 0, 100, 100, 0],
    ),
    (
        "Affinity: different label operators, including some match failures",
        pod(S1, aff=AFFINITY3),
        [pod(S1, on="node1"), pod(S2, on="node2"), pod(S1, on="node3")],
        nodes_of(CHINA, INDIA, AZ1),
        [20, 100, 0],
    ),
    (
        "Affinity symmetry: existing pods' preferred affinity terms",
        pod(S2),
        [
            pod(S1, on="node1", aff=STAY_WITH_S1_IN_REGION),
            pod(S2, on="node2", aff=STAY_WITH_S2_IN_REGION),
        ],
        nodes_of(CHINA, INDIA, AZ1),
        [0, 100, 0],
    ),
    (
        "Affinity symmetry: existing pods' required affinity (hardPodAffinityWeight)",
        pod(S1),
        [pod(S1, on="node1", aff=HARD_AFFINITY), pod(S2, on="node2", aff=HARD_AFFINITY)],
        nodes_of(CHINA, INDIA, AZ1),
        [100, 100, 0],
    ),
    (
        "Anti affinity: a node with a matching pod scores low",
        pod(S1, aff=AWAY_FROM_S1_IN_AZ),
        [pod(S1, on="node1"), pod(S2, on="node2")],
        nodes_of(AZ1, CHINA),
        [0, 100],
    ),
    (
        "Anti affinity: the node with more matching pods scores lower",
        pod(S1, aff=AWAY_FROM_S1_IN_AZ),
        [pod(S1, on="node1"), pod(S1, on="node1"), pod(S2, on="node2")],
        nodes_of(AZ1, INDIA),
        [0, 100],
    ),
    (
        "Anti affinity symmetry: existing pods' preferred anti-affinity",
        pod(S2),
        [
            pod(S1, on="node1", aff=AWAY_FROM_S2_IN_AZ),
            pod(S2, on="node2", aff=AWAY_FROM_S1_IN_AZ),
        ],
        nodes_of(AZ1, AZ2),
        [0, 100],
    ),
    (
        "Affinity and anti affinity together",
        pod(S1, aff=STAY_S1_REGION_AWAY_S2_AZ),
        [pod(S1, on="node1"), pod(S1, on="node2")],
        nodes_of(CHINA, AZ1),
        [100, 0],
    ),
    (
        "Affinity and anti affinity: same labels, stay in region, away at az level",
        pod(S1, aff=STAY_S1_REGION_AWAY_S2_AZ),
        [pod(S1, on=f"node{i}") for i in (1, 1, 2, 3, 3, 4, 5)],
        nodes_of(CHINA_AZ1, INDIA, CHINA, CHINA, INDIA),
        [100, 0, 100, 100, 0],
    ),
    (
        "Affinity, anti affinity and symmetry together",
        pod(S1, aff=STAY_S1_REGION_AWAY_S2_AZ),
        [
            pod(S1, on="node1"),
            pod(S2, on="node2"),
            pod(on="node3", aff=STAY_S1_REGION_AWAY_S2_AZ),
            pod(on="node4", aff=AWAY_FROM_S1_IN_AZ),
        ],
        nodes_of(CHINA, AZ1, INDIA, AZ2),
        [100, 0, 100, 0],
    ),
    (
        "Partial nodes in a topology have pods with affinity",
        pod(S1),
        [pod(S1, on="node1"), pod(on="node2", aff=STAY_S1_REGION_AWAY_S2_AZ)],
        nodes_of(CHINA, CHINA),
        [0, 0],
    ),
    (
        "No term of the pod or of existing pods matches: Skip",
        pod(S2),
        [pod(S1, on="node1"), pod(on="node2", aff=STAY_WITH_S1_IN_REGION)],
        nodes_of(CHINA, INDIA),
        None,
    ),
]


@pytest.mark.parametrize("index_first", [True, False], ids=["incremental", "scan"])
@pytest.mark.parametrize(
    ("incoming", "pods", "nodes", "want"),
    [case[1:] for case in SCORE],
    ids=[case[0] for case in SCORE],
)
def test_score(
    incoming: Pod, pods: list[Pod], nodes: list[Node], want: list[int] | None, index_first: bool
) -> None:
    _, plugin = build(nodes, pods, index_first=index_first)
    info = PodInfo(incoming)
    cands = Candidates.all(len(nodes))
    state = CycleState()
    status = plugin.pre_score(state, info, cands)
    if want is None:
        assert status.code == Code.SKIP
        return
    assert status.ok, status
    got = plugin.normalize_score(state, info, cands, plugin.score(state, info, cands))
    assert got.tolist() == want


def test_score_skips_without_terms() -> None:
    _, plugin = build(nodes_of(CHINA, INDIA), [pod(S1, on="node1")])
    assert plugin.pre_score(CycleState(), PodInfo(pod(S1)), Candidates.all(2)).code == Code.SKIP


def test_ignore_preferred_terms_of_existing_pods() -> None:
    pods = [
        pod(S1, on="node1", aff=STAY_WITH_S1_IN_REGION),
        pod(S2, on="node2", aff=STAY_WITH_S2_IN_REGION),
    ]
    args = InterPodAffinityArgs(ignore_preferred_terms_of_existing_pods=True)
    _, plugin = build(nodes_of(CHINA, INDIA, AZ1), pods, args)
    assert plugin.pre_score(CycleState(), PodInfo(pod(S2)), Candidates.all(3)).code == Code.SKIP


def test_hard_pod_affinity_weight_zero() -> None:
    pods = [pod(S1, on="node1", aff=HARD_AFFINITY)]
    args = InterPodAffinityArgs(hard_pod_affinity_weight=0)
    _, plugin = build(nodes_of(CHINA, INDIA), pods, args)
    assert plugin.pre_score(CycleState(), PodInfo(pod(S1)), Candidates.all(2)).code == Code.SKIP


def test_registered() -> None:
    assert IN_TREE["InterPodAffinity"].args is InterPodAffinityArgs


# ---- selectors -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("selector", "labels", "want"),
    [
        (None, {"a": "1"}, False),
        (LabelSelector(), {}, True),
        (LabelSelector(match_labels={"a": "1"}), {"a": "1", "b": "2"}, True),
        (LabelSelector(match_labels={"a": "1"}), {"a": "2"}, False),
        (sel_in("a", "1", "2"), {"a": "2"}, True),
        (sel_in("a", "1", "2"), {}, False),
        (
            LabelSelector(
                match_expressions=[
                    LabelSelectorRequirement(key="a", operator="NotIn", values=["1"])
                ]
            ),
            {},
            True,
        ),
        (
            LabelSelector(
                match_expressions=[LabelSelectorRequirement(key="a", operator="DoesNotExist")]
            ),
            {"a": ""},
            False,
        ),
    ],
)
def test_label_selector_matches(
    selector: LabelSelector | None, labels: dict[str, str], want: bool
) -> None:
    assert label_selector_matches(selector, labels) is want


def test_selector_key_is_canonical() -> None:
    a = LabelSelector(match_labels={"x": "1", "y": "2"})
    b = LabelSelector(
        match_expressions=[
            LabelSelectorRequirement(key="y", operator="In", values=["2"]),
            LabelSelectorRequirement(key="x", operator="In", values=["1"]),
        ]
    )
    assert selector_key(a) == selector_key(b)
    assert hash(selector_key(a)) == hash(selector_key(b))
    assert selector_key(None) is None
    assert selector_key(LabelSelector()) == ()


# ---- the shared index ------------------------------------------------------------------


def brute_force(cluster: ClusterState, matcher: PodMatcher) -> list[int]:
    table = cluster.table
    return [sum(matcher.matches(p) for p in table.pods[r].values()) for r in range(table.n)]


def test_index_stays_consistent_through_churn() -> None:
    """Random placements, deletions and node removals (which move rows) keep every
    tracked count equal to a recount from scratch."""
    rng = random.Random(7)
    cluster = ClusterState()
    handle = Handle(
        cluster, Snapshot(cluster), ManualClock(), np.random.default_rng(0), MemoryEffects()
    )
    index = PodTopologyIndex.of(handle)
    assert PodTopologyIndex.of(handle) is index and handle.services[SERVICE_NAME] is index
    matchers = [
        PodMatcher(((selector_key(sel_in("app", "web")), frozenset({"default"})),)),
        PodMatcher(((selector_key(LabelSelector()), None),), skip_terminating=True),
        PodMatcher(
            (
                (selector_key(sel_in("app", "web", "db")), None),
                (selector_key(LabelSelector(match_labels={"tier": "a"})), None),
            )
        ),
    ]
    guard = affinity(anti=[term(sel_in("app", "web"), "zone")])
    live: dict[str, Pod] = {}
    names = [f"n{i}" for i in range(70)]  # more than the initial capacity of 64
    for i, name in enumerate(names):
        cluster.add_node(node(name, zone=f"z{i % 4}"))
    for step in range(1500):
        action = rng.random()
        if action < 0.55 and cluster.table.n:
            p = pod(
                {"app": rng.choice(["web", "db"]), "tier": rng.choice(["a", "b"])},
                on=rng.choice(cluster.table.names),
                ns=rng.choice(["default", "other"]),
                aff=guard if rng.random() < 0.2 else None,
            )
            live[p.metadata.uid] = p
            cluster.add_bound_pod(PodInfo(p), p.spec.node_name)
        elif action < 0.85 and live:
            uid = rng.choice(sorted(live))
            del live[uid]
            cluster.remove_pod(uid)
        elif action < 0.95 and cluster.table.n > 1:
            cluster.remove_node(rng.choice(cluster.table.names))
        else:
            name = f"m{step}"
            cluster.add_node(node(name, zone=f"z{step % 4}"))
        if step % 100 == 0:  # register matchers at different times
            for m in matchers[: 1 + step // 500]:
                index.counts(m)
        for m in matchers:
            if m in index._matchers:
                assert index.counts(m).tolist() == brute_force(cluster, m)
        carriers = [0] * cluster.table.n
        for r in range(cluster.table.n):
            carriers[r] = sum(bool(p.anti_affinity_terms) for p in cluster.table.pods[r].values())
        groups = list(index.groups(REQUIRED_ANTI_AFFINITY))
        got = [0] * cluster.table.n
        for g in groups:
            for r, c in enumerate(g.counts[: cluster.table.n]):
                got[r] += int(c)
        assert got == carriers


# ---- end to end ------------------------------------------------------------------------


def test_self_anti_affinity_places_one_pod_per_node() -> None:
    effects = MemoryEffects()
    sched = new_scheduler(KubeSchedulerConfiguration(), clock=ManualClock(), effects=effects)
    for i in range(5):
        sched.add_node(node(f"n{i}", **{HOST: f"n{i}", "zone": f"z{i % 2}"}))
    spread_out = affinity(anti=[term(sel_in("app", "cache"), HOST)])
    for i in range(6):
        sched.add_pod(pod({"app": "cache"}, aff=spread_out, name=f"cache-{i}"))
    results = []
    while sched.has_work():
        result = sched.schedule_one()
        sched.start_bindings()
        sched.handle.effects.drain(sched)  # type: ignore[attr-defined]
        if result is not None:
            results.append(result)
    placed = sorted(effects.bound.values())
    assert placed == ["n0", "n1", "n2", "n3", "n4"]
    failed = [r for r in results if r.node is None]
    assert failed and failed[0].message == (
        "0/5 nodes are available: 5 node(s) didn't match pod anti-affinity rules."
        " preemption: 0/5 nodes are available: 5 No preemption victims found for "
        "incoming pod."
    )


def test_affinity_follows_the_first_pod() -> None:
    effects = MemoryEffects()
    sched = new_scheduler(KubeSchedulerConfiguration(), clock=ManualClock(), effects=effects)
    for i in range(6):
        sched.add_node(node(f"n{i}", **{HOST: f"n{i}", "zone": f"z{i % 3}"}))
    together = affinity(required=[term(sel_in("app", "batch"), "zone")])
    for i in range(6):
        sched.add_pod(pod({"app": "batch"}, aff=together, name=f"batch-{i}"))
    while sched.has_work():
        sched.schedule_one()
        sched.start_bindings()
        sched.handle.effects.drain(sched)  # type: ignore[attr-defined]
    zones = {f"n{i}": f"z{i % 3}" for i in range(6)}
    assert len(effects.bound) == 6
    assert len({zones[n] for n in effects.bound.values()}) == 1
