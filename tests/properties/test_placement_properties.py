"""Properties of placement over random clusters and random pod arrivals/departures:

(a) no node is ever overcommitted: for every node, the sum of the requests of the pods
    on it is <= its allocatable, and equals the node table's `requested` row;
(b) the same seed gives identical placements (and the same event log) twice;
(c) pods never land where they do not fit or are not tolerated, and deleting every pod
    returns all requested counters to zero.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shoal.api.podinfo import pod_requests
from shoal.api.resources import GPU, PODS
from shoal.testing import SchedulerHarness, make_node, make_pod

SETTINGS = settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

Gi = 2**30


@dataclass(frozen=True)
class NodeSpec:
    cpu: int  # cores
    mem_gi: int
    gpus: int
    pods: int
    tainted: bool


@dataclass(frozen=True)
class PodSpec:
    cpu_m: int
    mem_mi: int
    gpus: int
    tolerates: bool
    priority: int
    init_cpu_m: int  # 0: no init container
    sidecar_cpu_m: int  # 0: no sidecar


node_specs = st.builds(
    NodeSpec,
    cpu=st.integers(1, 16),
    mem_gi=st.integers(1, 32),
    gpus=st.sampled_from([0, 0, 0, 2, 4, 8]),
    pods=st.integers(1, 12),
    tainted=st.booleans(),
)

pod_specs = st.builds(
    PodSpec,
    cpu_m=st.sampled_from([0, 100, 250, 500, 1000, 2000, 4000, 9000]),
    mem_mi=st.sampled_from([0, 128, 512, 1024, 4096, 20000]),
    gpus=st.sampled_from([0, 0, 0, 1, 2, 4]),
    tolerates=st.booleans(),
    priority=st.integers(0, 3),
    init_cpu_m=st.sampled_from([0, 0, 0, 3000]),
    sidecar_cpu_m=st.sampled_from([0, 0, 0, 200]),
)

# Operations: ("pod", PodSpec) adds a pod; ("finish", i) deletes the i-th live pod (mod the
# number of live pods); ("node", NodeSpec) adds a node; ("wait", seconds) lets time pass.
operations = st.lists(
    st.one_of(
        st.tuples(st.just("pod"), pod_specs),
        st.tuples(st.just("pod"), pod_specs),
        st.tuples(st.just("finish"), st.integers(0, 1000)),
        st.tuples(st.just("node"), node_specs),
        st.tuples(st.just("wait"), st.sampled_from([0.5, 1.0, 5.0, 30.0])),
    ),
    min_size=1,
    max_size=40,
)


def _node(i: int, spec: NodeSpec) -> Any:
    node = make_node(f"n{i}").capacity(
        {"cpu": spec.cpu, "memory": spec.mem_gi * Gi, "pods": spec.pods, GPU: spec.gpus}
    )
    if spec.tainted:
        node.taint("dedicated", "batch", "NoSchedule")
    return node


def _pod(i: int, spec: PodSpec) -> Any:
    requests: dict[str, Any] = {}
    if spec.cpu_m:
        requests["cpu"] = f"{spec.cpu_m}m"
    if spec.mem_mi:
        requests["memory"] = f"{spec.mem_mi}Mi"
    if spec.gpus:
        requests[GPU] = spec.gpus
    pod = make_pod(f"p{i}").priority(spec.priority).req(requests)
    if spec.init_cpu_m:
        pod.init_req(cpu=f"{spec.init_cpu_m}m")
    if spec.sidecar_cpu_m:
        pod.sidecar_req(cpu=f"{spec.sidecar_cpu_m}m")
    if spec.tolerates:
        pod.toleration("dedicated", "batch", "NoSchedule")
    return pod


def _check_invariants(h: SchedulerHarness, live: dict[str, Any]) -> None:
    table = h.scheduler.cluster.table
    placements = h.result().placements
    cols = table.resource_index
    for row, name in enumerate(table.names):
        pods_here = table.pods[row]
        # Recompute the requests from the pod objects, independently of the table.
        expected = np.zeros(len(table.resources), dtype=np.int64)
        nonzero = np.zeros(2, dtype=np.int64)
        for info in pods_here.values():
            requests, nz = pod_requests(info.pod)
            for resource, amount in requests.items():
                expected[cols[resource]] += amount
            expected[cols[PODS]] += 1
            nonzero += nz
            # Tainted nodes only run pods that tolerate the taint.
            taints = table.taint_sets[int(table.taint_set[row])]
            assert not taints or info.tolerations, (info.key, name)
        assert np.array_equal(table.requested[row, : len(expected)], expected), name
        assert np.array_equal(table.nonzero_requested[row], nonzero), name
        assert np.all(expected <= table.allocatable[row, : len(expected)]), (
            name,
            dict(zip(table.resources, expected.tolist(), strict=True)),
            dict(zip(table.resources, table.allocatable[row].tolist(), strict=True)),
        )
        # What the harness reports bound here is exactly what the cache counts here.
        assert sorted(pods_here) == sorted(k for k, n in placements.items() if n == name)
    assert set(placements) == set(live)


def _run(nodes: list[NodeSpec], ops: list[tuple[str, Any]], seed: int) -> SchedulerHarness:
    h = SchedulerHarness(seed=seed)
    h.add_nodes(*(_node(i, spec) for i, spec in enumerate(nodes)))
    live: dict[str, Any] = {}
    n_nodes, n_pods = len(nodes), 0
    for kind, arg in ops:
        if kind == "pod":
            h.add_pods(_pod(n_pods, arg))
            live[f"default/p{n_pods}"] = arg
            n_pods += 1
        elif kind == "finish" and live:
            key = sorted(live)[arg % len(live)]
            h.delete_pod(key)
            del live[key]
        elif kind == "node":
            h.add_nodes(_node(n_nodes, arg))
            n_nodes += 1
        elif kind == "wait":
            h.advance(arg)
        h.run()
        _forget_evicted(h, live)
        _check_invariants(h, live)
    h.advance(400.0)  # past every backoff and the unschedulable timeout
    _forget_evicted(h, live)
    _check_invariants(h, live)
    return h


def _forget_evicted(h: SchedulerHarness, live: dict[str, Any]) -> None:
    """Pods preempted by higher-priority pods are deleted, as in Kubernetes."""
    for key in h.evicted:
        live.pop(key, None)


@SETTINGS
@given(nodes=st.lists(node_specs, min_size=1, max_size=6), ops=operations, seed=st.integers(0, 3))
def test_no_node_is_ever_overcommitted(nodes: list[NodeSpec], ops: list[Any], seed: int) -> None:
    _run(nodes, ops, seed)


@settings(SETTINGS, max_examples=30)
@given(nodes=st.lists(node_specs, min_size=1, max_size=6), ops=operations, seed=st.integers(0, 9))
def test_same_seed_same_placements(nodes: list[NodeSpec], ops: list[Any], seed: int) -> None:
    first = _run(nodes, ops, seed)
    second = _run(nodes, ops, seed)
    assert first.result() == second.result()
    assert first.events == second.events
    assert [(c.pod.key, c.node) for c in first.cycles] == [
        (c.pod.key, c.node) for c in second.cycles
    ]


@settings(SETTINGS, max_examples=50)
@given(nodes=st.lists(node_specs, min_size=1, max_size=6), pods=st.lists(pod_specs, max_size=30))
def test_deleting_every_pod_returns_requested_to_zero(
    nodes: list[NodeSpec], pods: list[PodSpec]
) -> None:
    h = SchedulerHarness()
    h.add_nodes(*(_node(i, spec) for i, spec in enumerate(nodes)))
    h.add_pods(*(_pod(i, spec) for i, spec in enumerate(pods)))
    h.run()
    live = {f"default/p{i}": spec for i, spec in enumerate(pods)}
    _forget_evicted(h, live)
    _check_invariants(h, live)
    placements = h.result().placements
    # Whatever is pending really does not fit (or is not tolerated) anywhere right now.
    for key, node in placements.items():
        if node is None:
            assert h.message(key).startswith(f"0/{len(nodes)} nodes are available: ")
    for key in list(live):
        h.delete_pod(key)
    table = h.scheduler.cluster.table
    assert not table.requested[: table.n].any()
    assert not table.nonzero_requested[: table.n].any()
    assert all(not pods_here for pods_here in table.pods)
    assert h.scheduler.cluster.placed == {}
    assert h.scheduler.scheduling_queue.counts() == {
        "active": 0,
        "backoff": 0,
        "unschedulable": 0,
        "gated": 0,
    }
