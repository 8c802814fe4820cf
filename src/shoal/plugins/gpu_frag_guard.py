"""GpuFragGuard (Score): fragmentation against the workload that actually arrives, with
a guard for the largest shapes and pressure to keep model pools for the tasks that need
them ("FragGuard", see docs/gpu-sharing.md).

FGD and FragBlend weigh each target shape by how many tasks have it, and keep only the
shapes covering 95 % of the tasks, given up front. Three things follow that hurt on
other members of the trace family: rare large tasks (8 whole GPUs) are not in the
target at all, so nothing keeps a whole node for them and they are the first refused;
a target fitted on one trace is wrong on another; and a task asking for 8 GPUs counts
as much as one asking for a tenth of one.

FragGuard keeps FragBlend's measure (FGD's term + the fill term that sees cpu and
memory, `shoal.gpu.fragmentation`) and changes the target workload:

* it is learned online from the pods this plugin scores, with exponentially decayed
  counts (`halfLife` pods; 0: no decay), refitted every `refitEvery` pods (and at
  1, 2, 4, ... pods before that; without decay every max(`refitEvery`, pods / 4), since
  cumulative counts move less and less and a refit empties the score caches), so it
  follows the workload that arrives; a `targetWorkload` in the args only seeds it;
* GPU shapes only (a CPU-only shape shifts every node's fragmentation by the same
  amount), weighted by pod count (`weighting: count`, the default) or by GPU demand
  (`demand`: count x GPUs x milli-GPU, so rare large tasks count as what they ask for;
  measured worse on the tuning traces, see docs), the heaviest covering `coverage`;
* shapes are grouped without memory; each carries the (decayed) mean memory of its
  pods, so exact memory requests do not split the workload into many rare shapes;
* `constrainedBoost` multiplies the weight of model-constrained shapes (1: none);
* the guard: for each multi-GPU count k seen, the largest such shape (most cpu, then
  memory) weighs at least max(`guard`, `guardDemand` x the share of the GPU demand
  asked by k-GPU tasks) of the total. Placing anything that takes a whole idle node's
  cpu or devices then costs that share x the node's GPUs, which keeps enough whole
  nodes for the large tasks until the cluster is nearly full; the more of the demand
  the large tasks are, the more it is worth keeping room for them (a small fixed
  guard alone strands GPUs on traces where 2-8-GPU tasks are half the demand, a large
  one costs where they are rare).

**Share prices** (`sharePrices`, a weight): FGD asks only whether a shape still fits the
room a share leaves, not how many other shares compete for such room, so a 0.32 share
goes beside a 0.47 (leaving 0.21 that only rare small shares fit) as readily as beside
another 0.32. The shares' sizes seen are priced by the dual of their bin-packing LP
(`shoal.gpu.share_prices`) and a share's gain on a device loses `sharePrices` x the
devices' worth its placement spoils (0 when it completes an optimal pattern), in
milli-GPU.

Model constraints are part of a shape, so constrained tasks that arrive are scored
against the models they may use (a node of another model is all fragment for them).
That alone does not stop unconstrained tasks from filling a small model pool that
constrained tasks need (FGD likes small nodes for single-GPU tasks), so **pool pressure**
(`poolPressure`) takes score points off GPU pods on nodes of a model whose free GPU is
short of its share of the constrained demand seen (see `pool_penalty`); a pod constrained
to that model alone loses the same points on all its nodes, so only the others move.
Everything is vectorised over nodes and cached per node version as in FGD.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Literal

import numpy as np
from numpy.typing import NDArray
from pydantic import Field

from shoal.api.gpu import GPU_MILLI
from shoal.api.podinfo import PodInfo
from shoal.framework.cycle_state import CycleState
from shoal.framework.handle import Handle
from shoal.framework.types import MAX_NODE_SCORE, Candidates
from shoal.gpu.fragmentation import (
    FragScorer,
    TargetShape,
    TargetWorkload,
    sigmoid_scores,
)
from shoal.gpu.share_prices import SharePrices
from shoal.plugins.fragmentation_base import (
    FragmentationPolicy,
    pod_shape,
)
from shoal.plugins.gpu_frag_blend import GpuFragBlendArgs, blend_scorer

__all__ = ["NAME", "GpuFragGuard", "GpuFragGuardArgs", "demand_workload"]

NAME = "GpuFragGuard"
_TOTAL_WEIGHT = 1_000_000
"""Integer weights of a fitted workload sum to about this."""


class GpuFragGuardArgs(GpuFragBlendArgs):
    """`mix`, `memory` and `temperature` as in GpuFragBlend; `coverage` is a share of the
    GPU pods (or demand) seen; the rest is described in the module docstring."""

    coverage: float = Field(default=0.95, gt=0, le=1)
    guard: float = Field(default=0.01, ge=0, lt=1)
    half_life: int = Field(default=0, ge=0)
    refit_every: int = Field(default=256, ge=1)
    weighting: Literal["demand", "count"] = "count"
    constrained_boost: float = Field(default=1.0, ge=0)
    pool_pressure: float = Field(default=100.0, ge=0)
    pool_penalty_cap: int = Field(default=30, ge=0, le=100)
    guard_demand: float = Field(default=0.4, ge=0, lt=1)
    share_prices: float = Field(default=8.0, ge=0)


def demand_workload(
    counts: Mapping[TargetShape, float],
    coverage: float,
    guard: float,
    weighting: Literal["demand", "count"] = "demand",
    constrained_boost: float = 1.0,
    guard_demand: float = 0.0,
) -> TargetWorkload:
    """The target workload of decayed shape counts: GPU shapes weighted by their GPU
    demand (or pod count), the heaviest covering `coverage` of it, and for each GPU
    count k >= 2 the largest shape seen with at least max(`guard`, `guard_demand` x the
    share of the GPU demand asked by k-GPU tasks) of the total weight."""
    demand = {
        s: c * (s.gpu_count * s.gpu_milli if weighting == "demand" else 1)
        for s, c in counts.items()
        if s.is_gpu and c > 0
    }
    total = sum(demand.values())
    if total <= 0:
        return TargetWorkload((), ())
    ranked = sorted(demand.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)
    kept: dict[TargetShape, float] = {}
    covered = 0.0
    for shape, value in ranked:
        if covered >= coverage * total:
            break
        kept[shape] = value * (constrained_boost if shape.models else 1.0)
        covered += value
    if guard > 0 or guard_demand > 0:
        largest: dict[int, TargetShape] = {}
        count_demand: dict[int, float] = {}
        for shape, c in counts.items():
            if shape.is_gpu and c > 0 and shape.gpu_count >= 2:
                k = shape.gpu_count
                count_demand[k] = count_demand.get(k, 0.0) + c * k * shape.gpu_milli
                top = largest.get(k)
                if top is None or (shape.cpu_milli, shape.memory) > (top.cpu_milli, top.memory):
                    largest[k] = shape
        all_demand = sum(c * s.gpu_count * s.gpu_milli for s, c in counts.items() if s.is_gpu)
        # Each floor is a share of the final total: w_k >= f_k * (rest + guarded).
        shares = {
            k: max(guard, guard_demand * count_demand[k] / max(all_demand, 1.0)) for k in largest
        }
        if shares and sum(shares.values()) < 1:
            rest = sum(v for s, v in kept.items() if s not in largest.values())
            final = rest / (1 - sum(shares.values()))
            for k, shape in largest.items():
                kept[shape] = max(kept.get(shape, 0.0), shares[k] * final)
    scale = _TOTAL_WEIGHT / sum(kept.values())
    items = sorted(kept.items())
    return TargetWorkload(
        tuple(s for s, _ in items), tuple(max(1, round(v * scale)) for _, v in items)
    )


class GpuFragGuard(FragmentationPolicy):
    name = NAME
    measure = "blend"

    def __init__(self, handle: Handle, args: GpuFragGuardArgs) -> None:
        self.guard_args = args
        self.use_memory = args.memory
        # Decayed counts per shape without memory, and the decayed sum of their memory.
        self._counts: dict[TargetShape, float] = {}
        self._memory: dict[TargetShape, float] = {}
        self._arrived = 0
        self._next_refit = 1
        self._decay = 1.0  # the scale of self._counts: new pods weigh 1 / _decay
        # Decayed GPU demand (milli) of all GPU pods, and of constrained pods per model set.
        self._gpu_demand = 0.0
        self._pool_demand: dict[tuple[str, ...], float] = {}
        self._prices = SharePrices()
        super().__init__(handle, args)
        prior = args.workload()
        if prior is not None:
            for shape, weight in zip(prior.shapes, prior.weights, strict=True):
                self._add(shape, float(weight))
            self._refit()

    def _scorer(self, workload: TargetWorkload) -> FragScorer:
        return blend_scorer(self, workload, self.guard_args)

    def score_of(self, gain: NDArray[np.float64]) -> NDArray[np.int64]:
        return sigmoid_scores(gain, self.guard_args.temperature)

    def _add(self, shape: TargetShape, weight: float) -> None:
        key = shape.without_memory()
        self._counts[key] = self._counts.get(key, 0.0) + weight
        self._memory[key] = self._memory.get(key, 0.0) + weight * shape.memory

    def _refit(self) -> None:
        args = self.guard_args
        workload = demand_workload(
            self._counts,
            args.coverage,
            args.guard,
            args.weighting,
            args.constrained_boost,
            args.guard_demand,
        )
        # Each shape carries the mean memory of its pods (a decayed mean).
        shapes = tuple(
            replace(s, memory=int(self._memory[s] / self._counts[s])) for s in workload.shapes
        )
        self.scorer = self._scorer(TargetWorkload(shapes, workload.weights))
        if args.share_prices:
            mix: dict[int, float] = {}
            for shape, count in self._counts.items():
                if shape.gpu_count == 1 and 0 < shape.gpu_milli < GPU_MILLI:
                    mix[shape.gpu_milli] = mix.get(shape.gpu_milli, 0.0) + count
            self._prices.update(mix)
            if self._prices.fitted:
                weight, prices = args.share_prices, self._prices
                self.scorer.share_loss = lambda free, milli: weight * prices.loss(free, milli)

    def observe(self, shape: TargetShape) -> None:
        """Count an arriving pod's shape (decayed) and refit on schedule."""
        half_life = self.guard_args.half_life
        if half_life:
            # Older pods weigh 2^(-age / halfLife): scale everything down, lazily in bulk.
            factor = 0.5 ** (1.0 / half_life)
            self._decay *= factor
            if self._decay < 1e-6:
                for key in self._counts:
                    self._counts[key] *= self._decay
                    self._memory[key] *= self._decay
                for models in self._pool_demand:
                    self._pool_demand[models] *= self._decay
                self._gpu_demand *= self._decay
                self._decay = 1.0
            weight = 1.0 / self._decay
        else:
            weight = 1.0
        self._add(shape, weight)
        if shape.is_gpu:
            demand = weight * shape.gpu_count * shape.gpu_milli
            self._gpu_demand += demand
            if shape.models:
                self._pool_demand[shape.models] = self._pool_demand.get(shape.models, 0.0) + demand
        self._arrived += 1
        if self._arrived >= self._next_refit:
            self._refit()
            every = self.guard_args.refit_every
            if not self.guard_args.half_life:
                # Undecayed counts move by about (new pods / all pods) between refits, so
                # the spacing can grow with the count (a refit empties the score caches).
                every = max(every, self._arrived // 4)
            self._next_refit = min(self._arrived * 2, self._arrived + every)

    def score(self, state: CycleState, pod: PodInfo, nodes: Candidates) -> NDArray[np.int64]:
        request, view = self.gpu_request(state, pod)
        if not request and not pod.requests:
            return np.full(nodes.size, MAX_NODE_SCORE, dtype=np.int64)
        shape = pod_shape(pod, request, self.use_memory)
        self.observe(shape)
        per_device = request.shared and request.count == 1
        rows = nodes.rows
        scores, devices = self.gpu_scores(rows, shape, per_device, view, pod.uid)
        if per_device:
            self.devices.plan(pod.uid, rows, devices)
        if self.guard_args.pool_pressure and shape.is_gpu and self._pool_demand:
            penalty = self.pool_penalty()
            model = self.devices.model[rows]
            scores = np.where(
                model >= 0, np.maximum(scores - penalty[np.maximum(model, 0)], 0), scores
            )
        return scores

    def pool_penalty(self) -> NDArray[np.int64]:
        """Score points taken from a GPU pod per node model: pools whose free GPU is short
        of their share of the constrained demand (relative to the cluster) cost more.

        C_j: constrained GPU demand that may use model j (a pod allowed k present models
        counts 1/k on each), Free_j: free milli-GPU of model j now. r_j = (C_j / Free_j) /
        (C / Free); penalty_j = min(cap, pressure x (C / demand) x (r_j - 1)+)."""
        devices = self.devices
        models = devices.models
        present = devices.model >= 0
        free = np.bincount(
            devices.model[present],
            weights=devices.free[present].sum(axis=1),
            minlength=len(models),
        )
        index = {m: i for i, m in enumerate(models)}
        want = np.zeros(len(models))
        for allowed, demand in self._pool_demand.items():
            cols = [index[m] for m in allowed if m in index]
            if cols:
                want[cols] += demand / len(cols)
        total_want = want.sum()
        if total_want <= 0 or free.sum() <= 0:
            return np.zeros(len(models), dtype=np.int64)
        ratio = (want / np.maximum(free, 1.0)) / (total_want / free.sum())
        share = total_want / max(self._gpu_demand, 1.0)
        penalty = self.guard_args.pool_pressure * share * np.maximum(ratio - 1.0, 0.0)
        capped: NDArray[np.int64] = np.minimum(
            np.round(penalty), self.guard_args.pool_penalty_cap
        ).astype(np.int64)
        return capped

    @classmethod
    def new(cls, args: GpuFragGuardArgs | None, handle: Handle) -> GpuFragGuard:
        return cls(handle, args or GpuFragGuardArgs())
