"""Properties of placement by migration, over random clusters and workloads (simulator).

Every plan the Rescheduler executes must lose nothing: each pod it moved runs again
(its replacement, re-created by the controller after a random delay) and the pod the
plan was for is placed; no pod is moved before it ran `minRunSeconds`; no controller has
a pod moved twice within `cooldownSeconds`; the hourly budget is never exceeded.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from itertools import pairwise

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shoal.plugins.rescheduler import with_rescheduler
from shoal.sim.engine import SimOptions, Simulation
from shoal.sim.results import PodState
from shoal.sim.runner import load_scheduler_config
from shoal.sim.scenario import Scenario
from shoal.sim.workload import PodSource
from shoal.testing import make_node, make_pod

GPU = "nvidia.com/gpu"
MIN_RUN = 50.0
COOLDOWN = 200.0
PER_HOUR = 5
PLAN = re.compile(r"rescheduled by plan (\S+): .* to make room for default/(\S+) on node")


@dataclass(frozen=True)
class Job:
    name: str
    gpus: int
    at: float
    node: str  # "" = placed by the scheduler
    movable: bool


@st.composite
def workloads(draw: st.DrawFn) -> tuple[int, list[Job], float]:
    """Running pods spread over the nodes at t=0, then larger pods arriving once the
    running ones may be moved (fragmentation the rescheduler can undo, or not)."""
    nodes = draw(st.integers(2, 5))
    jobs: list[Job] = []
    for i in range(draw(st.integers(2, 3 * nodes))):
        node = f"node{draw(st.integers(1, nodes))}"
        gpus = draw(st.integers(1, 5))
        jobs.append(Job(f"run{i}", gpus, 0.0, node, draw(st.integers(0, 4)) > 0))
    for i in range(draw(st.integers(1, 4))):
        at = draw(st.sampled_from([60.0, 90.0, 300.0]))
        jobs.append(Job(f"new{i}", draw(st.integers(3, 7)), at, "", True))
    delay = draw(st.sampled_from([0.0, 5.0, 30.0]))
    return nodes, jobs, delay


def scenario(nodes: int, jobs: list[Job]) -> Scenario:
    used: dict[str, int] = {}
    pods = []
    for job in jobs:
        node = job.node
        if node and used.get(node, 0) + job.gpus > 8:
            node = ""  # a prebound pod must fit its node
        if node:
            used[node] = used.get(node, 0) + job.gpus
        b = make_pod(job.name).req({GPU: job.gpus}, cpu="1").scheduler_name("shoal")
        b = b.owner("ReplicaSet", f"rs-{job.name}")
        if not job.movable:
            b = b.annotations({"shoal.dev/movable": "false"})
        if node:
            b = b.node(node)
        pods.append(PodSource(job.at if not node else 0.0, None, "default", job.name, pod=b.obj()))
    return Scenario(
        nodes=[
            make_node(f"node{i}").capacity({GPU: 8}, cpu="64", memory="256Gi").obj()
            for i in range(1, nodes + 1)
        ],
        pods=pods,
    )


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads())
def test_every_executed_plan_loses_nothing(case: tuple[int, list[Job], float]) -> None:
    nodes, jobs, delay = case
    args = {
        "minRunSeconds": MIN_RUN,
        "cooldownSeconds": COOLDOWN,
        "movesPerHour": PER_HOUR,
        "holdSeconds": 300,
    }
    config = with_rescheduler(load_scheduler_config(None), args)
    sim = Simulation(scenario(nodes, jobs), SimOptions(config=config, recreate_delay=delay))
    result = sim.run()
    records = {r.name: r for r in result.records}
    evictions = sim.effects.evictions
    assert all(PLAN.match(e.reason) for e in evictions), "only the rescheduler evicts here"

    base = {r.name: r.name.split("-r")[0] for r in result.records}
    for eviction in evictions:
        match = PLAN.match(eviction.reason)
        assert match is not None
        name = eviction.pod.removeprefix("default/")
        moved = records[name]
        # The waiting pod of the plan is placed.
        assert records[match.group(2)].state is PodState.RUNNING, match.group(2)
        # The moved pod runs again: its controller's replacement is running.
        assert any(
            r.state is PodState.RUNNING and base[r.name] == base[name] and r.name != name
            for r in result.records
        ), f"{name} was moved by {match.group(1)} and does not run again"
        # It had run long enough.
        started = moved.bound_at if moved.bound_at is not None else moved.arrival
        assert eviction.at - started >= MIN_RUN

    # No controller moved twice within the cool-down; the hourly budget held.
    by_owner: dict[str, list[float]] = {}
    for eviction in evictions:
        by_owner.setdefault(base[eviction.pod.removeprefix("default/")], []).append(eviction.at)
    for times in by_owner.values():
        times.sort()
        assert all(b - a >= COOLDOWN for a, b in pairwise(times))
    times = sorted(e.at for e in evictions)
    for i, t in enumerate(times):
        assert sum(1 for u in times[i:] if u < t + 3600) <= PER_HOUR
