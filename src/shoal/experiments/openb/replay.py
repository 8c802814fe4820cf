"""Dynamic replay of an openb trace: pods arrive at their creation time and leave after
their lifetime (deletion - creation), on the simulator engine (`shoal.sim`).

Unlike the static protocol, nothing is dropped: a pod that does not fit waits in the
scheduling queue until pods leave. Reported per policy: unallocated GPU % over time, how
many pods are pending over time, how long pods waited (time to schedule), and the
dynamic counterpart of the static headline: the unallocated GPU % averaged over the
time during which some GPU pod is pending (GPUs idle while GPU work waits: stranded).

`speedup` divides the arrival times (lifetimes unchanged), so a trace that never loads
the cluster can be replayed under pressure: `speedup=1` is the trace as recorded.

Waits are also reported by task size (`SIZES`: CPU-only, GPU share, 1, 2, 4, 8 GPUs),
because the mean hides the large tasks that wait longest; `summarize_replays` gives the
mean and sd over seeds. A policy may carry `+reservation` / `+protect`
(`shoal.experiments.openb.variants`).
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
    policy_plugin,
)
from shoal.experiments.openb.trace import (
    NAMESPACE,
    PodRow,
    Trace,
    node_manifest,
    pod_manifest,
)
from shoal.experiments.openb.variants import split_policy, variant_config, variant_name
from shoal.plugins.rescheduler import with_rescheduler
from shoal.sim.engine import SimOptions, Simulation
from shoal.sim.scenario import Scenario
from shoal.sim.workload import PodSource

__all__ = [
    "SIZES",
    "ReplayResult",
    "ReplaySummary",
    "format_replay_summary",
    "format_replay_table",
    "format_rescheduler_table",
    "format_wait_table",
    "replay",
    "replay_policies",
    "size_class",
    "summarize_replays",
    "write_replay_csv",
    "write_replay_svgs",
    "write_wait_csv",
]

SIZES = ("0", "share", "1", "2", "4", "8")
"""Task sizes in GPUs: CPU-only, a share of one device (< 1), whole GPUs. Other counts
(3, 6, ...) are reported under their own number."""
WAIT_STATS = ("pods", "never_placed", "mean", "p50", "p99", "max")


def size_class(row: PodRow) -> str:
    if not row.num_gpu or not row.gpu_milli:
        return "0"
    if row.gpu_milli < 1000:
        return "share"
    return str(row.num_gpu)


def _size_order(size: str) -> tuple[int, float]:
    return (0, SIZES.index(size)) if size in SIZES else (1, float(size))


def wait_stats(waits: list[float], never_placed: int) -> dict[str, float]:
    """pods, never_placed, mean, p50, p99 and max wait (s) of the placed pods."""
    a = np.array(waits, dtype=float)
    if not len(a):
        nan = math.nan
        return {"pods": float(never_placed), "never_placed": float(never_placed),
                "mean": nan, "p50": nan, "p99": nan, "max": nan}  # fmt: skip
    return {
        "pods": float(len(a) + never_placed),
        "never_placed": float(never_placed),
        "mean": float(a.mean()),
        "p50": float(np.percentile(a, 50)),
        "p99": float(np.percentile(a, 99)),
        "max": float(a.max()),
    }


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
    seed: int = 0
    # size class (SIZES) -> wait_stats of the pods of that size
    waits_by_size: dict[str, dict[str, float]] = field(default_factory=dict)

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
    base, suffixes = split_policy(policy)
    plugin = policy_plugin(base)
    config = experiment_config(base, target_workload(trace, memory=plugin in _MEMORY_ARGS))
    config = variant_config(config, suffixes)
    if rescheduler:
        config = with_rescheduler(config, rescheduler_args)
    scenario = Scenario(nodes=[node_manifest(n) for n in trace.nodes])
    gpu_pods: set[str] = set()
    sizes: dict[str, str] = {}
    multi_gpu: set[str] = set()
    traced: set[str] = set()
    for i, row in enumerate(trace.pods):
        created = float(row.creation_time or 0)
        lifetime = None
        if row.deletion_time is not None:
            lifetime = max(0.0, float(row.deletion_time) - created)
        uid = f"{i}-{row.name}"
        sizes[uid] = size_class(row)
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
    by_size: dict[str, list[float]] = {}
    unplaced: dict[str, int] = {}
    for r in records:
        size = sizes.get(r.uid, "0")
        waited_s = r.time_to_schedule
        if waited_s is None:
            unplaced[size] = unplaced.get(size, 0) + 1
            by_size.setdefault(size, [])
        else:
            by_size.setdefault(size, []).append(waited_s)
    waits_by_size = {
        size: wait_stats(by_size[size], unplaced.get(size, 0))
        for size in sorted(by_size, key=_size_order)
    }
    multi = np.array(
        [r.time_to_schedule for r in records if r.uid in multi_gpu and r.bound_at is not None],
        dtype=float,
    )
    moves = len(sim.effects.evictions)
    # Per hour of the time pods arrive or wait (until the last one is placed).
    hours = max(horizon, 1.0) / 3600.0
    return ReplayResult(
        trace=trace.name,
        policy=variant_name(policy) + ("+Rescheduler" if rescheduler else ""),
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
        seed=seed,
        waits_by_size=waits_by_size,
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
    seeds: list[int] | None = None,
) -> list[ReplayResult]:
    """One replay per policy (and per seed of `seeds`, else `seed`), in parallel on
    local processes; results in policy order, then seed order (`rescheduler`: each
    policy twice, without and then with the Rescheduler)."""
    import os
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing import get_context

    names = [variant_name(p) for p in policies]
    runs = [
        (p, s, with_it)
        for p in names
        for with_it in ((False, True) if rescheduler else (False,))
        for s in (seeds or [seed])
    ]
    workers = max(1, min(workers or os.cpu_count() or 1, len(runs)))
    if workers == 1:
        return [_replay_task(trace_dir, trace, p, s, speedup, r) for p, s, r in runs]
    with ProcessPoolExecutor(max_workers=workers, mp_context=get_context("fork")) as pool:
        futures = [
            pool.submit(_replay_task, trace_dir, trace, p, s, speedup, r) for p, s, r in runs
        ]
        return [f.result() for f in futures]


@dataclass
class ReplaySummary:
    """Mean and sd over seeds of one policy's replays."""

    policy: str
    seeds: list[int]
    # metric -> (mean, sd): waited, never_scheduled, mean_unallocated, min_unallocated,
    # stranded_while_pending, mean_pending_seconds
    metrics: dict[str, tuple[float, float]]
    # size -> stat (WAIT_STATS) -> (mean, sd) over the seeds that had pods of that size
    waits_by_size: dict[str, dict[str, tuple[float, float]]]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


_SUMMARY_METRICS = (
    "waited",
    "never_scheduled",
    "mean_unallocated",
    "min_unallocated",
    "stranded_while_pending",
    "mean_pending_seconds",
)


def _mean_sd(values: list[float]) -> tuple[float, float]:
    a = np.array([v for v in values if not math.isnan(v)], dtype=float)
    if not len(a):
        return (math.nan, math.nan)
    return (float(a.mean()), float(a.std(ddof=1)) if len(a) > 1 else 0.0)


def summarize_replays(results: list[ReplayResult]) -> list[ReplaySummary]:
    """Per policy (in first-seen order): mean and sample sd over its seeds."""
    by_policy: dict[str, list[ReplayResult]] = {}
    for r in results:
        by_policy.setdefault(r.policy, []).append(r)
    out = []
    for policy, runs in by_policy.items():
        metrics = {m: _mean_sd([float(getattr(r, m)) for r in runs]) for m in _SUMMARY_METRICS}
        sizes = sorted({s for r in runs for s in r.waits_by_size}, key=_size_order)
        waits = {
            size: {
                stat: _mean_sd(
                    [r.waits_by_size[size][stat] for r in runs if size in r.waits_by_size]
                )
                for stat in WAIT_STATS
            }
            for size in sizes
        }
        out.append(ReplaySummary(policy, [r.seed for r in runs], metrics, waits))
    return out


def _cell(pair: tuple[float, float], digits: int = 1) -> str:
    mean, sd = pair
    if math.isnan(mean):
        return "-"
    return f"{mean:.{digits}f} ({sd:.{digits}f})"


def format_replay_summary(summaries: list[ReplaySummary]) -> str:
    """One row per policy: mean (sd) over seeds of the unallocated GPU % and of the p99
    wait per task size."""
    sizes = sorted({s for x in summaries for s in x.waits_by_size}, key=_size_order)
    labels = [f"{s}-GPU" if s not in ("0", "share") else {"0": "CPU", "share": "share"}[s]
              for s in sizes]  # fmt: skip
    lines = [
        "mean (sd) over seeds "
        + (f"{summaries[0].seeds[0]}-{summaries[0].seeds[-1]}" if summaries else "")
        + "; waits in seconds",
        "",
        "| policy | seeds | pods waited | unallocated % (busiest) | unallocated % while pending | "
        + " | ".join(f"p99 wait {label}" for label in labels)
        + " | max wait 8-GPU |",
        "|---|---|---|---|---|" + "---|" * len(labels) + "---|",
    ]
    for x in summaries:
        eight = x.waits_by_size.get("8", {}).get("max", (math.nan, math.nan))
        lines.append(
            f"| {x.policy} | {len(x.seeds)} | {_cell(x.metrics['waited'], 0)} | "
            f"{_cell(x.metrics['min_unallocated'], 2)} | "
            f"{_cell(x.metrics['stranded_while_pending'], 2)} | "
            + " | ".join(
                _cell(x.waits_by_size.get(s, {}).get("p99", (math.nan, math.nan))) for s in sizes
            )
            + f" | {_cell(eight)} |"
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


def format_wait_table(results: list[ReplayResult]) -> str:
    """Wait (s) by task size, one row per run and size."""
    lines = [
        "| policy | seed | size (GPUs) | pods | never placed | mean | p50 | p99 | max |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        for size, st in r.waits_by_size.items():
            lines.append(
                f"| {r.policy} | {r.seed} | {size} | {st['pods']:.0f} | "
                f"{st['never_placed']:.0f} | {st['mean']:.1f} | {st['p50']:.1f} | "
                f"{st['p99']:.1f} | {st['max']:.1f} |"
            )
    return "\n".join(lines)


def write_wait_csv(results: list[ReplayResult], path: Any) -> Any:
    """replay-waits.csv: policy, seed, size, pods, never_placed, mean_s, p50_s, p99_s,
    max_s (one row per run and task size)."""
    import csv

    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(
            ["policy", "seed", "size", "pods", "never_placed", "mean_s", "p50_s", "p99_s", "max_s"]
        )
        for r in results:
            for size, st in r.waits_by_size.items():
                writer.writerow(
                    [r.policy, r.seed, size, int(st["pods"]), int(st["never_placed"])]
                    + [f"{st[k]:.3f}" for k in ("mean", "p50", "p99", "max")]
                )
    return path


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


def write_replay_csv(results: list[ReplayResult], path: Any) -> Any:
    """Columns: policy, time_s, unallocated_pct, pending_pods, mean_wait_s (of the pods
    that arrived since the previous sample), seed."""
    import csv

    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(
            ["policy", "time_s", "unallocated_pct", "pending_pods", "mean_wait_s", "seed"]
        )
        for r in results:
            for t, unalloc, pending, wait in r.samples:
                writer.writerow(
                    [r.policy, f"{t:.1f}", f"{unalloc:.3f}", pending, f"{wait:.1f}", r.seed]
                )
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
