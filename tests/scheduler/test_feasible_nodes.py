"""percentageOfNodesToScore: kube's numFeasibleNodesToFind and the rotation of the start
index (nextStartNodeIndex) over cycles."""

from __future__ import annotations

import pytest

from shoal.scheduler.scheduler import num_feasible_nodes_to_find
from shoal.testing import SchedulerHarness, make_node, make_pod


@pytest.mark.parametrize(
    ("num_nodes", "percentage", "expected"),
    [
        # TestNumFeasibleNodesToFind
        (10, None, 10),  # fewer than 100 nodes: all of them
        (10, 40, 10),
        (99, 1, 99),
        (100, None, 100),  # adaptive: 50 - 100/125 = 50% of 100 -> 50, at least 100
        (1000, None, 420),  # 50 - 8 = 42%
        (1000, 40, 400),
        (5000, None, 500),  # 50 - 40 = 10%
        (6000, None, 300),  # 50 - 48 = 2% -> clamped to 5%
        (6000, 40, 2400),
        (200, 10, 100),  # never below 100
        (200, 0, 100),  # 0 means adaptive: 49% of 200 = 98 -> 100
        (300, 100, 300),
        (1_000_000, None, 50_000),
    ],
)
def test_num_feasible_nodes_to_find(num_nodes: int, percentage: int | None, expected: int) -> None:
    assert num_feasible_nodes_to_find(num_nodes, percentage) == expected


def _cluster(n: int, pct: int | None) -> SchedulerHarness:
    config = {"percentageOfNodesToScore": pct} if pct is not None else {}
    h = SchedulerHarness(config)
    h.add_nodes(*(make_node(f"n{i:03d}").capacity(cpu="4", memory="8Gi") for i in range(n)))
    return h


def _index(node: str | None) -> int:
    assert node is not None
    return int(node[1:])


def test_search_starts_where_the_last_cycle_stopped() -> None:
    h = _cluster(250, 10)  # 10% of 250 = 25 -> at least 100 nodes per cycle
    sched = h.scheduler
    h.add_pods(make_pod("a").req(cpu="1"))
    h.run()
    assert 0 <= _index(h.node_of("a")) < 100
    assert sched.algorithm._next_start_node_index == 100
    h.add_pods(make_pod("b").req(cpu="1"))
    h.run()
    assert 100 <= _index(h.node_of("b")) < 200
    assert sched.algorithm._next_start_node_index == 200
    h.add_pods(make_pod("c").req(cpu="1"))
    h.run()
    # Nodes 200..249 and then 0..49 (wrapping around).
    c = _index(h.node_of("c"))
    assert c >= 200 or c < 50
    assert sched.algorithm._next_start_node_index == 50


def test_only_feasible_nodes_count_towards_the_limit() -> None:
    h = _cluster(250, 10)
    # Nodes 0..149 cannot take the pod: the first 100 feasible nodes are 150..249.
    for i in range(150):
        h.update_node(make_node(f"n{i:03d}").capacity(cpu="1", memory="8Gi"))
    h.add_pods(make_pod("a").req(cpu="2"))
    h.run()
    assert _index(h.node_of("a")) >= 150
    assert h.scheduler.algorithm._next_start_node_index == 0  # all 250 were examined


def test_profile_percentage_overrides_the_global_one() -> None:
    config = {
        "percentageOfNodesToScore": 100,
        "profiles": [{"schedulerName": "default-scheduler", "percentageOfNodesToScore": 10}],
    }
    h = SchedulerHarness(config)
    assert h.scheduler.profiles["default-scheduler"].percentage_of_nodes_to_score == 10
    h2 = SchedulerHarness({"percentageOfNodesToScore": 30})
    assert h2.scheduler.profiles["default-scheduler"].percentage_of_nodes_to_score == 30


def test_all_nodes_are_scored_below_one_hundred() -> None:
    h = _cluster(60, 10)
    h.add_pods(make_pod("a").req(cpu="1"))
    h.run()
    assert h.scheduler.algorithm._next_start_node_index == 0
