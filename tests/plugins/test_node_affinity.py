"""NodeAffinity: nodeSelector, required terms (ORed terms, ANDed requirements),
matchFields with PreFilter narrowing, scheduler-enforced addedAffinity, and preferred
weights normalised to 0..100 (kube's nodeaffinity/node_affinity_test.go)."""

from __future__ import annotations

from typing import Any

import pytest

from shoal.framework.status import Code
from shoal.plugins.args import NodeAffinityArgs
from shoal.plugins.node_affinity import REASON, REASON_ENFORCED, NodeAffinity
from shoal.testing import (
    NodeBuilder,
    PodBuilder,
    make_handle,
    make_node,
    make_pod,
    run_filter,
    run_score,
)


def _node(name: str, **labels: str) -> NodeBuilder:
    return make_node(name).capacity(cpu="1").labels(labels)


FILTER_CASES: list[tuple[str, PodBuilder, dict[str, str], bool]] = [
    ("no selector schedules anywhere", make_pod("p"), {"foo": "bar"}, True),
    ("missing labels", make_pod("p").node_selector(foo="bar"), {}, False),
    ("same labels", make_pod("p").node_selector(foo="bar"), {"foo": "bar"}, True),
    (
        "node labels are a superset",
        make_pod("p").node_selector(foo="bar"),
        {"foo": "bar", "baz": "blah"},
        True,
    ),
    (
        "node labels are a subset",
        make_pod("p").node_selector(foo="bar", baz="blah"),
        {"foo": "bar"},
        False,
    ),
    ("In matches", make_pod("p").node_affinity_in("foo", ["bar", "value2"]), {"foo": "bar"}, True),
    (
        "Gt matches",
        make_pod("p").node_affinity("kernel-version", "Gt", ["0204"]),
        {"kernel-version": "0206"},
        True,
    ),
    (
        "NotIn + Exists + Gt all need to hold",
        make_pod("p")
        .node_affinity_not_in("mem-type", ["DDR", "DDR2"])
        .node_affinity_exists("GPU")
        .node_affinity("kernel-version", "Gt", ["0204"]),
        {"kernel-version": "0206", "mem-type": "DDR3", "GPU": "NVIDIA-GRID-K1"},
        True,
    ),
    (
        "In fails on a different value",
        make_pod("p").node_affinity_in("foo", ["value1", "value2"]),
        {"foo": "bar"},
        False,
    ),
    ("an empty term matches no node", make_pod("p").node_affinity_term(), {"foo": "bar"}, False),
    (
        "terms are ORed",
        make_pod("p")
        .node_affinity_term(("diffkey", "In", ["wrong", "value2"]))
        .node_affinity_term(("foo", "In", ["bar"])),
        {"foo": "bar"},
        True,
    ),
    (
        "requirements within a term are ANDed",
        make_pod("p").node_affinity_term(("foo", "In", ["bar"]), ("diffkey", "In", ["x"])),
        {"foo": "bar"},
        False,
    ),
    ("Exists on a missing key", make_pod("p").node_affinity_exists("foo"), {"bar": "x"}, False),
    ("DoesNotExist", make_pod("p").node_affinity_does_not_exist("foo"), {"bar": "x"}, True),
    (
        "nodeSelector and affinity must both hold",
        make_pod("p").node_selector(foo="bar").node_affinity_exists("GPU"),
        {"foo": "bar"},
        False,
    ),
    (
        "nodeSelector and affinity both hold",
        make_pod("p").node_selector(foo="bar").node_affinity_exists("GPU"),
        {"foo": "bar", "GPU": "x"},
        True,
    ),
    ("matchFields metadata.name In", make_pod("p").node_affinity_node_names("node1"), {}, True),
    (
        "matchFields metadata.name In, other node",
        make_pod("p").node_affinity_node_names("node2"),
        {},
        False,
    ),
    (
        "matchFields and matchExpressions in one term are ANDed",
        make_pod("p").node_affinity_term(
            ("foo", "In", ["bar"]), fields=[("metadata.name", "In", ["node1"])]
        ),
        {"foo": "baz"},
        False,
    ),
    (
        "Lt on a non-numeric label fails",
        make_pod("p").node_affinity("gen", "Lt", ["5"]),
        {"gen": "three"},
        False,
    ),
]


@pytest.mark.parametrize(
    ("pod", "labels", "fits"), [pytest.param(*c[1:], id=c[0]) for c in FILTER_CASES]
)
def test_node_affinity_filter(pod: PodBuilder, labels: dict[str, str], fits: bool) -> None:
    handle = make_handle([_node("node1", **labels)])
    report = run_filter(NodeAffinity.new(None, handle), pod, handle)
    if fits:
        assert report.reasons["node1"] == ()
    else:
        assert report.reasons["node1"] == (REASON,)
        assert report.codes["node1"] == Code.UNSCHEDULABLE_AND_UNRESOLVABLE


def test_pre_filter_skips_pods_without_node_constraints() -> None:
    handle = make_handle([_node("node1")])
    report = run_filter(NodeAffinity.new(None, handle), make_pod("p").req(cpu="1"), handle)
    assert report.pre_filter.code == Code.SKIP


@pytest.mark.parametrize(
    ("pod", "names"),
    [
        (make_pod("p").node_affinity_node_names("node1"), {"node1"}),
        (
            make_pod("p")
            .node_affinity_term(fields=[("metadata.name", "In", ["node1"])])
            .node_affinity_term(fields=[("metadata.name", "In", ["node2"])]),
            {"node1", "node2"},
        ),
        (
            # One term without a name requirement means any node may match.
            make_pod("p")
            .node_affinity_term(fields=[("metadata.name", "In", ["node1"])])
            .node_affinity_term(("foo", "Exists")),
            None,
        ),
        (make_pod("p").node_selector(foo="bar"), None),
    ],
)
def test_pre_filter_result_narrows_by_node_name(pod: PodBuilder, names: set[str] | None) -> None:
    handle = make_handle([_node("node1"), _node("node2"), _node("node3")])
    report = run_filter(NodeAffinity.new(None, handle), pod, handle)
    assert report.pre_filter.ok
    result = report.pre_filter_result
    assert (None if result is None else result.node_names) == (
        None if names is None else frozenset(names)
    )


def _added(raw: dict[str, Any]) -> NodeAffinityArgs:
    return NodeAffinityArgs.model_validate({"addedAffinity": raw})


def test_added_affinity_is_enforced_and_combined_with_the_pods_own() -> None:
    args = _added(
        {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}
                ]
            }
        }
    )
    handle = make_handle(
        [_node("n1", zone="a"), _node("n2", zone="b"), _node("n3", zone="a", disk="ssd")]
    )
    plugin = NodeAffinity.new(args, handle)
    # No constraints of its own: only the enforced affinity applies (and PreFilter runs).
    report = run_filter(plugin, make_pod("p"), handle)
    assert report.pre_filter.ok
    assert report.reasons == {"n1": (), "n2": (REASON_ENFORCED,), "n3": ()}
    # The pod's own selector still applies to the nodes that pass the enforced one.
    report = run_filter(plugin, make_pod("p").node_selector(disk="ssd"), handle)
    assert report.reasons == {"n1": (REASON,), "n2": (REASON_ENFORCED,), "n3": ()}
    assert all(code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE for code in report.codes.values())


LABEL1 = {"foo": "bar"}
LABEL2 = {"key": "value"}
LABEL3 = {"az": "az1"}
LABEL4 = {"abc": "az11", "def": "az22"}
LABEL5 = {"foo": "bar", "key": "value", "az": "az1"}

AFFINITY1 = make_pod("p").preferred_node_affinity(2, "foo", ["bar"])
AFFINITY2 = (
    make_pod("p")
    .preferred_node_affinity(2, "foo", ["bar"])
    .preferred_node_affinity(4, "key", ["value"])
    .preferred_node_term(5, ("foo", "In", ["bar"]), ("key", "In", ["value"]), ("az", "In", ["az1"]))
)

SCORE_CASES = [
    (
        "no node matches the preferred terms",
        AFFINITY1,
        [("machine1", LABEL4), ("machine2", LABEL2), ("machine3", LABEL3)],
        {"machine1": 0, "machine2": 0, "machine3": 0},
    ),
    (
        "only machine1 matches",
        AFFINITY1,
        [("machine1", LABEL1), ("machine2", LABEL2), ("machine3", LABEL3)],
        {"machine1": 100, "machine2": 0, "machine3": 0},
    ),
    (
        "all machines match with different priorities",
        AFFINITY2,
        [("machine1", LABEL1), ("machine5", LABEL5), ("machine2", LABEL2)],
        {"machine1": 18, "machine5": 100, "machine2": 36},
    ),
]


@pytest.mark.parametrize(
    ("pod", "nodes", "expected"), [pytest.param(*c[1:], id=c[0]) for c in SCORE_CASES]
)
def test_node_affinity_priority(
    pod: PodBuilder, nodes: list[tuple[str, dict[str, str]]], expected: dict[str, int]
) -> None:
    handle = make_handle([_node(name, **labels) for name, labels in nodes])
    assert run_score(NodeAffinity.new(None, handle), pod, handle) == expected


def test_score_skipped_without_preferred_terms() -> None:
    handle = make_handle([_node("machine1", **LABEL1), _node("machine2", **LABEL2)])
    pod = make_pod("p").node_affinity_in("foo", ["bar"])  # required only
    assert run_score(NodeAffinity.new(None, handle), pod, handle) is None


def _added_preferred(weight: int) -> NodeAffinityArgs:
    term = {"matchExpressions": [{"key": "key", "operator": "In", "values": ["value"]}]}
    return _added(
        {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": weight, "preference": term}
            ]
        }
    )


def test_added_preferred_terms_score_every_pod() -> None:
    """kube's "added affinity" cases: the configuration's preferred terms count for every
    pod, beside its own. (Before, they were accepted and never scored.)"""
    handle = make_handle([_node("machine1", **LABEL1), _node("machine2", **LABEL2)])
    plugin = NodeAffinity.new(_added_preferred(2), handle)
    assert run_score(plugin, make_pod("p"), handle) == {"machine1": 0, "machine2": 100}
    handle = make_handle(
        [_node("machine1", **LABEL1), _node("machine2", **LABEL2), _node("machine3", **LABEL5)]
    )
    plugin = NodeAffinity.new(_added_preferred(3), handle)
    assert run_score(plugin, AFFINITY1, handle) == {"machine1": 40, "machine2": 60, "machine3": 100}


@pytest.mark.parametrize("weight", [0, 101])
def test_added_preferred_weights_are_taken_as_kube_scheduler_takes_them(weight: int) -> None:
    # The kit's kube-scheduler v1.36 starts with these (a pod's own must be 1..100).
    handle = make_handle([_node("machine1", **LABEL1), _node("machine2", **LABEL2)])
    plugin = NodeAffinity.new(_added_preferred(weight), handle)
    expected = None if weight == 0 else {"machine1": 0, "machine2": 100}
    assert run_score(plugin, make_pod("p"), handle) == expected
