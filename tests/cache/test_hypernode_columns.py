"""HyperNode tier columns kept up to date through node and HyperNode churn equal the
columns resolved from scratch; cycles of any length and self-membership are named."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from shoal.api.hypernode import HyperNode
from shoal.api.manifests import decode
from shoal.cache.cluster import ClusterState
from shoal.cache.hypernodes import HyperNodeTopology
from shoal.testing import make_node

NAMES = [f"n{i}" for i in range(12)] + [f"m{i}" for i in range(4)]


def hypernode(name: str, tier: int, *members: dict[str, Any]) -> HyperNode:
    raw = {"metadata": {"name": name}, "spec": {"tier": tier, "members": list(members)}}
    return decode(raw, HyperNode)


def node_member(kind: str, value: str) -> dict[str, Any]:
    if kind == "exact":
        return {"type": "Node", "selector": {"exactMatch": {"name": value}}}
    if kind == "regex":
        return {"type": "Node", "selector": {"regexMatch": {"pattern": value}}}
    return {"type": "Node", "selector": {"labelMatch": {"matchLabels": {"rack": value}}}}


def hn_member(name: str) -> dict[str, Any]:
    return {"type": "HyperNode", "selector": {"exactMatch": {"name": name}}}


LEAF = st.builds(
    lambda name, members: hypernode(name, 1, *members),
    st.sampled_from(["l0", "l1", "l2"]),
    st.lists(
        st.one_of(
            st.builds(node_member, st.just("exact"), st.sampled_from(NAMES)),
            st.builds(node_member, st.just("regex"), st.sampled_from(["^n1", "^m", "3$", "n"])),
            st.builds(node_member, st.just("labels"), st.sampled_from(["r0", "r1"])),
        ),
        max_size=3,
    ),
)
SPINE = st.builds(
    lambda name, tier, leaves: hypernode(name, tier, *(hn_member(x) for x in leaves)),
    st.sampled_from(["s0", "s1"]),
    st.sampled_from([2, 3]),
    st.lists(st.sampled_from(["l0", "l1", "l2", "s0", "s1"]), max_size=3),
)
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.sampled_from(NAMES), st.sampled_from(["", "r0", "r1"])),
        st.tuples(st.just("remove"), st.sampled_from(NAMES), st.just("")),
        st.tuples(st.just("upsert"), st.one_of(LEAF, SPINE), st.just("")),
        st.tuples(st.just("delete"), st.sampled_from(["l0", "l1", "l2", "s0", "s1"]), st.just("")),
        st.tuples(st.just("read"), st.just(""), st.just("")),
    ),
    max_size=40,
)


def columns(topology: HyperNodeTopology, n: int) -> dict[int, list[str | None]]:
    names = topology.values
    return {
        tier: [names[c] if c >= 0 else None for c in topology.column(tier, n).tolist()]
        for tier in (1, 2, 3)
    }


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.one_of(LEAF, SPINE), min_size=1, max_size=6),
    st.lists(st.sampled_from(["", "r0", "r1"]), min_size=len(NAMES), max_size=len(NAMES)),
    OPS,
)
def test_churn_keeps_the_columns_equal_to_a_fresh_resolution(
    fabric: list[HyperNode], racks: list[str], ops: list[tuple[Any, ...]]
) -> None:
    cluster = ClusterState()
    for obj in fabric:
        cluster.hypernodes.upsert(obj)
    for name, rack in zip(NAMES, racks, strict=True):
        cluster.add_node(make_node(name).labels({"rack": rack} if rack else {}).obj())
    columns(cluster.hypernodes, cluster.table.n)  # built: churn now goes row by row
    for kind, what, extra in ops:
        if kind == "add":
            node = make_node(what).labels({"rack": extra} if extra else {}).obj()
            cluster.add_node(node)  # an update when it exists
        elif kind == "remove":
            cluster.remove_node(what)
        elif kind == "upsert":
            cluster.hypernodes.upsert(what)
        elif kind == "delete":
            cluster.hypernodes.remove(what)
        else:
            columns(cluster.hypernodes, cluster.table.n)
    fresh = HyperNodeTopology(cluster.table)
    for obj in cluster.hypernodes.objects().values():
        fresh.upsert(obj)
    n = cluster.table.n
    assert columns(cluster.hypernodes, n) == columns(fresh, n)
    assert cluster.hypernodes.problems() == fresh.problems()


def test_cycles_of_any_length_and_self_membership_are_named() -> None:
    cluster = ClusterState()
    topo = cluster.hypernodes
    topo.upsert(hypernode("a", 3, hn_member("b")))
    topo.upsert(hypernode("b", 2, hn_member("c")))
    topo.upsert(hypernode("c", 1, hn_member("a")))
    topo.upsert(hypernode("me", 2, hn_member("me")))
    topo.upsert(hypernode("fine", 4, hn_member("a")))
    problems = topo.problems()
    assert set(problems) == {"a", "b", "c", "me"}
    assert "(a -> b -> c -> a)" in problems["a"]
    assert "(c -> a -> b -> c)" in problems["c"]
    assert "(me -> me)" in problems["me"]
    assert topo.tiers() == (4,)  # only `fine` stands (with nothing in it)
