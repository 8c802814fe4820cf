"""GpuFragmentation (Score): Fragmentation Gradient Descent (FGD, Weng et al., ATC'23).

Scores a node by how little the pod grows the node's GPU fragmentation F_n(M) with respect
to the target workload M (see `shoal.gpu.fragmentation`):

    score = floor(100 * sigmoid((F_before - F_after) / 1000))     (F in milli-GPU)

For a GPU share the pod could take any device with enough free milli; each is tried and
the node scores its best device (the lowest index among equal scores), which is the
device the pod gets if the node wins. k-GPU and CPU-only pods take devices as the
artifact does (lowest-index free devices).

The target workload is given as plugin args (`targetWorkload`: shapes with weights), or,
when empty, learned from the pods this plugin has scored: the most frequent shapes that
cover `coverage` of them, refitted each time the sample doubles.

Per-node results are cached per pod shape and recomputed only for nodes whose state
changed since (`GpuDevices.version`), so a cycle costs O(changed nodes) numpy work.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from shoal.framework.handle import Handle
from shoal.gpu.fragmentation import sigmoid_scores
from shoal.plugins.fragmentation_base import (
    FragmentationPolicy,
    GpuFragmentationArgs,
    TargetShapeArgs,
    pod_shape,
)

__all__ = [
    "NAME",
    "GpuFragmentation",
    "GpuFragmentationArgs",
    "TargetShapeArgs",
    "pod_shape",
]

NAME = "GpuFragmentation"


class GpuFragmentation(FragmentationPolicy):
    name = NAME
    measure = "fgd"

    def score_of(self, gain: NDArray[np.float64]) -> NDArray[np.int64]:
        return sigmoid_scores(gain)

    @classmethod
    def new(cls, args: GpuFragmentationArgs | None, handle: Handle) -> GpuFragmentation:
        return cls(handle, args or GpuFragmentationArgs())
