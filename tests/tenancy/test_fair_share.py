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


def test_every_report_gives_the_same_fair_share() -> None:
    # One measure (HDRF, as a dominant share): the simulator's summary, the dashboard's
    # queue history and the CLI's tenancy status give the same number per queue (they
    # once gave 15.0 % and 30.2 % for the same queue).
    from shoal.sim.queue_metrics import QueueMonitor
    from shoal.testing import SchedulerHarness
    from shoal.web.dashboard.history import queue_shares

    h = SchedulerHarness()
    h.add_nodes(
        *(make_node(f"n{i}").capacity({GPU: 2}, cpu="32", memory="128Gi") for i in range(4))
    )
    queues = [_queue("org", weight=2), _queue("batch"), _queue("a", "org"), _queue("b", "org")]
    assert h.scheduler.apply_queues(queues) == []
    for q, n in (("a", 6), ("b", 2), ("batch", 8)):
        h.add_pods(
            *(make_pod(f"{q}-{i}").labels({"shoal.dev/queue": q}).req({GPU: 1}) for i in range(n))
        )
    h.advance(2)
    manager, table = h.scheduler.tenant_queues, h.scheduler.cluster.table
    monitor = QueueMonitor(manager, table)
    monitor.sample(0.0)
    sim = {s.queue: s.fair_share for s in monitor.samples}
    names, _, shares = queue_shares(manager, table)
    dashboard = {name: float(shares[i, 0, 2]) for i, name in enumerate(names)}
    cli = {name: float(v["fairShare"]) for name, v in manager.status(table).items()}
    assert sim.keys() == dashboard.keys() == cli.keys()
    for name in sim:
        assert abs(sim[name] - dashboard[name]) < 1e-6, name
        assert abs(sim[name] - cli[name]) < 1e-9, name
    assert sim["batch"] > 0 and sim["org"] > sim["batch"]  # weight 2 against 1
