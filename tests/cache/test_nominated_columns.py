"""Nominations kept as columns (`shoal.cache.nominations`) give the room a pod must leave
free exactly as the nominations read one by one (`Snapshot.nominated_against`), through
random nominations, re-nominations, clears, nodes added and removed (rows move) and
resources first seen after the columns were built."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from shoal.testing import SchedulerHarness, make_node, make_pod

step = st.one_of(
    st.tuples(st.just("nominate"), st.integers(0, 9), st.integers(0, 5), st.integers(0, 3)),
    st.tuples(st.just("clear"), st.integers(0, 9), st.just(0), st.just(0)),
    st.tuples(st.just("remove-node"), st.integers(0, 5), st.just(0), st.just(0)),
    st.tuples(st.just("add-node"), st.integers(0, 5), st.just(0), st.just(0)),
)


@settings(max_examples=200, deadline=None)
@given(steps=st.lists(step, max_size=25), asker=st.integers(0, 3), extra=st.integers(0, 9))
def test_columns_match_the_nominations(
    steps: list[tuple[str, int, int, int]], asker: int, extra: int
) -> None:
    h = SchedulerHarness()
    h.add_nodes(*(make_node(f"n{i}").capacity(cpu="8", memory="8Gi") for i in range(6)))
    cluster = h.scheduler.handle.cluster
    snapshot = h.scheduler.handle.snapshot
    pods = [
        make_pod(f"p{i}")
        .req(cpu=f"{i + 1}", memory="1Gi", **({"example.com/x": "1"} if i == extra else {}))
        .priority(i % 4)
        .info()
        for i in range(10)
    ]
    for kind, a, b, _ in steps:
        if kind == "nominate":
            cluster.nominate(pods[a], f"n{b}")
        elif kind == "clear":
            cluster.clear_nomination(pods[a].uid)
        elif kind == "remove-node":
            h.delete_node(f"n{a}")
        else:
            h.add_nodes(make_node(f"n{a}").capacity(cpu="8", memory="8Gi"))
    for pod in (make_pod("asker").priority(asker).info(), pods[0], pods[5]):
        rows, vectors = snapshot.nominated_room(pod)
        got = Counter(
            (int(r), tuple(v.tolist())) for r, v in zip(rows.tolist(), vectors, strict=True)
        )
        want = Counter(
            (row, tuple(cluster.table.pod_vector(other).tolist()))
            for row, other in snapshot.nominated_against(pod)
        )
        assert got == want
