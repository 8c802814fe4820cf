"""NodeName: a pod naming a node in spec.nodeName fits only there (nodename_test.go)."""

from __future__ import annotations

from shoal.framework.status import Code
from shoal.plugins.node_name import REASON, NodeName
from shoal.testing import make_handle, make_node, make_pod, run_filter


def test_no_node_name_fits_everywhere() -> None:
    handle = make_handle([make_node("foo"), make_node("bar")])
    assert run_filter(NodeName.new(None, handle), make_pod("p"), handle).passed == ["foo", "bar"]


def test_node_name_matches_only_that_node() -> None:
    handle = make_handle([make_node("foo"), make_node("bar")])
    report = run_filter(NodeName.new(None, handle), make_pod("p").node("foo").info(), handle)
    assert report.passed == ["foo"]
    assert report.reasons["bar"] == (REASON,)
    assert report.codes["bar"] == Code.UNSCHEDULABLE_AND_UNRESOLVABLE


def test_unknown_node_name_fits_nowhere() -> None:
    handle = make_handle([make_node("foo")])
    report = run_filter(NodeName.new(None, handle), make_pod("p").node("baz").info(), handle)
    assert report.passed == []
