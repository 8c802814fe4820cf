"""ClusterState: assume / forget / confirm, bound pods, pods whose node arrives later,
and the read-only snapshot."""

from __future__ import annotations

import numpy as np
import pytest

from shoal.cache.cluster import ClusterState
from shoal.cache.snapshot import Snapshot
from shoal.testing import make_node, make_pod


def _cpu(cluster: ClusterState, node: str) -> int:
    table = cluster.table
    return int(table.requested[table.row_of[node], table.resource_index["cpu"]])


def _pods(cluster: ClusterState, node: str) -> int:
    table = cluster.table
    return int(table.requested[table.row_of[node], table.resource_index["pods"]])


@pytest.fixture
def cluster() -> ClusterState:
    cluster = ClusterState()
    cluster.add_node(make_node("n1").capacity(cpu="4").obj())
    cluster.add_node(make_node("n2").capacity(cpu="4").obj())
    return cluster


def test_assume_counts_until_forgotten(cluster: ClusterState) -> None:
    pod = make_pod("p").req(cpu="1").info()
    cluster.assume(pod, "n1")
    assert _cpu(cluster, "n1") == 1000 and _pods(cluster, "n1") == 1
    assert cluster.placed[pod.uid].assumed
    with pytest.raises(ValueError, match="already placed on n1"):
        cluster.assume(pod, "n2")
    cluster.forget(pod)
    assert _cpu(cluster, "n1") == 0 and _pods(cluster, "n1") == 0
    assert pod.uid not in cluster.placed
    cluster.forget(pod)  # idempotent


def test_confirmed_pod_is_not_forgotten(cluster: ClusterState) -> None:
    pod = make_pod("p").req(cpu="1").info()
    cluster.assume(pod, "n1")
    cluster.confirm(pod.uid)
    assert not cluster.placed[pod.uid].assumed
    cluster.forget(pod)  # a confirmed bind stays
    assert _cpu(cluster, "n1") == 1000
    assert cluster.remove_pod(pod.uid) is pod
    assert _cpu(cluster, "n1") == 0


def test_bound_update_replaces_assumed_without_double_counting(cluster: ClusterState) -> None:
    assumed = make_pod("p").req(cpu="1").info()
    cluster.assume(assumed, "n1")
    bound = make_pod("p").node("n1").req(cpu="1").info()  # the watch echo
    cluster.add_bound_pod(bound, "n1")
    assert _cpu(cluster, "n1") == 1000 and _pods(cluster, "n1") == 1
    assert cluster.placed[bound.uid].pod is bound and not cluster.placed[bound.uid].assumed
    assert cluster.pods_on("n1") == [bound]


def test_bound_elsewhere_moves_the_pod(cluster: ClusterState) -> None:
    pod = make_pod("p").req(cpu="1").info()
    cluster.assume(pod, "n1")
    other = make_pod("p").node("n2").req(cpu="1").info()  # someone else bound it to n2
    cluster.add_bound_pod(other, "n2")
    assert _cpu(cluster, "n1") == 0
    assert _cpu(cluster, "n2") == 1000


def test_pod_bound_to_a_node_that_arrives_later() -> None:
    cluster = ClusterState()
    pod = make_pod("early").node("late").req(cpu="2").host_port(9000).info()
    cluster.add_bound_pod(pod, "late")
    assert cluster.placed[pod.uid].node == "late"
    assert cluster.pods_on("late") == []
    cluster.add_node(make_node("late").capacity(cpu="8").obj())
    assert _cpu(cluster, "late") == 2000 and _pods(cluster, "late") == 1
    assert cluster.pods_on("late") == [pod]
    table = cluster.table
    assert table.host_port_count[table.row_of["late"]] == 1


def test_pod_deleted_before_its_node_arrives() -> None:
    cluster = ClusterState()
    pod = make_pod("early").node("late").req(cpu="2").info()
    cluster.add_bound_pod(pod, "late")
    assert cluster.remove_pod(pod.uid) is pod
    cluster.add_node(make_node("late").capacity(cpu="8").obj())
    assert _cpu(cluster, "late") == 0


def test_removed_node_keeps_its_pods_until_it_returns(cluster: ClusterState) -> None:
    pod = make_pod("p").node("n1").req(cpu="3").info()
    cluster.add_bound_pod(pod, "n1")
    assert cluster.remove_node("n1") == [pod]
    assert pod.uid in cluster.placed
    cluster.add_node(make_node("n1").capacity(cpu="4").obj())
    assert _cpu(cluster, "n1") == 3000


class _Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[str, int, str]] = []

    def pod_placed(self, row: int, pod: object) -> None:
        self.calls.append(("placed", row, pod.key))  # type: ignore[attr-defined]

    def pod_unplaced(self, row: int, pod: object) -> None:
        self.calls.append(("unplaced", row, pod.key))  # type: ignore[attr-defined]

    def row_moved(self, src: int, dst: int) -> None:
        self.calls.append(("moved", src, str(dst)))

    def node_changed(self, row: int) -> None:
        self.calls.append(("node", row, ""))


def test_observers_see_every_placement(cluster: ClusterState) -> None:
    rec = _Recorder()
    cluster.observers.append(rec)
    pod = make_pod("p").req(cpu="1").info()
    cluster.assume(pod, "n1")
    cluster.forget(pod)
    cluster.add_node(make_node("n3").obj())
    cluster.remove_node("n1")  # n3 (row 2) moves into row 0
    assert rec.calls == [
        ("placed", 0, "default/p"),
        ("unplaced", 0, "default/p"),
        ("node", 2, ""),
        ("moved", 2, "0"),
    ]


def test_snapshot_arrays_are_read_only(cluster: ClusterState) -> None:
    snap = Snapshot(cluster)
    for name in ("allocatable", "requested", "nonzero_requested", "unschedulable", "taint_set"):
        array = getattr(snap, name)
        with pytest.raises(ValueError, match="read-only"):
            array[0] = 1
    with pytest.raises(ValueError, match="read-only"):
        snap.names[0] = "evil"
    with pytest.raises(ValueError, match="read-only"):
        snap.requested[0:2] += 1
    # Plugins receive views of the live table: the cache can still write.
    cluster.assume(make_pod("p").req(cpu="1").info(), "n2")
    assert snap.requested[1, 0] == 1000


def test_snapshot_rebuilds_views_when_the_table_grows(cluster: ClusterState) -> None:
    snap = Snapshot(cluster)
    for i in range(100):
        cluster.add_node(make_node(f"x{i}").capacity(cpu="1").obj())
    snap.refresh()
    assert snap.n == 102
    assert snap.allocatable.shape[0] >= 102
    assert snap.allocatable[101, 0] == 1000
    with pytest.raises(ValueError, match="read-only"):
        snap.allocatable[101, 0] = 0
    # A resource never seen before gets a zero column (and the views follow).
    vector = snap.pod_vector(make_pod("g").req({"example.com/fpga": 1}).info())
    col = snap.resource_index["example.com/fpga"]
    assert vector[col] == 1
    assert snap.allocatable.shape[1] == len(snap.resources)
    assert np.all(snap.allocatable[: snap.n, col] == 0)
