"""NodeUnschedulable: cordoned nodes are skipped unless the pod tolerates the
node.kubernetes.io/unschedulable:NoSchedule taint (kube's node_unschedulable_test.go)."""

from __future__ import annotations

from typing import Any

import pytest

from shoal.framework.status import Code
from shoal.plugins.node_unschedulable import REASON, NodeUnschedulable
from shoal.testing import make_handle, make_node, make_pod, run_filter

KEY = "node.kubernetes.io/unschedulable"


@pytest.mark.parametrize(
    ("toleration", "cordoned", "fits"),
    [
        (None, True, False),
        (None, False, True),
        ({"key": KEY, "effect": "NoSchedule"}, True, True),  # Exists
        ({"key": KEY}, True, True),  # any effect
        ({}, True, True),  # tolerate everything
        ({"key": KEY, "effect": "NoExecute"}, True, False),
        ({"key": KEY, "value": "true", "effect": "NoSchedule"}, True, False),  # Equal ""
        ({"key": "other", "effect": "NoSchedule"}, True, False),
    ],
)
def test_node_unschedulable(toleration: dict[str, Any] | None, cordoned: bool, fits: bool) -> None:
    handle = make_handle([make_node("n1").unschedulable(cordoned), make_node("ok")])
    pod = make_pod("p")
    if toleration is not None:
        pod.toleration(
            toleration.get("key", ""), toleration.get("value"), toleration.get("effect", "")
        )
    report = run_filter(NodeUnschedulable.new(None, handle), pod, handle)
    assert report.reasons["ok"] == ()
    if fits:
        assert report.reasons["n1"] == ()
    else:
        assert report.reasons["n1"] == (REASON,)
        assert report.codes["n1"] == Code.UNSCHEDULABLE_AND_UNRESOLVABLE


def test_uncordon_updates_the_row() -> None:
    handle = make_handle([make_node("n1").unschedulable()])
    plugin = NodeUnschedulable.new(None, handle)
    assert run_filter(plugin, make_pod("p"), handle).passed == []
    handle.cluster.update_node(make_node("n1").obj())
    assert run_filter(plugin, make_pod("p"), handle).passed == ["n1"]
