"""Dynamic replay of an openb trace: pods arrive at their creation time and leave after
their lifetime (deletion - creation), on the simulator engine (`shoal.sim`).

Unlike the static protocol, nothing is dropped: a pod that does not fit waits in the
scheduling queue until pods leave. Reported per policy: unallocated GPU % over time, how
many pods are pending over time, how long pods waited (time to schedule), and the
dynamic counterpart of the static headline: the unallocated GPU % averaged over the
time during which some GPU pod is pending (GPUs idle while GPU work waits: stranded).

`speedup` divides the arrival times (lifetimes unchanged), so a trace that never loads
the cluster can be replayed under pressure: `speedup=1` is the trace as recorded.
"""

from __future__ import annotations

import math
import time
from bisect import bisect_right
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from shoal.api.objects import OwnerReference
from shoal.api.podinfo import PodInfo
from shoal.cache.gpu_devices import GpuDevices
from shoal.experiments.openb.protocol import target_workload
from shoal.experiments.openb.runner import (
    _MEMORY_ARGS,
    SCHEDULER_NAME,
    experiment_config,
    policy_name,
    policy_plugin,
)
from shoal.experiments.openb.trace import NAMESPACE, Trace, node_manifest, pod_manifest
from shoal.plugins.rescheduler import with_rescheduler
from shoal.sim.engine import SimOptions, Simulation
from shoal.sim.scenario import Scenario
from shoal.sim.workload import PodSource

__all__ = [
    "ReplayResult",
    "format_replay_table",
    "format_rescheduler_table",
    "replay",
    "replay_policies",
    "write_replay_csv",
    "write_replay_svgs",
]


@dataclass
class ReplayResult:
    trace: str
    policy: str
    speedup: float
    pods: int
    scheduled: int
    never_scheduled: int
    capacity_milli: int
    mean_unallocated: float  # time-weighted while pods arrive, % of GPU capacity
    min_unallocated: float  # at the busiest moment
    waited: int  # pods that could not be placed when they arrived
    pending_seconds: float  # time with at least one GPU pod pending
    stranded_while_pending: float  # time-weighted unallocated GPU % during that time
    mean_pending_seconds: float  # over scheduled pods
    p95_pending_seconds: float
    max_pending_seconds: float
    # (time s, unallocated GPU %, pending pods, mean wait s of the pods that arrived since
    # the previous sample and were placed) at regular sample times
    samples: list[tuple[float, float, int, float]] = field(default_factory=list)
    seconds: float = 0.0
    # With the Rescheduler (docs/rescheduler.md): its moves, and the wait of multi-GPU
    # tasks (num_gpu > 1, the trace's own pods, not the replacements of moved ones).
    rescheduler: bool = False
    moves: int = 0
    moves_per_hour: float = 0.0
    multi_gpu_tasks: int = 0
    multi_gpu_never_placed: int = 0
    multi_gpu_wait_mean: float = math.nan
    multi_gpu_wait_p99: float = math.nan
    multi_gpu_wait_max: float = math.nan
    # (arrival s, wait s) of each multi-GPU task placed, in arrival order
    multi_gpu_waits: list[tuple[float, float]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class _AllocationLog:
    """A PlacementObserver recording (time, allocated milli-GPU) after every change."""

    def __init__(self, devices: GpuDevices, clock: Any) -> None:
        self.devices = devices
        self.clock = clock
        self.times: list[float] = [0.0]
        self.alloc: list[int] = [0]

    def _note(self) -> None:
        now = float(self.clock.now())
        if self.times[-1] == now:
            self.alloc[-1] = self.devices.allocated_milli
        else:
            self.times.append(now)
            self.alloc.append(self.devices.allocated_milli)

    def pod_placed(self, row: int, pod: PodInfo) -> None:
        self._note()

    def pod_unplaced(self, row: int, pod: PodInfo) -> None:
        self._note()

    def row_moved(self, src: int, dst: int) -> None:
        return None

    def node_changed(self, row: int) -> None:
        return None


def replay(
    trace: Trace,
    policy: str,
    *,
    seed: int = 0,
    speedup: float = 1.0,
    samples: int = 200,
    rescheduler: bool = False,
    rescheduler_args: dict[str, Any] | None = None,
) -> ReplayResult:
    """Replay `trace` with its creation and deletion times under one policy
    (`rescheduler`: with the Rescheduler enabled; the trace's pods are then taken as
    re-created by a controller when moved, restarting their lifetime)."""
    if speedup <= 0:
        raise ValueError("speedup must be > 0")
    start = time.perf_counter()
    plugin = policy_plugin(policy)
    config = experiment_config(policy, target_workload(trace, memory=plugin in _MEMORY_ARGS))
    if rescheduler:
        config = with_rescheduler(config, rescheduler_args)
    scenario = Scenario(nodes=[node_manifest(n) for n in trace.nodes])
    gpu_pods: set[str] = set()
    multi_gpu: set[str] = set()
    traced: set[str] = set()
    for i, row in enumerate(trace.pods):
        created = float(row.creation_time or 0)
        lifetime = None
        if row.deletion_time is not None:
            lifetime = max(0.0, float(row.deletion_time) - created)
        uid = f"{i}-{row.name}"
        if row.total_milli:
            gpu_pods.add(uid)
        traced.add(uid)
        if row.num_gpu > 1:
            multi_gpu.add(uid)
        manifest = pod_manifest(row, uid, SCHEDULER_NAME)
        if rescheduler:
            manifest.metadata.owner_references = [
                OwnerReference(kind="Job", name=uid, uid=f"job-{uid}", controller=True)
            ]
        scenario.pods.append(
            PodSource(
                time=created / speedup,
                duration=lifetime,
                namespace=NAMESPACE,
                name=uid,
                pod=manifest,
            )
        )
    sim = Simulation(scenario, SimOptions(seed=seed, config=config))
    devices = GpuDevices.of(sim.scheduler.handle)
    log = _AllocationLog(devices, sim.clock)
    sim.cluster.observers.append(log)
    result = sim.run()
    capacity = trace.gpu_capacity_milli
    records = result.records
    waits = np.array(
        [r.time_to_schedule for r in records if r.time_to_schedule is not None], dtype=float
    )
    # The trace's own arrivals (not those of pods re-created after a move).
    last_arrival = max((r.arrival for r in records if r.uid in traced), default=0.0)
    end = max(log.times[-1], last_arrival)
    times = np.array([*log.times, end])
    unalloc = 100.0 - 100.0 * np.array([*log.alloc, log.alloc[-1]], dtype=float) / capacity
    # Time-weighted mean while pods arrive (after the last arrival only long runners stay).
    clipped = np.minimum(times, last_arrival)
    span = clipped[-1] - clipped[0]
    if span > 0:
        mean_unalloc = float(np.sum(unalloc[:-1] * np.diff(clipped)) / span)
    else:
        mean_unalloc = float(unalloc[0])
    pending_seconds, stranded = _stranded_while_pending(
        [(r.arrival, r.bound_at) for r in records if r.uid in gpu_pods],
        np.array(log.times, dtype=float),
        unalloc[:-1],
    )
    arrivals = sorted(r.arrival for r in records)
    bound = sorted(r.bound_at for r in records if r.bound_at is not None)
    # Sample until the last pod is placed (pods still wait after the last arrival).
    horizon = max(last_arrival, bound[-1] if bound else 0.0) or end
    grid = np.linspace(0.0, horizon, max(2, samples)) if horizon > 0 else np.array([0.0])
    placed = sorted(
        (r.arrival, r.time_to_schedule) for r in records if r.time_to_schedule is not None
    )
    placed_arrival = [a for a, _ in placed]
    wait_sums = np.concatenate(([0.0], np.cumsum([w for _, w in placed])))
    series = []
    previous = -math.inf
    for t in grid:
        i = max(0, bisect_right(log.times, t) - 1)
        pending = bisect_right(arrivals, t) - bisect_right(bound, t)
        lo, hi = bisect_right(placed_arrival, previous), bisect_right(placed_arrival, t)
        wait = float((wait_sums[hi] - wait_sums[lo]) / (hi - lo)) if hi > lo else 0.0
        series.append((float(t), float(unalloc[i]), int(pending), wait))
        previous = t
    multi = np.array(
        [r.time_to_schedule for r in records if r.uid in multi_gpu and r.bound_at is not None],
        dtype=float,
    )
    moves = len(sim.effects.evictions)
    # Per hour of the time pods arrive or wait (until the last one is placed).
    hours = max(horizon, 1.0) / 3600.0
    return ReplayResult(
        trace=trace.name,
        policy=policy_name(policy) + ("+Rescheduler" if rescheduler else ""),
        speedup=speedup,
        pods=len(records),
        scheduled=len(waits),
        never_scheduled=len(records) - len(waits),
        capacity_milli=capacity,
        mean_unallocated=mean_unalloc,
        min_unallocated=float(unalloc.min()),
        pending_seconds=pending_seconds,
        stranded_while_pending=stranded,
        waited=int(np.count_nonzero(waits > 0)),
        mean_pending_seconds=float(waits.mean()) if len(waits) else math.nan,
        p95_pending_seconds=float(np.percentile(waits, 95)) if len(waits) else math.nan,
        max_pending_seconds=float(waits.max()) if len(waits) else math.nan,
        samples=series,
        seconds=time.perf_counter() - start,
        rescheduler=rescheduler,
        moves=moves,
        moves_per_hour=moves / hours,
        multi_gpu_tasks=len(multi_gpu),
        multi_gpu_never_placed=len(multi_gpu) - len(multi),
        multi_gpu_wait_mean=float(multi.mean()) if len(multi) else math.nan,
        multi_gpu_wait_p99=float(np.percentile(multi, 99)) if len(multi) else math.nan,
        multi_gpu_wait_max=float(multi.max()) if len(multi) else math.nan,
        multi_gpu_waits=sorted(
            (r.arrival, float(r.time_to_schedule))
            for r in records
            if r.uid in multi_gpu and r.time_to_schedule is not None
        ),
    )


def _stranded_while_pending(
    waits: list[tuple[float, float | None]],
    change_times: NDArray[np.float64],
    unalloc_after: NDArray[np.float64],
) -> tuple[float, float]:
    """(seconds with >= 1 GPU pod pending, time-weighted unallocated % over them).

    `unalloc_after[i]` holds from `change_times[i]` to the next change; a pod never
    scheduled stays pending until the last change."""
    end = float(change_times[-1]) if len(change_times) else 0.0
    intervals = sorted((a, end if b is None else b) for a, b in waits if (b is None or b > a))
    merged: list[list[float]] = []
    for a, b in intervals:
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    total = 0.0
    weighted = 0.0
    for a, b in merged:
        # The allocation steps inside [a, b): cut the step function at a and b.
        inside = (change_times > a) & (change_times < b)
        cuts = np.concatenate(([a], change_times[inside], [b]))
        first = max(0, int(np.searchsorted(change_times, a, side="right")) - 1)
        values = np.concatenate(([unalloc_after[first]], unalloc_after[inside]))
        weighted += float(np.sum(values * np.diff(cuts)))
        total += b - a
    return total, (weighted / total if total > 0 else math.nan)


def _replay_task(
    trace_dir: str, name: str, policy: str, seed: int, speedup: float, rescheduler: bool = False
) -> ReplayResult:
    from shoal.experiments.openb.trace import load_trace

    return replay(
        load_trace(Path(trace_dir), name),
        policy,
        seed=seed,
        speedup=speedup,
        rescheduler=rescheduler,
    )


def replay_policies(
    trace_dir: str,
    trace: str,
    policies: list[str],
    *,
    seed: int = 0,
    speedup: float = 1.0,
    workers: int | None = None,
    rescheduler: bool = False,
) -> list[ReplayResult]:
    """One replay per policy, in parallel on local processes; results in policy order
    (`rescheduler`: each policy twice, without and then with the Rescheduler)."""
    import os
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing import get_context

    names = [policy_name(p) for p in policies]
    runs = [(p, with_it) for p in names for with_it in ((False, True) if rescheduler else (False,))]
    workers = max(1, min(workers or os.cpu_count() or 1, len(runs)))
    if workers == 1:
        return [_replay_task(trace_dir, trace, p, seed, speedup, r) for p, r in runs]
    with ProcessPoolExecutor(max_workers=workers, mp_context=get_context("fork")) as pool:
        futures = [
            pool.submit(_replay_task, trace_dir, trace, p, seed, speedup, r) for p, r in runs
        ]
        return [f.result() for f in futures]


def format_replay_table(results: list[ReplayResult]) -> str:
    lines = [
        "| policy | pods | waited | never placed | unallocated % (mean while arriving) "
        "| unallocated % (busiest) | GPU pods pending (s) | unallocated % while pending "
        "| pending s (mean / p95 / max) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r.policy} | {r.pods} | {r.waited} | {r.never_scheduled} | "
            f"{r.mean_unallocated:.2f} | {r.min_unallocated:.2f} | "
            f"{r.pending_seconds:.0f} | {r.stranded_while_pending:.2f} | "
            f"{r.mean_pending_seconds:.1f} / {r.p95_pending_seconds:.1f} / "
            f"{r.max_pending_seconds:.1f} |"
        )
    return "\n".join(lines)


def format_rescheduler_table(results: list[ReplayResult]) -> str:
    """Multi-GPU tasks' wait, unallocated GPU % and moves, with and without the
    Rescheduler (docs/rescheduler.md)."""
    lines = [
        "| run | multi-GPU tasks | never placed | wait s (mean / p99 / max) "
        "| unallocated % (mean while arriving) | unallocated % while GPU pods pend "
        "| moves | moves per hour |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r.policy} | {r.multi_gpu_tasks} | {r.multi_gpu_never_placed} | "
            f"{r.multi_gpu_wait_mean:.1f} / {r.multi_gpu_wait_p99:.1f} / "
            f"{r.multi_gpu_wait_max:.1f} | {r.mean_unallocated:.2f} | "
            f"{r.stranded_while_pending:.2f} | {r.moves} | {r.moves_per_hour:.1f} |"
        )
    return "\n".join(lines)


def write_replay_csv(results: list[ReplayResult], path: Any) -> Any:
    """Columns: policy, time_s, unallocated_pct, pending_pods, mean_wait_s (of the pods
    that arrived since the previous sample)."""
    import csv

    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["policy", "time_s", "unallocated_pct", "pending_pods", "mean_wait_s"])
        for r in results:
            for t, unalloc, pending, wait in r.samples:
                writer.writerow([r.policy, f"{t:.1f}", f"{unalloc:.3f}", pending, f"{wait:.1f}"])
    return path


def write_replay_svgs(results: list[ReplayResult], out_dir: Path, title: str = "") -> list[Path]:
    """replay-unallocated.svg and replay-pending.svg: one line per policy over time."""
    from shoal.experiments.openb.report import Line, write_lines_svg

    unallocated = [
        Line(
            f"{r.policy} ({r.stranded_while_pending:.1f})",
            [(t / 60.0, u) for t, u, _, _ in r.samples],
        )
        for r in results
    ]
    pending = [Line(r.policy, [(t / 60.0, float(p)) for t, _, p, _ in r.samples]) for r in results]
    return [
        write_lines_svg(
            unallocated,
            out_dir / "replay-unallocated.svg",
            title=f"{title} (legend: unallocated % while GPU pods pend)",
            x_label="minutes since the first arrival",
            y_label="unallocated GPU (%)",
        ),
        write_lines_svg(
            pending,
            out_dir / "replay-pending.svg",
            title=title,
            x_label="minutes since the first arrival",
            y_label="pending pods",
        ),
    ]
