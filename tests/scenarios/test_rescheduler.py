"""Placement by migration (the Rescheduler), in the simulator.

The requirements' case: two 8-GPU nodes; node1 runs podA (4 GPUs) and podB (3 GPUs),
node2 runs other work with 5 GPUs; podC asks for 4 GPUs and fits nowhere, and nothing
has a lower priority to preempt. Moving podB to node2 makes room: the end state is
node1 = podA + podC, node2 = other + podB (re-created by its controller), with exactly
one eviction. Gang variants: a running 2-pod gang moves whole to make room for a 4-GPU
job, and when it cannot move whole nothing moves.
"""

from __future__ import annotations

from typing import Any

from shoal.config.types import Plugin
from shoal.plugins.rescheduler import with_rescheduler
from shoal.sim.engine import SimOptions, SimResult, Simulation
from shoal.sim.results import PodState
from shoal.sim.runner import load_scheduler_config
from shoal.sim.scenario import Scenario
from shoal.sim.workload import PodSource
from shoal.testing import SchedulerHarness, make_node, make_pod
from shoal.testing.builders import PodBuilder

GPU = "nvidia.com/gpu"
GANG = "pod-group.scheduling.sigs.k8s.io/name"
GANG_MIN = "pod-group.scheduling.sigs.k8s.io/min-available"


def pod(
    name: str,
    gpus: int,
    node: str = "",
    at: float = 0.0,
    *,
    owner: str | None = "ReplicaSet",
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
) -> PodSource:
    b = make_pod(name).req({GPU: gpus}, cpu="1").scheduler_name("shoal")
    if owner:
        b = b.owner(owner, f"{owner.lower()}-{name.split('-')[0]}")
    if node:
        b = b.node(node)
    if labels:
        b = b.labels(labels)
    if annotations:
        b = b.annotations(annotations)
    return PodSource(at, None, "default", name, pod=b.obj())


def nodes(count: int) -> list[Any]:
    return [
        make_node(f"node{i}").capacity({GPU: 8}, cpu="64", memory="256Gi").obj()
        for i in range(1, count + 1)
    ]


def simulate(
    scenario: Scenario,
    args: dict[str, Any] | None = None,
    *,
    gpu_share: bool = False,
    **options: Any,
) -> tuple[SimResult, Simulation]:
    base = load_scheduler_config(None)
    if gpu_share:  # device-level GPU fit, for pods asking for shares of a GPU
        for profile in base.profiles:
            profile.plugins.multi_point.enabled.append(Plugin(name="GpuShare"))
    config = with_rescheduler(base, {"minRunSeconds": 0, **(args or {})})
    sim = Simulation(scenario, SimOptions(config=config, **{"until": 600, **options}))
    return sim.run(), sim


def running(result: SimResult) -> dict[str, str]:
    return {r.name: r.node for r in result.records if r.state is PodState.RUNNING}


def issue_case(**extra: PodSource) -> Scenario:
    return Scenario(
        nodes=nodes(2),
        pods=[
            pod("podA", 4, "node1"),
            pod("podB", 3, "node1"),
            pod("other", 5, "node2"),
            pod("podC", 4, at=10),
            *extra.values(),
        ],
    )


def test_the_requirements_case_moves_podB_and_places_podC() -> None:
    result, sim = simulate(issue_case())
    assert running(result) == {
        "podA": "node1",
        "podC": "node1",
        "other": "node2",
        "podB-r1": "node2",
    }
    evictions = sim.effects.evictions
    assert [e.pod for e in evictions] == ["default/podB"]
    reason = evictions[0].reason
    assert reason.startswith(
        "rescheduled by plan migration-1: moving from node node1 to node node2"
    )
    assert "to make room for default/podC on node node1" in reason


def test_without_the_rescheduler_podC_waits() -> None:
    sim = Simulation(issue_case(), SimOptions(until=600))
    result = sim.run()
    assert "podC" not in running(result)
    assert sim.effects.evictions == []


def test_the_held_room_survives_the_controllers_delay() -> None:
    # podB's replacement arrives 30 s after the eviction; a 3-GPU pod arriving in the
    # meantime must not take the room held for it on node2.
    scenario = issue_case(late=pod("late", 3, at=20, owner=None))
    result, _ = simulate(scenario, recreate_delay=30)
    placed = running(result)
    assert placed["podB-r1"] == "node2"
    assert placed["podC"] == "node1"
    assert "late" not in placed


def test_an_unclaimed_hold_expires() -> None:
    # The controller never re-creates podB: after holdSeconds the room goes to others.
    scenario = issue_case(late=pod("late", 3, at=20, owner=None))
    result, _ = simulate(scenario, {"holdSeconds": 60}, recreate_evicted=False)
    placed = running(result)
    assert placed["podC"] == "node1"
    assert placed["late"] == "node2"
    late = next(r for r in result.records if r.name == "late")
    assert late.bound_at is not None and late.bound_at >= 70


def test_pods_that_may_not_move_are_not_moved() -> None:
    for blocker in (
        pod("podB", 3, "node1", annotations={"shoal.dev/movable": "false"}),
        pod("podB", 3, "node1", owner=None),  # nobody would re-create it
    ):
        scenario = issue_case()
        scenario.pods[1] = blocker
        result, sim = simulate(scenario)
        assert "podC" not in running(result)
        assert sim.effects.evictions == []
        podc = next(r for r in result.records if r.name == "podC")
        assert "rescheduler: no plan" in podc.message


def test_a_young_pod_is_not_moved() -> None:
    result, sim = simulate(issue_case(), {"minRunSeconds": 60})
    # podB started at t=0; podC waits until podB has run 60 s.
    podc = next(r for r in result.records if r.name == "podC")
    assert podc.state is PodState.RUNNING and podc.node == "node1"
    assert podc.bound_at is not None and podc.bound_at >= 60
    assert len(sim.effects.evictions) == 1


def test_higher_priority_work_is_not_moved_for_lower() -> None:
    scenario = issue_case()
    b = make_pod("podB").req({GPU: 3}, cpu="1").scheduler_name("shoal").node("node1")
    scenario.pods[1] = PodSource(
        0, None, "default", "podB", pod=b.owner("ReplicaSet", "rs").priority(10).obj()
    )
    result, sim = simulate(scenario)
    assert "podC" not in running(result)
    assert sim.effects.evictions == []


def test_the_hourly_budget_is_held() -> None:
    scenario = issue_case()
    result, sim = simulate(scenario, {"movesPerHour": 0})
    assert sim.effects.evictions == []
    podc = next(r for r in result.records if r.name == "podC")
    assert "budget of 0 moves per hour is used up" in podc.message


def gang(name: str, index: int, gpus: int, node: str, **kw: Any) -> PodSource:
    return pod(f"{name}-{index}", gpus, node, owner="Job", labels={GANG: name, GANG_MIN: "2"}, **kw)


def gang_case(movable: bool = True) -> Scenario:
    """node1: train-0 (2 GPUs) + podA (4); node2: train-1 (2) + other (4);
    node3: more (6). podC (4 GPUs) fits nowhere. Moving train-0 alone to node3 would
    make room but break the gang: it moves whole (train-0 to node3, train-1 where it
    fits) or not at all."""
    annotations = {} if movable else {"shoal.dev/movable": "false"}
    return Scenario(
        nodes=nodes(3),
        pods=[
            gang("train", 0, 2, "node1"),
            gang("train", 1, 2, "node2", annotations=annotations),
            pod("podA", 4, "node1"),
            pod("other", 4, "node2"),
            pod("more", 6, "node3"),
            pod("podC", 4, at=10),
        ],
    )


def test_a_running_gang_moves_whole() -> None:
    result, sim = simulate(gang_case())
    evicted = sorted(e.pod for e in sim.effects.evictions)
    assert evicted == ["default/train-0", "default/train-1"]
    placed = running(result)
    assert placed["podC"] == "node1"
    # Both members run again (re-created by their Job), none on node1.
    members = {k: v for k, v in placed.items() if k.startswith("train-")}
    assert len(members) == 2 and all(k.endswith(("-r1", "-r2")) for k in members)
    assert "node1" not in members.values()


def test_a_gang_that_cannot_move_whole_is_not_moved() -> None:
    result, sim = simulate(gang_case(movable=False))
    assert sim.effects.evictions == []
    assert "podC" not in running(result)
    assert {"train-0", "train-1"} <= set(running(result))


# ---- defragmentation ----------------------------------------------------------------


def share_pod(name: str, milli: int, node: str, index: int, at: float = 0.0) -> PodSource:
    annotations = {
        "alibabacloud.com/gpu-milli": str(milli),
        "alibabacloud.com/gpu-count": "1",
        "shoal.dev/gpu-index": str(index),
    }
    return pod(name, 0, node, at, annotations=annotations)


def shared_cluster(late: float = 400.0) -> Scenario:
    """Two 2-GPU nodes, each GPU half used by a GPU-share pod; a third node runs a
    whole-GPU pod. No node has a whole GPU free, though two halves on each node could
    share one device. A whole-GPU pod arrives at `late`."""
    two_gpus = [
        make_node(f"node{i}").capacity({GPU: 2}, cpu="64", memory="256Gi").obj() for i in (1, 2)
    ]
    one_gpu = make_node("node3").capacity({GPU: 1}, cpu="64", memory="256Gi").obj()
    whole = {"alibabacloud.com/gpu-milli": "1000", "alibabacloud.com/gpu-count": "1"}
    return Scenario(
        nodes=[*two_gpus, one_gpu],
        pods=[
            share_pod("s1", 500, "node1", 0),
            share_pod("s2", 500, "node1", 1),
            share_pod("s3", 500, "node2", 0),
            share_pod("s4", 500, "node2", 1),
            pod("w", 0, "node3", annotations=whole),
            # Arrivals keep the simulator ticking while the passes run.
            *(pod(f"cpu{i}", 0, at=float(t), owner=None) for i, t in enumerate(range(50, 400, 50))),
            pod("whole", 0, at=late, owner=None, annotations=whole),
        ],
    )


def test_the_defragmentation_pass_frees_a_whole_gpu_before_it_is_needed() -> None:
    args = {"defragIntervalSeconds": 60, "defragMovesPerPass": 1}
    result, sim = simulate(shared_cluster(), args, gpu_share=True)
    evictions = sim.effects.evictions
    # One move consolidates two halves on one device; then a whole GPU is free and the
    # pass has nothing more to do.
    assert len(evictions) == 1, [e.reason for e in evictions]
    reason = evictions[0].reason
    assert "to make room for a typical 1 x 1000 milli-GPU pod" in reason
    assert "fragmentation of the nodes touched 400 -> 200 milli-GPU" in reason
    placed = running(result)
    whole = next(r for r in result.records if r.name == "whole")
    assert placed["whole"] in ("node1", "node2")
    assert whole.bound_at == whole.arrival  # no wait: the room was made in advance
    assert sum(1 for name in placed if name.startswith("s")) == 4  # the moved one runs again


def test_without_the_pass_the_whole_gpu_pod_waits_for_placement_by_migration() -> None:
    result, sim = simulate(shared_cluster(), gpu_share=True)
    placed = running(result)
    # The PostFilter path alone still places it, by moving a half at its arrival.
    assert placed["whole"] in ("node1", "node2")
    assert len(sim.effects.evictions) == 1
    assert "to make room for default/whole" in sim.effects.evictions[0].reason


def test_a_waiting_gang_is_placed_by_moving_a_pod_for_one_member() -> None:
    # node3 takes one 4-GPU member; the other fits nowhere until b1 moves from node1 to
    # node3, in the same decision as the gang (its member is counted on node3 already).
    members = [
        pod(f"job-{i}", 4, at=10, owner=None, labels={GANG: "job", GANG_MIN: "2"}) for i in range(2)
    ]
    scenario = Scenario(
        nodes=nodes(3),
        pods=[
            pod("a1", 4, "node1"),
            pod("b1", 3, "node1"),
            pod("a2", 4, "node2"),
            pod("b2", 4, "node2"),
            pod("c", 1, "node3"),
            *members,
        ],
    )
    result, sim = simulate(scenario)
    placed = running(result)
    assert [e.pod for e in sim.effects.evictions] == ["default/b1"]
    assert sorted((placed["job-0"], placed["job-1"])) == ["node1", "node3"]
    assert placed["b1-r1"] == "node3"


def test_a_replacement_naming_the_plan_claims_its_hold() -> None:
    # No controller here: whoever re-creates podB names the plan in the
    # shoal.dev/migration-plan annotation; a stranger arriving first does not get the room.
    config = with_rescheduler(load_scheduler_config(None), {"minRunSeconds": 0})
    h = SchedulerHarness(config)
    h.add_nodes(
        *(make_node(f"node{i}").capacity({GPU: 8}, cpu="64", memory="256Gi") for i in (1, 2))
    )

    def gpu_pod(name: str, gpus: int) -> PodBuilder:
        return make_pod(name).req({GPU: gpus}, cpu="1").scheduler_name("shoal")

    h.add_pods(
        gpu_pod("podA", 4).node("node1"),
        gpu_pod("podB", 3).node("node1").owner("ReplicaSet", "rs-b"),
        gpu_pod("other", 5).node("node2"),
    )
    h.add_pods(gpu_pod("podC", 4))
    h.advance(5)
    assert list(h.evicted) == ["default/podB"]
    assert h.node_of("default/podC") == "node1"
    h.add_pods(gpu_pod("stranger", 3))
    h.add_pods(gpu_pod("podB-again", 3).annotations({"shoal.dev/migration-plan": "migration-1"}))
    h.advance(5)
    assert h.node_of("default/podB-again") == "node2"
    assert h.node_of("default/stranger") is None
