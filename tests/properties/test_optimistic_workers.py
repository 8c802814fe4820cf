"""Optimistic workers over random clusters and pods: whatever the workers decide on their
stale replicas and however many conflicts the committer rejects,

* no node is overcommitted: the requests of the pods bound to each node (recomputed
  from the binds, not read from the cache) fit its allocatable, pod slots included;
* every pod is bound at most once (one Bind effect per pod), and the pods left pending
  are exactly those without a bind;
* when there is room for everything (the pods together fit on the smallest node), the
  workers bind every pod, as a single scheduler does.
"""

from __future__ import annotations

from collections import Counter, defaultdict

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shoal.api.resources import parse_resource_list
from shoal.config import KubeSchedulerConfiguration
from shoal.drivers.loop import Driver
from shoal.drivers.memory import ManualClock, MemoryEffects
from shoal.drivers.optimistic import OptimisticDriver
from shoal.framework.effects import Bind, Effect
from shoal.scheduler import new_scheduler
from shoal.testing import make_node, make_pod

node_st = st.tuples(st.integers(1, 4), st.integers(1, 4), st.integers(2, 8))  # cpu, GiB, pods
pod_st = st.tuples(st.integers(1, 4), st.integers(1, 4))  # cpu in 250m, memory in 256Mi


def run(
    nodes: list[tuple[int, int, int]], pods: list[tuple[int, int]], workers: int, batch: int
) -> tuple[dict[str, str], Counter[str]]:
    effects = MemoryEffects()
    binds: Counter[str] = Counter()

    def count(effect: Effect) -> None:
        if isinstance(effect, Bind):
            binds[effect.pod.uid] += 1

    effects.listeners.append(count)
    sched = new_scheduler(KubeSchedulerConfiguration(), clock=ManualClock(), effects=effects)
    for i, (cpu, gib, slots) in enumerate(nodes):
        sched.add_node(
            make_node(f"n{i}").capacity(cpu=str(cpu), memory=f"{gib}Gi", pods=slots).obj()
        )
    for i, (cpu, mem) in enumerate(pods):
        sched.add_pod(make_pod(f"p{i}").req(cpu=f"{cpu * 250}m", memory=f"{mem * 256}Mi").obj())
    if workers:
        with OptimisticDriver(sched, effects, workers=workers, batch=batch) as driver:
            assert driver.run()
            stats = driver.stats()
        assert stats["proposed"] == stats["committed"] + stats["conflicts"]
    else:
        assert Driver(sched, inbox=effects).run()
    return dict(effects.bound), binds


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    nodes=st.lists(node_st, min_size=1, max_size=6),
    pods=st.lists(pod_st, min_size=1, max_size=24),
    workers=st.integers(2, 4),
    batch=st.integers(1, 8),
    room=st.booleans(),
)
def test_workers_never_overcommit_and_bind_each_pod_once(
    nodes: list[tuple[int, int, int]],
    pods: list[tuple[int, int]],
    workers: int,
    batch: int,
    room: bool,
) -> None:
    if room:  # every node could hold every pod: nothing may be left pending
        nodes = [(max(cpu, 24), max(gib, 24), 110) for cpu, gib, _ in nodes]
    bound, binds = run(nodes, pods, workers, batch)
    assert set(binds.values()) <= {1}
    assert set(binds) == set(bound)
    used: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    for uid, node in bound.items():
        cpu, mem = pods[int(uid.removeprefix("default/p"))]
        total = used[node]
        total[0] += cpu * 250
        total[1] += mem * 256 * 2**20
        total[2] += 1
    for node, (cpu, mem, count) in used.items():
        alloc = nodes[int(node.removeprefix("n"))]
        assert cpu <= alloc[0] * 1000
        assert mem <= alloc[1] * 2**30
        assert count <= alloc[2]
    roomy = (
        sum(c for c, _ in pods) * 250 <= min(n[0] for n in nodes) * 1000
        and sum(m for _, m in pods) * 256 * 2**20 <= min(n[1] for n in nodes) * 2**30
        and len(pods) <= min(n[2] for n in nodes)
    )
    if roomy:
        serial, _ = run(nodes, pods, 0, batch)
        assert len(bound) == len(serial) == len(pods)


def test_the_resource_units_above_are_the_caches() -> None:
    assert parse_resource_list({"cpu": "250m", "memory": "256Mi"}) == {
        "cpu": 250,
        "memory": 256 * 2**20,
    }
