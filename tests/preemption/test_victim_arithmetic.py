"""Preemption's victim arithmetic (`VictimSearch._select_by_arithmetic`, used when
NodeResourcesFit is the only filter taking part that reads the pods on a node) chooses
exactly the victims the transaction path chooses (every victim evicted from the cache,
every filter re-run, then reprieved one by one), on random nodes, victims and
nominated pods, and never touches the cache."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shoal.preemption.evaluator import VictimSearch, _Fallback
from shoal.testing import SchedulerHarness, make_node, make_pod

pod_shape = st.tuples(st.integers(1, 8), st.integers(1, 8), st.integers(0, 5))  # cpu, GiB, prio


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    nodes=st.lists(st.lists(pod_shape, min_size=0, max_size=5), min_size=1, max_size=6),
    preemptor=st.tuples(st.integers(1, 12), st.integers(1, 12)),
    nominated=st.lists(st.tuples(st.integers(0, 5), st.integers(1, 4)), max_size=3),
    tainted=st.sets(st.integers(0, 5), max_size=2),
)
def test_arithmetic_and_transaction_choose_the_same_victims(
    nodes: list[list[tuple[int, int, int]]],
    preemptor: tuple[int, int],
    nominated: list[tuple[int, int]],
    tainted: set[int],
) -> None:
    h = SchedulerHarness(seed=1)
    for i in range(len(nodes)):
        node = make_node(f"n{i}").capacity(cpu="16", memory="16Gi")
        if i in tainted:
            node = node.taint("dedicated", "x", "NoSchedule")
        h.add_nodes(node)
    for i, pods in enumerate(nodes):
        h.add_pods(
            *(
                make_pod(f"v{i}-{k}").req(cpu=str(c), memory=f"{g}Gi").priority(p).node(f"n{i}")
                for k, (c, g, p) in enumerate(pods)
            )
        )
    h.run()
    cluster = h.scheduler.handle.cluster
    for j, (at, cpu) in enumerate(nominated):
        if at < len(nodes):
            (waiting,) = h.add_pods(make_pod(f"nom{j}").req(cpu=str(cpu)).priority(9))
            cluster.nominate(waiting, f"n{at}")
    (pod,) = h.add_pods(
        make_pod("high").req(cpu=str(preemptor[0]), memory=f"{preemptor[1]}Gi").priority(6)
    )
    search = VictimSearch(h.scheduler.handle)
    runner = h.scheduler.handle.runner(pod)
    rows = list(range(len(nodes)))
    units_of = {
        row: [[p] for p in cluster.table.pods[row].values() if p.priority < pod.priority]
        for row in rows
    }
    rows = [row for row in rows if units_of[row]]
    generation = cluster.table.generation
    fast = search._select_by_arithmetic(runner, pod, rows, units_of)
    assert fast is not None
    assert cluster.table.generation == generation  # the cache was not touched
    slow_search = VictimSearch(h.scheduler.handle)
    slow_search._select_by_arithmetic = lambda *args: None  # type: ignore[method-assign]
    slow = slow_search.select_on_nodes(runner, pod, rows, units_of)

    def keys(result: dict[int, Any]) -> dict[int, list[list[str]] | None]:
        return {
            row: None if units is None else [[p.key for p in u] for u in units]
            for row, units in result.items()
        }

    assert keys(fast) == keys(slow)


def test_a_filter_that_reads_pods_keeps_the_transaction_path() -> None:
    h = SchedulerHarness()
    h.add_nodes(make_node("n0").capacity(cpu="4", memory="8Gi"))
    h.add_pods(make_pod("low").req(cpu="4").node("n0").host_port(8080))
    h.run()
    (pod,) = h.add_pods(make_pod("high").req(cpu="2").priority(5).host_port(8080))
    search = VictimSearch(h.scheduler.handle)
    units_of = {0: [[p] for p in h.scheduler.handle.cluster.table.pods[0].values()]}
    runner = h.scheduler.handle.runner(pod)
    assert search._select_by_arithmetic(runner, pod, [0], units_of) is None
    (chosen,) = search.select_on_nodes(runner, pod, [0], units_of).values()
    assert chosen is not None and [p.name for u in chosen for p in u] == ["low"]


def test_preemption_basic_shape_uses_the_columns() -> None:
    h = SchedulerHarness()
    h.add_nodes(*(make_node(f"n{i}").capacity(cpu="4", memory="32Gi") for i in range(4)))
    h.add_pods(
        *(
            make_pod(f"low{i}-{k}").req(cpu="900m", memory="500Mi").node(f"n{i}")
            for i in range(4)
            for k in range(4)
        )
    )
    h.run()
    calls: list[bool] = []
    original = VictimSearch._best_by_columns

    def spy(self: VictimSearch, *args: Any) -> Any:
        found = original(self, *args)
        calls.append(not isinstance(found, _Fallback))
        return found

    VictimSearch._best_by_columns = spy  # type: ignore[method-assign]
    try:
        h.add_pods(make_pod("high").req(cpu="3", memory="500Mi").priority(10))
        h.advance(2)
    finally:
        VictimSearch._best_by_columns = original  # type: ignore[method-assign]
    assert calls and all(calls)
    assert h.node_of("high") is not None
    assert len(h.evicted) == 3
