"""Weighted hierarchical fair share: a three-level tree (org / team / user) converges to
the weighted HDRF allocation, and the simulator's fairness metric reports it."""

from __future__ import annotations

from shoal.api.manifests import decode
from shoal.api.queue import Queue
from shoal.sim.engine import SimOptions, simulate
from shoal.sim.scenario import Scenario
from shoal.sim.workload import PodSource
from shoal.tenancy.fairshare import jain_index
from shoal.testing import make_node, make_pod

GPU = "nvidia.com/gpu"

# org weight, team weight, users (all leaf weights 1)
TREE = {
    "org-a": (2, {"team-a1": (1, ["u1", "u2"]), "team-a2": (1, ["u3"])}),
    "org-b": (1, {"team-b1": (1, ["u4", "u5"])}),
}
# Expected weighted max-min shares of 30 GPUs when every user has unbounded demand:
# org-a 2/3 (20), org-b 1/3 (10); team-a1 = team-a2 = 10; u1 = u2 = 5, u3 = 10; u4 = u5 = 5.
EXPECTED = {"u1": 5, "u2": 5, "u3": 10, "u4": 5, "u5": 5}


def _queue(name: str, parent: str = "", weight: int = 1) -> Queue:
    return decode({"metadata": {"name": name}, "spec": {"parent": parent, "weight": weight}}, Queue)


def _scenario(jobs_per_user: int = 80) -> Scenario:
    sc = Scenario()
    sc.nodes = [
        make_node(f"n{i}").capacity({GPU: 2}, cpu="32", memory="128Gi").obj() for i in range(15)
    ]
    for org, (w, teams) in TREE.items():
        sc.queues.append(_queue(org, weight=w))
        for team, (tw, users) in teams.items():
            sc.queues.append(_queue(team, org, tw))
            sc.queues.extend(_queue(u, team) for u in users)
    for user in EXPECTED:
        for j in range(jobs_per_user):
            pod = (
                make_pod(f"{user}-{j}")
                .labels({"shoal.dev/queue": user})
                .req({GPU: 1}, cpu="1")
                .obj()
            )
            # Every user has far more demand than its share; jobs last 100-150 s.
            sc.pods.append(
                PodSource(0.0, 100.0 + (j % 6) * 10, "default", pod.metadata.name, pod=pod)
            )
    return sc


def test_three_level_tree_converges_to_weighted_hdrf_shares() -> None:
    result = simulate(_scenario(), SimOptions(seed=3, until=600, queue_sample_seconds=30))
    monitor = result.queues
    assert monitor is not None
    # At every sample after the start, each user holds its weighted fair share of GPUs
    # (dominant share here = GPUs / 30), within one GPU.
    for sample in monitor.samples:
        if sample.queue in EXPECTED and 30 <= sample.time <= 540:
            assert abs(sample.allocated * 30 - EXPECTED[sample.queue]) <= 1.0 + 1e-9, sample
            assert abs(sample.fair_share * 30 - EXPECTED[sample.queue]) <= 1e-6, sample
    # ...and the simulator's fairness index says so.
    steady = [j for t, j in monitor.jain if 30 <= t <= 540]
    assert steady and min(steady) > 0.98


def test_jain_index_bounds() -> None:
    assert jain_index([1.0, 1.0, 1.0]) == 1.0
    assert abs(jain_index([1.0, 0.0, 0.0, 0.0]) - 0.25) < 1e-12
