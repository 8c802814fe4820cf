"""ImageLocality (PreScore, Score): kube-scheduler's preference for nodes that already
hold the pod's container images, with kube's arithmetic.

For every container and init container whose image a node lists (the name normalized
as kube does: no tag means `:latest`), the node earns the image's size scaled by the
share of all nodes that hold it (`int(size * nodes_with_it / all_nodes)`, so an image
everywhere is worth its size and a rare one little: kube's guard against piling pods on
the few nodes that have it). The sum, clamped to [23 MiB, 1000 MiB x containers], maps
linearly onto 0..100. Nodes report images in `status.images`; the state per image lives
in the cache (`shoal.cache.images`) and is read through the Snapshot.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from shoal.api.podinfo import PodInfo
from shoal.framework.cycle_state import CycleState
from shoal.framework.handle import Handle
from shoal.framework.status import Code, Status
from shoal.framework.types import MAX_NODE_SCORE, Candidates

__all__ = ["NAME", "ImageLocality", "normalized_image_name"]

NAME = "ImageLocality"
_MB = 1024 * 1024
MIN_THRESHOLD = 23 * _MB  # below: no preference (a small image pulls fast anyway)
MAX_CONTAINER_THRESHOLD = 1000 * _MB  # per container: above, the score is full
_STATE_KEY = "PreScore" + NAME


def normalized_image_name(name: str) -> str:
    """kube's normalizedImageName: an image named without a tag is `:latest`."""
    if name.rfind(":") <= name.rfind("/"):
        return name + ":latest"
    return name


class ImageLocality:
    name = NAME

    def __init__(self, handle: Handle) -> None:
        self.handle = handle

    def pre_score(self, state: CycleState, pod: PodInfo, nodes: Candidates) -> Status:
        images = self.handle.snapshot.images
        if images.empty:
            return Status(Code.SKIP)  # no node lists images: every score would be 0
        spec = pod.pod.spec
        containers = [*spec.init_containers, *spec.containers]
        present = [
            name
            for container in containers
            if images.state(name := normalized_image_name(container.image)) is not None
        ]
        if not present:
            return Status(Code.SKIP)  # none of its images is anywhere: 0 everywhere
        state.write(_STATE_KEY, (present, max(1, len(containers))))
        return Status()

    def score(self, state: CycleState, pod: PodInfo, nodes: Candidates) -> NDArray[np.int64]:
        present, containers = state.read(_STATE_KEY)
        snap = self.handle.snapshot
        images = snap.images
        total_nodes = snap.n
        sums = np.zeros(nodes.size, dtype=np.int64)
        for name in present:
            found = images.state(name)
            if found is None:
                continue
            size, count = found
            # kube: int64(float64(size) * (float64(numNodes) / float64(totalNumNodes)))
            scaled = int(size * (count / total_nodes))
            sums += scaled * images.mask(name)[nodes.index]
        high = MAX_CONTAINER_THRESHOLD * containers
        np.clip(sums, MIN_THRESHOLD, high, out=sums)
        scores: NDArray[np.int64] = (MAX_NODE_SCORE * (sums - MIN_THRESHOLD)) // (
            high - MIN_THRESHOLD
        )
        return scores

    @classmethod
    def new(cls, args: object, handle: Handle) -> ImageLocality:
        return cls(handle)
