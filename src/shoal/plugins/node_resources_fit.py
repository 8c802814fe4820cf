"""NodeResourcesFit (PreFilter, Filter, Score): the pod's requests must fit in the
node's free allocatable; scoring is LeastAllocated (spread, the default), MostAllocated
(bin-packing) or RequestedToCapacityRatio (a utilisation -> score curve), each with
per-resource weights. Extended resources such as nvidia.com/gpu count like cpu.

Whole GPUs: GPU-share pods (`alibabacloud.com/gpu-milli`) occupy part of a device without
charging the `nvidia.com/gpu` column, so on nodes the cache's device table knows
(`Snapshot.gpu_devices`), a pod asking for whole GPUs needs that many *fully free*
devices, in every profile, with or without GpuShare; the reason stays kube's
"Insufficient nvidia.com/gpu". Pods without a GPU request never touch the device table.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
from numpy.typing import NDArray

from shoal.api.gpu import DEVICE_LEVEL_RESOURCES, GPU_MILLI
from shoal.api.podinfo import PodInfo
from shoal.api.resources import GPU, PODS, is_extended
from shoal.cache.dra import SERVICE_KEY as DRA_SERVICE
from shoal.cache.dra import DeviceCatalog
from shoal.cache.gpu_devices import GpuDevices, request_of
from shoal.framework.cycle_state import CycleState
from shoal.framework.handle import Handle
from shoal.framework.status import Code, Status
from shoal.framework.types import (
    MAX_NODE_SCORE,
    ActionType,
    Candidates,
    ClusterEvent,
    EventResource,
    Failure,
    FilterResult,
    PreFilterResult,
)
from shoal.plugins.args import NodeResourcesFitArgs
from shoal.plugins.normalize import go_div
from shoal.plugins.resource_allocation import allocatable_and_requested

__all__ = ["NAME", "NodeResourcesFit", "broken_linear"]

NAME = "NodeResourcesFit"
_STATE_KEY = "PreFilter" + NAME
_GPU_SHARE = "GpuShare"  # the plugin that places devices (plugins never import each other)
MAX_CUSTOM_PRIORITY_SCORE = 10  # RequestedToCapacityRatio shape scores are 0..10
MAX_UTILIZATION = 100
_CHECKED_KEPT = 4096  # request vectors whose checked columns are remembered

Scorer = Callable[[NDArray[np.int64], NDArray[np.int64], NDArray[np.int64]], NDArray[np.int64]]


def least_allocated(alloc: NDArray[np.int64], req: NDArray[np.int64]) -> NDArray[np.int64]:
    """kube's leastRequestedScore: (alloc - req) * 100 / alloc, 0 when alloc is 0 or the
    request exceeds it. Both are non-negative, so those cases are exactly the ones whose
    numerator is <= 0 (with alloc 0 divided by 1): one clamp instead of two masks."""
    score: NDArray[np.int64] = ((alloc - req) * MAX_NODE_SCORE) // np.maximum(alloc, 1)
    np.maximum(score, 0, out=score)
    return score


def most_allocated(alloc: NDArray[np.int64], req: NDArray[np.int64]) -> NDArray[np.int64]:
    """kube's mostRequestedScore: min(req, alloc) * 100 / alloc, 0 when alloc is 0 (then
    the numerator is min(req, 0) = 0 as well)."""
    score: NDArray[np.int64] = (np.minimum(req, alloc) * MAX_NODE_SCORE) // np.maximum(alloc, 1)
    return score


def broken_linear(shape: list[tuple[int, int]]) -> Callable[[NDArray[np.int64]], NDArray[np.int64]]:
    """kube's buildBrokenLinearFunction over (utilization, score) points."""
    utils = np.array([u for u, _ in shape], dtype=np.int64)
    scores = np.array([s for _, s in shape], dtype=np.int64)

    def fn(p: NDArray[np.int64]) -> NDArray[np.int64]:
        i = np.searchsorted(utils, p, side="left")  # first point with p <= utilization
        out = np.full(p.shape, scores[-1], dtype=np.int64)
        inside = i < len(utils)
        first = inside & (i == 0)
        out[first] = scores[0]
        mid = inside & (i > 0)
        if mid.any():
            j = i[mid]
            du = utils[j] - utils[j - 1]
            out[mid] = scores[j - 1] + go_div(
                (scores[j] - scores[j - 1]) * (p[mid] - utils[j - 1]), du
            )
        return out

    return fn


class NodeResourcesFit:
    name = NAME
    # Optimistic workers may decide with it: its verdict reads only the node's row and
    # the pod (shoal.scheduler.optimistic).
    row_local = True
    # Its verdict on a node depends only on that node's pods and only improves as pods
    # leave: preemption may judge all candidate nodes at once (shoal.preemption).
    preemption_local = True

    def __init__(self, handle: Handle, args: NodeResourcesFitArgs) -> None:
        self.handle = handle
        self.args = args
        strategy = args.scoring_strategy
        self.score_resources = [r.name for r in strategy.resources]
        self.weights = np.array([r.weight for r in strategy.resources], dtype=np.int64)
        self.strategy = strategy.type
        # Sizes of one device (vGPU memory and compute) are checked per device by
        # GpuShare; device plugins do not report them per node.
        self._ignored = set(args.ignored_resources) | set(DEVICE_LEVEL_RESOURCES)
        self._ignored_groups = set(args.ignored_resource_groups)
        self._checked_columns: NDArray[np.bool_] = np.zeros(0, dtype=bool)
        self._checked_of: dict[
            int,
            tuple[NDArray[np.int64], NDArray[np.intp], NDArray[np.int64], list[tuple[int, int]]],
        ] = {}
        self._shape: Callable[[NDArray[np.int64]], NDArray[np.int64]] | None = None
        if strategy.requested_to_capacity_ratio is not None:
            factor = MAX_NODE_SCORE // MAX_CUSTOM_PRIORITY_SCORE
            self._shape = broken_linear(
                [
                    (p.utilization, p.score * factor)
                    for p in strategy.requested_to_capacity_ratio.shape
                ]
            )

    def _checked(self, resource: str) -> bool:
        if not is_extended(resource):
            return True
        if resource in self._ignored:
            return False
        group = resource.split("/", 1)[0] if "/" in resource else ""
        return group not in self._ignored_groups

    # ---- PreFilter / Filter --------------------------------------------------------

    def pre_filter(self, state: CycleState, pod: PodInfo) -> tuple[PreFilterResult | None, Status]:
        unplaceable = self._gpu_without_gpu_share(state, pod)
        if unplaceable:
            return None, Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, unplaceable)
        vector, cols, need, pairs = self._checked_of_pod(pod)
        gpu = self._whole_gpu_position(state, pod, vector, cols)
        state.write(_STATE_KEY, (cols, need, gpu, pairs, self._delegated(cols)))
        return None, Status()

    def _delegated(self, cols: NDArray[np.intp]) -> tuple[int, ...]:
        """Positions in `cols` of extended resources a DeviceClass stands for: on a node
        whose allocatable lacks one, DynamicResources allocates devices for it instead
        (kube's shouldDelegateResourceToDRA, KEP-5004), so it is not checked there."""
        catalog = self.handle.services.get(DRA_SERVICE)
        if not isinstance(catalog, DeviceCatalog) or not catalog.classes:
            return ()
        mapping = catalog.extended_mapping()
        names = self.handle.snapshot.resources
        return tuple(j for j, col in enumerate(cols.tolist()) if names[col] in mapping)

    def checked_request(self, pod: PodInfo) -> tuple[NDArray[np.intp], NDArray[np.int64]]:
        """The columns Filter checks for the pod and the amounts (preemption's could-fit
        arithmetic must leave out what Filter leaves out)."""
        _, cols, need, _ = self._checked_of_pod(pod)
        return cols, need

    def _checked_of_pod(
        self, pod: PodInfo
    ) -> tuple[NDArray[np.int64], NDArray[np.intp], NDArray[np.int64], list[tuple[int, int]]]:
        vector = self.handle.snapshot.pod_vector(pod)
        checked = self._checked_of.get(id(vector))
        if checked is None or checked[0] is not vector:
            checked = self._checked_for(vector)
        return checked

    def _checked_for(
        self, vector: NDArray[np.int64]
    ) -> tuple[NDArray[np.int64], NDArray[np.intp], NDArray[np.int64], list[tuple[int, int]]]:
        """The columns Filter checks for a request vector, the amounts, and both as
        plain ints (numpy scalars index slower). Kept per vector: pods of one shape share
        their vector (`NodeTable.pod_vector`), so most pods find theirs here."""
        names = self.handle.snapshot.resources
        if len(self._checked_columns) != len(names):  # columns are only ever appended
            self._checked_columns = np.array([self._checked(r) for r in names], dtype=bool)
        cols = np.flatnonzero(vector)
        cols = cols[self._checked_columns[cols]]
        need = vector[cols]
        cols.flags.writeable = need.flags.writeable = False  # shared by many cycles
        pairs = list(zip(cols.tolist(), need.tolist(), strict=True))
        if len(self._checked_of) >= _CHECKED_KEPT:
            self._checked_of.clear()
        # The vector is kept with its entry, so its id is not reused while it is here.
        entry = (vector, cols, need, pairs)
        self._checked_of[id(vector)] = entry
        return entry

    def _gpu_without_gpu_share(self, state: CycleState, pod: PodInfo) -> str:
        """Why a pod asking for GPU devices the `nvidia.com/gpu` column cannot see (a
        share, or devices counted only by annotation) cannot run in a profile without
        GpuShare ("" if it can): refused with the fix rather than placed as if it had
        asked for no GPU."""
        request = request_of(state, pod)
        if not request or (not request.shared and pod.requests.get(GPU, 0) == request.count):
            return ""
        runner = self.handle.frameworks.get(pod.scheduler_name)
        if runner is None or runner.has_filter(_GPU_SHARE):
            return ""
        what = (
            f"a GPU share ({request.milli} milli-GPU"
            + (f" on each of {request.count} devices" if request.count > 1 else "")
            + ")"
            if request.shared
            else f"{request.count} GPU device(s) by annotation"
        )
        return (
            f"the pod asks for {what}, but profile {pod.scheduler_name!r} does not enable "
            f"{_GPU_SHARE}: enable it in the profile (multiPoint) or ask for whole GPUs "
            f"with the {GPU} request"
        )

    def _whole_gpu_position(
        self, state: CycleState, pod: PodInfo, vector: NDArray[np.int64], cols: NDArray[np.intp]
    ) -> int:
        """Where the `nvidia.com/gpu` column is in `cols` when the pod asks for whole
        GPUs and the cache tracks devices; -1 otherwise (the column alone decides)."""
        if self.handle.snapshot.gpu_devices is None:
            return -1
        gpu_col = self.handle.snapshot.resource_index.get(GPU)
        if gpu_col is None or not vector[gpu_col]:
            return -1
        where = np.flatnonzero(cols == gpu_col)
        if not where.size or request_of(state, pod).milli != GPU_MILLI:
            return -1  # a share that also charges the column keeps kube's column check
        return int(where[0])

    def _whole_gpus_free(
        self, devices: GpuDevices, index: slice | NDArray[np.intp], column_free: NDArray[np.int64]
    ) -> NDArray[np.int64]:
        """Whole GPUs free: fully free devices where the device table knows the node
        (never more than the column, which also counts pods no device could hold)."""
        known = devices.count[index] > 0
        full = np.minimum(column_free, devices.full[index])
        free: NDArray[np.int64] = np.where(known, full, column_free)
        return free

    def filter(self, state: CycleState, pod: PodInfo, nodes: Candidates) -> FilterResult:
        snap = self.handle.snapshot
        cols, need, gpu, pairs, delegated = state.read(_STATE_KEY)
        idx = nodes.index
        free = snap.free
        # One contiguous column per requested resource (the table is column-major).
        fits = [free[:, col][idx] >= amount for col, amount in pairs]
        if not fits:
            return FilterResult(np.ones(nodes.size, dtype=bool))
        devices = self.handle.snapshot.gpu_devices
        if gpu >= 0 and devices is not None:
            fits[gpu] = self._whole_gpus_free(devices, idx, free[idx, cols[gpu]]) >= need[gpu]
        if self.handle.snapshot.nominations:
            self._leave_room_for_nominated(pod, nodes, cols, need, fits, gpu)
        for j in delegated:
            fits[j] = fits[j] | (snap.allocatable[:, cols[j]][idx] == 0)
        passed = fits[0]
        if len(fits) > 1:
            passed = passed & fits[1]
            for fit in fits[2:]:
                passed &= fit
        if passed.all():
            return FilterResult(passed)
        failures = []
        names = snap.resources
        # kube lists "Too many pods" first, then the resources in column order.
        for j, col in sorted(enumerate(cols), key=lambda jc: names[jc[1]] != PODS):
            short = ~fits[j]
            if not short.any():
                continue
            name = names[col]
            if name == PODS:
                failures.append(Failure("Too many pods", short, Code.UNSCHEDULABLE))
                continue
            reason = f"Insufficient {name}"
            # More than the node has at all: no eviction can make room (kube's
            # InsufficientResource.Unresolvable), so preemption leaves the node alone.
            hopeless = short & (snap.allocatable[:, col][idx] < need[j])
            if hopeless.any():
                failures.append(Failure(reason, hopeless, Code.UNSCHEDULABLE_AND_UNRESOLVABLE))
                short &= ~hopeless
                if not short.any():
                    continue
            failures.append(Failure(reason, short, Code.UNSCHEDULABLE))
        return FilterResult(passed, failures)

    def fits_after(
        self, state: CycleState, pod: PodInfo, rows: NDArray[np.intp], freed: NDArray[np.int64]
    ) -> NDArray[np.bool_] | None:
        """Filter's verdict on `rows` if `freed[i]` (over all columns) more were free on
        row i, nominated room included, as it would be with those pods evicted from the
        cache: preemption's victim arithmetic. None when the verdict needs more than the
        columns (whole GPUs judged per device)."""
        cols, need, gpu, _, delegated = state.read(_STATE_KEY)
        if gpu >= 0 or delegated:
            return None
        free = (self.handle.snapshot.free_for(pod, rows) + freed)[:, cols]
        fits: NDArray[np.bool_] = np.all(free >= need, axis=1)
        return fits

    def _leave_room_for_nominated(
        self,
        pod: PodInfo,
        nodes: Candidates,
        cols: NDArray[np.intp],
        need: NDArray[np.int64],
        fits: list[NDArray[np.bool_]],
        gpu: int,
    ) -> None:
        """Nominated pods (preemptors waiting for the room they freed) count as placed on
        their node for pods of lower or equal priority (kube's addNominatedPods)."""
        snap = self.handle.snapshot
        devices = self.handle.snapshot.gpu_devices
        rows, vectors = snap.nominated_room(pod)
        if not rows.size:
            return
        # Vectorised: sum the nominated pods' requests per row, then locate those rows
        # among the candidates (many preemptors may be waiting at once).
        vectors = vectors[:, cols]
        uniq, inverse = np.unique(rows, return_inverse=True)
        reserved = np.zeros((uniq.size, len(cols)), dtype=np.int64)
        np.add.at(reserved, inverse, vectors)
        if isinstance(nodes.index, slice):
            keep = uniq < nodes.size
            positions = uniq[keep]
        else:
            cand = nodes.rows
            order = np.argsort(cand, kind="stable")
            at = np.searchsorted(cand, uniq, sorter=order)
            at = np.minimum(at, cand.size - 1)
            keep = cand[order[at]] == uniq
            positions = order[at[keep]]
        if not keep.any():
            return
        uniq, reserved = uniq[keep], reserved[keep]
        available = snap.free[uniq][:, cols].copy()
        if gpu >= 0 and devices is not None:
            available[:, gpu] = self._whole_gpus_free(devices, uniq, available[:, gpu])
        left = available - reserved
        for j in range(len(cols)):
            fits[j] = fits[j].copy() if not fits[j].flags.writeable else fits[j]
            fits[j][positions] = left[:, j] >= need[j]

    # ---- Score ---------------------------------------------------------------------

    def score(self, state: CycleState, pod: PodInfo, nodes: Candidates) -> NDArray[np.int64]:
        counted = allocatable_and_requested(
            self.handle.snapshot, pod, nodes, self.score_resources, use_requested=False
        )
        alloc, req = counted.allocatable, counted.requested
        if not counted.positions.size:
            return np.zeros(nodes.size, dtype=np.int64)
        weights = self.weights[counted.positions]
        # Every resource of every candidate at once (resources x candidates).
        if self.strategy == "LeastAllocated":
            per_resource = least_allocated(alloc, req)
        elif self.strategy == "MostAllocated":
            per_resource = most_allocated(alloc, req)
        else:
            assert self._shape is not None
            safe = np.where(alloc == 0, 1, alloc)
            util = np.where(
                (alloc == 0) | (req > alloc), MAX_UTILIZATION, (req * MAX_UTILIZATION) // safe
            )
            per_resource = self._shape(util)
            # kube's RTCR scorer leaves resources that score 0 out of the average.
            weight = np.where((alloc > 0) & (per_resource > 0), weights[:, None], 0)
            total = (per_resource * weight).sum(axis=0)
            weight_sum = weight.sum(axis=0)
            # Go's math.Round: halves round away from zero (np.round would round to even).
            out = np.floor(total / np.maximum(weight_sum, 1) + 0.5).astype(np.int64)
            return np.where(weight_sum == 0, 0, out)
        if alloc.all():
            # The usual case: every candidate has some of every resource (cpu, memory).
            weight_total = int(weights.sum())
            if weight_total == 0:
                return np.zeros(nodes.size, dtype=np.int64)
            scores: NDArray[np.int64] = (weights @ per_resource) // weight_total
            return scores
        # A resource with zero allocatable on a node does not count on that node (its
        # score there is 0 already).
        weight = (alloc > 0) * weights[:, None]
        weight_sum = weight.sum(axis=0)
        out = (per_resource * weight).sum(axis=0) // np.maximum(weight_sum, 1)
        return np.where(weight_sum == 0, 0, out)

    def events_to_register(self) -> Sequence[ClusterEvent]:
        return [
            ClusterEvent(
                EventResource.ASSIGNED_POD, ActionType.DELETE | ActionType.UPDATE_POD_SCALE_DOWN
            ),
            ClusterEvent(EventResource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_ALLOCATABLE),
        ]

    @classmethod
    def new(cls, args: NodeResourcesFitArgs | None, handle: Handle) -> NodeResourcesFit:
        return cls(handle, args or NodeResourcesFitArgs())
