"""GPU census: how the cluster's GPUs are used, per node pool and GPU model, for /metrics.

Per (pool, model): devices; GPUs allocated to whole-GPU pods and to GPU shares; GPUs
unallocated; devices holding shares; and fragmentation, the free GPU that today's GPU
workload could not use (F_n(M) of `shoal.gpu.fragmentation`, the FGD measure, summed
over the nodes; M is the mix of GPU shapes pending and placed now, as on the dashboard).
A node counts in every NodePool whose selector it matches, and under pool "" when it
matches none; a node without a model label counts under model "".

The census is taken where the scheduler runs: `GpuCensus.maybe_sample` is a sampler of
the driver loop (the core's thread in a cluster), so it reads the cache between
decisions and never races them; the metrics collector only reads the latest result (an
immutable tuple). Taking it is vectorised over nodes; the Python work is per GPU pod
new since the last census (its shape) and per share (its devices).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from shoal.api.gpu import GPU_MILLI
from shoal.api.podinfo import PodInfo
from shoal.api.queue import NodePool
from shoal.api.resources import CPU, MEMORY
from shoal.cache.gpu_devices import Assignment, GpuDevices, request_of
from shoal.cache.node_table import NodeTable
from shoal.gpu.dra_gpus import DraGpuView
from shoal.gpu.fragmentation import FragmentationModel, NodeStates, TargetShape, TargetWorkload
from shoal.plugins.fragmentation_base import pod_shape
from shoal.scheduler import Scheduler
from shoal.web.dra_census import DraGroup, dra_census, dra_gpus

__all__ = ["MAX_SHAPES", "WHOLE_GPU", "GpuCensus", "GpuGroup", "ShapeTracker", "pool_masks"]

MAX_SHAPES = 10_000  # distinct GPU shapes remembered
WHOLE_GPU = TargetShape(0, GPU_MILLI, 1)
DEFAULT_INTERVAL = 5.0  # seconds of the driver's clock between two censuses


class ShapeTracker:
    """The target workload M: the GPU shapes of the pods pending and placed now. A pod's
    shape is parsed once (its first sighting) and counted while the pod is known: a
    refresh costs set differences over the uids plus the parsing of the pods new since."""

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self._shapes: dict[str, int] = {}  # uid -> index into _shape_list (-1: no GPU)
        self._shape_list: list[TargetShape] = []
        self._shape_index: dict[TargetShape, int] = {}
        self._counts: Counter[int] = Counter()  # shape index -> pods of _shapes

    def _shape_id(self, pod: PodInfo) -> int:
        request = request_of(None, pod)
        if not (request.count and request.milli):
            return -1
        shape = pod_shape(pod, request)
        found = self._shape_index.get(shape)
        if found is None:
            found = self._shape_index[shape] = len(self._shape_list)
            self._shape_list.append(shape)
        return found

    def target(
        self,
        pending: Mapping[str, PodInfo],
        devices: GpuDevices | None,
        rows: list[dict[str, PodInfo]],
    ) -> TargetWorkload:
        """M from the pending pods (uid -> pod) and the pods the device table holds
        (`rows`: the node table's pods per row); one whole GPU when there is none."""
        if len(self._shape_list) > MAX_SHAPES:  # shapes of long-gone pods: start afresh
            self._reset()
        cached, counts = self._shapes, self._counts
        placed = devices.assigned if devices is not None else {}
        for uid in cached.keys() - pending.keys() - placed.keys():
            counts[cached.pop(uid)] -= 1
        for uid in pending.keys() - cached.keys():
            sid = cached[uid] = self._shape_id(pending[uid])
            counts[sid] += 1
        for uid in placed.keys() - cached.keys():
            row = placed[uid].row
            pod = rows[row].get(uid) if row < len(rows) else None
            if pod is not None:
                sid = cached[uid] = self._shape_id(pod)
                counts[sid] += 1
        present = {sid: n for sid, n in counts.items() if n > 0 and sid >= 0}
        if not present:
            return TargetWorkload((WHOLE_GPU,), (1,))
        shapes = self._shape_list
        return TargetWorkload.from_counts({shapes[i]: n for i, n in present.items()}, 0.95)


class FragmentationGauge:
    """F_n(M) of every node row, with the model rebuilt only when M or the models change."""

    def __init__(self) -> None:
        self._model: FragmentationModel | None = None
        self._key: tuple[object, ...] = ()

    def frag(
        self, devices: GpuDevices, table: NodeTable, workload: TargetWorkload, width: int
    ) -> NDArray[np.float64]:
        n = table.n
        if not width or not n:
            return np.zeros(n)
        key = (workload, tuple(devices.models))
        if self._model is None or key != self._key:
            self._model = FragmentationModel(workload, devices.models)
            self._key = key
        cpu, mem = table.resource_index[CPU], table.resource_index[MEMORY]
        states = NodeStates(
            devices.free[:n, :width].astype(np.int64),
            table.allocatable[:n, cpu] - table.requested[:n, cpu],
            table.allocatable[:n, mem] - table.requested[:n, mem],
            devices.model[:n].astype(np.int64),
        )
        frag: NDArray[np.float64] = self._model.frag(states)
        return frag


def pool_masks(table: NodeTable, pools: Mapping[str, NodePool]) -> dict[str, NDArray[np.bool_]]:
    """Which node rows each NodePool selects (by its nodeSelector), and under "" the
    rows no pool selects. Vectorised over the label columns."""
    n = table.n
    labels = table.labels
    out: dict[str, NDArray[np.bool_]] = {}
    in_some = np.zeros(n, dtype=bool)
    for name, pool in sorted(pools.items()):
        mask = np.ones(n, dtype=bool)
        for key, value in pool.spec.node_selector.items():
            (code,) = labels.value_codes(key, [value])
            mask &= labels.column(key, slice(0, n)) == code
        out[name] = mask
        in_some |= mask
    out[""] = ~in_some
    return out


@dataclass(frozen=True, slots=True)
class GpuGroup:
    """The GPUs of the nodes of one pool with one model (amounts in milli-GPU)."""

    pool: str
    model: str
    nodes: int
    devices: int
    whole_milli: int  # allocated to pods asking for whole GPUs
    shared_milli: int  # allocated to GPU shares
    free_milli: int
    shared_devices: int  # devices holding at least one share
    frag_milli: float  # free GPU the current workload could not use
    # Devices that take no more pods (registered unhealthy, or at their HAMi/Volcano
    # split count; `GpuDevices.blocked`): their unallocated milli is in `free_milli`.
    blocked_devices: int = 0


class GpuCensus:
    """The latest census of the scheduler's GPUs (see the module docstring)."""

    def __init__(self, scheduler: Scheduler, interval: float = DEFAULT_INTERVAL) -> None:
        self.scheduler = scheduler
        self.interval = interval
        self.latest: tuple[GpuGroup, ...] = ()
        # The DRA devices per driver, taken with each census (`shoal.web.dra_census`).
        self.dra: tuple[DraGroup, ...] = ()
        self.taken_at: float | None = None
        self._next = 0.0
        self._shapes = ShapeTracker()
        self._frag = FragmentationGauge()

    def maybe_sample(self, now: float) -> None:
        """A driver-loop sampler: a census at most every `interval` seconds."""
        if now >= self._next:
            self.latest = self.sample()
            self.dra = dra_census(self.scheduler)
            self.taken_at = now
            self._next = now + self.interval

    def sample(self) -> tuple[GpuGroup, ...]:
        native = self._sample_native()
        gpus = dra_gpus(self.scheduler)
        if gpus is None:
            return native
        return _with_dra(native, gpus, self.scheduler)

    def _sample_native(self) -> tuple[GpuGroup, ...]:
        sched = self.scheduler
        devices = sched.cluster.gpu_devices
        table = sched.cluster.table
        n = table.n
        if devices is None or n == 0:
            return ()
        count = devices.count[:n].astype(np.int64)
        width = int(count.max())
        # Unallocated, blocked devices included (allocated + unallocated = devices).
        free = devices.room[:n, :width].astype(np.int64)
        blocked = devices.blocked[:n, :width].sum(axis=1)
        whole, shared, shared_devices = _allocations(devices.assigned.values(), n, width)
        pending = {e.pod.uid: e.pod for e in sched.scheduling_queue.pending()}
        workload = self._shapes.target(pending, devices, table.pods)
        frag = self._frag.frag(devices, table, workload, width)
        models = devices.models
        codes = devices.model[:n].astype(np.int64)
        free_total = free.sum(axis=1)
        groups: list[GpuGroup] = []
        for pool, mask in pool_masks(table, sched.tenant_queues.pools).items():
            gpu_rows = mask & (count > 0)
            for code in np.unique(codes[gpu_rows]).tolist():
                rows = gpu_rows & (codes == code)
                groups.append(
                    GpuGroup(
                        pool,
                        models[code] if code >= 0 else "",
                        int(rows.sum()),
                        int(count[rows].sum()),
                        int(whole[rows].sum()),
                        int(shared[rows].sum()),
                        int(free_total[rows].sum()),
                        int(shared_devices[rows].sum()),
                        round(float(frag[rows].sum()), 1),
                        int(blocked[rows].sum()),
                    )
                )
        return tuple(groups)


def _allocations(
    assignments: Iterable[Assignment], n: int, width: int
) -> tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.int64]]:
    """Per row: milli-GPU held by whole-GPU pods, by shares, and devices with shares."""
    whole = np.zeros(n, dtype=np.int64)
    shared = np.zeros(n, dtype=np.int64)
    share_devices = np.zeros((n, max(width, 1)), dtype=bool)
    for found in assignments:
        row, devices, milli = found.row, found.devices, found.milli
        if row >= n or not devices:
            continue
        if milli >= GPU_MILLI:
            whole[row] += milli * len(devices)
        else:
            shared[row] += milli * len(devices)
            share_devices[row, [d for d in devices if d < width]] = True
    return whole, shared, share_devices.sum(axis=1).astype(np.int64)


def _with_dra(
    groups: tuple[GpuGroup, ...], gpus: DraGpuView, scheduler: Scheduler
) -> tuple[GpuGroup, ...]:
    """The groups with the GPUs published through DRA added (same pool and model: one
    group). Their fragmentation is not measured (0 added)."""
    table = scheduler.cluster.table
    n = table.n
    by_key = {(g.pool, g.model): g for g in groups}
    inside = gpus.row < n
    models = np.array(gpus.model, dtype=object)
    for pool, mask in pool_masks(table, scheduler.tenant_queues.pools).items():
        mine = inside & mask[np.minimum(gpus.row, max(n - 1, 0))]
        if not mine.any():
            continue
        for model in sorted(set(models[mine].tolist())):
            pick = mine & (models == model)
            old = by_key.get((pool, model))
            nodes = int(np.unique(gpus.row[pick]).size)
            add = GpuGroup(
                pool,
                model,
                nodes,
                int(pick.sum()),
                int(gpus.whole[pick].sum()),
                int(gpus.shared[pick].sum()),
                int(gpus.free[pick].sum()),
                int((gpus.shared[pick] > 0).sum()),
                0.0,
            )
            if old is not None:
                add = GpuGroup(
                    pool,
                    model,
                    old.nodes + add.nodes,
                    old.devices + add.devices,
                    old.whole_milli + add.whole_milli,
                    old.shared_milli + add.shared_milli,
                    old.free_milli + add.free_milli,
                    old.shared_devices + add.shared_devices,
                    old.frag_milli,
                    old.blocked_devices,
                )
            by_key[(pool, model)] = add
    return tuple(by_key.values())
