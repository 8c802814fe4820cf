"""The victim search given a test of which pods may be taken (DefaultPreemption's way)
finds what it finds with the pool listed up front, but reads only the pods of the nodes
it visits: at most the candidate count of nodes, not every pod in the cluster."""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from shoal.api.podinfo import PodInfo
from shoal.cache.cluster import PodRecord
from shoal.framework.status import Code, Status
from shoal.preemption.evaluator import VictimSearch
from shoal.testing import SchedulerHarness, make_node, make_pod

NODES = 60


class AllResolvable:
    """Every node failed with a status preemption may resolve."""

    def status_of(self, node: str) -> Status:
        return Status(Code.UNSCHEDULABLE, "Insufficient cpu")

    def unresolvable(self) -> NDArray[np.bool_]:
        return np.zeros(NODES, dtype=bool)

    def resolvable(self, rows: NDArray[np.intp]) -> NDArray[np.bool_]:
        return np.ones(rows.size, dtype=bool)

    @property
    def pre_filter_resolvable(self) -> bool:
        return False


def full_cluster() -> tuple[SchedulerHarness, PodInfo]:
    h = SchedulerHarness(seed=3)
    h.add_nodes(*(make_node(f"n{i:02d}").capacity(cpu="4", memory="8Gi") for i in range(NODES)))
    h.add_pods(
        *(
            make_pod(f"low-{i:02d}-{k}").req(cpu="1").priority(k).node(f"n{i:02d}")
            for i in range(NODES)
            for k in range(4)
        )
    )
    h.run()
    (high,) = h.add_pods(make_pod("high").req(cpu="2").priority(10))
    return h, high


def test_a_pool_test_finds_the_same_victims_and_reads_only_the_visited_nodes() -> None:
    h, high = full_cluster()
    cluster = h.scheduler.handle.cluster
    listed = [r for r in cluster.placed.values() if r.pod.priority < high.priority]
    asked: list[str] = []

    def takeable(record: PodRecord) -> bool:
        asked.append(record.pod.uid)
        return record.pod.priority < high.priority

    h.scheduler.handle.rng = np.random.default_rng(7)
    from_list = VictimSearch(h.scheduler.handle).best(
        high, AllResolvable(), listed, max_candidates=10
    )
    h.scheduler.handle.rng = np.random.default_rng(7)
    from_test = VictimSearch(h.scheduler.handle).best(
        high, AllResolvable(), takeable, max_candidates=10
    )
    assert from_list is not None and from_test is not None
    assert from_test.node == from_list.node
    assert sorted(v.key for v in from_test.victims) == sorted(v.key for v in from_list.victims)
    # The two lowest-priority pods of a node make room for 2 cpu.
    assert sorted(v.priority for v in from_test.victims) == [0, 1]
    # Ten candidate nodes of four pods each were looked at, not all 240 pods.
    assert len(set(asked)) == 40
