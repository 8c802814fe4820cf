"""Label selector requirement masks (v1 NodeSelectorRequirement semantics) evaluated on
integer label columns, incl. matchFields metadata.name; table-driven after
k8s.io/component-helpers/scheduling/corev1/nodeaffinity tests."""

from __future__ import annotations

import numpy as np
import pytest

from shoal.api.objects import NodeSelectorTerm
from shoal.cache.cluster import ClusterState
from shoal.testing import make_node, node_requirement

NODES = {
    "n0": {"zone": "a", "gen": "3", "ssd": ""},
    "n1": {"zone": "b", "gen": "5"},
    "n2": {"zone": "c", "gen": "not-a-number"},
    "n3": {},
    "n4": {"zone": "a", "gen": "-2"},
}


@pytest.fixture(scope="module")
def cluster() -> ClusterState:
    cluster = ClusterState()
    for name, labels in NODES.items():
        cluster.add_node(make_node(name).labels(labels).obj())
    return cluster


def _matching(cluster: ClusterState, mask: np.ndarray) -> list[str]:
    return [str(n) for n in cluster.table.names_array[: cluster.table.n][mask]]


@pytest.mark.parametrize(
    ("key", "op", "values", "expected"),
    [
        ("zone", "In", ["a"], ["n0", "n4"]),
        ("zone", "In", ["a", "b"], ["n0", "n1", "n4"]),
        ("zone", "In", ["unknown"], []),
        ("nokey", "In", ["a"], []),
        ("zone", "NotIn", ["a"], ["n1", "n2", "n3"]),  # nodes without the key match NotIn
        ("zone", "NotIn", ["unknown"], ["n0", "n1", "n2", "n3", "n4"]),
        ("nokey", "NotIn", ["x"], ["n0", "n1", "n2", "n3", "n4"]),
        ("zone", "Exists", [], ["n0", "n1", "n2", "n4"]),
        ("ssd", "Exists", [], ["n0"]),  # an empty value still exists
        ("nokey", "Exists", [], []),
        ("zone", "DoesNotExist", [], ["n3"]),
        ("nokey", "DoesNotExist", [], ["n0", "n1", "n2", "n3", "n4"]),
        ("gen", "Gt", ["3"], ["n1"]),  # strictly greater; non-numbers never match
        ("gen", "Gt", ["-3"], ["n0", "n1", "n4"]),
        ("gen", "Lt", ["5"], ["n0", "n4"]),
        ("gen", "Lt", ["100"], ["n0", "n1", "n4"]),
        ("nokey", "Gt", ["0"], []),
        ("nokey", "Lt", ["0"], []),
    ],
)
def test_requirement_masks(
    cluster: ClusterState, key: str, op: str, values: list[str], expected: list[str]
) -> None:
    req = node_requirement(key, op, values)
    labels = cluster.table.labels
    assert _matching(cluster, labels.requirement_mask(req, slice(0, cluster.table.n))) == expected
    # The same requirement on an index array of rows gives the same answer row by row.
    rows = np.array([4, 2, 0], dtype=np.intp)
    sub = labels.requirement_mask(req, rows)
    assert [f"n{r}" for r, ok in zip(rows, sub, strict=True) if ok] == [
        n for n in ("n4", "n2", "n0") if n in expected
    ]


@pytest.mark.parametrize(
    ("expressions", "fields", "expected"),
    [
        ([("zone", "In", ["a"]), ("gen", "Gt", ["0"])], [], ["n0"]),  # ANDed
        ([], [("metadata.name", "In", ["n1", "n3", "missing"])], ["n1", "n3"]),
        ([], [("metadata.name", "NotIn", ["n1"])], ["n0", "n2", "n3", "n4"]),
        ([("zone", "Exists", [])], [("metadata.name", "In", ["n1", "n3"])], ["n1"]),
        ([], [("metadata.uid", "In", ["n1"])], []),  # only metadata.name is a node field
        ([], [], []),  # an empty term matches nothing
    ],
)
def test_term_masks(
    cluster: ClusterState,
    expressions: list[tuple[str, str, list[str]]],
    fields: list[tuple[str, str, list[str]]],
    expected: list[str],
) -> None:
    table = cluster.table
    term = NodeSelectorTerm(
        match_expressions=[node_requirement(*e) for e in expressions],
        match_fields=[node_requirement(*f) for f in fields],
    )
    index = slice(0, table.n)
    names = table.names_array[index]
    assert _matching(cluster, table.labels.term_mask(term, names, index)) == expected


def test_terms_are_ored(cluster: ClusterState) -> None:
    table = cluster.table
    terms = (
        NodeSelectorTerm(match_expressions=[node_requirement("zone", "In", ["b"])]),
        NodeSelectorTerm(match_fields=[node_requirement("metadata.name", "In", ["n3"])]),
        NodeSelectorTerm(),
    )
    index = slice(0, table.n)
    mask = table.labels.terms_mask(terms, table.names_array[index], index)
    assert _matching(cluster, mask) == ["n1", "n3"]


def test_numeric_view_is_rebuilt_after_label_changes() -> None:
    cluster = ClusterState()
    cluster.add_node(make_node("x").labels(gen="1").obj())
    cluster.add_node(make_node("y").labels(gen="9").obj())
    req = node_requirement("gen", "Gt", ["5"])
    labels = cluster.table.labels
    assert labels.requirement_mask(req, slice(0, 2)).tolist() == [False, True]
    cluster.update_node(make_node("x").labels(gen="10").obj())
    assert labels.requirement_mask(req, slice(0, 2)).tolist() == [True, True]
    cluster.remove_node("x")  # y moves to row 0
    assert labels.requirement_mask(req, slice(0, 1)).tolist() == [True]
