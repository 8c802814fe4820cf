"""GpuFragBlend (Score): FGD's fragmentation, with a fill term that sees cpu and memory
as the tie-breaker ("FragBlend", see docs/gpu-sharing.md).

FGD counts a node's free GPU as usable by a task shape as soon as one copy of the shape
fits. That misses GPUs stranded by the other resources: a node with 8 free GPUs and 30
free cpu cores can host only two of the trace's typical 12-core 1-GPU tasks, and a cpu-only
pod placed on a GPU-rich node takes cores its GPUs will need. The fill term measures, per
shape, the GPU that would stay unused if the node were filled with copies of the shape
(copies limited by whole devices, cpu and memory).

The node's fragmentation is `mix[0]` x FGD's term + `mix[1]` x the fill term. The default
16:1 keeps FGD in charge: the fill term decides between nodes whose FGD gains are (nearly)
equal, which is most of them once a cluster fills up, and overrides FGD only when it
sees far more stranded GPU. The score is FGD's sigmoid, floor(100 * sigmoid(gain / T)),
gain = F_before - F_after in milli-GPU, with T = 500 instead of FGD's 1000: scores are
integers, and at T = 1000 gains within ~40 milli-GPU of each other collapse into one
score, which hides exactly the small differences the fill term adds. (With FGD's term
alone a finer T is worse: its ties, broken in a random node order, spread load. The
sensitivity measurements are in docs/gpu-sharing.md.)

Shares pick their device the same way as FGD (the best-scoring device, lowest index among
equals). Target workload: as GpuFragmentation (plugin args, or learned online); with
`memory`, target shapes carry a memory request and pods are matched with theirs.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray
from pydantic import Field, field_validator

from shoal.framework.handle import Handle
from shoal.gpu.fragmentation import (
    FragmentationModel,
    FragScorer,
    TargetWorkload,
    sigmoid_scores,
)
from shoal.plugins.fragmentation_base import FragmentationPolicy, GpuFragmentationArgs

__all__ = [
    "DEFAULT_MIX",
    "DEFAULT_TEMPERATURE",
    "NAME",
    "GpuFragBlend",
    "GpuFragBlendArgs",
    "blend_scorer",
]

NAME = "GpuFragBlend"
DEFAULT_MIX = (16, 1)
"""Weights of the FGD term and the fill term."""
DEFAULT_TEMPERATURE = 500.0
"""The sigmoid scale (milli-GPU) turning fragmentation gains into scores."""


class GpuFragBlendArgs(GpuFragmentationArgs):
    mix: tuple[int, int] = DEFAULT_MIX
    memory: bool = True
    temperature: float = Field(default=DEFAULT_TEMPERATURE, gt=0)

    @field_validator("mix")
    @classmethod
    def _weights(cls, mix: tuple[int, int]) -> tuple[int, int]:
        if min(mix) < 0 or sum(mix) == 0:
            raise ValueError("mix weights must be >= 0 and not both 0")
        return mix


def blend_scorer(
    policy: FragmentationPolicy, workload: TargetWorkload, args: GpuFragBlendArgs
) -> FragScorer:
    """The blend measure's scorer for `workload` under `args` (mix; memory off drops the
    shapes' memory), shared by the policies built on it (GpuFragGuard)."""
    if not args.memory:
        workload = TargetWorkload(
            tuple(s.without_memory() for s in workload.shapes), workload.weights
        )
    model = FragmentationModel(workload, policy.devices.models, policy.measure, args.mix)
    return FragScorer(
        policy.devices, policy.handle.snapshot, model, policy.score_of, policy.state_classes
    )


class GpuFragBlend(FragmentationPolicy):
    name = NAME
    measure = "blend"

    def __init__(self, handle: Handle, args: GpuFragBlendArgs) -> None:
        # Set before the base class builds the scorer (it calls `_scorer`); typed as ours.
        self.blend_args = args
        self.use_memory = args.memory
        super().__init__(handle, args)

    def _scorer(self, workload: TargetWorkload) -> FragScorer:
        return blend_scorer(self, workload, self.blend_args)

    def score_of(self, gain: NDArray[np.float64]) -> NDArray[np.int64]:
        return sigmoid_scores(gain, self.blend_args.temperature)

    @classmethod
    def new(cls, args: GpuFragBlendArgs | None, handle: Handle) -> GpuFragBlend:
        return cls(handle, args or GpuFragBlendArgs())
