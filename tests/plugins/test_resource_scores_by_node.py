"""NodeResourcesFit and BalancedAllocation score every candidate in one array operation
per step (resources x candidates); these properties hold them to kube-scheduler's
scorers written one node and one resource at a time (`leastResourceScorer`,
`mostResourceScorer`, `balancedResourceScorer` over `resourceAllocationScorer`'s
allocatable/requested), on random clusters with zero allocatable, extended resources
and weights."""

from __future__ import annotations

import math
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from shoal.plugins.args import NodeResourcesBalancedAllocationArgs, NodeResourcesFitArgs
from shoal.plugins.balanced_allocation import BalancedAllocation
from shoal.plugins.node_resources_fit import NodeResourcesFit
from shoal.testing import make_handle, make_node, make_pod, run_score

EXT = "example.com/dev"
RESOURCES = ("cpu", "memory", EXT)

_amount = st.integers(0, 64_000)
_node = st.tuples(_amount, _amount, st.integers(0, 8))  # cpu m, memory, EXT (0: none)
_placed = st.tuples(st.integers(0, 5), st.integers(1, 4000), st.integers(1, 4000))


def _cluster(
    nodes: list[tuple[int, int, int]], placed: list[tuple[int, int, int]]
) -> tuple[Any, dict[str, dict[str, int]], dict[str, dict[str, int]]]:
    """A handle, and per node its allocatable and requested (cpu in millis)."""
    builders, alloc, used = [], {}, {}
    for i, (cpu, mem, dev) in enumerate(nodes):
        name = f"n{i}"
        capacity: dict[str, Any] = {"cpu": f"{cpu}m", "memory": mem, "pods": 110}
        if dev:
            capacity[EXT] = dev
        builders.append(make_node(name).capacity(capacity))
        alloc[name] = {"cpu": cpu, "memory": mem, EXT: dev}
        used[name] = {"cpu": 0, "memory": 0, EXT: 0}
    pods = []
    for k, (at, cpu, mem) in enumerate(placed):
        name = f"n{at % len(nodes)}"
        pods.append(make_pod(f"placed-{k}").req(cpu=f"{cpu}m", memory=mem).node(name))
        used[name]["cpu"] += cpu
        used[name]["memory"] += mem
    return make_handle(builders, pods), alloc, used


def _columns(
    alloc: dict[str, int], used: dict[str, int], ask: dict[str, int], weights: dict[str, int]
) -> list[tuple[int, int, int]]:
    """kube's resourceAllocationScorer: (allocatable, requested with the pod, weight) of
    each configured resource the node has; an extended resource the pod does not ask
    for counts as allocatable 0."""
    out = []
    for name, weight in weights.items():
        a = alloc[name]
        if name == EXT and not ask.get(EXT):
            a = 0
        if a == 0:
            continue
        out.append((a, used[name] + ask.get(name, 0), weight))
    return out


def _least(columns: list[tuple[int, int, int]]) -> int:
    total = weight_sum = 0
    for a, r, w in columns:
        total += (0 if r > a else (a - r) * 100 // a) * w
        weight_sum += w
    return total // weight_sum if weight_sum else 0


def _most(columns: list[tuple[int, int, int]]) -> int:
    total = weight_sum = 0
    for a, r, w in columns:
        total += min(r, a) * 100 // a * w
        weight_sum += w
    return total // weight_sum if weight_sum else 0


def _balanced(columns: list[tuple[int, int, int]]) -> int:
    fractions = [min(r / a, 1.0) for a, r, _ in columns]
    std = 0.0
    if len(fractions) == 2:
        std = abs((fractions[0] - fractions[1]) / 2)
    elif len(fractions) > 2:
        mean = sum(fractions) / len(fractions)
        std = math.sqrt(sum((f - mean) ** 2 for f in fractions) / len(fractions))
    return int((1 - std) * 100)


@settings(max_examples=60, deadline=None)
@given(
    nodes=st.lists(_node, min_size=1, max_size=12),
    placed=st.lists(_placed, max_size=12),
    ask=st.tuples(st.integers(1, 8000), st.integers(1, 8000), st.integers(0, 3)),
    strategy=st.sampled_from(["LeastAllocated", "MostAllocated"]),
    weights=st.tuples(st.integers(1, 5), st.integers(1, 5), st.integers(1, 5)),
)
def test_allocated_scores_equal_kubes_per_node_scorer(
    nodes: list[tuple[int, int, int]],
    placed: list[tuple[int, int, int]],
    ask: tuple[int, int, int],
    strategy: str,
    weights: tuple[int, int, int],
) -> None:
    handle, alloc, used = _cluster(nodes, placed)
    request = {"cpu": ask[0], "memory": ask[1], EXT: ask[2]}
    asked: dict[str, Any] = {"cpu": f"{ask[0]}m", "memory": ask[1]}
    if ask[2]:
        asked[EXT] = ask[2]
    pod = make_pod("p").req(asked)  # one container: no non-zero defaults apply
    by_name = dict(zip(RESOURCES, weights, strict=True))
    args = NodeResourcesFitArgs.model_validate(
        {
            "scoringStrategy": {
                "type": strategy,
                "resources": [{"name": r, "weight": w} for r, w in by_name.items()],
            }
        }
    )
    scorer = _least if strategy == "LeastAllocated" else _most
    expected = {name: scorer(_columns(alloc[name], used[name], request, by_name)) for name in alloc}
    assert run_score(NodeResourcesFit.new(args, handle), pod, handle) == expected


@settings(max_examples=60, deadline=None)
@given(
    nodes=st.lists(_node, min_size=1, max_size=12),
    placed=st.lists(_placed, max_size=12),
    ask=st.tuples(st.integers(1, 8000), st.integers(1, 8000), st.integers(0, 3)),
    with_ext=st.booleans(),
)
def test_balanced_scores_equal_kubes_per_node_scorer(
    nodes: list[tuple[int, int, int]],
    placed: list[tuple[int, int, int]],
    ask: tuple[int, int, int],
    with_ext: bool,
) -> None:
    handle, alloc, used = _cluster(nodes, placed)
    request = {"cpu": ask[0], "memory": ask[1], EXT: ask[2]}
    asked: dict[str, Any] = {"cpu": f"{ask[0]}m", "memory": ask[1]}
    if ask[2]:
        asked[EXT] = ask[2]
    pod = make_pod("p").req(asked)  # one container: no non-zero defaults apply
    names = RESOURCES if with_ext else RESOURCES[:2]
    args = NodeResourcesBalancedAllocationArgs.model_validate(
        {"resources": [{"name": r, "weight": 1} for r in names]}
    )
    weights = dict.fromkeys(names, 1)
    expected = {
        name: _balanced(_columns(alloc[name], used[name], request, weights)) for name in alloc
    }
    assert run_score(BalancedAllocation.new(args, handle), pod, handle) == expected
