"""GPU devices per node row, kept current by cluster placement events.

`GpuDevices` is a `PlacementObserver` owned by the cache: `ClusterState` creates it when
the first node with GPUs appears (`ClusterState.gpu_devices`, None while no node has
any), so device state is right in every profile, with or without GpuShare, and a
cluster without GPUs pays nothing for it. The GPU plugins and NodeResourcesFit (whole
GPUs) read it:

* `free[row, i]`: free milli-GPU of device `i` of the node in `row` that a new pod may
  take (0 past its last device, and 0 on a device that takes no more pods: registered
  unhealthy, or running as many pods as its device plugin's split count allows; see
  `blocked`), `count[row]` devices, `model[row]` a code into `models` (-1: no model
  label); `room[row, i]`: the device's unallocated milli-GPU whether blocked or not;
* `kinds[row, k]`: how many GPU pods of each kind ("share-gpu", "1-gpu", ...) the node
  runs (GpuClustering reads it);
* `version[row]`: bumped on every change of the row (a pod placed or removed, the node
  updated or moved), so policies can cache per-node results and recompute stale rows only.

Which devices a pod takes is decided when the pod is placed on a row (`pod_placed`, fired
by `ClusterState.assume` right after host selection): the device plan a Score plugin
published for that pod and row (`plan`), else the indices recorded on the pod
(`shoal.dev/gpu-index`, for pods bound elsewhere), else the default: the tightest device
that fits for a GPU share, the lowest-index free devices for whole GPUs. `pod_unplaced`
gives the devices back.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import numpy as np
from numpy.typing import NDArray

from shoal.api.gpu import (
    GPU_MILLI,
    NO_GPU,
    GpuRequest,
    GpuRequestError,
    node_gpu_memory,
    node_gpus,
    pod_gpu_index,
    pod_gpu_request,
    registration_of,
)
from shoal.api.podinfo import PodInfo
from shoal.api.resources import CPU
from shoal.api.vgpu_protocol import ALLOCATED_ANNOTATIONS, allocated_devices
from shoal.cache.node_table import NodeTable

G = TypeVar("G", bound=np.generic)

__all__ = [
    "MAX_SPEC_CPU",
    "MAX_SPEC_GPU",
    "Assignment",
    "GpuDevices",
    "cpu_left",
    "remember_request",
    "request_of",
]

_REQUEST_KEY = "shoal.gpu_request"

MAX_SPEC_CPU = 128_000
"""Normalisation constants of the published policies: the largest node (milli-cpu)..."""
MAX_SPEC_GPU = 8_000
"""...and milli-GPU (8 devices)."""


class _Columns(Protocol):
    """The resource columns of the node table or a snapshot of it."""

    @property
    def resource_index(self) -> Mapping[str, int]: ...
    @property
    def allocatable(self) -> NDArray[np.int64]: ...
    @property
    def requested(self) -> NDArray[np.int64]: ...


class _Host(Protocol):
    """What owns the device table: the cluster cache (`ClusterState`)."""

    table: NodeTable
    gpu_devices: GpuDevices | None
    observers: list[Any]
    nominations: dict[str, tuple[str, PodInfo]]


def cpu_left(snapshot: _Columns, index: slice | NDArray[np.intp]) -> NDArray[np.int64]:
    """Unrequested milli-cpu of the indexed nodes."""
    col = snapshot.resource_index[CPU]
    left: NDArray[np.int64] = snapshot.allocatable[index, col] - snapshot.requested[index, col]
    return left


class _HasCluster(Protocol):
    @property
    def cluster(self) -> _Host: ...


class CycleScratch(Protocol):
    """What of a plugin's CycleState the request cache uses (the cache layer does not
    import the framework)."""

    def get(self, key: str, default: Any = None) -> Any: ...
    def write(self, key: str, value: Any) -> None: ...


def remember_request(state: CycleScratch, pod: PodInfo, request: GpuRequest) -> None:
    """Store the pod's parsed request for this cycle (read back by `request_of`)."""
    state.write(_REQUEST_KEY, (pod, request))


def request_of(state: CycleScratch | None, pod: PodInfo) -> GpuRequest:
    """The pod's GPU request, parsed once per cycle (NO_GPU if it is invalid: GpuShare's
    PreFilter rejects such pods with the parse error)."""
    if state is not None:
        found = state.get(_REQUEST_KEY)
        if found is not None and found[0] is pod:
            return found[1]  # type: ignore[no-any-return]
    try:
        request = pod_gpu_request(pod)
    except GpuRequestError:
        request = NO_GPU
    if state is not None:
        state.write(_REQUEST_KEY, (pod, request))
    return request


@dataclass(frozen=True, slots=True)
class Assignment:
    """Devices a placed pod holds (empty when none could be found: overcommitted), and
    the compute (milli) and memory (MiB) it takes on each."""

    row: int
    devices: tuple[int, ...]
    milli: int
    kind: int
    memory: int = 0


class GpuDevices:
    """Row-aligned GPU device state; see the module docstring."""

    def __init__(self, table: NodeTable) -> None:
        self.table = table
        self._capacity = 0
        self.width = 0
        self.free: NDArray[np.int32] = np.zeros((0, 0), dtype=np.int32)
        self.room: NDArray[np.int32] = np.zeros((0, 0), dtype=np.int32)
        # HAMi's and Volcano's device plugins register per device how many vGPUs may
        # share it (`split`, 0: no limit) and whether it is healthy; their schedulers
        # skip a device that is unhealthy or runs `split` pods (HAMi's Fit:
        # CardNotHealth, CardTimeSlicingExhausted), and so does Shoal: such a device is
        # `blocked` and shows no free milli. `used`: pods holding each device.
        self.split: NDArray[np.int32] = np.zeros((0, 0), dtype=np.int32)
        self.used: NDArray[np.int32] = np.zeros((0, 0), dtype=np.int32)
        self.unhealthy: NDArray[np.bool_] = np.zeros((0, 0), dtype=bool)
        self.blocked: NDArray[np.bool_] = np.zeros((0, 0), dtype=bool)
        self.limited: NDArray[np.bool_] = np.zeros(0, dtype=bool)  # rows with either
        self.blocked_devices = 0  # how many are blocked now (0: skip looking)
        # Memory: MiB per device of the row's nodes (0: unknown) and free per device.
        self.mem: NDArray[np.int64] = np.zeros(0, dtype=np.int64)
        self.mem_free: NDArray[np.int64] = np.zeros((0, 0), dtype=np.int64)
        self.memory_pods = 0  # placed pods that asked for memory explicitly
        self.count: NDArray[np.int32] = np.zeros(0, dtype=np.int32)
        self.model: NDArray[np.int32] = np.zeros(0, dtype=np.int32)
        self.version: NDArray[np.int64] = np.zeros(0, dtype=np.int64)
        # Per row: the largest free milli of a device, and the number of fully free devices.
        self.max_free: NDArray[np.int32] = np.zeros(0, dtype=np.int32)
        self.full: NDArray[np.int32] = np.zeros(0, dtype=np.int32)
        self.kinds: NDArray[np.int32] = np.zeros((0, 0), dtype=np.int32)
        self.kind_index: dict[str, int] = {}
        self.models: list[str] = []
        self._model_code: dict[str, int] = {}
        self._names: list[str | None] = []
        # Per row: (split, healthy) of each registered device (None: no registration).
        self._limits: list[tuple[tuple[int, bool], ...] | None] = []
        self._tick = 0
        self.assigned: dict[str, Assignment] = {}
        self.allocated_milli = 0
        self._plan: tuple[str, NDArray[np.intp], NDArray[np.int64]] | None = None
        self._chooser: tuple[str, Callable[[int], tuple[int, ...]]] | None = None
        # Row -> GPU requests of the nominated pods a pod must leave room for (set by
        # the cache, which holds the nominations; GpuShare's Filter and
        # `_around_nominated` read it).
        self.nominated: Callable[[PodInfo], dict[int, list[GpuRequest]]] | None = None

    # ---- creation ------------------------------------------------------------------

    @classmethod
    def of(cls, handle: _HasCluster) -> GpuDevices:
        """The cluster's device table (created if no node had GPUs yet)."""
        return cls.of_cluster(handle.cluster)

    @classmethod
    def of_cluster(cls, cluster: _Host) -> GpuDevices:
        """The cluster's device table, created from its nodes and pods and subscribed to
        its placement events on first use."""
        found = cluster.gpu_devices
        if found is not None:
            return found
        table = cluster.table
        devices = cls(table)
        for row in range(table.n):
            devices.node_changed(row)
            for pod in table.pods[row].values():
                devices.pod_placed(row, pod)
        cluster.observers.append(devices)
        cluster.gpu_devices = devices
        nominations = cluster.nominations

        def nominated(pod: PodInfo) -> dict[int, list[GpuRequest]]:
            """Nominated GPU pods of equal or higher priority than `pod`, by row (kube's
            nominated-pod rule, as `Snapshot.nominated_against`)."""
            by_row: dict[int, list[GpuRequest]] = {}
            for uid, (node, other) in nominations.items():
                if uid == pod.uid or other.priority < pod.priority:
                    continue
                row = table.row_of.get(node)
                if row is not None and (wanted := request_of(None, other)):
                    by_row.setdefault(row, []).append(wanted)
            return by_row

        devices.nominated = nominated
        return devices

    # ---- storage -------------------------------------------------------------------

    def _ensure(self, rows: int, width: int = 0) -> None:
        width = max(width, self.width)
        if rows <= self._capacity and width <= self.width:
            return
        cap = max(rows, self._capacity * 2, 64) if rows > self._capacity else self._capacity
        self.free = _grow2(self.free, cap, width)
        self.room = _grow2(self.room, cap, width)
        self.mem_free = _grow2(self.mem_free, cap, width)
        self.split = _grow2(self.split, cap, width)
        self.used = _grow2(self.used, cap, width)
        self.unhealthy = _grow2(self.unhealthy, cap, width)
        self.blocked = _grow2(self.blocked, cap, width)
        self.limited = _grow(self.limited, cap, 0)
        self.mem = _grow(self.mem, cap, 0)
        self.count = _grow(self.count, cap, 0)
        self.model = _grow(self.model, cap, -1)
        self.version = _grow(self.version, cap, 0)
        self.max_free = _grow(self.max_free, cap, 0)
        self.full = _grow(self.full, cap, 0)
        kinds = np.zeros((cap, self.kinds.shape[1]), dtype=np.int32)
        kinds[: self._capacity] = self.kinds
        self.kinds = kinds
        self._names += [None] * (cap - self._capacity)
        self._limits += [None] * (cap - self._capacity)
        self._capacity = cap
        self.width = width

    def _kind(self, name: str) -> int:
        k = self.kind_index.get(name)
        if k is None:
            k = self.kind_index[name] = len(self.kind_index)
            pad = np.zeros((self._capacity, 1), dtype=np.int32)
            self.kinds = np.hstack([self.kinds, pad])
        return k

    def model_code(self, model: str) -> int:
        """The code of a model name (-1 for "" and for models no node has)."""
        return self._model_code.get(model, -1) if model else -1

    def register_model(self, model: str) -> int:
        """The code of a model name, given one if it has none yet (GPU models known
        from elsewhere than node labels: devices published through DRA)."""
        if not model:
            return -1
        code = self._model_code.get(model)
        if code is None:
            code = self._model_code[model] = len(self.models)
            self.models.append(model)
        return code

    def _bump(self, row: int) -> None:
        self._tick += 1
        self.version[row] = self._tick

    def _take(self, row: int, devices: tuple[int, ...], milli: int, pods: int) -> None:
        """`milli` taken from (negative: given back to) each of the row's `devices`,
        by `pods` pods (1 or -1)."""
        room, free = self.room, self.free
        for d in devices:  # one or a few: scalar updates beat fancy indexing here
            room[row, d] -= milli
        if self.limited[row]:
            used = self.used
            for d in devices:
                used[row, d] += pods
            self._unblocked(row)
        else:
            for d in devices:
                free[row, d] -= milli
        self._summarize(row)

    def _unblocked(self, row: int) -> None:
        """Recompute which of the row's devices take no more pods, and its free milli."""
        split = self.split[row]
        blocked = self.unhealthy[row] | ((split > 0) & (self.used[row] >= split))
        self.blocked_devices += int(blocked.sum()) - int(self.blocked[row].sum())
        self.blocked[row] = blocked
        self.free[row] = np.where(blocked, 0, self.room[row])

    def _summarize(self, row: int) -> None:
        free = self.free[row]
        self.max_free[row] = free.max() if len(free) else 0
        self.full[row] = int((free == GPU_MILLI).sum())

    @property
    def capacity_milli(self) -> int:
        n = self.table.n
        return int(self.count[:n].sum()) * GPU_MILLI

    # ---- device plans --------------------------------------------------------------

    def plan(self, uid: str, rows: NDArray[np.intp], choice: NDArray[np.int64]) -> None:
        """Publish the devices the pod would take on each of `rows` (sorted ascending);
        `choice[i]` holds the device indices for `rows[i]`. Replaces any earlier plan."""
        self._plan = (uid, rows, choice.reshape(len(rows), -1))

    def choose_with(self, uid: str, choose: Callable[[int], tuple[int, ...]]) -> None:
        """A policy's device rule for the pod, asked for the row it is placed on when no
        plan covers that row (the chosen row only: also when the only feasible node is
        chosen without scoring). Replaces any earlier rule."""
        self._chooser = (uid, choose)

    def _planned(self, row: int, pod: PodInfo) -> tuple[int, ...] | None:
        plan = self._plan
        if plan is not None and plan[0] == pod.uid:
            self._plan = None
            rows, choice = plan[1], plan[2]
            i = int(np.searchsorted(rows, row))
            if i < len(rows) and rows[i] == row:
                return tuple(int(d) for d in choice[i])
        chooser = self._chooser
        if chooser is not None and chooser[0] == pod.uid:
            self._chooser = None
            return chooser[1](row)
        return None

    def takes(self, row: int, request: GpuRequest) -> tuple[int, int]:
        """(milli, MiB) the request takes on each of its devices on this row: a share
        sized by compute takes memory in proportion, rounded down (a whole GPU all of
        it; shares whose compute fills a device fit its memory too: 700m + 300m of 16384
        MiB take 11468 + 4915); one sized by memory alone takes compute in proportion,
        rounded up (more than a device when the node's device memory is unknown: it
        cannot be placed there)."""
        return _takes(request, int(self.mem[row]))

    def default_choice(self, row: int, request: GpuRequest) -> tuple[int, ...]:
        """Tightest-fitting devices for a share, lowest-index free devices otherwise."""
        n = self.count[row]
        milli, mem = self.takes(row, request)
        fits = (self.free[row, :n] >= milli) & (self.mem_free[row, :n] >= mem)
        if int(fits.sum()) < request.count:
            return ()
        return tuple(int(d) for d in self.choice_in(row, self.free[row, :n], request))

    def choice_in(
        self,
        row: int,
        free: NDArray[Any],
        request: GpuRequest,
        mem_free: NDArray[Any] | None = None,
    ) -> NDArray[np.intp]:
        """The devices (positions in `free`, the row's free milli per device, and
        `mem_free`, its free MiB, default: the table's) the default choice takes; when
        too few have room, the ones with the most free compute."""
        milli, mem = self.takes(row, request)
        if mem_free is None:
            mem_free = self.mem_free[row, : len(free)]
        fits = np.flatnonzero((free >= milli) & (mem_free >= mem))
        if len(fits) < request.count:
            most: NDArray[np.intp] = np.argsort(-free, kind="stable")[: request.count]
            return most
        if request.shared:
            fits = fits[np.argsort(free[fits], kind="stable")]
        chosen: NDArray[np.intp] = fits[: request.count]
        return chosen

    def _valid(self, row: int, devices: tuple[int, ...] | None, request: GpuRequest) -> bool:
        if devices is None or len(devices) != request.count or len(set(devices)) != len(devices):
            return False
        n = int(self.count[row])
        milli, mem = self.takes(row, request)
        return all(
            0 <= d < n and self.free[row, d] >= milli and self.mem_free[row, d] >= mem
            for d in devices
        )

    def _registered(self, row: int, pod: PodInfo) -> tuple[int, ...] | None:
        """The devices a pod bound by HAMi's or Volcano's own scheduler holds, by the
        UUIDs its allocation annotation names (None: not such a pod)."""
        annotations = pod.pod.metadata.annotations
        if not annotations or not any(key in annotations for key in ALLOCATED_ANNOTATIONS):
            return None
        registration = registration_of(self.table.nodes[row])
        return None if registration is None else allocated_devices(registration, annotations)

    def _around_nominated(
        self, row: int, pod: PodInfo, request: GpuRequest, planned: tuple[int, ...] | None
    ) -> tuple[int, ...] | None:
        """A policy's device plan, unless it takes devices a nominated preemptor of equal
        or higher priority on this row needs while the default choice would not: GpuShare
        let the pod through on the default choice (see its Filter), so that is what the
        pod gets then."""
        if planned is None or self.nominated is None:
            return planned
        others = self.nominated(pod).get(row)
        if not others or self.leaves_room(row, planned, request, others):
            return planned
        fallback = self.default_choice(row, request)
        if fallback and self.leaves_room(row, fallback, request, others):
            return fallback
        return planned

    def leaves_room(
        self,
        row: int,
        devices: tuple[int, ...] | NDArray[np.intp],
        request: GpuRequest,
        others: list[GpuRequest],
    ) -> bool:
        """Whether `others` (nominated pods) still find their devices on the row after a
        pod asking `request` takes `devices`."""
        n = self.count[row]
        free = self.free[row, :n].astype(np.int64)
        mem_free = self.mem_free[row, :n].copy()
        milli, mem = self.takes(row, request)
        free[list(devices)] -= milli
        mem_free[list(devices)] -= mem
        for wanted in others:
            take = self.choice_in(row, free, wanted, mem_free)
            w_milli, w_mem = self.takes(row, wanted)
            if (
                len(take) < wanted.count
                or (free[take] < w_milli).any()
                or (mem_free[take] < w_mem).any()
            ):
                return False
            free[take] -= w_milli
            mem_free[take] -= w_mem
        return True

    # ---- PlacementObserver ---------------------------------------------------------

    def pod_placed(self, row: int, pod: PodInfo) -> None:
        self._bump(row)
        request = request_of(None, pod)
        if not request:
            return
        devices = self._planned(row, pod)
        if self._valid(row, devices, request):
            devices = self._around_nominated(row, pod, request, devices)
        else:
            devices = pod_gpu_index(pod)
            if devices is None:
                devices = self._registered(row, pod)
            if not self._valid(row, devices, request):
                devices = self.default_choice(row, request)
        assert devices is not None
        kind = self._kind(request.affinity)
        self.kinds[row, kind] += 1
        milli, mem = self.takes(row, request)
        milli = min(milli, GPU_MILLI)
        if devices:
            self._take(row, devices, milli, 1)
            self.mem_free[row, list(devices)] -= mem
            self.allocated_milli += milli * len(devices)
        # Explicit memory (MiB, or a percentage with compute sized apart) is held as
        # such; a share sized by compute alone holds memory in proportion.
        explicit = bool(request.memory or request.memory_percent)
        self.memory_pods += 1 if explicit else 0
        self.assigned[pod.uid] = Assignment(row, devices, milli, kind, mem if explicit else 0)

    def pod_unplaced(self, row: int, pod: PodInfo) -> None:
        self._bump(row)
        found = self.assigned.pop(pod.uid, None)
        if found is None:
            return
        self.kinds[row, found.kind] -= 1
        self.memory_pods -= 1 if found.memory else 0
        if found.devices:
            self._take(row, found.devices, -found.milli, -1)
            self.mem_free[row, list(found.devices)] += self._memory_of(row, found)
            self.allocated_milli -= found.milli * len(found.devices)

    def _memory_of(self, row: int, found: Assignment) -> int:
        """MiB an assignment holds per device (explicit, else in proportion)."""
        return found.memory or found.milli * int(self.mem[row]) // GPU_MILLI

    def row_moved(self, src: int, dst: int) -> None:
        self.blocked_devices -= int(self.blocked[dst].sum())  # dst's node is gone
        arrays = (
            self.free,
            self.room,
            self.mem_free,
            self.split,
            self.used,
            self.unhealthy,
            self.blocked,
            self.limited,
            self.mem,
            self.count,
            self.kinds,
            self.max_free,
        )
        for array in (*arrays, self.model, self.full):
            array[dst] = array[src]
        for array in (*arrays, self.full):
            array[src] = 0
        self.model[src] = -1
        self._names[dst] = self._names[src]
        self._names[src] = None
        self._limits[dst] = self._limits[src]
        self._limits[src] = None
        self._bump(dst)
        self._bump(src)
        for uid, found in list(self.assigned.items()):
            if found.row == src:
                self.assigned[uid] = Assignment(
                    dst, found.devices, found.milli, found.kind, found.memory
                )

    def node_changed(self, row: int) -> None:
        table = self.table
        node = table.nodes[row]
        count, model = node_gpus(node)
        self._ensure(max(row + 1, table.n), count)
        self._bump(row)
        name = node.metadata.name
        if model and model not in self._model_code:
            self._model_code[model] = len(self.models)
            self.models.append(model)
        self.model[row] = self.model_code(model)
        memory = node_gpu_memory(node, count)
        registration = registration_of(node)
        limits = (
            None
            if registration is None
            else tuple((d.split, d.healthy) for d in registration.devices)
        )
        if (
            self._names[row] == name
            and self.count[row] == count
            and self.mem[row] == memory
            and self._limits[row] == limits
        ):
            self._summarize(row)
            return
        self._names[row] = name
        self._limits[row] = limits
        self.count[row] = count
        self.mem[row] = memory
        self.room[row] = 0
        self.room[row, :count] = GPU_MILLI
        self.mem_free[row] = 0
        self.mem_free[row, :count] = memory
        self.used[row] = 0
        self.split[row] = 0
        self.unhealthy[row] = False
        if limits is not None:
            self.split[row, :count] = [split for split, _ in limits]
            self.unhealthy[row, :count] = [not healthy for _, healthy in limits]
        self.limited[row] = limits is not None
        # Pods already on the row keep their devices where they still exist.
        for uid, found in list(self.assigned.items()):
            if found.row != row:
                continue
            kept = tuple(d for d in found.devices if d < count)
            if kept:
                self.room[row, list(kept)] -= found.milli
                self.used[row, list(kept)] += 1
                self.mem_free[row, list(kept)] -= self._memory_of(row, found)
            self.allocated_milli -= found.milli * (len(found.devices) - len(kept))
            self.assigned[uid] = Assignment(row, kept, found.milli, found.kind, found.memory)
        self._unblocked(row)
        self._summarize(row)

    # ---- queries -------------------------------------------------------------------

    def devices_of(self, uid: str) -> tuple[int, ...] | None:
        found = self.assigned.get(uid)
        return None if found is None else found.devices

    def enough(self, request: GpuRequest, index: slice | NDArray[np.intp]) -> NDArray[np.bool_]:
        """Which nodes have `request.count` devices with room for the request each
        (compute and memory, see `takes`)."""
        if request.memory or request.memory_percent or self.memory_pods:
            milli, mem = _takes_per_node(request, self.mem[index])
            room = (self.free[index] >= milli[:, None]) & (self.mem_free[index] >= mem[:, None])
            counted: NDArray[np.bool_] = room.sum(axis=1) >= request.count
            return counted
        if request.count == 1:
            return self.max_free[index] >= request.milli
        if request.milli >= GPU_MILLI:
            return self.full[index] >= request.count
        fits: NDArray[np.bool_] = (self.free[index] >= request.milli).sum(axis=1) >= request.count
        return fits

    def total_free(self, index: slice | NDArray[np.intp]) -> NDArray[np.int64]:
        total: NDArray[np.int64] = self.free[index].sum(axis=1, dtype=np.int64)
        return total

    def model_allowed(
        self, request: GpuRequest, index: slice | NDArray[np.intp]
    ) -> NDArray[np.bool_] | None:
        """Which nodes have an allowed model (None: the pod accepts any model)."""
        if request.models is None:
            return None
        codes = [self._model_code[m] for m in request.models if m in self._model_code]
        return np.isin(self.model[index], codes)


def _takes(request: GpuRequest, device_mem: int) -> tuple[int, int]:
    if request.memory_percent:
        return request.milli, request.memory_percent * device_mem // 100
    if request.memory:
        if request.milli:
            return request.milli, request.memory
        if device_mem <= 0:
            return GPU_MILLI + 1, request.memory  # unknown device memory: never fits
        return min(GPU_MILLI, -(-GPU_MILLI * request.memory // device_mem)), request.memory
    return request.milli, request.milli * device_mem // GPU_MILLI


def _takes_per_node(
    request: GpuRequest, device_mem: NDArray[np.int64]
) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """`_takes` for every node at once."""
    if request.memory_percent:
        milli = np.full(device_mem.shape, request.milli, dtype=np.int64)
        return milli, request.memory_percent * device_mem // 100
    if request.memory:
        mem = np.full(device_mem.shape, request.memory, dtype=np.int64)
        if request.milli:
            return np.full(device_mem.shape, request.milli, dtype=np.int64), mem
        share = -(-GPU_MILLI * request.memory // np.maximum(device_mem, 1))
        milli = np.where(device_mem > 0, np.minimum(share, GPU_MILLI), GPU_MILLI + 1)
        return milli.astype(np.int64), mem
    milli = np.full(device_mem.shape, request.milli, dtype=np.int64)
    return milli, request.milli * device_mem // GPU_MILLI


def _grow2(array: NDArray[G], cap: int, width: int) -> NDArray[G]:
    """A [cap, width] copy of a row x device array, zero (False) where new."""
    out = np.zeros((cap, width), dtype=array.dtype)
    out[: array.shape[0], : array.shape[1]] = array
    return out


def _grow(array: NDArray[G], cap: int, fill: int) -> NDArray[G]:
    out = np.full(cap, fill, dtype=array.dtype)
    out[: len(array)] = array
    return out
