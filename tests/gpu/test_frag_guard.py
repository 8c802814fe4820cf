"""GpuFragGuard (FragGuard): the demand-weighted, learned target workload with a guard
for the largest shapes, and its scores on hand-computed nodes."""

from __future__ import annotations

import pytest

from shoal.cache.gpu_devices import GpuDevices
from shoal.framework.handle import Handle
from shoal.gpu.fragmentation import TargetShape
from shoal.plugins.gpu_frag_guard import GpuFragGuard, GpuFragGuardArgs, demand_workload
from shoal.testing.plugin_env import make_handle, run_score

from .helpers import cpu_pod, gpu_node, gpu_pod

SHARE = TargetShape(4000, 300, 1)  # 0.3 GPU
WHOLE = TargetShape(8000, 1000, 1)
EIGHT = TargetShape(64000, 1000, 8)
EIGHT_SMALL = TargetShape(32000, 1000, 8)
CPU = TargetShape(2000, 0, 0)


def test_weights_are_shares_of_gpu_demand() -> None:
    # 100 shares (30 GPUs), 40 whole GPUs (40), 1 eight-GPU task (8), 50 CPU-only tasks.
    # Demand 78 GPUs: whole 51.3 %, share 38.5 %, eight 10.3 %; CPU-only tasks drop out.
    w = demand_workload({SHARE: 100, WHOLE: 40, EIGHT: 1, CPU: 50}, coverage=1.0, guard=0)
    weights = dict(zip(w.shapes, w.weights, strict=True))
    assert set(weights) == {SHARE, WHOLE, EIGHT}
    assert weights[WHOLE] == round(1e6 * 40 / 78)
    assert weights[SHARE] == round(1e6 * 30 / 78)
    assert weights[EIGHT] == round(1e6 * 8 / 78)
    # By pod count the eight-GPU task would weigh 1 / 141 and fall outside 95 % coverage;
    # by demand it is kept at 95 % (whole + share cover 89.7 %) and dropped at 85 %.
    kept = demand_workload({SHARE: 100, WHOLE: 40, EIGHT: 1}, coverage=0.85, guard=0).shapes
    assert EIGHT not in kept
    assert set(demand_workload({SHARE: 100, WHOLE: 40, EIGHT: 1}, 0.95, 0).shapes) == {
        SHARE,
        WHOLE,
        EIGHT,
    }


def test_the_guard_keeps_the_largest_shape_per_gpu_count() -> None:
    # Demand: shares 30, whole 40, eight-small 8 GPUs, eight 0.08 GPUs (a decayed count).
    # Coverage 0.9 keeps whole and share (70 of 78.08 = 89.7 %) and eight-small; the
    # largest 8-GPU shape (64 cpu) gets the guard floor: w = 0.1 x total, i.e.
    # w = 0.1 (78 + w) / ... solved as w = 0.1 x rest / (1 - 0.1) = 8.67 GPUs of 86.67.
    counts = {SHARE: 100, WHOLE: 40, EIGHT_SMALL: 1, EIGHT: 0.01}
    w = demand_workload(counts, coverage=0.9, guard=0.1)
    weights = dict(zip(w.shapes, w.weights, strict=True))
    assert set(weights) == {SHARE, WHOLE, EIGHT_SMALL, EIGHT}
    assert weights[EIGHT] / sum(w.weights) == pytest.approx(0.1, abs=1e-5)
    assert weights[WHOLE] / weights[SHARE] == pytest.approx(40 / 30, rel=1e-5)
    # No multi-GPU task seen: no guard.
    assert demand_workload({SHARE: 3, WHOLE: 1}, 1.0, 0.1).total_weight == pytest.approx(1e6, 1)


def test_the_guard_grows_with_the_gpu_demand_of_large_tasks() -> None:
    # Pod counts: 40 whole GPUs (40 GPUs of demand), 4 small 8-GPU tasks (32) and a
    # decayed trace of the big 8-GPU shape (0.01 pods, 0.08 GPUs). 8-GPU tasks ask for
    # 32.08 / 72.08 = 44.5 % of the demand, so with guardDemand 0.5 the big shape's floor
    # is 0.5 x 44.5 % = 22.25 % of the weight; a plain guard above that wins.
    counts = {WHOLE: 40, EIGHT_SMALL: 4, EIGHT: 0.01}
    share = 0.5 * 32.08 / 72.08
    w = demand_workload(counts, 1.0, guard=0.01, weighting="count", guard_demand=0.5)
    weights = dict(zip(w.shapes, w.weights, strict=True))
    assert weights[EIGHT] / sum(w.weights) == pytest.approx(share, abs=1e-5)
    # The others keep their pod-count ratio.
    assert weights[WHOLE] / weights[EIGHT_SMALL] == pytest.approx(10, rel=1e-5)
    w = demand_workload(counts, 1.0, guard=0.3, weighting="count", guard_demand=0.5)
    weights = dict(zip(w.shapes, w.weights, strict=True))
    assert weights[EIGHT] / sum(w.weights) == pytest.approx(0.3, abs=1e-5)
    # A trace with few large tasks keeps the plain guard.
    few = {WHOLE: 400, EIGHT_SMALL: 1, EIGHT: 0.01}
    w = demand_workload(few, 1.0, guard=0.01, weighting="count", guard_demand=0.5)
    weights = dict(zip(w.shapes, w.weights, strict=True))
    assert weights[EIGHT] / sum(w.weights) == pytest.approx(0.01, abs=1e-5)


def test_nothing_seen_is_an_empty_workload() -> None:
    assert demand_workload({CPU: 5}, 0.99, 0.05).shapes == ()


def guarded_cluster() -> Handle:
    # n1: an idle 8-GPU, 96-cpu node; n2: the same with one 8-cpu 1-GPU pod on device 0.
    return make_handle(
        nodes=[gpu_node("n1", 8, cpu="96"), gpu_node("n2", 8, cpu="96")],
        pods=[gpu_pod("e", cpu="8", node="n2", devices="0")],
    )


def guard_args(guard: float) -> GpuFragGuardArgs:
    # Seen so far: ten 1-GPU tasks (10 GPUs of demand) and one 8-GPU, 64-cpu task (8).
    # FGD's term only (mix 1:0) so that the numbers can be followed by hand.
    return GpuFragGuardArgs.model_validate(
        {
            "targetWorkload": [
                {"cpuMilli": 8000, "gpuMilli": 1000, "gpuCount": 1, "weight": 10},
                {"cpuMilli": 64000, "gpuMilli": 1000, "gpuCount": 8, "weight": 1},
            ],
            "coverage": 0.5,
            "guard": guard,
            "guardDemand": 0,
            "mix": (1, 0),
            "weighting": "demand",
        }
    )


def test_without_the_guard_a_cpu_pod_may_take_an_idle_whole_node() -> None:
    # Coverage 0.5 keeps only the 1-GPU shape (10 of 18 GPUs of demand): both nodes run
    # it before and after a 40-cpu pod, gain 0, score 50 on both.
    handle = guarded_cluster()
    plugin = GpuFragGuard.new(guard_args(0.0), handle)
    assert run_score(plugin, cpu_pod("c", cpu="40"), handle) == {"n1": 50, "n2": 50}


def test_the_guard_keeps_the_idle_node_whole() -> None:
    # Guard 0.2: the 8-GPU shape weighs 0.2 x rest / 0.8 = 2.5 GPUs against the 1-GPU
    # shape's 10, i.e. popularity 0.2 and 0.8.
    # A 40-cpu pod: n1 goes from F = 0 to 0.2 x 8000 (56 cpu < 64: the 8-GPU shape cannot
    # run): gain -1600, floor(100 sigmoid(-1600 / 500)) = 3. n2 (7 free GPUs) is all
    # fragment for the 8-GPU shape before and after: gain 0 -> 50.
    handle = guarded_cluster()
    plugin = GpuFragGuard.new(guard_args(0.2), handle)
    assert run_score(plugin, cpu_pod("c", cpu="40"), handle) == {"n1": 3, "n2": 50}
    # A 1-GPU pod: on n1, 7 GPUs left: F 0 -> 0.2 x 7000, gain -1400 -> 5; on n2,
    # F 0.2 x 7000 -> 0.2 x 6000, gain +200 -> floor(100 sigmoid(0.4)) = 59.
    assert run_score(plugin, gpu_pod("g", cpu="8"), handle) == {"n1": 5, "n2": 59}


def test_the_workload_is_learned_from_arriving_pods() -> None:
    handle = guarded_cluster()
    plugin = GpuFragGuard.new(GpuFragGuardArgs(), handle)
    run_score(plugin, gpu_pod("g1", milli=300), handle)
    run_score(plugin, gpu_pod("g2", count=8, cpu="64"), handle)
    shapes = plugin.scorer.model.workload.shapes
    assert {(s.gpu_count, s.gpu_milli) for s in shapes} == {(1, 300), (8, 1000)}


def test_constrained_shapes_can_be_boosted() -> None:
    t4 = TargetShape(4000, 1000, 1, ("T4",))
    w = demand_workload({WHOLE: 3, t4: 1}, 1.0, 0.0, constrained_boost=3.0)
    weights = dict(zip(w.shapes, w.weights, strict=True))
    assert weights[t4] == weights[WHOLE] == 500_000


def test_pool_pressure_keeps_a_scarce_model_for_the_pods_that_need_it() -> None:
    # a: 2 T4 GPUs; b, c: 2 V100 GPUs each; all free. A T4-only 1-GPU pod arrives, then an
    # unconstrained 1-GPU pod. Constrained demand: 1000 milli on T4 of 2000 in all (share
    # 0.5). T4's pressure relative to the cluster: (1000 / 2000 free) / (1000 / 6000) = 3;
    # V100's 0. Penalty with pressure 10: T4 10 x 0.5 x (3 - 1) = 10 points, V100 none.
    def scores(pressure: float) -> dict[str, int] | None:
        handle = make_handle(
            nodes=[
                gpu_node("a", 2, model="T4"),
                gpu_node("b", 2, model="V100"),
                gpu_node("c", 2, model="V100"),
            ]
        )
        plugin = GpuFragGuard.new(GpuFragGuardArgs(pool_pressure=pressure), handle)
        run_score(plugin, gpu_pod("t4", models="T4"), handle)
        if pressure:  # only the T4 pod seen so far: share 1, penalty 10 x 1 x 2
            penalty = dict(zip(GpuDevices.of(handle).models, plugin.pool_penalty(), strict=True))
            assert penalty == {"T4": 20, "V100": 0}
        return run_score(plugin, gpu_pod("any"), handle)

    plain, pressed = scores(0.0), scores(10.0)
    assert plain is not None and pressed is not None
    assert pressed == {"a": plain["a"] - 10, "b": plain["b"], "c": plain["c"]}
