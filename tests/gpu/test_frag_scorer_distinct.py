"""FragScorer scores a large batch of stale rows once per distinct node state (many nodes
share one; state ids kept across refits); the scores and devices must be those of
scoring every row on its own."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from shoal.cache.gpu_devices import GpuDevices
from shoal.gpu.fragmentation import (
    FragmentationModel,
    FragScorer,
    StateClasses,
    TargetShape,
    TargetWorkload,
)
from shoal.testing.builders import NodeBuilder, PodBuilder
from shoal.testing.plugin_env import as_pod_info, make_handle

from .helpers import cpu_pod, gpu_node, gpu_pod

NODE_TYPES = [(8, "96", "V100"), (4, "32", "T4"), (2, "64", "T4"), (8, "64", "")]
SHAPES = [
    TargetShape(4000, 300, 1, (), 8 << 30),
    TargetShape(8000, 1000, 1, (), 16 << 30),
    TargetShape(12000, 500, 1, ("T4",), 0),
    TargetShape(32000, 1000, 4, (), 64 << 30),
    TargetShape(64000, 1000, 8, (), 0),
    TargetShape(2000, 0, 0),
]


def _cluster(seed: int, nodes: int) -> tuple[list[NodeBuilder], list[PodBuilder]]:
    """`nodes` nodes of a few types, a third of them with a pod or two: duplicates
    (idle nodes of a type, nodes filled alike) and distinct states."""
    rng = np.random.default_rng(seed)
    built, pods = [], []
    for i in range(nodes):
        gpus, cpu, model = NODE_TYPES[int(rng.integers(len(NODE_TYPES)))]
        built.append(gpu_node(f"n{i}", gpus, cpu=cpu, model=model))
        for j in range(int(rng.choice([0, 0, 1, 2]))):
            name = f"p{i}-{j}"
            kind = int(rng.integers(3))
            if kind == 0:
                milli = int(rng.choice([250, 300, 500]))
                pods.append(
                    gpu_pod(name, milli=milli, cpu="4", node=f"n{i}", devices=str(j % gpus))
                )
            elif kind == 1:
                pods.append(gpu_pod(name, cpu="8", node=f"n{i}", devices=str(j % gpus)))
            else:
                pods.append(cpu_pod(name, cpu=str(int(rng.choice([2, 8]))), node=f"n{i}"))
    return built, pods


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    nodes=st.sampled_from([64, 90, 150]),
    weights=st.lists(st.integers(1, 1000), min_size=len(SHAPES), max_size=len(SHAPES)),
    refit=st.lists(st.integers(1, 1000), min_size=len(SHAPES), max_size=len(SHAPES)),
    mix=st.sampled_from([(1, 0), (16, 1), (0, 1)]),
)
def test_distinct_states_score_as_every_row(
    seed: int,
    nodes: int,
    weights: list[int],
    refit: list[int],
    mix: tuple[int, int],
) -> None:
    handle = make_handle(*_cluster(seed, nodes), seed=seed)
    handle.snapshot.refresh()
    devices = GpuDevices.of(handle)
    rows = np.arange(handle.snapshot.n, dtype=np.intp)
    pods = [(TargetShape(4000, 300, 1, (), 8 << 30), True)]
    pods += [(s, False) for s in SHAPES[1:]]
    # Two workloads: a scorer per fit, as a refit builds (the score caches start empty,
    # the state ids carry over).
    classes = StateClasses()
    for fit, w in enumerate((weights, refit)):
        if fit:
            # Between the fits pods land on some nodes: their ids must be renewed.
            for i in range(0, nodes, 7):
                pod = as_pod_info(cpu_pod(f"late{i}", cpu="16", node=f"n{i}"))
                handle.cluster.add_bound_pod(pod, f"n{i}")
            handle.snapshot.refresh()
        workload = TargetWorkload(tuple(SHAPES), tuple(w))

        def scorer(
            workload: TargetWorkload = workload, shared: StateClasses | None = None
        ) -> FragScorer:
            model = FragmentationModel(workload, devices.models, "blend", mix)
            return FragScorer(devices, handle.snapshot, model, classes=shared)

        distinct, every = scorer(shared=classes), scorer()
        distinct.distinct_min, every.distinct_min = 64, 1 << 30
        for shape, per_device in pods:
            # The second shape's stale rows find "before" values the first one cached
            # for rows it did not compute (their state's representative's).
            got = distinct.score(rows, shape, per_device)
            want = every.score(rows, shape, per_device)
            assert list(got[0]) == list(want[0])
            assert list(got[1]) == list(want[1])
            # A small batch (one row scored on its own) reads the cached "before".
            few = rows[:3]
            devices.version[few] += 1
            got = distinct.score(few, shape, per_device)
            want = every.score(few, shape, per_device)
            assert list(got[0]) == list(want[0])
            assert list(got[1]) == list(want[1])
