"""The published static protocol of the openb experiment (see docs/gpu-sharing.md).

1. The cluster is the GPU node list; a task uses cpu, memory, GPU count, milli-GPU per
   GPU and allowed GPU models.
2. Pods are sorted by name, shuffled with the seed, then "inflated" to 130 % of the GPU
   capacity: uniform resamples of the original pods are appended until the next one
   would pass the target (like the artifact, the check adds the resample's milli-GPU per
   GPU), or random pods are dropped while the trace is above it.
3. Pods arrive one at a time and never leave; a pod that does not fit is dropped.
4. After each pod: arrived % = GPU milli requested by all pods tried so far, alloc % =
   GPU milli allocated, both over the GPU capacity. Per seed, pods are binned by
   round(arrived %) and alloc % is averaged per bin; the headline is the unallocated GPU
   % (100 - alloc %) in the arrived = 100 % bin.

The target workload of FGD is the most frequent task shapes of the original trace (cpu,
milli-GPU, GPU count, models; CPU-only shapes included) covering 95 % of its pods.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace

import numpy as np
from numpy.typing import NDArray

from shoal.api.gpu import GPU_MILLI, parse_models
from shoal.experiments.openb.trace import POD_FILE_PREFIX, PodRow, Trace, TraceError
from shoal.gpu.fragmentation import TargetShape, TargetWorkload

__all__ = [
    "DEFAULT_RATIO",
    "MAX_BIN",
    "MAX_INFLATED_PODS",
    "Curve",
    "bin_curve",
    "check_inflation",
    "inflate",
    "prepare_workload",
    "shape_of",
    "target_workload",
]

DEFAULT_RATIO = 1.3
MAX_BIN = 130


def shape_of(pod: PodRow) -> TargetShape:
    models = parse_models(pod.gpu_spec) if pod.num_gpu else None
    # kube scores a pod that requests no cpu as if it asked for 100m.
    cpu = pod.cpu_milli or 100
    return TargetShape(cpu, pod.gpu_milli, pod.num_gpu, tuple(sorted(models or ())))


def target_workload(trace: Trace, coverage: float = 0.95, memory: bool = False) -> TargetWorkload:
    """The most frequent shapes covering `coverage` of the trace's pods; with `memory`,
    each shape carries the median memory of its pods."""
    workload = TargetWorkload.from_counts(Counter(shape_of(p) for p in trace.pods), coverage)
    if not memory:
        return workload
    mems: dict[TargetShape, list[int]] = {}
    for pod in trace.pods:
        mems.setdefault(shape_of(pod), []).append(pod.memory_mib)
    shapes = tuple(replace(s, memory=int(np.median(mems[s])) * 2**20) for s in workload.shapes)
    return TargetWorkload(shapes, workload.weights)


def inflate(
    original: list[PodRow], capacity_milli: int, ratio: float, rng: np.random.Generator
) -> list[PodRow]:
    """Append resamples of (or drop random) pods to reach `ratio` x GPU capacity."""
    pods = list(original)
    total = sum(p.total_milli for p in pods)
    target = ratio * capacity_milli
    if total > target:
        while total > target and pods:
            total -= pods.pop(int(rng.integers(len(pods)))).total_milli
        return pods
    if not any(p.total_milli > 0 for p in original):
        return pods  # no GPU demand (all CPU): resampling would never reach the target
    by_name = sorted(original, key=lambda p: p.name)
    i = 0
    while by_name:
        pick = by_name[int(rng.integers(len(by_name)))]
        if total + pick.gpu_milli > target:
            break
        total += pick.total_milli
        pods.append(pick.renamed(f"{pick.name}-tuned-{i}"))
        i += 1
    return pods


# Inflation resamples the trace until its GPU demand reaches `ratio` x the capacity: a
# node list far larger than the pod list would take millions of pods (hours, then
# memory). Refused up front beyond this many pods.
MAX_INFLATED_PODS = 1_000_000


def check_inflation(trace: Trace, ratio: float = DEFAULT_RATIO) -> None:
    """TraceError when inflating `trace` to `ratio` x its GPU capacity would take more
    than `MAX_INFLATED_PODS` pods (the expected count: resamples are uniform)."""
    demand = sum(p.total_milli for p in trace.pods)
    target = ratio * trace.gpu_capacity_milli
    if ratio <= 0 or demand >= target or not demand:
        return
    expected = len(trace.pods) + (target - demand) * len(trace.pods) / demand
    if expected > MAX_INFLATED_PODS:
        raise TraceError(
            f"{POD_FILE_PREFIX}{trace.name}.csv: its {len(trace.pods)} pods ask for "
            f"{demand / GPU_MILLI:g} GPUs in all; reaching {ratio:.0%} of the "
            f"{trace.gpu_capacity_milli // GPU_MILLI} GPUs of its nodes would take about "
            f"{expected:,.0f} pods (at most {MAX_INFLATED_PODS:,}): the node list is far "
            "larger than the pod list was made for; use the node list of the trace, or a "
            "pod list with more GPU demand"
        )


def prepare_workload(trace: Trace, seed: int, ratio: float = DEFAULT_RATIO) -> list[PodRow]:
    """The pods in arrival order for one seed (TraceError when inflation would take more
    than `MAX_INFLATED_PODS` pods)."""
    check_inflation(trace, ratio)
    rng = np.random.default_rng(seed)
    ordered = sorted(trace.pods, key=lambda p: p.name)
    shuffled = [ordered[i] for i in rng.permutation(len(ordered))]
    if ratio <= 0:
        return shuffled
    return inflate(shuffled, trace.gpu_capacity_milli, ratio, rng)


@dataclass
class Curve:
    """Mean alloc % per arrived-% bin (NaN where no pod fell in or next to a bin)."""

    alloc: NDArray[np.float64]  # index = arrived % bin, 0..MAX_BIN

    def unallocated_at(self, arrived: int = 100) -> float:
        return float(100.0 - self.alloc[arrived])


def bin_curve(
    arrived_milli: NDArray[np.int64], alloc_milli: NDArray[np.int64], capacity_milli: int
) -> Curve:
    arrived = np.round(arrived_milli / capacity_milli * 100.0)
    alloc = np.round(alloc_milli / capacity_milli * 100.0, 2)
    out = np.full(MAX_BIN + 1, np.nan)
    for b in range(MAX_BIN + 1):
        inside = arrived == b
        if not inside.any():
            inside = (arrived >= b - 1) & (arrived <= b + 1)
            if not inside.any():
                continue
        out[b] = float(np.round(alloc[inside].mean(), 2))
    return Curve(out)
