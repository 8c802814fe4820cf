"""Defragmentation: make room for the cluster's typical GPU work before it has to wait.

GPU-share pods and partial multi-GPU placements leave free GPU milli scattered over
nodes, so that a typical multi-GPU or whole-GPU task finds no node although the cluster
has the GPUs. A defragmentation pass (the Rescheduler's, every `defragIntervalSeconds`)
looks at the *typical workload*, the GPU shapes of the pods running now weighted by how
many run, and, largest shape first, asks whether any node could take one more pod of
that shape. If none can, it asks the migration planner (`shoal.rescheduler.planner`)
for moves that make room for one (a copy of a running pod of that shape stands for it),
and keeps the plan only if it lowers the fragmentation of the nodes it touches, measured
as the placement policies measure it (`shoal.gpu.fragmentation`, the FGD definition against
the same typical workload). The first such plan is the pass's result; nothing is held
for the typical pod (it does not exist yet), only for the moved pods.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import msgspec
import numpy as np
from numpy.typing import NDArray

from shoal.api.gpu import GpuRequest
from shoal.api.podinfo import PodInfo
from shoal.cache.cluster import PlacedPods
from shoal.cache.gpu_devices import request_of
from shoal.cache.snapshot import Snapshot
from shoal.cache.transaction import Transaction
from shoal.gpu.fragmentation import FragmentationModel, FragScorer, TargetShape, TargetWorkload
from shoal.rescheduler.planner import MigrationPlan, unbound

__all__ = ["DefragPlan", "plan_defragmentation", "typical_workload"]

DEFRAG_UID = "shoal-defrag/"


class DefragPlan:
    __slots__ = ("frag_after", "frag_before", "plan", "shape")

    def __init__(
        self, plan: MigrationPlan, shape: TargetShape, before: float, after: float
    ) -> None:
        self.plan = plan
        self.shape = shape
        self.frag_before = before
        self.frag_after = after


def _shape(pod: PodInfo, request: GpuRequest) -> TargetShape:
    return TargetShape(pod.requests.get("cpu", 0), request.milli, request.count)


def typical_workload(cluster: PlacedPods) -> tuple[TargetWorkload, dict[TargetShape, PodInfo]]:
    """The GPU shapes of the pods placed now, counted, and one running pod per shape."""
    counts: Counter[TargetShape] = Counter()
    example: dict[TargetShape, PodInfo] = {}
    for record in cluster.placed.values():
        request = request_of(None, record.pod)
        if not request:
            continue
        shape = _shape(record.pod, request)
        counts[shape] += 1
        if not record.assumed:
            example.setdefault(shape, record.pod)
    return TargetWorkload.from_counts(counts), example


def plan_defragmentation(
    snapshot: Snapshot,
    transaction: Callable[[], Transaction],
    plan: Callable[[PodInfo], MigrationPlan | None],
) -> DefragPlan | None:
    """The first plan (largest typical shape first) that makes room for a shape no node
    has room for and lowers the fragmentation of the nodes it touches; `plan` is the
    Rescheduler's planner with its rules and budgets."""
    devices = snapshot.gpu_devices
    n = snapshot.n
    if devices is None or n == 0:
        return None
    workload, example = typical_workload(snapshot)
    if not workload.shapes:
        return None
    model = FragmentationModel(workload, devices.models)
    scorer = FragScorer(devices, snapshot, model)
    everywhere = np.arange(n, dtype=np.intp)
    for shape in sorted(workload.shapes, key=lambda s: (-s.gpu_count * s.gpu_milli, s)):
        if shape not in example:
            continue
        request = GpuRequest(shape.gpu_count, shape.gpu_milli)
        if bool(devices.enough(request, everywhere).any()):
            continue  # a pod of this shape would find room today
        stand_in = _typical_pod(example[shape], shape)
        found = plan(stand_in)
        if found is None:
            continue
        rows = np.array(
            sorted(
                {snapshot.row_of[m.source] for m in found.moves}
                | {snapshot.row_of[m.target] for m in found.moves}
            ),
            dtype=np.intp,
        )
        before = _frag(scorer, rows)
        with transaction() as tx:
            for move in found.moves:
                tx.evict(move.pod)
            for move in found.moves:
                tx.assume(unbound(move.pod), move.target)
            snapshot.refresh()
            after = _frag(scorer, rows)
        snapshot.refresh()
        if after < before:
            return DefragPlan(found, shape, before, after)
    return None


def _frag(scorer: FragScorer, rows: NDArray[np.intp]) -> float:
    states = scorer.states(rows)
    return float(scorer.model.frag(states).sum())


def _typical_pod(example: PodInfo, shape: TargetShape) -> PodInfo:
    """A pending copy of a running pod of the shape: what the next one would ask for."""
    meta = msgspec.structs.replace(
        example.pod.metadata,
        uid=f"{DEFRAG_UID}{shape.gpu_count}x{shape.gpu_milli}",
        name=f"typical-{shape.gpu_count}x{shape.gpu_milli}",
        owner_references=[],
    )
    spec = msgspec.structs.replace(example.pod.spec, node_name="")
    pod = PodInfo(msgspec.structs.replace(example.pod, metadata=meta, spec=spec), 0.0)
    pod.priority = example.priority
    return pod
