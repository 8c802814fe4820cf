"""The victim search over the pods as columns (`VictimSearch._best_by_columns`) makes the
same choice as the search pod by pod: the same node, the same victims in the same order,
on random clusters with ties in priority and start time, nominated room, tainted nodes,
pods still being bound or already being evicted, a queue's pool, few candidates per
chunk, nodes removed after the columns were built (rows move) and resources first seen
after that (columns widen)."""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from numpy.typing import NDArray

from shoal.api.manifests import decode
from shoal.api.podinfo import PodInfo
from shoal.api.queue import PodDisruptionBudget
from shoal.preemption.budgets import DisruptionBudgets
from shoal.preemption.evaluator import _FALLBACK, Candidate, LowerPriority, VictimSearch
from shoal.testing import SchedulerHarness, make_node, make_pod

# cpu, GiB, priority (few values: ties), start time (few values: ties)
pod_shape = st.tuples(st.integers(1, 6), st.integers(1, 6), st.integers(0, 3), st.integers(0, 2))


class _Statuses:
    """Every row resolvable except `unresolvable`."""

    pre_filter_resolvable = False

    def __init__(self, unresolvable: set[int]) -> None:
        self.unresolvable_rows = unresolvable

    def status_of(self, node: str) -> Any:
        raise NotImplementedError

    def unresolvable(self) -> NDArray[np.bool_]:
        raise NotImplementedError

    def resolvable(self, rows: NDArray[np.intp]) -> NDArray[np.bool_]:
        return np.array([r not in self.unresolvable_rows for r in rows.tolist()], dtype=bool)


def _choice(found: Candidate | None) -> tuple[str, list[str]] | None:
    return None if found is None else (found.node, [p.key for p in found.victims])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    nodes=st.lists(st.lists(pod_shape, max_size=6), min_size=1, max_size=8),
    preemptor=st.tuples(st.integers(4, 16), st.integers(1, 12)),
    nominated=st.lists(st.tuples(st.integers(0, 7), st.integers(1, 4)), max_size=3),
    tainted=st.sets(st.integers(0, 7), max_size=2),
    unresolvable=st.sets(st.integers(0, 7), max_size=2),
    removed=st.sets(st.integers(0, 7), max_size=2),
    late_gpu=st.booleans(),
    busy=st.sets(st.integers(0, 40), max_size=4),
    queue=st.none() | st.sets(st.integers(0, 40), max_size=20),
    max_candidates=st.integers(1, 8),
    seed=st.integers(0, 3),
    pdb=st.sampled_from([None, "elsewhere", "default"]),
)
@example(
    nodes=[[(1, 1, 0, 0), (1, 1, 0, 0)], [(1, 1, 0, 0), (1, 1, 0, 0)]],
    preemptor=(16, 1),
    nominated=[],
    tainted=set(),
    unresolvable=set(),
    removed=set(),
    late_gpu=False,
    busy=set(),
    queue=None,
    max_candidates=2,
    seed=0,
    pdb=None,
)
def test_columns_and_pod_by_pod_choose_the_same(
    nodes: list[list[tuple[int, int, int, int]]],
    preemptor: tuple[int, int],
    nominated: list[tuple[int, int]],
    tainted: set[int],
    unresolvable: set[int],
    removed: set[int],
    late_gpu: bool,
    busy: set[int],
    queue: set[int] | None,
    max_candidates: int,
    seed: int,
    pdb: str | None,
) -> None:
    h = SchedulerHarness(seed=seed)
    budgets = DisruptionBudgets()
    if pdb is not None:
        # One budget selecting every pod of a namespace, allowing one disruption: in
        # another namespace the search stays columnar, in the pods' own it falls back.
        budgets.add(
            decode(
                {
                    "metadata": {"name": "b", "namespace": pdb},
                    "spec": {"selector": {}, "maxUnavailable": 1},
                },
                PodDisruptionBudget,
            )
        )
    for i in range(len(nodes)):
        node = make_node(f"n{i}").capacity(cpu="16", memory="16Gi")
        if i in tainted:
            node = node.taint("dedicated", "x", "NoSchedule")
        h.add_nodes(node)
    cluster = h.scheduler.handle.cluster
    table = cluster.table
    placed: list[PodInfo] = []
    for i, pods in enumerate(nodes):
        for k, (c, g, p, t) in enumerate(pods):
            builder = make_pod(f"v{i}-{k}").req(cpu=str(c), memory=f"{g}Gi").priority(p)
            placed.append(h.scheduler.add_pod(builder.node(f"n{i}").info(float(t))))
            if i == 0 and k == 0:
                table.pod_columns()  # built early: later pods are added to it one by one
    h.run()
    table.pod_columns()
    if late_gpu:
        # A resource first seen now: the columns widen.
        h.add_nodes(make_node("gpu").capacity(cpu="16", memory="16Gi", **{"example.com/x": "4"}))
        placed += h.add_pods(
            make_pod("g0").req(cpu="1", memory="1Gi", **{"example.com/x": "1"}).node("gpu")
        )
    for i in sorted(removed):
        if i < len(nodes) and len(nodes) > 1:
            h.delete_node(f"n{i}")  # the last row moves into its place
    for j, (at, cpu) in enumerate(nominated):
        if f"n{at}" in table.row_of:
            (waiting,) = h.add_pods(make_pod(f"nom{j}").req(cpu=str(cpu)).priority(9))
            cluster.nominate(waiting, f"n{at}")
    on_rows = [
        p for p in placed if p.uid in cluster.placed and cluster.placed[p.uid].node in table.row_of
    ]
    for i in sorted(busy):
        if i < len(on_rows):
            victim = on_rows[i]
            if i % 2:
                cluster.evicting.add(victim.uid)
            else:  # still being bound: assumed, not confirmed
                record = cluster.placed[victim.uid]
                cluster.remove_pod(victim.uid)
                cluster.assume(record.pod, record.node)
    (pod,) = h.add_pods(
        make_pod("high").req(cpu=str(preemptor[0]), memory=f"{preemptor[1]}Gi").priority(6)
    )
    pool = LowerPriority(
        pod.priority, None if queue is None else {p.uid for i, p in enumerate(placed) if i in queue}
    )
    statuses = _Statuses(unresolvable)

    def search(columns: bool) -> tuple[str, list[str]] | None:
        handle = h.scheduler.handle
        handle.rng = np.random.default_rng(seed)
        found = VictimSearch(handle, pdb_violations=budgets.checker(handle.snapshot))
        if not columns:
            found._best_by_columns = lambda *args: _FALLBACK  # type: ignore[method-assign]
        generation = table.generation
        chosen = found.best(pod, statuses, pool, max_candidates=max_candidates)  # type: ignore[arg-type]
        assert table.generation == generation  # a search never changes the cache
        return _choice(chosen)

    assert search(columns=True) == search(columns=False)


def test_the_columns_follow_placements_removals_and_moved_rows() -> None:
    h = SchedulerHarness()
    h.add_nodes(*(make_node(f"n{i}").capacity(cpu="8", memory="8Gi") for i in range(3)))
    h.add_pods(*(make_pod(f"p{i}").req(cpu="1").node(f"n{i}") for i in range(3)))
    h.run()
    table = h.scheduler.handle.cluster.table
    columns = table.pod_columns()
    h.delete_pod("p1")
    h.delete_node("n0")  # n2 moves to row 0
    h.add_pods(make_pod("p3").req(cpu="2").node("n1"))
    live = {
        columns.uids[s]: int(columns.row[s]) for s in range(columns.size) if columns.row[s] >= 0
    }
    expected = {uid: row for row in range(table.n) for uid in table.pods[row]}
    assert live == expected
