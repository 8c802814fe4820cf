"""NodeTable rows: add, update and swap-remove keep every column consistent."""

from __future__ import annotations

import numpy as np
import pytest

from shoal.api.objects import NodeSelectorRequirement
from shoal.cache.cluster import ClusterState
from shoal.cache.node_table import NodeTable
from shoal.testing import make_node, make_pod

Gi = 2**30


def _row_view(table: NodeTable, name: str) -> dict[str, object]:
    """Everything the table holds about one node, read through its current row."""
    row = table.row_of[name]
    labels = {
        key: table.labels.values[key][code]
        for key, column in table.labels.codes.items()
        if (code := int(column[row])) >= 0
    }
    return {
        "name": table.names[row],
        "name_array": table.names_array[row],
        "node": table.nodes[row].metadata.name,
        "alloc": {r: int(table.allocatable[row, c]) for r, c in table.resource_index.items()},
        "requested": {r: int(table.requested[row, c]) for r, c in table.resource_index.items()},
        "nonzero": tuple(int(x) for x in table.nonzero_requested[row]),
        "unschedulable": bool(table.unschedulable[row]),
        "taints": table.taint_sets[int(table.taint_set[row])],
        "labels": labels,
        "pods": sorted(table.pods[row]),
        "ports": sorted(p.port for p in table.host_ports[row]),
        "port_count": int(table.host_port_count[row]),
        "generation": int(table.row_generation[row]),
    }


def _cluster() -> ClusterState:
    cluster = ClusterState()
    nodes = [
        make_node("a").capacity(cpu="1", memory="1Gi").labels(zone="z1", tier="web"),
        make_node("b").capacity(cpu="2", memory="2Gi").labels(zone="z2").taint("gpu", "yes"),
        make_node("c").capacity({"nvidia.com/gpu": 4}, cpu="3").labels(zone="z3", gpu="a100"),
        make_node("d").capacity(cpu="4").unschedulable().taint("x", effect="NoExecute"),
    ]
    for node in nodes:
        cluster.add_node(node.obj())
    pods = [
        make_pod("pa").node("a").req(cpu="100m").host_port(80),
        make_pod("pc").node("c").req({"nvidia.com/gpu": 1}, cpu="1").host_port(443),
        make_pod("pd").node("d").req(cpu="2", memory="1Gi"),
    ]
    for pod in pods:
        info = pod.info()
        cluster.add_bound_pod(info, info.node_name)
    return cluster


def test_rows_are_dense_and_indexed() -> None:
    table = _cluster().table
    assert table.n == 4
    assert table.names == ["a", "b", "c", "d"]
    assert [table.row_of[n] for n in "abcd"] == [0, 1, 2, 3]
    assert table.resources[:4] == ["cpu", "memory", "ephemeral-storage", "pods"]
    assert "nvidia.com/gpu" in table.resource_index


@pytest.mark.parametrize("victim", ["a", "b", "c", "d"])
def test_swap_remove_keeps_every_other_row_intact(victim: str) -> None:
    cluster = _cluster()
    table = cluster.table
    before = {name: _row_view(table, name) for name in table.names if name != victim}
    orphans = cluster.remove_node(victim)
    assert victim not in table.row_of
    assert table.n == 3
    assert sorted(table.row_of.values()) == [0, 1, 2]
    assert sorted(table.names) == sorted(before)
    for name, view in before.items():
        assert _row_view(table, name) == view, name
    # The freed last row is blank: no stale labels or names left behind.
    assert table.names_array[3] is None
    assert all(column[3] == -1 for column in table.labels.codes.values())
    expected_orphans = [] if victim == "b" else [f"p{victim}"]
    assert [p.name for p in orphans] == expected_orphans


def test_label_masks_follow_the_moved_row() -> None:
    cluster = _cluster()
    table = cluster.table
    cluster.remove_node("a")  # d moves into row 0
    req = NodeSelectorRequirement(key="zone", operator="Exists")
    mask = table.labels.requirement_mask(req, slice(0, table.n))
    assert dict(zip(table.names, mask.tolist(), strict=True)) == {
        "d": False,
        "b": True,
        "c": True,
    }
    req = NodeSelectorRequirement(key="tier", operator="In", values=["web"])
    assert not table.labels.requirement_mask(req, slice(0, table.n)).any()


def test_update_rewrites_row_in_place() -> None:
    cluster = _cluster()
    table = cluster.table
    row = table.row_of["b"]
    generation = table.generation
    cluster.update_node(make_node("b").capacity(cpu="8", memory="2Gi").labels(zone="z9").obj())
    assert table.row_of["b"] == row
    view = _row_view(table, "b")
    assert view["alloc"]["cpu"] == 8000
    assert view["labels"] == {"zone": "z9"}  # old labels gone
    assert view["taints"] == ()  # taint removed
    assert view["unschedulable"] is False
    assert table.generation > generation


def test_pods_placed_and_unplaced_adjust_all_counters() -> None:
    cluster = _cluster()
    table = cluster.table
    view = _row_view(table, "c")
    assert view["requested"]["cpu"] == 1000
    assert view["requested"]["nvidia.com/gpu"] == 1
    assert view["requested"]["pods"] == 1
    assert view["ports"] == [443] and view["port_count"] == 1
    cluster.remove_pod("default/pc")
    view = _row_view(table, "c")
    assert view["requested"] == {r: 0 for r in table.resources}
    assert view["nonzero"] == (0, 0)
    assert view["ports"] == [] and view["port_count"] == 0


def test_row_generations_change_with_their_row_only_and_never_repeat() -> None:
    """An optimistic worker's proposal is valid while its row's generation is the one it
    read (`shoal.scheduler.optimistic`): every change to a row gives it a new one, other
    rows keep theirs, and a node removed and added again does not get an old one back."""
    cluster = _cluster()
    table = cluster.table

    def gens() -> dict[str, int]:
        return {name: int(table.row_generation[table.row_of[name]]) for name in table.names}

    seen: set[int] = set(gens().values())
    assert len(seen) == 4
    before = gens()
    pod = make_pod("new").req(cpu="100m").info()
    cluster.assume(pod, "b")
    after = gens()
    assert after["b"] not in seen
    assert {k: v for k, v in after.items() if k != "b"} == {
        k: v for k, v in before.items() if k != "b"
    }
    seen.add(after["b"])
    cluster.forget(pod)
    assert gens()["b"] not in seen
    seen.add(gens()["b"])
    cluster.update_node(make_node("c").capacity(cpu="8").obj())
    assert gens()["c"] not in seen
    seen.add(gens()["c"])
    keep = gens()
    cluster.remove_node("a")  # "d" moves into row 0 with its generation
    assert gens() == {k: v for k, v in keep.items() if k != "a"}
    cluster.add_node(make_node("a").capacity(cpu="1").obj())
    assert gens()["a"] not in seen


def test_new_resource_widens_columns_with_zeros() -> None:
    table = NodeTable()
    table.add(make_node("a").capacity(cpu="1").obj())
    version = table.layout_version
    col = table.column("example.com/foo")
    assert table.layout_version == version + 1
    assert table.allocatable.shape[1] == col + 1
    assert table.allocatable[0, col] == 0 and table.requested[0, col] == 0


def test_growth_beyond_initial_capacity() -> None:
    cluster = ClusterState()
    for i in range(200):
        cluster.add_node(make_node(f"n{i}").capacity(cpu="1").labels(idx=str(i)).obj())
    table = cluster.table
    assert table.n == 200
    assert table.allocatable.shape[0] >= 200
    req = NodeSelectorRequirement(key="idx", operator="In", values=["0", "199"])
    mask = table.labels.requirement_mask(req, slice(0, table.n))
    assert np.flatnonzero(mask).tolist() == [0, 199]
    for i in range(0, 200, 2):
        cluster.remove_node(f"n{i}")
    assert table.n == 100
    assert sorted(table.names, key=lambda n: int(n[1:])) == [f"n{i}" for i in range(1, 200, 2)]
    for name in table.names:
        row = table.row_of[name]
        assert table.labels.values["idx"][table.labels.codes["idx"][row]] == name[1:]


def test_remove_unknown_node_is_a_no_op() -> None:
    cluster = _cluster()
    assert cluster.remove_node("zzz") == []
    assert cluster.table.n == 4
