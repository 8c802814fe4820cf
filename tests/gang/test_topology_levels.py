"""Several topology levels (block > spine > leaf): `shoal.dev/topology-preferred` lists
preferred levels lowest first; a gang goes into one domain of the lowest level that can
hold it, so the highest tier it spans is as low as it can be, under an optional required
level; a preference never blocks."""

from __future__ import annotations

import pytest

from shoal.testing import SchedulerHarness, make_node, make_pod
from shoal.testing.builders import PodBuilder

LIGHT_NAME = "pod-group.scheduling.sigs.k8s.io/name"
LIGHT_MIN = "pod-group.scheduling.sigs.k8s.io/min-available"
PREFERRED = "shoal.dev/topology-preferred"
REQUIRED = "shoal.dev/topology-required"


def fabric(seed: int) -> SchedulerHarness:
    """2 blocks x 2 spines x 2 leaves x 2 nodes of 2 cpu (2 members each)."""
    h = SchedulerHarness(seed=seed)
    for b in range(2):
        for s in range(2):
            for leaf in range(2):
                for n in range(2):
                    name = f"b{b}s{s}l{leaf}n{n}"
                    h.add_nodes(
                        make_node(name)
                        .capacity(cpu="2", memory="8Gi")
                        .labels(block=f"b{b}", spine=f"b{b}s{s}", leaf=f"b{b}s{s}l{leaf}")
                    )
    return h


def members(name: str, size: int, **annotations: str) -> list[PodBuilder]:
    return [
        make_pod(f"{name}-{i}")
        .labels({LIGHT_NAME: name, LIGHT_MIN: str(size)})
        .annotations(annotations)
        .req(cpu="1")
        for i in range(size)
    ]


def domains(h: SchedulerHarness, prefix: str) -> tuple[set[str], set[str], set[str]]:
    """(blocks, spines, leaves) the gang's bound members sit in."""
    nodes = [
        n for k, n in h.result().placements.items() if k.startswith(f"default/{prefix}-") and n
    ]
    return {n[:2] for n in nodes}, {n[:4] for n in nodes}, {n[:6] for n in nodes}


@pytest.mark.parametrize("seed", range(6))
def test_each_gang_spans_the_lowest_tier_that_can_hold_it(seed: int) -> None:
    h = fabric(seed)
    levels = "leaf,spine,block"
    h.add_pods(*members("small", 4, **{PREFERRED: levels}))  # one leaf holds 4
    h.run()
    blocks, spines, leaves = domains(h, "small")
    assert len(leaves) == 1
    h.add_pods(*members("mid", 8, **{PREFERRED: levels}))  # a spine holds 8, a leaf 4
    h.run()
    blocks, spines, leaves = domains(h, "mid")
    assert len(spines) == 1 and len(leaves) == 2
    # Block b0 has 4 left after those two; only the other block holds 12.
    h.add_pods(*members("big", 12, **{PREFERRED: levels}))
    h.run()
    blocks, spines, leaves = domains(h, "big")
    assert len(blocks) == 1 and len(spines) <= 2


@pytest.mark.parametrize("seed", range(6))
def test_required_spine_and_preferred_leaf_keep_a_gang_in_one_leaf(seed: int) -> None:
    h = fabric(seed)
    h.add_pods(*members("ring", 4, **{REQUIRED: "spine", PREFERRED: "leaf"}))
    h.run()
    _, spines, leaves = domains(h, "ring")
    assert len(spines) == 1 and len(leaves) == 1


def test_a_busy_leaf_moves_the_gang_up_one_tier_not_two() -> None:
    h = fabric(0)
    # One member's worth taken on one node of every leaf: no leaf holds 4 any more.
    h.add_pods(
        *(
            make_pod(f"filler-{b}{s}{leaf}").req(cpu="1").node(f"b{b}s{s}l{leaf}n0")
            for b in range(2)
            for s in range(2)
            for leaf in range(2)
        )
    )
    h.run()
    h.add_pods(*members("g", 4, **{PREFERRED: "leaf,spine,block"}))
    h.run()
    blocks, spines, leaves = domains(h, "g")
    assert len(spines) == 1 and len(blocks) == 1 and len(leaves) == 2


def test_preferred_levels_no_node_carries_never_block() -> None:
    h = fabric(0)
    h.add_pods(*members("g", 4, **{PREFERRED: "rack,row"}))
    h.run()
    assert all(n for k, n in h.result().placements.items() if k.startswith("default/g-"))
