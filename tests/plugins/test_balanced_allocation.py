"""NodeResourcesBalancedAllocation scores, ported from kube-scheduler's
noderesources/balanced_allocation_test.go (expected numbers unchanged)."""

from __future__ import annotations

from typing import Any

import pytest

from shoal.plugins.args import NodeResourcesBalancedAllocationArgs
from shoal.plugins.balanced_allocation import BalancedAllocation
from shoal.testing import PodBuilder, make_handle, make_node, make_pod, run_score

GPU = "nvidia.com/gpu"
DEFAULT = [{"name": "cpu", "weight": 1}, {"name": "memory", "weight": 1}]
WITH_GPU = [*DEFAULT, {"name": GPU, "weight": 1}]


def _node(name: str, milli_cpu: int, memory: int, scalar: dict[str, int] | None = None) -> Any:
    return make_node(name).capacity({"cpu": f"{milli_cpu}m", "memory": memory, **(scalar or {})})


def cpu_and_memory(name: str, node: str = "") -> PodBuilder:
    pod = make_pod(name).req(cpu="1000m", memory="2000").req(cpu="2000m", memory="3000")
    return pod.node(node) if node else pod


def cpu_only(name: str, node: str = "") -> PodBuilder:
    pod = make_pod(name).req(cpu="1000m", memory="0").req(cpu="2000m", memory="0")
    return pod.node(node) if node else pod


def cpu_memory_gpu(name: str, node: str = "") -> PodBuilder:
    pod = make_pod(name).req(cpu="1000m", memory="2000").req({GPU: 3}, cpu="2000m", memory="3000")
    return pod.node(node) if node else pod


CASES = [
    (
        "nothing scheduled, resources requested, differently sized nodes",
        cpu_and_memory("p"),
        [_node("node1", 4000, 10000), _node("node2", 6000, 10000)],
        [],
        DEFAULT,
        {"node1": 87, "node2": 100},
    ),
    (
        "resources requested, pods scheduled with resources",
        cpu_and_memory("p"),
        [_node("node1", 10000, 20000), _node("node2", 10000, 20000)],
        [cpu_only("e1", "node1"), cpu_and_memory("e2", "node2")],
        DEFAULT,
        {"node1": 82, "node2": 95},
    ),
    (
        "resources requested, pods scheduled with resources, differently sized nodes",
        cpu_and_memory("p"),
        [_node("node1", 10000, 20000), _node("node2", 10000, 50000)],
        [cpu_only("e1", "node1"), cpu_and_memory("e2", "node2")],
        DEFAULT,
        {"node1": 82, "node2": 80},
    ),
    (
        "requested resources at node capacity",
        cpu_only("p"),
        [_node("node1", 6000, 10000), _node("node2", 6000, 10000)],
        [cpu_only("e1", "node1"), cpu_and_memory("e2", "node2")],
        DEFAULT,
        {"node1": 50, "node2": 75},
    ),
    (
        "include scalar resource on a node for balanced resource allocation",
        make_pod("p").req({GPU: 1}, memory="0"),
        [_node("node1", 3500, 40000, {GPU: 8}), _node("node2", 3500, 40000, {GPU: 8})],
        [cpu_and_memory("e1", "node2"), cpu_memory_gpu("e2", "node1")],
        WITH_GPU,
        {"node1": 70, "node2": 65},
    ),
    (
        "node without the scalar resource should skip the scalar resource",
        cpu_and_memory("p"),
        [_node("node1", 3500, 40000, {GPU: 8}), _node("node2", 3500, 40000)],
        [],
        WITH_GPU,
        {"node1": 63, "node2": 63},
    ),
    (
        "fractions above 1 are capped",
        make_pod("p").req(cpu="8", memory="1000"),
        [_node("node1", 4000, 4000)],
        [],
        DEFAULT,
        {"node1": 62},  # fractions 1.0 and 0.25: 1 - 0.375
    ),
]


@pytest.mark.parametrize(
    ("pod", "nodes", "existing", "resources", "expected"),
    [pytest.param(*case[1:], id=case[0]) for case in CASES],
)
def test_balanced_allocation_scores(
    pod: PodBuilder,
    nodes: list[Any],
    existing: list[PodBuilder],
    resources: list[dict[str, Any]],
    expected: dict[str, int],
) -> None:
    handle = make_handle(nodes, existing)
    args = NodeResourcesBalancedAllocationArgs.model_validate({"resources": resources})
    plugin = BalancedAllocation.new(args, handle)
    assert run_score(plugin, pod, handle) == expected


def test_best_effort_pod_is_skipped_in_pre_score() -> None:
    handle = make_handle([_node("node1", 4000, 10000), _node("node2", 4000, 10000)])
    plugin = BalancedAllocation.new(None, handle)
    assert run_score(plugin, make_pod("p"), handle) is None
    assert run_score(plugin, make_pod("p").container(), handle) is None  # no requests at all


def test_scores_are_exact_on_integer_boundaries() -> None:
    """(1 - |0.6 - 0.5| / 2) * 100 is 95 in kube's float64 arithmetic, not 94."""
    handle = make_handle([_node("node2", 10000, 20000)], [cpu_and_memory("e2", "node2")])
    plugin = BalancedAllocation.new(None, handle)
    assert run_score(plugin, cpu_and_memory("p"), handle) == {"node2": 95}
