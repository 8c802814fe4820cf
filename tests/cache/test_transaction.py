"""Transaction: what-ifs over the cache are undone exactly, and commit keeps the right
things (placements; victims back in place but marked evicting; nominations)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shoal.api.podinfo import PodInfo
from shoal.cache.cluster import ClusterState
from shoal.cache.transaction import Transaction, TransactionError
from shoal.testing.builders import make_node, make_pod

GPU = "nvidia.com/gpu"


def cluster_with(nodes: int = 3) -> ClusterState:
    cluster = ClusterState()
    for i in range(nodes):
        cluster.add_node(make_node(f"n{i}").capacity({GPU: 2}, cpu="8", memory="16Gi").obj())
    return cluster


def pod(name: str, node: str = "", cpu: str = "1", gpu: int = 0) -> PodInfo:
    builder = make_pod(name).req(cpu=cpu)
    if gpu:
        builder = builder.req({GPU: gpu}, cpu=cpu)
    if node:
        builder = builder.node(node)
    return PodInfo(builder.obj())


def fingerprint(cluster: ClusterState) -> tuple[object, ...]:
    table = cluster.table
    n = table.n
    devices = cluster.gpu_devices
    return (
        table.requested[:n].copy().tobytes(),
        table.free[:n].copy().tobytes(),
        sorted((u, r.node, r.assumed) for u, r in cluster.placed.items()),
        sorted((r, sorted(p)) for r, p in enumerate(table.pods[:n])),
        sorted((u, n_) for u, (n_, _) in cluster.nominations.items()),
        None if devices is None else devices.free[:n].copy().tobytes(),
        sorted(cluster.evicting),
    )


def test_discard_undoes_assume_evict_and_nominate() -> None:
    cluster = cluster_with()
    running = pod("running", "n0", gpu=1)
    cluster.add_bound_pod(running, "n0")
    before = fingerprint(cluster)
    with Transaction(cluster) as tx:
        tx.evict(running, "what if")
        tx.assume(pod("new", cpu="2", gpu=2), "n0")
        tx.nominate(pod("preemptor"), "n1")
        assert fingerprint(cluster) != before
    assert fingerprint(cluster) == before


def test_undo_hooks_run_newest_first_with_the_operations_and_never_on_commit() -> None:
    """`on_undo` (a pod's Unreserve) runs when a rollback or discard passes it, in
    reverse order with the operations around it; a commit runs none."""
    cluster = cluster_with()
    log: list[str] = []
    a, b = pod("a"), pod("b")

    with Transaction(cluster) as tx:
        tx.assume(a, "n0")
        tx.on_undo(lambda: log.append(f"unreserve a, placed={a.uid in cluster.placed}"))
        mark = tx.mark()
        tx.assume(b, "n1")
        tx.on_undo(lambda: log.append(f"unreserve b, placed={b.uid in cluster.placed}"))
        tx.rollback(mark)
        assert log == ["unreserve b, placed=True"]
        assert b.uid not in cluster.placed and a.uid in cluster.placed
        tx.discard()
    assert log == ["unreserve b, placed=True", "unreserve a, placed=True"]
    assert not cluster.placed

    log.clear()
    with Transaction(cluster) as tx:
        tx.assume(a, "n0")
        tx.on_undo(lambda: log.append("unreserve a"))
        tx.commit()
    assert log == [] and cluster.placed[a.uid].assumed


def test_commit_keeps_placements() -> None:
    cluster = cluster_with()
    new = pod("new")
    with Transaction(cluster) as tx:
        tx.assume(new, "n1")
        decision = tx.commit()
    assert decision.assumed == [(new, "n1")]
    assert cluster.placed[new.uid].assumed and cluster.placed[new.uid].node == "n1"


def test_commit_of_evictions_keeps_victims_counted_and_nominates() -> None:
    cluster = cluster_with()
    victim = pod("victim", "n0", cpu="4")
    cluster.add_bound_pod(victim, "n0")
    free_before = cluster.table.free[0].copy()
    preemptor = pod("preemptor", cpu="6")
    with Transaction(cluster) as tx:
        tx.evict(victim, "preempted")
        tx.nominate(preemptor, "n0")
        decision = tx.commit()
    assert [(e.pod.key, e.node, e.reason) for e in decision.evicted] == [
        ("default/victim", "n0", "preempted")
    ]
    assert decision.nominated == [(preemptor, "n0")]
    # The victim still counts until the API server deletes it, and is marked.
    assert np.array_equal(cluster.table.free[0], free_before)
    assert "default/victim" in cluster.evicting
    assert cluster.nominations["default/preemptor"][0] == "n0"


def test_a_transaction_that_evicts_cannot_commit_placements() -> None:
    cluster = cluster_with()
    victim = pod("victim", "n0")
    cluster.add_bound_pod(victim, "n0")
    before = fingerprint(cluster)
    with Transaction(cluster) as tx:
        tx.evict(victim)
        tx.assume(pod("new"), "n0")
        with pytest.raises(TransactionError, match="nominate them"):
            tx.commit()
    assert fingerprint(cluster) == before


def test_savepoints_roll_back_only_what_came_after() -> None:
    cluster = cluster_with()
    a, b = pod("a", "n0"), pod("b", "n0")
    cluster.add_bound_pod(a, "n0")
    cluster.add_bound_pod(b, "n0")
    with Transaction(cluster) as tx:
        tx.evict(a)
        mark = tx.mark()
        tx.evict(b)
        tx.restore(a)
        tx.rollback(mark)
        assert tx.evicted() == [a] and "default/b" in cluster.placed
        assert "default/a" not in cluster.placed
    assert set(cluster.placed) == {"default/a", "default/b"}


class _Tally:
    """An assignment observer (as tenant-queue usage is): what it was told."""

    def __init__(self) -> None:
        self.told: list[tuple[str, str, str]] = []

    def pod_assigned(self, pod: PodInfo, node: str) -> None:
        self.told.append(("+", pod.key, node))

    def pod_released(self, pod: PodInfo, node: str) -> None:
        self.told.append(("-", pod.key, node))


def test_a_what_if_tells_assignment_observers_nothing_and_cannot_commit() -> None:
    cluster = cluster_with()
    tally = _Tally()
    cluster.assignment_observers.append(tally)
    running = pod("running", "n0")
    cluster.add_bound_pod(running, "n0")
    assert tally.told == [("+", running.key, "n0")]
    before = fingerprint(cluster)
    with Transaction(cluster, what_if=True) as tx:
        tx.evict(running)
        tx.assume(pod("new", cpu="2"), "n1")
        assert fingerprint(cluster) != before  # filters see the what-if
        with pytest.raises(TransactionError, match="never committed"):
            tx.commit()
    assert fingerprint(cluster) == before
    assert tally.told == [("+", running.key, "n0")]  # neither the what-if nor its undoing
    assert cluster.unobserved == 0
    # An ordinary transaction after it is observed again.
    with Transaction(cluster) as tx:
        tx.evict(running)
    assert tally.told[1:] == [("-", running.key, "n0"), ("+", running.key, "n0")]


def test_a_what_if_outside_a_with_block_is_refused() -> None:
    """Observers are off for exactly a what-if's `with` block: used without one, they
    could stay off."""
    cluster = cluster_with()
    tx = Transaction(cluster, what_if=True)
    with pytest.raises(TransactionError, match="context manager"):
        tx.assume(pod("p"), "n0")
    assert cluster.unobserved == 0
    with pytest.raises(RuntimeError), Transaction(cluster, what_if=True) as tx:
        tx.assume(pod("p"), "n0")
        raise RuntimeError("a judge failed")
    assert cluster.unobserved == 0 and "p" not in {r.pod.name for r in cluster.placed.values()}


def test_misuse_is_refused() -> None:
    cluster = cluster_with()
    assumed = pod("assumed")
    cluster.assume(assumed, "n0")
    tx = Transaction(cluster)
    with pytest.raises(TransactionError, match="still being bound"):
        tx.evict(assumed)
    with pytest.raises(TransactionError, match="not running"):
        tx.evict(pod("nowhere"))
    with pytest.raises(TransactionError, match="was not evicted"):
        tx.restore(assumed)
    tx.discard()
    with pytest.raises(TransactionError, match="already been committed or discarded"):
        tx.assume(pod("late"), "n1")


OPS = st.lists(
    st.tuples(
        st.sampled_from(["assume", "evict", "restore", "nominate", "mark", "rollback"]),
        st.integers(0, 5),
        st.integers(0, 2),
    ),
    max_size=30,
)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=OPS)
def test_any_sequence_of_operations_is_undone_exactly(ops: list[tuple[str, int, int]]) -> None:
    """Whatever a what-if does (including savepoints), discard restores the node table,
    the GPU devices, the placements and the nominations bit for bit."""
    cluster = cluster_with()
    running = [pod(f"r{i}", f"n{i % 3}", gpu=i % 2) for i in range(6)]
    for p in running:
        cluster.add_bound_pod(p, p.node_name)
    pending = [pod(f"p{i}", gpu=(i % 3) // 2) for i in range(6)]
    before = fingerprint(cluster)
    marks: list[int] = []
    with Transaction(cluster) as tx:
        for op, i, node in ops:
            if op == "assume" and pending[i].uid not in cluster.placed:
                tx.assume(pending[i], f"n{node}")
            elif op == "evict" and running[i].uid in cluster.placed:
                tx.evict(running[i])
            elif op == "restore" and tx.is_evicted(running[i].uid):
                tx.restore(running[i])
            elif op == "nominate":
                tx.nominate(pending[i], f"n{node}")
            elif op == "mark":
                marks.append(tx.mark())
            elif op == "rollback" and marks:
                tx.rollback(marks.pop())
                marks = [m for m in marks if m <= tx.mark()]
    assert fingerprint(cluster) == before
