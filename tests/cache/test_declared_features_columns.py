"""The declared-features index (a `RowSets` per feature, kept in step with node adds,
changes and removals that move the table's last row) answers as a scan of the nodes
does, over random histories."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from shoal.cache.cluster import ClusterState
from shoal.testing import make_node

FEATURES = ("A", "B", "C")
step_st = st.tuples(
    st.sampled_from(["put", "remove"]),
    st.integers(0, 5),
    st.frozensets(st.sampled_from(FEATURES)),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(step_st, max_size=40))
def test_masks_equal_a_scan_of_the_nodes(steps: list[tuple[str, int, frozenset[str]]]) -> None:
    cluster = ClusterState()
    declared: dict[str, frozenset[str]] = {}
    for action, i, features in steps:
        name = f"n{i}"
        if action == "put":
            cluster.add_node(make_node(name).capacity(cpu="1").declares(*features).obj())
            declared[name] = features
        elif name in declared:
            cluster.remove_node(name)
            del declared[name]
        names = cluster.table.names
        for feature in FEATURES:
            mask = cluster.declared_features.mask(feature)
            got = {str(names[r]) for r in range(cluster.table.n) if mask[r]}
            assert got == {n for n, fs in declared.items() if feature in fs}, (feature, steps)
