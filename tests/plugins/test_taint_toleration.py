"""TaintToleration: Filter (NoSchedule/NoExecute must be tolerated) and PreferNoSchedule
scoring, ported from kube-scheduler's tainttoleration/taint_toleration_test.go."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from shoal.framework.status import Code
from shoal.plugins.taint_toleration import TaintToleration, untolerated_taints
from shoal.testing import (
    NodeBuilder,
    PodBuilder,
    make_handle,
    make_node,
    make_pod,
    run_filter,
    run_score,
)


def _node(name: str, *taints: tuple[str, str, str]) -> NodeBuilder:
    node = make_node(name).capacity(cpu="1")
    for key, value, effect in taints:
        node.taint(key, value, effect)  # type: ignore[arg-type]
    return node


def _pod(*tolerations: dict[str, Any]) -> PodBuilder:
    pod = make_pod("pod1")
    for t in tolerations:
        pod.toleration(
            t.get("key", ""),
            t.get("value"),
            t.get("effect", ""),
            operator=t.get("operator"),
        )
    return pod


PREFER = "PreferNoSchedule"

SCORE_CASES = [
    (
        "node with taints tolerated by the pod, gets a higher score than those node with "
        "intolerable taints",
        _pod({"key": "foo", "operator": "Equal", "value": "bar", "effect": PREFER}),
        [_node("nodeA", ("foo", "bar", PREFER)), _node("nodeB", ("foo", "blah", PREFER))],
        {"nodeA": 100, "nodeB": 0},
    ),
    (
        "all taints tolerated: same score whatever the number of tolerated taints",
        _pod(
            {"key": "cpu-type", "operator": "Equal", "value": "arm64", "effect": PREFER},
            {"key": "disk-type", "operator": "Equal", "value": "ssd", "effect": PREFER},
        ),
        [
            _node("nodeA"),
            _node("nodeB", ("cpu-type", "arm64", PREFER)),
            _node("nodeC", ("cpu-type", "arm64", PREFER), ("disk-type", "ssd", PREFER)),
        ],
        {"nodeA": 100, "nodeB": 100, "nodeC": 100},
    ),
    (
        "the more intolerable taints a node has, the lower score it gets",
        _pod({"key": "foo", "operator": "Equal", "value": "bar", "effect": PREFER}),
        [
            _node("nodeA"),
            _node("nodeB", ("cpu-type", "arm64", PREFER)),
            _node("nodeC", ("cpu-type", "arm64", PREFER), ("disk-type", "ssd", PREFER)),
        ],
        {"nodeA": 100, "nodeB": 50, "nodeC": 0},
    ),
    (
        "only PreferNoSchedule taints and tolerations count for the score",
        _pod(
            {"key": "cpu-type", "operator": "Equal", "value": "arm64", "effect": "NoSchedule"},
            {"key": "disk-type", "operator": "Equal", "value": "ssd", "effect": "NoSchedule"},
        ),
        [
            _node("nodeA"),
            _node("nodeB", ("cpu-type", "arm64", "NoSchedule")),
            _node("nodeC", ("cpu-type", "arm64", PREFER), ("disk-type", "ssd", PREFER)),
        ],
        {"nodeA": 100, "nodeB": 100, "nodeC": 0},
    ),
    (
        "no taints and tolerations: lands on the node without taints",
        _pod(),
        [_node("nodeA"), _node("nodeB", ("cpu-type", "arm64", PREFER))],
        {"nodeA": 100, "nodeB": 0},
    ),
    (
        "a toleration with an empty effect covers PreferNoSchedule",
        _pod({"key": "foo", "operator": "Exists"}),
        [_node("nodeA", ("foo", "x", PREFER)), _node("nodeB", ("bar", "x", PREFER))],
        {"nodeA": 100, "nodeB": 0},
    ),
]


@pytest.mark.parametrize(
    ("pod", "nodes", "expected"), [pytest.param(*c[1:], id=c[0]) for c in SCORE_CASES]
)
def test_taint_toleration_score(
    pod: PodBuilder, nodes: list[NodeBuilder], expected: dict[str, int]
) -> None:
    handle = make_handle(nodes)
    assert run_score(TaintToleration.new(None, handle), pod, handle) == expected


def test_score_skipped_when_no_node_has_taints() -> None:
    handle = make_handle([_node("a"), _node("b")])
    assert run_score(TaintToleration.new(None, handle), _pod(), handle) is None


FILTER_CASES = [
    (
        "a pod having no tolerations can't be scheduled onto a node with nonempty taints",
        _pod(),
        _node("nodeA", ("dedicated", "user1", "NoSchedule")),
        "dedicated=user1:NoSchedule",
    ),
    (
        "a pod which can be scheduled on a dedicated node assigned to user1",
        _pod({"key": "dedicated", "value": "user1", "effect": "NoSchedule"}),
        _node("nodeA", ("dedicated", "user1", "NoSchedule")),
        None,
    ),
    (
        "a pod which can't be scheduled on a dedicated node assigned to user2",
        _pod({"key": "dedicated", "operator": "Equal", "value": "user2", "effect": "NoSchedule"}),
        _node("nodeA", ("dedicated", "user1", "NoSchedule")),
        "dedicated=user1:NoSchedule",
    ),
    (
        "a toleration with operator Exists tolerates the taint",
        _pod({"key": "foo", "operator": "Exists", "effect": "NoSchedule"}),
        _node("nodeA", ("foo", "bar", "NoSchedule")),
        None,
    ),
    (
        "multiple tolerations, multiple taints, all tolerated",
        _pod(
            {"key": "dedicated", "operator": "Equal", "value": "user2", "effect": "NoSchedule"},
            {"key": "foo", "operator": "Exists", "effect": "NoSchedule"},
        ),
        _node("nodeA", ("dedicated", "user2", "NoSchedule"), ("foo", "bar", "NoSchedule")),
        None,
    ),
    (
        "key and value match but the (non-empty) effect does not",
        _pod({"key": "foo", "operator": "Equal", "value": "bar", "effect": PREFER}),
        _node("nodeA", ("foo", "bar", "NoSchedule")),
        "foo=bar:NoSchedule",
    ),
    (
        "an empty toleration effect matches NoSchedule",
        _pod({"key": "foo", "operator": "Equal", "value": "bar"}),
        _node("nodeA", ("foo", "bar", "NoSchedule")),
        None,
    ),
    (
        "PreferNoSchedule taints never block",
        _pod({"key": "dedicated", "operator": "Equal", "value": "user2", "effect": "NoSchedule"}),
        _node("nodeA", ("dedicated", "user1", PREFER)),
        None,
    ),
    (
        "no toleration, only a PreferNoSchedule taint",
        _pod(),
        _node("nodeA", ("dedicated", "user1", PREFER)),
        None,
    ),
    (
        "NoExecute taints block too",
        _pod(),
        _node("nodeA", ("evict", "", "NoExecute")),
        "evict:NoExecute",
    ),
    (
        "an empty key with Exists tolerates everything",
        _pod({"operator": "Exists"}),
        _node("nodeA", ("a", "1", "NoSchedule"), ("b", "2", "NoExecute")),
        None,
    ),
    (
        "the first untolerated taint is the one named (to operators)",
        _pod({"key": "a", "operator": "Exists"}),
        _node("nodeA", ("a", "1", "NoSchedule"), ("b", "2", "NoSchedule"), ("c", "3", "NoExecute")),
        "b=2:NoSchedule",
    ),
]


@pytest.mark.parametrize(
    ("pod", "node", "taint"), [pytest.param(*c[1:], id=c[0]) for c in FILTER_CASES]
)
def test_taint_toleration_filter(pod: PodBuilder, node: NodeBuilder, taint: str | None) -> None:
    """The pod's reason never names the taint (kube >= 1.34: keys and values may be
    sensitive); `untolerated_taints` names it for operators."""
    # A second, untainted node makes sure the taint sets are broadcast to the right rows.
    handle = make_handle([_node("clean"), node])
    report = run_filter(TaintToleration.new(None, handle), pod, handle)
    assert report.reasons["clean"] == ()
    rows = np.array([0, 1], dtype=np.intp)
    named = untolerated_taints(handle, pod.info(), rows)
    if taint is None:
        assert report.reasons["nodeA"] == ()
        assert named == {}
    else:
        assert report.reasons["nodeA"] == ("node(s) had untolerated taint(s)",)
        assert report.codes["nodeA"] == Code.UNSCHEDULABLE_AND_UNRESOLVABLE
        assert named == {taint: 1}


def test_nodes_sharing_a_taint_set_share_one_reason() -> None:
    nodes = [_node(f"g{i}", ("gpu", "yes", "NoSchedule")) for i in range(3)] + [_node("x")]
    handle = make_handle(nodes)
    plugin = TaintToleration.new(None, handle)
    handle.snapshot.refresh()
    from shoal.framework.cycle_state import CycleState
    from shoal.framework.types import Candidates

    result = plugin.filter(CycleState(), make_pod("p").info(), Candidates.all(4))
    assert result.passed.tolist() == [False, False, False, True]
    assert [(f.reason, f.nodes.tolist()) for f in result.failures] == [
        ("node(s) had untolerated taint(s)", [True, True, True, False])
    ]
    rows = np.arange(4, dtype=np.intp)
    assert untolerated_taints(handle, make_pod("p").info(), rows) == {"gpu=yes:NoSchedule": 3}
