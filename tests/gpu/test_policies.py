"""Each published policy's score on hand-computed nodes.

n1: 8 GPUs, 96 cpu; a 0.5-GPU pod on device 0 and a 36-cpu pod: 7.5 GPUs and 56 cpu free.
n2: 2 idle GPUs, 64 cpu.
n3: 4 GPUs, 32 cpu; two 1-GPU pods (8 cpu each) on devices 2 and 3: 2 GPUs, 16 cpu free.
The pod asks for 0.3 GPU and 4 cpu.
"""

from __future__ import annotations

from shoal.cache.gpu_devices import GpuDevices
from shoal.framework.handle import Handle
from shoal.plugins.fragmentation_base import GpuFragmentationArgs, TargetShapeArgs
from shoal.plugins.gpu_best_fit import GpuBestFit
from shoal.plugins.gpu_clustering import GpuClustering
from shoal.plugins.gpu_dot_product import GpuDotProduct
from shoal.plugins.gpu_fgd import GpuFragmentation
from shoal.plugins.gpu_frag_blend import GpuFragBlend, GpuFragBlendArgs
from shoal.plugins.gpu_packing import GpuPacking
from shoal.plugins.gpu_random import GpuRandom
from shoal.testing.plugin_env import make_handle, run_score

from .helpers import cpu_pod, gpu_node, gpu_pod

POD = gpu_pod("p", milli=300, cpu="4")


def cluster(seed: int = 0) -> Handle:
    return make_handle(
        nodes=[
            gpu_node("n1", 8, cpu="96"),
            gpu_node("n2", 2, cpu="64"),
            gpu_node("n3", 4, cpu="32"),
        ],
        pods=[
            gpu_pod("e1", milli=500, cpu="4", node="n1", devices="0"),
            cpu_pod("e2", cpu="36", node="n1"),
            gpu_pod("e3", cpu="8", node="n3", devices="2"),
            gpu_pod("e4", cpu="8", node="n3", devices="3"),
        ],
        seed=seed,
    )


def test_dot_product() -> None:
    # 100 * (1 - (cpu_free/128 * 4/128 + gpu_free/8 * 0.3/8) / 2), truncated.
    # n1: 1 - (0.4375*0.03125 + 0.9375*0.0375)/2 = 0.97559; n2: 0.9875; n3: 0.99336.
    handle = cluster()
    assert run_score(GpuDotProduct.new(None, handle), POD, handle) == {"n1": 97, "n2": 98, "n3": 99}


def test_gpu_clustering() -> None:
    # used = 25 * (8000 - GPU milli left) // 8000: n1 1, n2 18, n3 18.
    # n1 runs only shares (+75), n2 runs no GPU pod (+25), n3 runs only 1-GPU pods (+0).
    handle = cluster()
    assert run_score(GpuClustering.new(None, handle), POD, handle) == {"n1": 76, "n2": 43, "n3": 18}
    # CPU-only pods score 0 everywhere.
    assert set(run_score(GpuClustering.new(None, handle), cpu_pod("c"), handle).values()) == {0}  # type: ignore[union-attr]


def test_gpu_packing() -> None:
    # n1: shares device 0 (500 free): 100 - (50 % free) / 10 = 95.
    # n2: idle node: max(33 - 2 free devices, 2) = 31.
    # n3: takes a fully free device of a used node: max(50 - 1, 33) = 49.
    handle = cluster()
    assert run_score(GpuPacking.new(None, handle), POD, handle) == {"n1": 95, "n2": 31, "n3": 49}


def test_best_fit() -> None:
    # 100 * (1 - 0.5 (cpu_free - 4)/128 - 0.5 (gpu_free - 0.3)/8): n1 34.69, n2 65.94,
    # n3 84.69 -> 34, 65, 84, then min-max normalised: 0, (65-34)*100//50 = 62, 100.
    handle = cluster()
    plugin = GpuBestFit.new(None, handle)
    assert run_score(plugin, POD, handle, normalize=False) == {"n1": 34, "n2": 65, "n3": 84}
    assert run_score(plugin, POD, handle) == {"n1": 0, "n2": 62, "n3": 100}


def test_fgd_score_and_device_choice() -> None:
    # Target workload: a (4 cpu, 0.3 GPU) share and a (8 cpu, 1 GPU) task, equally popular.
    # n1 before: F = (0 + 500) / 2 = 250. Taking device 0 (500 -> 200): F = (200 + 200) / 2
    # = 200, gain 50, score floor(100 sigmoid(0.05)) = 51; taking a full device
    # (1000 -> 700): F = (0 + 1200) / 2 = 600, gain -350, score 41. The node scores 51 with
    # device 0.
    # n2 and n3: F = 0 before; taking a full device leaves 700 that the 1-GPU task cannot
    # use: F = 350, gain -350, score floor(100 sigmoid(-0.35)) = 41.
    handle = cluster()
    args = GpuFragmentationArgs(
        target_workload=[
            TargetShapeArgs(cpu_milli=4000, gpu_milli=300, gpu_count=1),
            TargetShapeArgs(cpu_milli=8000, gpu_milli=1000, gpu_count=1),
        ]
    )
    plugin = GpuFragmentation.new(args, handle)
    assert run_score(plugin, POD, handle) == {"n1": 51, "n2": 41, "n3": 41}
    devices = GpuDevices.of(handle)
    plan = devices._plan
    assert plan is not None and plan[0] == "p"
    assert [int(c[0]) for c in plan[2]] == [0, 0, 0]  # device 0 on n1, first free elsewhere


TWO_SHAPES = [
    TargetShapeArgs(cpu_milli=4000, gpu_milli=300, gpu_count=1),
    TargetShapeArgs(cpu_milli=8000, gpu_milli=1000, gpu_count=1),
]


def test_frag_blend_share_score_and_device_choice() -> None:
    # Same target workload as above; blended F = 16 x FGD + 1 x fill, summed over the two
    # shapes, over a total weight of 2 x 17 = 34.
    # n1 (7.5 GPUs, 56 cpu) before: FGD 0 + 500; fill: shape A fits min(22 by GPU,
    # 14 by cpu) = 14 copies -> 7500 - 4200 = 3300, B min(7, 7) -> 500: 16*500 + 3800 = 11800.
    # Device 0 (500 -> 200, 52 cpu): FGD 200 + 200; fill A 13 copies -> 3300, B 6 copies
    # -> 1200: 16*400 + 4500 = 10900, gain 900/34 = 26.5, floor(100 sigmoid(26.5/500)) = 51.
    # A full device (-> 700): FGD 0 + 1200, fill 4500: gain (11800 - 23700)/34 = -350 -> 33.
    # n2 (200 -> 12100) and n3 (800 -> 12700): gain -350 -> 33.
    handle = cluster()
    plugin = GpuFragBlend.new(GpuFragBlendArgs(target_workload=TWO_SHAPES), handle)
    assert run_score(plugin, POD, handle) == {"n1": 51, "n2": 33, "n3": 33}
    plan = GpuDevices.of(handle)._plan
    assert plan is not None and [int(c[0]) for c in plan[2]] == [0, 0, 0]


def test_frag_blend_sends_cpu_pods_where_gpus_do_not_need_the_cpu() -> None:
    # A 12-cpu pod. FGD sees no change on n1 (56 -> 44 cpu) nor n2 (64 -> 52): both 50.
    # The fill term sees n1 lose copies (A 14 -> 11, B 7 -> 5: +900 + 2000 stranded milli),
    # gain -2900/34 = -85.3 -> 45; n2 keeps its 6 and 2 copies -> 50. n3 (16 -> 4 cpu)
    # strands its 2 GPUs for B: FGD +2000, fill +2900, gain -(16*2000 + 2900)/34 -> 11.
    handle = cluster()
    pod = cpu_pod("c", cpu="12")
    blend = GpuFragBlend.new(GpuFragBlendArgs(target_workload=TWO_SHAPES), handle)
    assert run_score(blend, pod, handle) == {"n1": 45, "n2": 50, "n3": 11}
    # FGD alone cannot tell n1 from n2: gain 0 on both; n3: -2000/2 -> floor(100 sigmoid(-1)).
    fgd = GpuFragmentation.new(GpuFragmentationArgs(target_workload=TWO_SHAPES), handle)
    assert run_score(fgd, pod, handle) == {"n1": 50, "n2": 50, "n3": 26}


def test_fgd_learns_the_workload_when_none_is_given() -> None:
    handle = cluster()
    plugin = GpuFragmentation.new(None, handle)
    scores = run_score(plugin, POD, handle)
    assert scores is not None and set(scores) == {"n1", "n2", "n3"}
    assert plugin.scorer.model.workload.shapes[0].gpu_milli == 300


def test_random_picks_one_feasible_node_and_a_random_fitting_device() -> None:
    picks = set()
    for seed in range(12):
        handle = cluster(seed)
        scores = run_score(GpuRandom.new(None, handle), POD, handle)
        assert scores is not None and sorted(scores.values()) == [0, 0, 100]
        picks.add(max(scores, key=lambda n: scores[n]))
        plan = GpuDevices.of(handle)._plan
        assert plan is not None
        row, device = int(plan[1][0]), int(plan[2][0][0])
        assert GpuDevices.of(handle).free[row, device] >= 300
    assert picks == {"n1", "n2", "n3"}
    again = [run_score(GpuRandom.new(None, h := cluster(3)), POD, h) for _ in range(2)]
    assert again[0] == again[1]  # seeded
