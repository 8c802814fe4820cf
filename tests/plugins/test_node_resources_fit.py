"""NodeResourcesFit: Filter reasons and the three scoring strategies.

Filter cases are ported from kube-scheduler's noderesources/fit_test.go (TestEnoughRequests,
TestNotEnoughRequests, TestStorageRequests); scores from least_allocated_test.go,
most_allocated_test.go and requested_to_capacity_ratio_test.go, with kube's expected
numbers.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shoal.plugins.args import NodeResourcesFitArgs
from shoal.plugins.node_resources_fit import (
    NodeResourcesFit,
    broken_linear,
    least_allocated,
    most_allocated,
)
from shoal.testing import PodBuilder, make_handle, make_node, make_pod, run_filter, run_score

EXT_A = "example.com/aaa"
EXT_B = "example.com/bbb"
K8S_IO_A = "kubernetes.io/something"
K8S_IO_B = "subdomain.kubernetes.io/something"
HUGE_A = "hugepages-2Mi"


def _fit(handle: Any, **args: Any) -> NodeResourcesFit:
    return NodeResourcesFit.new(NodeResourcesFitArgs.model_validate(args), handle)


def _usage(cpu_m: int = 0, mem: int = 0, **extra: int) -> dict[str, Any]:
    out: dict[str, Any] = {"cpu": f"{cpu_m}m", "memory": mem}
    out.update({k.replace("__", "/").replace("_", "."): v for k, v in extra.items()})
    return out


def _pod(*containers: dict[str, Any], init: tuple[dict[str, Any], ...] = ()) -> PodBuilder:
    pod = make_pod("p")
    for c in containers:
        pod.req(c)
    for c in init:
        pod.init_req(c)
    return pod


# The node of TestEnoughRequests: cpu 10m, memory 20, pods 32, example.com/aaa 5,
# ephemeral-storage 20, hugepages-2Mi 5.
NODE = make_node("n").capacity(
    {"cpu": "10m", "memory": 20, "pods": 32, EXT_A: 5, "ephemeral-storage": 20, HUGE_A: 5}
)

CPU, MEM = "Insufficient cpu", "Insufficient memory"

ENOUGH_REQUESTS = [
    ("no resources requested always fits", _pod(), {"cpu": "10m", "memory": 20}, []),
    (
        "too many resources fails",
        _pod({"cpu": "1m", "memory": 1}),
        {"cpu": "10m", "memory": 20},
        [CPU, MEM],
    ),
    (
        "too many resources fails due to init container cpu",
        _pod({"cpu": "1m", "memory": 1}, init=({"cpu": "3m", "memory": 1},)),
        {"cpu": "8m", "memory": 19},
        [CPU],
    ),
    (
        "too many resources fails due to highest init container cpu",
        _pod(
            {"cpu": "1m", "memory": 1},
            init=({"cpu": "3m", "memory": 1}, {"cpu": "2m", "memory": 1}),
        ),
        {"cpu": "8m", "memory": 19},
        [CPU],
    ),
    (
        "too many resources fails due to init container memory",
        _pod({"cpu": "1m", "memory": 1}, init=({"cpu": "1m", "memory": 3},)),
        {"cpu": "9m", "memory": 19},
        [MEM],
    ),
    (
        "too many resources fails due to highest init container memory",
        _pod(
            {"cpu": "1m", "memory": 1},
            init=({"cpu": "1m", "memory": 3}, {"cpu": "1m", "memory": 2}),
        ),
        {"cpu": "9m", "memory": 19},
        [MEM],
    ),
    (
        "init container fits because it's the max, not sum, of containers and init containers",
        _pod({"cpu": "1m", "memory": 1}, init=({"cpu": "1m", "memory": 1},)),
        {"cpu": "9m", "memory": 19},
        [],
    ),
    (
        "multiple init containers fit because it's the max, not sum",
        _pod(
            {"cpu": "1m", "memory": 1},
            init=({"cpu": "1m", "memory": 1}, {"cpu": "1m", "memory": 1}),
        ),
        {"cpu": "9m", "memory": 19},
        [],
    ),
    ("both resources fit", _pod({"cpu": "1m", "memory": 1}), {"cpu": "5m", "memory": 5}, []),
    (
        "one resource memory fits",
        _pod({"cpu": "2m", "memory": 1}),
        {"cpu": "9m", "memory": 5},
        [CPU],
    ),
    ("one resource cpu fits", _pod({"cpu": "1m", "memory": 2}), {"cpu": "5m", "memory": 19}, [MEM]),
    ("equal edge case", _pod({"cpu": "5m", "memory": 1}), {"cpu": "5m", "memory": 19}, []),
    (
        "equal edge case for init container",
        _pod({"cpu": "4m", "memory": 1}, init=({"cpu": "5m", "memory": 1},)),
        {"cpu": "5m", "memory": 19},
        [],
    ),
    ("extended resource fits", _pod({EXT_A: 1}), {}, []),
    ("extended resource fits for init container", _pod(init=({EXT_A: 1},)), {}, []),
    (
        "extended resource capacity enforced",
        _pod({"cpu": "1m", "memory": 1, EXT_A: 10}),
        {EXT_A: 0},
        [f"Insufficient {EXT_A}"],
    ),
    (
        "extended resource capacity enforced for init container",
        _pod(init=({"cpu": "1m", "memory": 1, EXT_A: 10},)),
        {EXT_A: 0},
        [f"Insufficient {EXT_A}"],
    ),
    (
        "extended resource allocatable enforced",
        _pod({"cpu": "1m", "memory": 1, EXT_A: 1}),
        {EXT_A: 5},
        [f"Insufficient {EXT_A}"],
    ),
    (
        "extended resource allocatable enforced for multiple containers",
        _pod({"cpu": "1m", "memory": 1, EXT_A: 3}, {"cpu": "1m", "memory": 1, EXT_A: 3}),
        {EXT_A: 2},
        [f"Insufficient {EXT_A}"],
    ),
    (
        "extended resource allocatable admits multiple init containers",
        _pod(init=({"cpu": "1m", "memory": 1, EXT_A: 3}, {"cpu": "1m", "memory": 1, EXT_A: 3})),
        {EXT_A: 2},
        [],
    ),
    (
        "extended resource allocatable enforced for multiple init containers",
        _pod(init=({"cpu": "1m", "memory": 1, EXT_A: 6}, {"cpu": "1m", "memory": 1, EXT_A: 3})),
        {EXT_A: 2},
        [f"Insufficient {EXT_A}"],
    ),
    (
        "extended resource allocatable enforced for unknown resource",
        _pod({"cpu": "1m", "memory": 1, EXT_B: 1}),
        {},
        [f"Insufficient {EXT_B}"],
    ),
    (
        "extended resource allocatable enforced for unknown resource for init container",
        _pod(init=({"cpu": "1m", "memory": 1, EXT_B: 1},)),
        {},
        [f"Insufficient {EXT_B}"],
    ),
    (
        "kubernetes.io resource capacity enforced",
        _pod({"cpu": "1m", "memory": 1, K8S_IO_A: 10}),
        {},
        [f"Insufficient {K8S_IO_A}"],
    ),
    (
        "kubernetes.io resource capacity enforced for init container",
        _pod(init=({"cpu": "1m", "memory": 1, K8S_IO_B: 10},)),
        {},
        [f"Insufficient {K8S_IO_B}"],
    ),
    (
        "hugepages resource capacity enforced",
        _pod({"cpu": "1m", "memory": 1, HUGE_A: 10}),
        {HUGE_A: 0},
        [f"Insufficient {HUGE_A}"],
    ),
    (
        "hugepages resource capacity enforced for init container",
        _pod(init=({"cpu": "1m", "memory": 1, HUGE_A: 10},)),
        {HUGE_A: 0},
        [f"Insufficient {HUGE_A}"],
    ),
    (
        "hugepages resource allocatable enforced for multiple containers",
        _pod({"cpu": "1m", "memory": 1, HUGE_A: 3}, {"cpu": "1m", "memory": 1, HUGE_A: 3}),
        {HUGE_A: 2},
        [f"Insufficient {HUGE_A}"],
    ),
    (
        "resources + pod overhead fits",
        _pod({"cpu": "1m", "memory": 1}).overhead(cpu="3m", memory=13),
        {"cpu": "5m", "memory": 5},
        [],
    ),
    (
        "requests + overhead does not fit for memory",
        _pod({"cpu": "1m", "memory": 1}).overhead(cpu="1m", memory=15),
        {"cpu": "5m", "memory": 5},
        [MEM],
    ),
    (
        "storage ephemeral local storage request exceeds allocatable",
        _pod({"ephemeral-storage": 25}),
        {"cpu": "2m", "memory": 2},
        ["Insufficient ephemeral-storage"],
    ),
    ("storage pod fits", _pod({"ephemeral-storage": 10}), {"cpu": "2m", "memory": 2}, []),
]


@pytest.mark.parametrize(
    ("pod", "existing", "reasons"),
    [pytest.param(p, e, r, id=name) for name, p, e, r in ENOUGH_REQUESTS],
)
def test_enough_requests(pod: PodBuilder, existing: dict[str, Any], reasons: list[str]) -> None:
    handle = make_handle([NODE], [make_pod("existing").node("n").req(existing)])
    report = run_filter(_fit(handle), pod, handle)
    assert report.pre_filter.ok
    assert list(report.reasons["n"]) == reasons


@pytest.mark.parametrize(
    ("args", "fits"),
    [
        ({}, False),
        ({"ignoredResources": [EXT_B]}, True),
        ({"ignoredResourceGroups": ["example.com"]}, True),
        ({"ignoredResourceGroups": ["example"]}, False),  # groups match the whole prefix
        ({"ignoredResources": [EXT_A]}, False),
    ],
)
def test_ignored_resources_and_groups(args: dict[str, Any], fits: bool) -> None:
    handle = make_handle([NODE])
    report = run_filter(_fit(handle, **args), _pod({"cpu": "1m", "memory": 1, EXT_B: 1}), handle)
    assert report.passed == (["n"] if fits else [])


def test_ignored_groups_never_skip_native_resources() -> None:
    handle = make_handle([NODE])
    fit = _fit(handle, ignoredResources=["cpu"], ignoredResourceGroups=["hugepages-2Mi"])
    report = run_filter(fit, _pod({"cpu": "20m", HUGE_A: 10}), handle)
    assert report.reasons["n"] == (CPU, f"Insufficient {HUGE_A}")


# TestNotEnoughRequests: the node allows a single pod and already runs one.
@pytest.mark.parametrize(
    ("pod", "existing", "reasons"),
    [
        pytest.param(_pod(), {"cpu": "10m", "memory": 20}, ["Too many pods"], id="no-requests"),
        pytest.param(
            _pod({"cpu": "1m", "memory": 1}),
            {"cpu": "5m", "memory": 5},
            ["Too many pods"],
            id="resources-fit",
        ),
        pytest.param(
            _pod({"cpu": "5m", "memory": 1}),
            {"cpu": "5m", "memory": 19},
            ["Too many pods"],
            id="equal-edge",
        ),
        pytest.param(
            _pod({"cpu": "5m", "memory": 1}, init=({"cpu": "5m", "memory": 1},)),
            {"cpu": "5m", "memory": 19},
            ["Too many pods"],
            id="equal-edge-init",
        ),
        pytest.param(
            _pod({"cpu": "1m", "memory": 1}),
            {"cpu": "10m", "memory": 20},
            # kube reports the pod count first, then cpu, memory, ...
            ["Too many pods", CPU, MEM],
            id="everything-short",
        ),
    ],
)
def test_not_enough_pods(pod: PodBuilder, existing: dict[str, Any], reasons: list[str]) -> None:
    node = make_node("n").capacity({"cpu": "10m", "memory": 20, "pods": 1})
    handle = make_handle([node], [make_pod("existing").node("n").req(existing)])
    assert list(run_filter(_fit(handle), pod, handle).reasons["n"]) == reasons


def test_filter_is_vectorised_over_many_nodes() -> None:
    nodes = [make_node(f"n{i}").capacity(cpu=str(i), memory="1Gi") for i in range(6)]
    handle = make_handle(nodes, [make_pod("e").node("n5").req(cpu="3")])
    report = run_filter(_fit(handle), make_pod("p").req(cpu="2500m"), handle)
    assert report.passed == ["n3", "n4"]
    assert report.failed == {n: (CPU,) for n in ("n0", "n1", "n2", "n5")}


# ---- scoring ---------------------------------------------------------------------------

EXT = "abc.com/xyz"  # kube's extendedRes
DEFAULT = [{"name": "cpu", "weight": 1}, {"name": "memory", "weight": 1}]
EXT_SET = [*DEFAULT, {"name": EXT, "weight": 1}]


def _node(name: str, cpu: str, mem: str | int, **extended: int) -> Any:
    return make_node(name).capacity({"cpu": cpu, "memory": mem, **extended})


def _cap(name: str, cpu: str, memory: str, ext: dict[str, int] | None = None) -> Any:
    return make_node(name).capacity({"cpu": cpu, "memory": memory, **(ext or {})})


def _req2() -> PodBuilder:
    return make_pod("p").req(cpu="1000", memory="2000").req(cpu="2000", memory="3000")


def _at(node: str, **req: Any) -> PodBuilder:
    return make_pod(f"e-{node}-{len(req)}-{id(req)}").node(node).req(req)


def _existing(node: str, i: int, req: dict[str, Any] | None = None) -> PodBuilder:
    pod = make_pod(f"{node}-{i}").node(node)
    return pod.req(req) if req is not None else pod


LEAST_ALLOCATED = [
    (
        "nothing scheduled, nothing requested",
        make_pod("p"),
        [_cap("node1", "4000", "10000"), _cap("node2", "4000", "10000")],
        [],
        DEFAULT,
        {"node1": 100, "node2": 100},
    ),
    (
        "nothing scheduled, resources requested, differently sized nodes",
        _req2(),
        [_cap("node1", "4000", "10000"), _cap("node2", "6000", "10000")],
        [],
        DEFAULT,
        {"node1": 37, "node2": 50},
    ),
    (
        "no resources requested, pods scheduled",
        make_pod("p"),
        [_cap("node1", "4000", "10000"), _cap("node2", "4000", "10000")],
        [
            _existing("node1", 0),
            _existing("node1", 1),
            _existing("node2", 0),
            _existing("node2", 1),
        ],
        DEFAULT,
        {"node1": 100, "node2": 100},
    ),
    (
        "no resources requested, pods scheduled with resources",
        make_pod("p"),
        [_cap("node1", "10000", "20000"), _cap("node2", "10000", "20000")],
        [
            _existing("node1", 0, {"cpu": "3000", "memory": "0"}),
            _existing("node1", 1, {"cpu": "3000", "memory": "0"}),
            _existing("node2", 0, {"cpu": "3000", "memory": "0"}),
            _existing("node2", 1, {"cpu": "3000", "memory": "5000"}),
        ],
        DEFAULT,
        {"node1": 70, "node2": 57},
    ),
    (
        "resources requested, pods scheduled with resources",
        _req2(),
        [_cap("node1", "10000", "20000"), _cap("node2", "10000", "20000")],
        [
            _existing("node1", 0, {"cpu": "3000", "memory": "0"}),
            _existing("node2", 0, {"cpu": "3000", "memory": "5000"}),
        ],
        DEFAULT,
        {"node1": 57, "node2": 45},
    ),
    (
        "resources requested, pods scheduled with resources, differently sized nodes",
        _req2(),
        [_cap("node1", "10000", "20000"), _cap("node2", "10000", "50000")],
        [
            _existing("node1", 0, {"cpu": "3000", "memory": "0"}),
            _existing("node2", 0, {"cpu": "3000", "memory": "5000"}),
        ],
        DEFAULT,
        {"node1": 57, "node2": 60},
    ),
    (
        "requested resources exceed node capacity",
        make_pod("p").req(cpu="3000", memory="0"),
        [_cap("node1", "4000", "10000"), _cap("node2", "4000", "10000")],
        [
            _existing("node1", 0, {"cpu": "3000", "memory": "0"}),
            _existing("node2", 0, {"cpu": "3000", "memory": "5000"}),
        ],
        DEFAULT,
        {"node1": 50, "node2": 25},
    ),
    (
        "zero node resources, pods scheduled with resources",
        make_pod("p"),
        [make_node("node1").capacity(pods=110), make_node("node2").capacity(pods=110)],
        [
            _existing("node1", 0, {"cpu": "3000", "memory": "0"}),
            _existing("node2", 0, {"cpu": "3000", "memory": "5000"}),
        ],
        DEFAULT,
        {"node1": 0, "node2": 0},
    ),
    (
        "different weight on CPU and memory",
        _req2(),
        [_cap("node1", "4000", "10000"), _cap("node2", "6000", "10000")],
        [],
        [{"name": "memory", "weight": 2}, {"name": "cpu", "weight": 1}],
        {"node1": 41, "node2": 50},
    ),
    (
        "bypass extended resource if the pod does not request",
        _req2(),
        [_cap("node1", "6000", "10000"), _cap("node2", "6000", "10000", {EXT: 4})],
        [],
        EXT_SET,
        {"node1": 50, "node2": 50},
    ),
    (
        "honor extended resource if the pod requests",
        make_pod("p").req({"cpu": "3000", "memory": "5000", EXT: 2}),
        [_cap("node1", "6000", "10000", {EXT: 4}), _cap("node2", "6000", "10000", {EXT: 10})],
        [],
        EXT_SET,
        {"node1": 50, "node2": 60},
    ),
    (
        "if the node doesn't have a resource",
        make_pod("p").req(cpu="3000", memory="4000"),
        [_cap("node1", "6000", "10000"), _cap("node2", "6000", "10000", {EXT: 4})],
        [],
        [{"name": EXT, "weight": 2}, {"name": "cpu", "weight": 1}, {"name": "memory", "weight": 1}],
        {"node1": 55, "node2": 55},
    ),
]

MOST_ALLOCATED = [
    (
        "nothing scheduled, nothing requested",
        make_pod("p"),
        [_cap("node1", "4000", "10000"), _cap("node2", "4000", "10000")],
        [],
        DEFAULT,
        {"node1": 0, "node2": 0},
    ),
    (
        "nothing scheduled, resources requested, differently sized nodes",
        _req2(),
        [_cap("node1", "4000", "10000"), _cap("node2", "6000", "10000")],
        [],
        DEFAULT,
        {"node1": 62, "node2": 50},
    ),
    (
        "no resources requested, pods scheduled with resources",
        make_pod("p"),
        [_cap("node1", "10000", "20000"), _cap("node2", "10000", "20000")],
        [
            _existing("node1", 0, {"cpu": "3000", "memory": "0"}),
            _existing("node1", 1, {"cpu": "3000", "memory": "0"}),
            _existing("node2", 0, {"cpu": "3000", "memory": "0"}),
            _existing("node2", 1, {"cpu": "3000", "memory": "5000"}),
        ],
        DEFAULT,
        {"node1": 30, "node2": 42},
    ),
    (
        "resources requested, pods scheduled with resources",
        _req2(),
        [_cap("node1", "10000", "20000"), _cap("node2", "10000", "20000")],
        [
            _existing("node1", 0, {"cpu": "3000", "memory": "0"}),
            _existing("node2", 0, {"cpu": "3000", "memory": "5000"}),
        ],
        DEFAULT,
        {"node1": 42, "node2": 55},
    ),
    (
        "resources requested equal node capacity",
        make_pod("p").req(cpu="2000", memory="4000").req(cpu="3000", memory="5000"),
        [_cap("node1", "5000", "10000"), _cap("node2", "10000", "9000")],
        [],
        DEFAULT,
        {"node1": 95, "node2": 75},
    ),
    (
        "different weight on CPU and memory",
        _req2(),
        [_cap("node1", "4000", "10000"), _cap("node2", "6000", "10000")],
        [],
        [{"name": "memory", "weight": 2}, {"name": "cpu", "weight": 1}],
        {"node1": 58, "node2": 50},
    ),
    (
        "no resources requested, pods scheduled, nonzero request for resource",
        make_pod("p").container(),
        [_cap("node1", "250m", "1000Mi"), _cap("node2", "250m", "1000Mi")],
        [_existing("node1", 0).container(), _existing("node1", 1).container()],
        DEFAULT,
        {"node1": 80, "node2": 30},
    ),
    (
        "bypass extended resource if the pod does not request",
        _req2(),
        [_cap("node1", "6000", "10000"), _cap("node2", "6000", "10000", {EXT: 4})],
        [],
        EXT_SET,
        {"node1": 50, "node2": 50},
    ),
    (
        "honor extended resource if the pod request",
        make_pod("p").req({"cpu": "3000", "memory": "5000", EXT: 2}),
        [_cap("node1", "6000", "10000", {EXT: 4}), _cap("node2", "6000", "10000", {EXT: 10})],
        [],
        EXT_SET,
        {"node1": 50, "node2": 40},
    ),
    (
        "if the node doesn't have a resource",
        make_pod("p").req(cpu="3000", memory="4000"),
        [_cap("node1", "6000", "10000"), _cap("node2", "6000", "10000", {EXT: 4})],
        [],
        [{"name": EXT, "weight": 2}, {"name": "cpu", "weight": 1}, {"name": "memory", "weight": 1}],
        {"node1": 45, "node2": 45},
    ),
]


@pytest.mark.parametrize(
    ("strategy", "pod", "nodes", "existing", "resources", "expected"),
    [pytest.param("LeastAllocated", *case[1:], id=f"least: {case[0]}") for case in LEAST_ALLOCATED]
    + [pytest.param("MostAllocated", *case[1:], id=f"most: {case[0]}") for case in MOST_ALLOCATED],
)
def test_allocated_scores(
    strategy: str,
    pod: PodBuilder,
    nodes: list[Any],
    existing: list[PodBuilder],
    resources: list[dict[str, Any]],
    expected: dict[str, int],
) -> None:
    handle = make_handle(nodes, existing)
    fit = _fit(handle, scoringStrategy={"type": strategy, "resources": resources})
    assert run_score(fit, pod, handle) == expected


@pytest.mark.parametrize(
    ("resources", "field"),
    [
        ([{"name": "memory", "weight": -1}, {"name": "cpu", "weight": 1}], 0),
        ([{"name": "memory", "weight": 1}, {"name": "cpu", "weight": 0}], 1),
        ([{"name": "memory", "weight": 1}, {"name": "cpu", "weight": 101}], 1),
    ],
)
def test_resource_weights_are_validated(resources: list[dict[str, Any]], field: int) -> None:
    with pytest.raises(ValueError) as err:
        NodeResourcesFitArgs.model_validate(
            {"scoringStrategy": {"type": "LeastAllocated", "resources": resources}}
        )
    assert f"scoringStrategy.resources.{field}.weight" in str(err.value)


SHAPE_DOWN = [{"utilization": 0, "score": 10}, {"utilization": 100, "score": 0}]
SHAPE_UP = [{"utilization": 0, "score": 0}, {"utilization": 100, "score": 1}]
FOO, BAR = "intel.com/foo", "intel.com/bar"


def _rtcr(
    handle: Any, shape: list[dict[str, int]], resources: list[dict[str, Any]]
) -> NodeResourcesFit:
    return _fit(
        handle,
        scoringStrategy={
            "type": "RequestedToCapacityRatio",
            "resources": resources,
            "requestedToCapacityRatio": {"shape": shape},
        },
    )


def _bin_node(name: str, ext: dict[str, int]) -> Any:
    return make_node(name).capacity({"cpu": "4", "memory": 10000 * 2**20, **ext})


RTCR = [
    # TestRequestedToCapacityRatioScoringStrategy
    (
        "nothing scheduled, nothing requested",
        SHAPE_DOWN,
        DEFAULT,
        make_pod("p"),
        [_cap("node1", "4000", "10000"), _cap("node2", "4000", "10000")],
        [_existing("node1", 0), _existing("node1", 1)],
        {"node1": 100, "node2": 100},
    ),
    (
        "nothing scheduled, resources requested, differently sized nodes",
        SHAPE_DOWN,
        DEFAULT,
        _req2(),
        [_cap("node1", "4000", "10000"), _cap("node2", "6000", "10000")],
        [_existing("node1", 0), _existing("node1", 1)],
        {"node1": 38, "node2": 50},
    ),
    (
        "no resources requested, pods scheduled with resources",
        SHAPE_DOWN,
        DEFAULT,
        make_pod("p"),
        [_cap("node1", "4000", "10000"), _cap("node2", "6000", "10000")],
        [
            _existing("node1", 0, {"cpu": "3000", "memory": "5000"}),
            _existing("node2", 0, {"cpu": "3000", "memory": "5000"}),
        ],
        {"node1": 38, "node2": 50},
    ),
    # TestResourceBinPackingSingleExtended
    (
        "single extended: nothing requested",
        SHAPE_UP,
        [{"name": FOO, "weight": 1}],
        make_pod("p"),
        [_bin_node("node1", {FOO: 8}), _bin_node("node2", {FOO: 4})],
        [],
        {"node1": 0, "node2": 0},
    ),
    (
        "single extended: requested, less resources",
        SHAPE_UP,
        [{"name": FOO, "weight": 1}],
        make_pod("p").req({FOO: 2}),
        [_bin_node("node1", {FOO: 8}), _bin_node("node2", {FOO: 4})],
        [],
        {"node1": 2, "node2": 5},
    ),
    (
        "single extended: existing pod on node2",
        SHAPE_UP,
        [{"name": FOO, "weight": 1}],
        make_pod("p").req({FOO: 2}),
        [_bin_node("node1", {FOO: 8}), _bin_node("node2", {FOO: 4})],
        [_existing("node2", 0, {FOO: 2})],
        {"node1": 2, "node2": 10},
    ),
    (
        "single extended: more resources",
        SHAPE_UP,
        [{"name": FOO, "weight": 1}],
        make_pod("p").req({FOO: 4}),
        [_bin_node("node1", {FOO: 8}), _bin_node("node2", {FOO: 4})],
        [],
        {"node1": 5, "node2": 10},
    ),
    # TestResourceBinPackingMultipleExtended
    (
        "multiple extended: nothing requested",
        SHAPE_UP,
        [{"name": FOO, "weight": 3}, {"name": BAR, "weight": 5}],
        make_pod("p"),
        [_bin_node("node1", {FOO: 8, BAR: 4}), _bin_node("node2", {FOO: 4, BAR: 8})],
        [],
        {"node1": 0, "node2": 0},
    ),
    (
        "multiple extended: less resources",
        SHAPE_UP,
        [{"name": FOO, "weight": 3}, {"name": BAR, "weight": 5}],
        make_pod("p").req({FOO: 2, BAR: 2}),
        [_bin_node("node1", {FOO: 8, BAR: 4}), _bin_node("node2", {FOO: 4, BAR: 8})],
        [],
        {"node1": 4, "node2": 3},
    ),
    (
        "multiple extended: existing pod on node2",
        SHAPE_UP,
        [{"name": FOO, "weight": 3}, {"name": BAR, "weight": 5}],
        make_pod("p").req({FOO: 2, BAR: 2}),
        [_bin_node("node1", {FOO: 8, BAR: 4}), _bin_node("node2", {FOO: 4, BAR: 8})],
        [_existing("node2", 0, {FOO: 4, BAR: 2})],
        {"node1": 4, "node2": 7},
    ),
    (
        "multiple extended: more resources",
        SHAPE_UP,
        [{"name": FOO, "weight": 3}, {"name": BAR, "weight": 5}],
        make_pod("p").req({FOO: 4, BAR: 2}),
        [_bin_node("node1", {FOO: 8, BAR: 4}), _bin_node("node2", {FOO: 4, BAR: 8})],
        [],
        {"node1": 5, "node2": 5},
    ),
    # kube's scorer: a resource whose score is 0 is left out of the weighted average
    # (`if resourceScore > 0`), so a full cpu does not halve the memory score.
    (
        "zero-score resources do not dilute the average",
        SHAPE_DOWN,
        DEFAULT,
        make_pod("p").req(cpu="4000", memory="5000"),
        [_cap("node1", "4000", "10000"), _cap("node2", "8000", "10000")],
        [],
        {"node1": 50, "node2": 50},
    ),
    # math.Round rounds half away from zero: (2 + 3) / 2 = 2.5 -> 3 (not banker's 2).
    (
        "average rounds half away from zero",
        SHAPE_UP,
        [{"name": FOO, "weight": 1}, {"name": BAR, "weight": 1}],
        make_pod("p").req({FOO: 2, BAR: 3}),
        [_bin_node("node1", {FOO: 8, BAR: 10})],
        [],
        {"node1": 3},
    ),
]


@pytest.mark.parametrize(
    ("shape", "resources", "pod", "nodes", "existing", "expected"),
    [pytest.param(*case[1:], id=case[0]) for case in RTCR],
)
def test_requested_to_capacity_ratio_scores(
    shape: list[dict[str, int]],
    resources: list[dict[str, Any]],
    pod: PodBuilder,
    nodes: list[Any],
    existing: list[PodBuilder],
    expected: dict[str, int],
) -> None:
    handle = make_handle(nodes, existing)
    assert run_score(_rtcr(handle, shape, resources), pod, handle) == expected


@pytest.mark.parametrize(
    ("points", "assertions"),
    [
        (
            [(10, 1), (90, 9)],
            [
                (-10, 1),
                (0, 1),
                (9, 1),
                (10, 1),
                (15, 1),
                (19, 1),
                (20, 2),
                (89, 8),
                (90, 9),
                (99, 9),
                (100, 9),
                (110, 9),
            ],
        ),
        (
            [(0, 2), (40, 10), (100, 0)],
            [(-10, 2), (0, 2), (20, 6), (30, 8), (40, 10), (70, 5), (100, 0), (110, 0)],
        ),
        (
            [(0, 2), (40, 2), (100, 2)],
            [(-10, 2), (0, 2), (20, 2), (30, 2), (40, 2), (70, 2), (100, 2), (110, 2)],
        ),
    ],
)
def test_broken_linear_function(
    points: list[tuple[int, int]], assertions: list[tuple[int, int]]
) -> None:
    fn = broken_linear(points)
    xs = np.array([p for p, _ in assertions], dtype=np.int64)
    assert fn(xs).tolist() == [e for _, e in assertions]


def test_rtcr_needs_a_shape() -> None:
    with pytest.raises(ValueError, match=r"requestedToCapacityRatio\.shape is required"):
        NodeResourcesFitArgs.model_validate(
            {"scoringStrategy": {"type": "RequestedToCapacityRatio"}}
        )


# ---- the vectorised scorers against kube's per-node arithmetic ------------------------

_amounts = st.lists(
    st.tuples(st.integers(0, 10**12), st.integers(0, 10**12)), min_size=1, max_size=40
)


@settings(max_examples=200, deadline=None)
@given(_amounts)
def test_least_and_most_allocated_match_kubes_formulas(pairs: list[tuple[int, int]]) -> None:
    alloc = np.array([a for a, _ in pairs], dtype=np.int64)
    req = np.array([r for _, r in pairs], dtype=np.int64)
    # kube's leastRequestedScore / mostRequestedScore, one node at a time (Go integer
    # division of non-negative numbers).
    least = [0 if a == 0 or r > a else (a - r) * 100 // a for a, r in pairs]
    most = [0 if a == 0 else min(r, a) * 100 // a for a, r in pairs]
    assert least_allocated(alloc, req).tolist() == least
    assert most_allocated(alloc, req).tolist() == most


def test_a_request_beyond_the_nodes_allocatable_is_unresolvable() -> None:
    """kube's InsufficientResource.Unresolvable: asking more of a resource than the node
    has at all cannot be fixed by evicting anything, so preemption leaves such a node
    alone; short of what is free only, or short of pod slots, stays resolvable."""
    from shoal.framework.status import Code

    node = make_node("n").capacity({"cpu": "10m", "memory": 20, "pods": 1})
    handle = make_handle([node], [make_pod("existing").node("n").req({"cpu": "5m", "memory": 5})])
    beyond = run_filter(_fit(handle), _pod({"cpu": "11m", "memory": 1}), handle)
    assert beyond.reasons["n"] == ("Too many pods", CPU)
    assert beyond.codes["n"] == Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    short = run_filter(_fit(handle), _pod({"cpu": "6m", "memory": 1}), handle)
    assert short.reasons["n"] == ("Too many pods", CPU)
    assert short.codes["n"] == Code.UNSCHEDULABLE
