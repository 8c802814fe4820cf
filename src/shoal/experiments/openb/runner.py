"""Run the openb experiment on the real scheduler: one run, or sweeps in parallel.

A run builds a lean scheduler profile (everything the protocol needs and nothing else):
PrioritySort, NodeResourcesFit (PreFilter/Filter only), GpuShare (PreFilter, Filter,
Reserve, PreBind), the policy's Score plugin and DefaultBinder, with
percentageOfNodesToScore = 100. Nodes are added in a random order fixed by the seed and
equal best scores go to the node that comes first in that order (the published
protocol); `tie_break="random"` picks uniformly among them instead (kube-scheduler's
default).

Sweeps run each (trace, policy, seed) in its own process on the local cores, or as Ray
tasks when a cluster address is given (`pip install 'shoal[ray]'`).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from multiprocessing import get_context
from pathlib import Path
from typing import Any, Literal

import numpy as np

from shoal.api.gpu import GPU_MILLI
from shoal.cache.cluster import ClusterState
from shoal.cache.dra import DeviceCatalog
from shoal.cache.gpu_devices import GpuDevices
from shoal.cache.snapshot import Snapshot
from shoal.config.types import KubeSchedulerConfiguration
from shoal.drivers.heap import frozen_heap
from shoal.drivers.loop import Driver
from shoal.drivers.memory import ManualClock, MemoryEffects
from shoal.experiments.openb import dra
from shoal.experiments.openb.protocol import (
    DEFAULT_RATIO,
    bin_curve,
    check_inflation,
    prepare_workload,
    target_workload,
)
from shoal.experiments.openb.trace import (
    PodRow,
    Trace,
    load_trace,
    node_manifest,
    pod_manifest,
)
from shoal.framework.handle import Handle
from shoal.framework.types import Candidates
from shoal.gpu.dra_gpus import DraGpuView
from shoal.gpu.fragmentation import TargetWorkload
from shoal.scheduler import Scheduler, default_registry
from shoal.scheduler.algorithm import PlacementAlgorithm
from shoal.scheduler.dra import upsert_dra
from shoal.scheduler.profiles import build_profiles
from shoal.scheduling_queue.queue import QueueConfig

__all__ = [
    "POLICIES",
    "RunResult",
    "TieBreak",
    "driver_of",
    "experiment_config",
    "parse_seeds",
    "run_one",
    "run_one_dra",
    "run_result",
    "run_sweep",
    "stranded",
]

TieBreak = Literal["order", "random"]

# Published policy name -> Score plugin (all in shoal.plugins).
POLICIES: dict[str, str] = {
    "Random": "GpuRandom",
    "DotProd": "GpuDotProduct",
    "GpuClustering": "GpuClustering",
    "GpuPacking": "GpuPacking",
    "BestFit": "GpuBestFit",
    "FGD": "GpuFragmentation",
    "FragBlend": "GpuFragBlend",
    "FragGuard": "GpuFragGuard",
}
# Policies whose plugin takes the trace's target workload as args.
_TARGET_ARGS = {"GpuFragmentation", "GpuFragBlend"}
# Policies whose target workload carries memory.
_MEMORY_ARGS = {"GpuFragBlend"}
SCHEDULER_NAME = "openb"


def policy_plugin(policy: str) -> str:
    for name, plugin in POLICIES.items():
        if policy.lower() in (name.lower(), plugin.lower()):
            return plugin
    raise ValueError(f"unknown policy {policy!r} (known: {', '.join(POLICIES)})")


def policy_name(policy: str) -> str:
    plugin = policy_plugin(policy)
    return next(name for name, p in POLICIES.items() if p == plugin)


def workload_args(workload: TargetWorkload) -> list[dict[str, Any]]:
    return [
        {
            "cpuMilli": s.cpu_milli,
            "gpuMilli": s.gpu_milli,
            "gpuCount": s.gpu_count,
            "models": list(s.models),
            "memoryMib": s.memory // 2**20,
            "weight": w,
        }
        for s, w in zip(workload.shapes, workload.weights, strict=True)
    ]


def experiment_config(
    policy: str, workload: TargetWorkload | None, args: Mapping[str, Any] | None = None
) -> KubeSchedulerConfiguration:
    """The lean profile of the protocol for one policy (`args`: extra plugin args)."""
    plugin = policy_plugin(policy)
    plugin_args: dict[str, Any] = dict(args or {})
    if plugin in _TARGET_ARGS and workload is not None:
        plugin_args["targetWorkload"] = workload_args(workload)
    plugin_config = [{"name": plugin, "args": plugin_args}] if plugin_args else []
    return KubeSchedulerConfiguration.model_validate(
        {
            "percentageOfNodesToScore": 100,
            "profiles": [
                {
                    "schedulerName": SCHEDULER_NAME,
                    "plugins": {
                        "multiPoint": {
                            "disabled": [{"name": "*"}],
                            "enabled": [
                                {"name": "PrioritySort"},
                                {"name": "NodeResourcesFit"},
                                {"name": "GpuShare"},
                                {"name": plugin, "weight": 1},
                                {"name": "DefaultBinder"},
                            ],
                        },
                        "score": {"disabled": [{"name": "NodeResourcesFit"}]},
                    },
                    "pluginConfig": plugin_config,
                }
            ],
        }
    )


class _FirstInOrder(PlacementAlgorithm):
    """Equal best scores go to the candidate in the lowest row (nodes were added in the
    seed's random order, so this is "a fixed random node order per seed")."""

    def _select_host(self, nodes: Candidates, scores: np.ndarray, top: int) -> int:
        return int(nodes.rows[int(np.argmax(scores))])


def build_scheduler(
    config: KubeSchedulerConfiguration, seed: int, tie_break: TieBreak = "order"
) -> Scheduler:
    """What `shoal.scheduler.new_scheduler` wires, with the protocol's tie-break."""
    cluster = ClusterState()
    clock = ManualClock()
    handle = Handle(
        cluster=cluster,
        snapshot=Snapshot(cluster),
        clock=clock,
        rng=np.random.default_rng(seed),
        effects=MemoryEffects(clock),
    )
    profiles = build_profiles(config, default_registry(include_entry_points=False), handle)
    queue = QueueConfig(
        initial_backoff_seconds=float(config.pod_initial_backoff_seconds),
        max_backoff_seconds=float(config.pod_max_backoff_seconds),
    )
    algorithm = _FirstInOrder(handle.snapshot, handle.rng) if tie_break == "order" else None
    return Scheduler(profiles, handle, queue, algorithm=algorithm)


def driver_of(sched: Scheduler) -> Driver:
    """The driver loop over a scheduler built by `build_scheduler` (in-memory effects)."""
    effects = sched.handle.effects
    assert isinstance(effects, MemoryEffects)
    return Driver(sched, inbox=effects)


@dataclass
class RunResult:
    trace: str
    policy: str
    seed: int
    pods: int
    placed: int
    capacity_milli: int
    unallocated: float  # % of GPU capacity at arrived = 100 %
    curve: list[float | None]  # mean alloc % per arrived-% bin 0..130
    first_failure: float | None  # arrived % when the first pod was dropped
    seconds: float
    # Where the free GPU is when arrived first reaches 100 % (% of GPU capacity): left
    # over on devices that hold shared pods, and whole idle devices (see `stranded`).
    leftover: float | None = None
    idle: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def stranded(devices: GpuDevices) -> tuple[int, int]:
    """Free milli-GPU split in two: left over on partly used devices (a shared pod's
    remainder, usable only by pods that small) and on whole idle devices (kept free by
    cpu, memory, model or multi-GPU shape)."""
    nodes = slice(0, devices.table.n)
    idle = int(devices.full[nodes].sum()) * GPU_MILLI  # devices kept whole, per node
    return int(devices.total_free(nodes).sum()) - idle, idle


def run_one(
    trace: Trace,
    policy: str,
    seed: int,
    *,
    ratio: float = DEFAULT_RATIO,
    tie_break: TieBreak = "order",
    workload: TargetWorkload | None = None,
    plugin_args: Mapping[str, Any] | None = None,
    on_pod: Callable[[PodRow, bool, float], None] | None = None,
) -> RunResult:
    """One seed of the protocol; `workload` overrides the target workload of FGD-like
    policies (default: from the trace); `on_pod(row, placed, arrived %)` is called after
    each pod (for analyses of what was placed)."""
    start = time.perf_counter()
    pods = prepare_workload(trace, seed, ratio)
    plugin = policy_plugin(policy)
    target = workload or target_workload(trace, memory=plugin in _MEMORY_ARGS)
    sched = build_scheduler(experiment_config(policy, target, plugin_args), seed, tie_break)
    order = np.random.default_rng([seed, 1]).permutation(len(trace.nodes))
    for i in order:
        sched.add_node(node_manifest(trace.nodes[int(i)]))
    devices = GpuDevices.of(sched.handle)
    capacity = trace.gpu_capacity_milli
    arrived = np.zeros(len(pods), dtype=np.int64)
    alloc = np.zeros(len(pods), dtype=np.int64)
    total = 0
    placed = 0
    first_failure: float | None = None
    split: tuple[int, int] | None = None
    driver = driver_of(sched)
    effects = driver.inbox
    assert isinstance(effects, MemoryEffects)
    with frozen_heap():  # the trace and the cluster stay: later collections skip them
        for i, row in enumerate(pods):
            total += row.total_milli
            info = sched.add_pod(pod_manifest(row, f"{i}-{row.name}", SCHEDULER_NAME))
            driver.run()
            if info.uid in effects.bound:
                placed += 1
            else:
                sched.delete_pod(info.uid)  # dropped: no retry
                if first_failure is None and row.total_milli:
                    first_failure = 100.0 * total / capacity
            arrived[i] = total
            alloc[i] = devices.allocated_milli
            if on_pod is not None:
                on_pod(row, info.uid in effects.bound, 100.0 * total / capacity)
            if split is None and total >= capacity:
                split = stranded(devices)
    return run_result(trace, policy, seed, placed, arrived, alloc, first_failure, start, split)


def run_one_dra(
    trace: Trace,
    policy: str,
    seed: int,
    *,
    ratio: float = DEFAULT_RATIO,
    on_pod: Callable[[PodRow, bool, float], None] | None = None,
) -> RunResult:
    """One seed of the protocol with the GPUs published through DRA
    (`shoal.experiments.openb.dra` describes the cluster): the same pods, policy and
    seed as `run_one`, allocated by DynamicResources, the unallocated GPU measured from
    the devices' state; `on_pod` as in `run_one`."""
    start = time.perf_counter()
    pods = prepare_workload(trace, seed, ratio)
    plugin = policy_plugin(policy)
    target = target_workload(trace, memory=plugin in _MEMORY_ARGS)
    config = experiment_config(policy, target)
    raw = config.model_dump(by_alias=True, exclude_none=True)
    raw["profiles"][0]["plugins"]["multiPoint"]["enabled"].append({"name": "DynamicResources"})
    sched = build_scheduler(KubeSchedulerConfiguration.model_validate(raw), seed)
    upsert_dra(sched, dra.device_class())
    order = np.random.default_rng([seed, 1]).permutation(len(trace.nodes))
    for i in order:
        node = trace.nodes[int(i)]
        sched.add_node(dra.dra_node(node))
        if node.gpus:
            upsert_dra(sched, dra.gpu_slice(node))
    catalog = DeviceCatalog.of(sched.handle)
    capacity = trace.gpu_capacity_milli
    arrived = np.zeros(len(pods), dtype=np.int64)
    alloc = np.zeros(len(pods), dtype=np.int64)
    total = placed = 0
    first_failure: float | None = None
    driver = driver_of(sched)
    effects = driver.inbox
    assert isinstance(effects, MemoryEffects)
    allocated = 0
    with frozen_heap():  # the trace and the cluster stay: later collections skip them
        for i, row in enumerate(pods):
            total += row.total_milli
            name = f"{i}-{row.name}"
            pod = pod_manifest(row, name, SCHEDULER_NAME)
            if row.num_gpu:
                upsert_dra(sched, dra.gpu_claim(row, name))
                pod = dra.with_claim(pod, name)
            info = sched.add_pod(pod)
            driver.run()
            if info.uid in effects.bound:
                placed += 1
                if row.num_gpu:
                    view = DraGpuView.of(catalog)
                    allocated = int(view.whole.sum() + view.shared.sum()) if view is not None else 0
            else:
                sched.delete_pod(info.uid)  # dropped: no retry
                if first_failure is None and row.total_milli:
                    first_failure = 100.0 * total / capacity
            arrived[i] = total
            alloc[i] = allocated
            if on_pod is not None:
                on_pod(row, info.uid in effects.bound, 100.0 * total / capacity)
    return run_result(trace, policy, seed, placed, arrived, alloc, first_failure, start)


def run_result(
    trace: Trace,
    policy: str,
    seed: int,
    placed: int,
    arrived: np.ndarray,
    alloc: np.ndarray,
    first_failure: float | None,
    start: float,
    split: tuple[int, int] | None = None,
) -> RunResult:
    """A run's result from what it recorded per pod (GPU arrived and allocated, milli)."""
    capacity = trace.gpu_capacity_milli
    curve = bin_curve(arrived, alloc, capacity)
    return RunResult(
        trace=trace.name,
        policy=policy_name(policy),
        seed=seed,
        pods=len(arrived),
        placed=placed,
        capacity_milli=capacity,
        unallocated=curve.unallocated_at(100),
        curve=[None if math.isnan(v) else float(v) for v in curve.alloc],
        first_failure=first_failure,
        seconds=time.perf_counter() - start,
        leftover=None if split is None else 100.0 * split[0] / capacity,
        idle=None if split is None else 100.0 * split[1] / capacity,
    )


def parse_seeds(text: str) -> list[int]:
    """ "42-51", "42..51", "42,43" or "42" -> a list of seeds (non-negative integers);
    ValueError naming the part that is not one and the forms that are."""
    seeds: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        lo, sep, hi = part.partition("..")
        if not sep:
            lo, sep, hi = part.partition("-")
        try:
            if sep:
                a, b = int(lo), int(hi)
                if b < a:
                    raise ValueError(f"empty seed range {part!r}: write LOW-HIGH, e.g. 42-51")
                seeds.extend(range(a, b + 1))
            else:
                seeds.append(int(part))
        except ValueError as err:
            if "empty seed range" in str(err):
                raise
            raise ValueError(
                f"--seeds: {part!r} is not a seed: give non-negative integers, a range "
                "(42-51 or 42..51) or a list (42,43)"
            ) from None
    if not seeds:
        raise ValueError("no seeds given")
    return seeds


# ---- sweeps --------------------------------------------------------------------------

_TRACES: dict[tuple[str, str], Trace] = {}


def _trace(trace_dir: str, name: str) -> Trace:
    key = (trace_dir, name)
    if key not in _TRACES:
        _TRACES[key] = load_trace(Path(trace_dir), name)
    return _TRACES[key]


def _task(trace_dir: str, name: str, policy: str, seed: int, opts: Mapping[str, Any]) -> RunResult:
    options = dict(opts)
    if options.pop("dra", False):
        return run_one_dra(_trace(trace_dir, name), policy, seed, **options)
    return run_one(_trace(trace_dir, name), policy, seed, **options)


def run_sweep(
    trace_dir: Path,
    traces: Iterable[str],
    policies: Iterable[str],
    seeds: Iterable[int],
    *,
    workers: int | None = None,
    ray_address: str | None = None,
    progress: Callable[[RunResult], None] | None = None,
    started: Callable[[], None] | None = None,
    **opts: Any,
) -> list[RunResult]:
    """Every (trace, policy, seed) once; results in that order. `progress(run)` is called
    as each run finishes, `started()` once the runs are under way (after the local
    worker processes are forked: a progress display's thread may start then)."""
    tasks = [
        (str(trace_dir), t, policy_name(p), s) for t in traces for p in policies for s in seeds
    ]
    for name in {t for _, t, _, _ in tasks}:
        # Fail early on a bad file, or on a trace inflation cannot fill.
        check_inflation(load_trace(trace_dir, name), opts.get("ratio", DEFAULT_RATIO))
    if ray_address:
        results = _run_ray(tasks, ray_address, opts, progress, started)
    else:
        results = _run_local(tasks, workers, opts, progress, started)
    index = {task: i for i, task in enumerate(tasks)}
    return sorted(results, key=lambda r: index[(str(trace_dir), r.trace, r.policy, r.seed)])


def _run_local(
    tasks: list[tuple[str, str, str, int]],
    workers: int | None,
    opts: Mapping[str, Any],
    progress: Callable[[RunResult], None] | None,
    started: Callable[[], None] | None = None,
) -> list[RunResult]:
    workers = max(1, min(workers or os.cpu_count() or 1, len(tasks)))
    results: list[RunResult] = []
    if workers == 1:
        if started:
            started()
        for task in tasks:
            result = _task(*task, opts)
            results.append(result)
            if progress:
                progress(result)
        return results
    with ProcessPoolExecutor(max_workers=workers, mp_context=get_context("fork")) as pool:
        futures = [pool.submit(_task, *task, opts) for task in tasks]
        if started:  # the workers are forked at the first submit: no thread is copied
            started()
        for future in as_completed(futures):
            result = future.result()
            results.append(result)
            if progress:
                progress(result)
    return results


def _run_ray(
    tasks: list[tuple[str, str, str, int]],
    address: str,
    opts: Mapping[str, Any],
    progress: Callable[[RunResult], None] | None,
    started: Callable[[], None] | None = None,
) -> list[RunResult]:
    try:
        import ray  # type: ignore[import-not-found]  # optional extra: 'shoal[ray]'
    except ImportError as err:
        raise RuntimeError("Ray is not installed: pip install 'shoal[ray]'") from err
    ray.init(address=address, ignore_reinit_error=True)
    remote = ray.remote(_task)
    pending = {remote.remote(*task, dict(opts)): task for task in tasks}
    if started:
        started()
    results: list[RunResult] = []
    while pending:
        done, _ = ray.wait(list(pending), num_returns=1)
        for ref in done:
            pending.pop(ref)
            result = ray.get(ref)
            results.append(result)
            if progress:
                progress(result)
    return results


def run_tasks(
    tasks: list[tuple[str, str, str, int]],
    *,
    workers: int | None = None,
    ray_address: str | None = None,
    progress: Callable[[RunResult], None] | None = None,
    **opts: Any,
) -> list[RunResult]:
    """Run (trace folder, trace, policy, seed) tasks from any folders, locally or on Ray;
    results in completion order."""
    for folder, name in {(d, t) for d, t, _, _ in tasks}:
        # Fail early on a bad file, or on a trace inflation cannot fill.
        check_inflation(load_trace(Path(folder), name), opts.get("ratio", DEFAULT_RATIO))
    tasks = [(d, t, policy_name(p), s) for d, t, p, s in tasks]
    if ray_address:
        return _run_ray(tasks, ray_address, opts, progress)
    return _run_local(tasks, workers, opts, progress)
