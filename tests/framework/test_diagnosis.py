"""Diagnosis / FitError messages, exactly as kube-scheduler formats them:
"0/5 nodes are available: 2 Insufficient cpu, 3 node(s) had untolerated taint(s)."
(reasons as "count reason", sorted as strings; a node is charged only to the first
filter that rejected it; nodes a PreFilter excluded count under that plugin)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import pytest

from shoal.framework.cycle_state import CycleState
from shoal.framework.diagnosis import Diagnosis, fit_error_message
from shoal.framework.registry import PluginSpec
from shoal.framework.status import Code, Status
from shoal.framework.types import Candidates, Failure, FilterResult, PreFilterResult
from shoal.scheduler import default_registry
from shoal.testing import SchedulerHarness, make_node, make_pod


@pytest.mark.parametrize(
    ("n", "reasons", "pre", "post", "expected"),
    [
        (
            5,
            {"Insufficient cpu": 2, "node(s) had untolerated taint(s)": 3},
            "",
            "",
            "0/5 nodes are available: 2 Insufficient cpu, 3 node(s) had untolerated taint(s).",
        ),
        (
            12,
            # sorted as strings, not numbers: "10 ..." before "2 ..."
            {"Insufficient cpu": 2, "Insufficient memory": 10},
            "",
            "",
            "0/12 nodes are available: 10 Insufficient memory, 2 Insufficient cpu.",
        ),
        (
            3,
            {"ignored": 3},
            "node(s) didn't satisfy plugin NodeAffinity",
            "",
            "0/3 nodes are available: node(s) didn't satisfy plugin NodeAffinity.",
        ),
        (
            4,
            {"Insufficient cpu": 4},
            "",
            "No preemption victims found for incoming pod",
            "0/4 nodes are available: 4 Insufficient cpu. "
            "No preemption victims found for incoming pod.",
        ),
        (2, {}, "", "", "0/2 nodes are available:"),
    ],
)
def test_fit_error_message(
    n: int, reasons: dict[str, int], pre: str, post: str, expected: str
) -> None:
    assert fit_error_message(n, Counter(reasons), pre, post) == expected


def _result(passed: list[bool], *failures: tuple[str, list[int], Code]) -> FilterResult:
    return FilterResult(
        np.array(passed), [Failure(r, np.array(m, dtype=bool), c) for r, m, c in failures]
    )


def test_node_charged_to_first_rejecting_filter_only() -> None:
    U, UU = Code.UNSCHEDULABLE, Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    results = [
        ("NodeUnschedulable", _result([False, True, True, True], ("cordoned", [1, 0, 0, 0], UU))),
        ("TaintToleration", _result([False, False, True, True], ("taint", [1, 1, 0, 0], UU))),
        (
            "NodeResourcesFit",
            _result(
                [False, False, False, True],
                ("Insufficient cpu", [1, 1, 1, 0], U),
                ("Insufficient memory", [0, 1, 1, 0], U),
            ),
        ),
    ]
    d = Diagnosis.from_filters(4, Candidates.all(4), results)
    assert d.reasons == Counter(
        {"cordoned": 1, "taint": 1, "Insufficient cpu": 1, "Insufficient memory": 1}
    )
    assert d.rejected_by == ["NodeUnschedulable", "TaintToleration", "NodeResourcesFit", ""]
    assert d.node_reasons[2] == ("Insufficient cpu", "Insufficient memory")
    assert d.unschedulable_plugins == {"NodeUnschedulable", "TaintToleration", "NodeResourcesFit"}
    assert d.unresolvable is not None and d.unresolvable.tolist() == [True, True, False, False]
    assert d.message() == (
        "0/4 nodes are available: 1 Insufficient cpu, 1 Insufficient memory, 1 cordoned, 1 taint."
    )


def _h(nodes: list[Any], config: Any = None, registry: Any = None) -> SchedulerHarness:
    h = SchedulerHarness(config, registry=registry)
    h.add_nodes(*nodes)
    return h


def test_end_to_end_message_matches_kube() -> None:
    nodes = [make_node(f"small{i}").capacity(cpu="1", memory="8Gi") for i in range(2)] + [
        make_node(f"tainted{i}").capacity(cpu="8", memory="8Gi").taint("k", "v") for i in range(3)
    ]
    h = _h(nodes)
    h.add_pods(make_pod("p").req(cpu="2"))
    assert h.run().messages == {
        "default/p": "0/5 nodes are available: 2 Insufficient cpu, "
        "3 node(s) had untolerated taint(s)."
        # A 2-cpu pod on 1-cpu nodes: no eviction can help there either (kube's
        # InsufficientResource.Unresolvable).
        " preemption: 0/5 nodes are available: 5 Preemption is not helpful for scheduling."
    }


def test_a_node_failing_two_filters_counts_once_under_the_first() -> None:
    # TaintToleration runs before NodeResourcesFit in the default profile.
    nodes = [
        make_node("both").capacity(cpu="1").taint("k", "v"),
        make_node("cpu").capacity(cpu="1"),
    ]
    h = _h(nodes)
    h.add_pods(make_pod("p").req(cpu="2", memory="1Gi"))
    assert h.run().messages["default/p"] == (
        "0/2 nodes are available: 1 Insufficient cpu, 1 Insufficient memory, "
        "1 node(s) had untolerated taint(s)."
        " preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."
    )


def test_nodes_excluded_by_a_pre_filter_result_are_counted() -> None:
    nodes = [make_node(f"n{i}").capacity(cpu="1") for i in range(5)]
    h = _h(nodes)
    h.add_pods(make_pod("p").req(cpu="2").node_affinity_node_names("n1"))
    assert h.run().messages["default/p"] == (
        "0/5 nodes are available: 1 Insufficient cpu, "
        "4 node(s) didn't satisfy plugin(s) [NodeAffinity]."
        " preemption: 0/5 nodes are available: 5 Preemption is not helpful for scheduling."
    )


def test_pre_filter_result_naming_unknown_nodes() -> None:
    h = _h([make_node(f"n{i}").capacity(cpu="1") for i in range(3)])
    h.add_pods(make_pod("p").node_affinity_node_names("ghost"))
    assert h.run().messages["default/p"] == (
        "0/3 nodes are available: 3 node(s) didn't satisfy plugin(s) [NodeAffinity]."
        " preemption: 0/3 nodes are available: 3 Preemption is not helpful for "
        "scheduling."
    )


class _Narrow:
    """A PreFilter plugin that allows only the nodes named in its args."""

    name = "Narrow"

    def __init__(self, names: frozenset[str]) -> None:
        self.names = names

    def pre_filter(self, state: CycleState, pod: Any) -> tuple[PreFilterResult | None, Status]:
        return PreFilterResult(self.names), Status()


def test_disjoint_pre_filter_results() -> None:
    registry = default_registry(include_entry_points=False).merged(
        [("Narrow", PluginSpec(lambda args, handle: _Narrow(frozenset({"n0"}))))]
    )
    config = {"profiles": [{"plugins": {"preFilter": {"enabled": [{"name": "Narrow"}]}}}]}
    h = _h([make_node(f"n{i}").capacity(cpu="1") for i in range(3)], config, registry)
    h.add_pods(make_pod("p").node_affinity_node_names("n1"))
    assert h.run().messages["default/p"] == (
        "0/3 nodes are available: "
        "node(s) didn't satisfy plugin(s) [Narrow NodeAffinity] simultaneously."
        " preemption: 0/3 nodes are available: 3 Preemption is not helpful for "
        "scheduling."
    )
    h.add_pods(make_pod("q").node_affinity_node_names("n0").req(cpu="2"))
    assert h.run().messages["default/q"] == (
        "0/3 nodes are available: 1 Insufficient cpu, "
        "2 node(s) didn't satisfy plugin(s) [Narrow NodeAffinity]."
        " preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling."
    )


def test_no_nodes_at_all() -> None:
    h = _h([])
    h.add_pods(make_pod("p"))
    assert h.run().messages == {"default/p": "no nodes available to schedule pods"}
    # A node arriving wakes the pod up.
    h.add_nodes(make_node("n").capacity(cpu="1"))
    assert h.advance(1.0).placements == {"default/p": "n"}


def test_post_filter_statuses_report_first_rejection() -> None:
    from shoal.framework.runtime import _Statuses

    h = _h([make_node("t").capacity(cpu="4").taint("k", "v"), make_node("c").capacity(cpu="4")])
    h.add_pods(make_pod("other").req(cpu="3").node("c"), make_pod("p").req(cpu="2"))
    h.run()
    diagnosis = h.cycles[-1].diagnosis
    assert diagnosis is not None
    statuses = _Statuses(diagnosis, h.scheduler.handle)
    t, c = statuses.status_of("t"), statuses.status_of("c")
    assert (t.code, t.plugin, t.reasons) == (
        Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
        "TaintToleration",
        ("node(s) had untolerated taint(s)",),
    )
    assert (c.code, c.plugin, c.reasons) == (
        Code.UNSCHEDULABLE,
        "NodeResourcesFit",
        ("Insufficient cpu",),
    )
    assert statuses.unresolvable().tolist() == [True, False]
