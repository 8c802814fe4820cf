"""GPU fragmentation of nodes with respect to a target workload (Weng et al., ATC'23).

The target workload M is a list of task shapes m (cpu milli, milli-GPU per device, device
count, allowed models) with popularity p_m. For a node n with free milli-GPU R_g per
device:

* m is CPU-only, or m cannot run on n (not enough cpu, model not allowed, fewer than k_m
  devices with R_g >= d_m): F_n(m) = sum_g R_g (every idle GPU is a fragment for m);
* otherwise F_n(m) = sum_g R_g [R_g < d_m] (the devices too small for m).

F_n(M) = sum_m p_m F_n(m), and the cluster's fragmentation is the sum over nodes.

Popularity weights are kept as integers (task counts) so that fragmentation differences
are exact: `frag_weighted` returns sum_m w_m F_n(m) and `FragmentationModel.total_weight`
is sum_m w_m.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from shoal.api.gpu import GPU_MILLI
from shoal.api.resources import CPU, MEMORY
from shoal.cache.gpu_devices import GpuDevices
from shoal.cache.snapshot import Snapshot

__all__ = [
    "MEASURES",
    "FragScorer",
    "FragmentationModel",
    "NodeStates",
    "TargetShape",
    "TargetWorkload",
    "after_states",
    "best_per_row",
    "sigmoid_scores",
]


@dataclass(frozen=True, slots=True, order=True)
class TargetShape:
    """A task shape of the target workload."""

    cpu_milli: int
    gpu_milli: int  # per device; 0 for CPU-only tasks
    gpu_count: int
    models: tuple[str, ...] = ()  # allowed models, sorted; () means any
    memory: int = 0  # bytes; used by the "fill" measure only (0: not limiting)

    @property
    def is_gpu(self) -> bool:
        return self.gpu_count > 0 and self.gpu_milli > 0

    def without_memory(self) -> TargetShape:
        return TargetShape(self.cpu_milli, self.gpu_milli, self.gpu_count, self.models)


@dataclass(frozen=True)
class TargetWorkload:
    """Shapes with integer popularity weights (e.g. how many tasks of the trace have it)."""

    shapes: tuple[TargetShape, ...]
    weights: tuple[int, ...]

    def __post_init__(self) -> None:
        if len(self.shapes) != len(self.weights):
            raise ValueError("one weight per shape is required")
        if any(w < 0 for w in self.weights):
            raise ValueError("weights must not be negative")

    @property
    def total_weight(self) -> int:
        return sum(self.weights)

    @property
    def popularity(self) -> list[float]:
        total = self.total_weight or 1
        return [w / total for w in self.weights]

    @classmethod
    def from_counts(
        cls, counts: Mapping[TargetShape, int] | Iterable[TargetShape], coverage: float = 0.95
    ) -> TargetWorkload:
        """The most frequent shapes until they cover `coverage` of all tasks (the FGD
        artifact's typical pods: ties in frequency go to the larger shape first)."""
        counter = counts if isinstance(counts, Mapping) else Counter(counts)
        total = sum(counter.values())
        ranked = sorted(counter.items(), key=lambda kv: (kv[1], _less_key(kv[0])), reverse=True)
        shapes: list[TargetShape] = []
        weights: list[int] = []
        covered = 0
        for shape, count in ranked:
            if covered >= coverage * total:
                break
            shapes.append(shape)
            weights.append(int(count))
            covered += count
        return cls(tuple(shapes), tuple(weights))

    @classmethod
    def from_weights(cls, items: Iterable[tuple[TargetShape, float]]) -> TargetWorkload:
        """Shapes with arbitrary non-negative weights (scaled to integers)."""
        pairs = list(items)
        if all(float(w).is_integer() for _, w in pairs):
            return cls(tuple(s for s, _ in pairs), tuple(int(w) for _, w in pairs))
        return cls(tuple(s for s, _ in pairs), tuple(round(w * 1_000_000) for _, w in pairs))


def _less_key(shape: TargetShape) -> tuple[int, int, int, str]:
    # The artifact compares cpu, milli, count, then the model string.
    return (shape.cpu_milli, shape.gpu_milli, shape.gpu_count, "|".join(shape.models))


MEASURES = ("fgd", "fill", "blend")


@dataclass(frozen=True, slots=True)
class NodeStates:
    """A batch of node states: free milli-GPU per device, unrequested cpu (milli) and
    memory (bytes), and GPU model code (-1: none)."""

    free: NDArray[np.int64]
    cpu_left: NDArray[np.int64]
    mem_left: NDArray[np.int64]
    model: NDArray[np.int64]

    def take(self, pos: NDArray[np.intp]) -> NodeStates:
        return NodeStates(self.free[pos], self.cpu_left[pos], self.mem_left[pos], self.model[pos])

    def concat(self, other: NodeStates) -> NodeStates:
        return NodeStates(
            np.concatenate((self.free, other.free)),
            np.concatenate((self.cpu_left, other.cpu_left)),
            np.concatenate((self.mem_left, other.mem_left)),
            np.concatenate((self.model, other.model)),
        )


class FragmentationModel:
    """Vectorised fragmentation of batches of node states against a target workload.

    `measure` selects what is counted as fragment for shape m (see docs/gpu-sharing.md):

    * "fgd": the published definition (module docstring); memory is ignored;
    * "fill": the GPU that would stay unused if the node were filled with copies of m:
      copies = min(sum_g floor(R_g / d_m) // k_m, cpu_left // cpu_m, mem_left // mem_m)
      (0 when the model is not allowed or m is CPU-only; memory only limits shapes that
      carry one), F_n(m) = sum_g R_g - copies * k_m * d_m;
    * "blend": mix[0] x the "fgd" term + mix[1] x the "fill" term.

    Call `refresh_models` when node states use new model codes.
    """

    def __init__(
        self,
        workload: TargetWorkload,
        models: list[str],
        measure: str = "fgd",
        mix: tuple[int, int] = (1, 1),
    ) -> None:
        if measure not in MEASURES:
            raise ValueError(f"unknown fragmentation measure {measure!r} (known: {MEASURES})")
        self.workload = workload
        self.measure = measure
        shapes = workload.shapes
        self.cpu = np.array([s.cpu_milli for s in shapes], dtype=np.int64)
        self.memory = np.array([s.memory for s in shapes], dtype=np.int64)
        self.milli = np.array([s.gpu_milli for s in shapes], dtype=np.int64)
        self.count = np.array([s.gpu_count for s in shapes], dtype=np.int64)
        self.weight = np.array(workload.weights, dtype=np.int64)
        self.gpu_shape = np.array([s.is_gpu for s in shapes], dtype=bool)
        self.mix = {"fgd": (1, 0), "fill": (0, 1)}.get(measure, mix)
        self.total_weight = int(self.weight.sum()) * sum(self.mix)
        # Distinct per-device demands: sums over devices are taken once per demand.
        demands = sorted({int(d) for d in self.milli[self.gpu_shape]})
        self.demands = np.array(demands or [GPU_MILLI], dtype=np.int64)
        index = {d: i for i, d in enumerate(demands)}
        # shape -> its demand column
        self.demand_of = np.array([index.get(int(d), 0) for d in self.milli], dtype=np.intp)
        self._per_copy = self.count * self.milli
        self._cpu_div = np.maximum(self.cpu, 1)
        self._mem_div = np.maximum(self.memory, 1)
        self._count_div = np.maximum(self.count, 1)
        # For every free milli f a device can have: how many demands it meets
        # (`_per_demand`) and floor(f / d) per demand d (`_copies_per_demand`).
        values = np.arange(GPU_MILLI + 1, dtype=np.int64)
        self._met_table = np.searchsorted(self.demands, values, side="right")
        self._copies_table: NDArray[np.int64] | None = (
            values[:, None] // self.demands[None, :] if int(self.demands.min()) > 0 else None
        )
        self._models: list[str] | None = None
        self.allowed = np.zeros((len(shapes), 1), dtype=bool)
        self.refresh_models(models)

    def refresh_models(self, models: list[str]) -> None:
        """Rebuild the shape x model table (the last column is "no model")."""
        if models == self._models:
            return
        self._models = list(models)
        allowed = np.zeros((len(self.workload.shapes), len(models) + 1), dtype=bool)
        for i, shape in enumerate(self.workload.shapes):
            if not shape.models:
                allowed[i, :] = True
            else:
                for j, model in enumerate(models):
                    allowed[i, j] = model in shape.models
        # A node without a model label only runs shapes that accept any model.
        allowed[:, -1] = [not s.models for s in self.workload.shapes]
        self.allowed = allowed & self.gpu_shape[:, None]

    def frag_weighted(self, states: NodeStates) -> NDArray[np.int64]:
        """sum_m w_m F_n(m) for each state; divide by `total_weight` for F_n(M) in
        milli-GPU."""
        free = states.free
        total = free.sum(axis=1)
        if not len(self.weight):
            return np.zeros(len(free), dtype=np.int64)
        allowed = self.allowed.T[states.model]  # model -1 picks the "no model" column
        satisfied = np.zeros(len(free), dtype=np.int64)
        if self.mix[0]:
            meets, usable = self._per_demand(free)  # [B, D] each
            fits = meets[:, self.demand_of] >= self.count[None, :]
            fits &= states.cpu_left[:, None] >= self.cpu[None, :]
            fits &= allowed
            usable_m = np.where(fits, usable[:, self.demand_of], 0)
            satisfied += self.mix[0] * (usable_m @ self.weight)
        if self.mix[1]:
            per_device = self._copies_per_demand(free)  # [B, D]
            copies = per_device[:, self.demand_of] // self._count_div[None, :]
            copies = np.minimum(copies, states.cpu_left[:, None] // self._cpu_div[None, :])
            by_memory = states.mem_left[:, None] // self._mem_div[None, :]
            copies = np.minimum(copies, np.where(self.memory > 0, by_memory, copies))
            copies = np.where(allowed, np.maximum(copies, 0), 0)
            satisfied += self.mix[1] * ((copies * self._per_copy[None, :]) @ self.weight)
        result: NDArray[np.int64] = total * self.total_weight - satisfied
        return result

    def _per_demand(self, free: NDArray[np.int64]) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        """Per state and demand d: the devices with at least d free, and their free milli
        summed. Each device is counted once, at the number of demands it meets, and the
        counts summed from the top; the free milli of the devices meeting d is a prefix
        sum of the devices in decreasing order. [B, W] + [B, D] work instead of comparing
        every device with every demand ([B, D, W]): a refit rescores every node for
        every shape."""
        states, width = free.shape
        table = self._met_table
        if states * width < 64 or table is None or int(free.max(initial=0)) >= len(table):
            ge = free[:, None, :] >= self.demands[None, :, None]  # [B, D, W]
            found: NDArray[np.int64] = ge.sum(axis=2)
            summed: NDArray[np.int64] = np.where(ge, free[:, None, :], 0).sum(axis=2)
            return found, summed
        bins = len(self.demands) + 1
        met = table[free]  # how many demands each device meets (demands ascending)
        flat = (np.arange(states, dtype=np.intp)[:, None] * bins + met).ravel()
        count = np.bincount(flat, minlength=states * bins).reshape(states, bins)
        # Column d: the devices that meet more than d demands.
        found = np.cumsum(count[:, :0:-1], axis=1)[:, ::-1]
        prefix = np.zeros((states, width + 1), dtype=np.int64)
        np.cumsum(-np.sort(-free, axis=1), axis=1, out=prefix[:, 1:])
        summed = np.take_along_axis(prefix, found, axis=1)
        return found, summed

    def _copies_per_demand(self, free: NDArray[np.int64]) -> NDArray[np.int64]:
        """Per state and demand d: sum over devices of floor(free / d), read device by
        device from a table of floor(f / d) for every free value f a device can have
        (milli-GPU, at most one GPU), instead of dividing [B, D, W] values."""
        table = self._copies_table
        if table is None or int(free.max(initial=0)) >= len(table):
            found: NDArray[np.int64] = (free[:, None, :] // self.demands[None, :, None]).sum(axis=2)
            return found
        out = table[free[:, 0]]
        for device in range(1, free.shape[1]):
            out += table[free[:, device]]
        return out

    def frag(self, states: NodeStates) -> NDArray[np.float64]:
        """F_n(M) in milli-GPU for each state."""
        weighted = self.frag_weighted(states)
        return weighted / max(self.total_weight, 1)


def after_states(
    free: NDArray[np.int64], milli: int, gpus: int, per_device: bool
) -> tuple[NDArray[np.intp], NDArray[np.intp], NDArray[np.int64]]:
    """Free milli-GPU per device after placing `gpus` x `milli` on each of the nodes.

    With `per_device` (a share of one device), one state per node and distinct free value:
    the device taken is the lowest-index device with that value (devices with equal free
    milli lead to the same state). Otherwise one state per node, taking devices the way
    the FGD artifact's `NodeResource.Sub` does: the feasible devices with the least free
    milli first (lowest index among equals). A device that does not exist has 0 free.

    Returns (position of the node in the input, device index or -1, free after [P, W]);
    positions are ascending, and devices ascending within a node.
    """
    n, width = free.shape
    if gpus == 0 or milli == 0:
        return np.arange(n, dtype=np.intp), np.full(n, -1, dtype=np.intp), free
    if per_device:
        fits = free >= milli
        # First occurrence of each free value within a row.
        earlier = np.tri(width, width, -1, dtype=bool)[None, :, :]
        same_before = ((free[:, :, None] == free[:, None, :]) & earlier).any(axis=2)
        pos, dev = np.nonzero(fits & ~same_before)
        after = free[pos]
        after[np.arange(len(pos)), dev] -= milli
        return pos.astype(np.intp), dev.astype(np.intp), after
    order = np.argsort(np.where(free >= milli, free, GPU_MILLI + 1), axis=1, kind="stable")
    sorted_free = np.take_along_axis(free, order, axis=1)
    feasible = sorted_free >= milli
    take = feasible & (np.cumsum(feasible, axis=1) <= gpus)
    after = np.empty_like(free)
    np.put_along_axis(after, order, sorted_free - np.where(take, milli, 0), axis=1)
    return np.arange(n, dtype=np.intp), np.full(n, -1, dtype=np.intp), after


def sigmoid_scores(gain: NDArray[np.float64], scale: float = 1000.0) -> NDArray[np.int64]:
    """FGD's score: floor(100 * sigmoid(gain / scale)) for a fragmentation decrease
    `gain` in milli-GPU (FGD's scale is 1000)."""
    return ((1.0 / (1.0 + np.exp(-gain / scale))) * 100).astype(np.int64)


def best_per_row(
    n: int, pos: NDArray[np.intp], dev: NDArray[np.intp], score: NDArray[np.int64]
) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """Highest score per position and the lowest device reaching it (positions without
    an option score 0 with device -1)."""
    best = np.zeros(n, dtype=np.int64)
    device = np.full(n, -1, dtype=np.int64)
    if not len(pos):
        return best, device
    order = np.lexsort((dev, -score, pos))
    pos_sorted = pos[order]
    first = np.ones(len(order), dtype=bool)
    first[1:] = pos_sorted[1:] != pos_sorted[:-1]
    chosen = order[first]
    best[pos[chosen]] = score[chosen]
    device[pos[chosen]] = dev[chosen]
    return best, device


@dataclass
class _ShapeEntry:
    score: NDArray[np.int64]
    device: NDArray[np.int64]
    version: NDArray[np.int64]


class FragScorer:
    """Scores nodes for a pod shape by the fragmentation decrease of placing it, with
    per-node caching keyed by `GpuDevices.version`.

    `F_before` is cached per node row; for each pod shape the score and the chosen device
    of every row are cached and recomputed only for rows that changed since (a placement
    changes one row, so a cycle costs O(changed rows) numpy work).
    `score_of` maps the exact decrease (milli-GPU, float) to integer scores.
    """

    def __init__(
        self,
        devices: GpuDevices,
        snapshot: Snapshot,
        model: FragmentationModel,
        score_of: Callable[[NDArray[np.float64]], NDArray[np.int64]] = sigmoid_scores,
    ) -> None:
        self.devices = devices
        self.snapshot = snapshot
        self.model = model
        self.score_of = score_of
        self._models_seen = -1
        self._cap = -1
        self._before = np.zeros(0, dtype=np.int64)
        self._before_version = np.zeros(0, dtype=np.int64)
        self._shapes: dict[tuple[TargetShape, bool], _ShapeEntry] = {}
        self.share_loss: Callable[[NDArray[np.int64], int], NDArray[np.float64]] | None = None
        """Milli-GPU taken off the gain of putting a share of `milli` on a device with
        `free` milli (see `GpuFragGuard`'s share prices); None: nothing."""

    def _check(self) -> None:
        devices = self.devices
        cap = len(devices.version)
        if cap != self._cap or len(devices.models) != self._models_seen:
            self._cap = cap
            self._models_seen = len(devices.models)
            self.model.refresh_models(devices.models)
            self._before = np.zeros(cap, dtype=np.int64)
            self._before_version = np.full(cap, -1, dtype=np.int64)
            self._shapes.clear()

    def states(self, rows: NDArray[np.intp]) -> NodeStates:
        snap = self.snapshot
        index = snap.resource_index
        cpu, mem = index[CPU], index[MEMORY]
        alloc = snap.allocatable[rows]
        req = snap.requested[rows]
        return NodeStates(
            self.devices.free[rows].astype(np.int64),
            alloc[:, cpu] - req[:, cpu],
            alloc[:, mem] - req[:, mem],
            self.devices.model[rows].astype(np.int64),
        )

    def gains(
        self, rows: NDArray[np.intp], shape: TargetShape, per_device: bool
    ) -> tuple[NDArray[np.intp], NDArray[np.intp], NDArray[np.float64]]:
        """Every way of placing `shape` on each row: (position in rows, device or -1,
        fragmentation decrease in milli-GPU)."""
        self._check()
        version = self.devices.version
        states = self.states(rows)
        pos, dev, free_after = after_states(
            states.free, shape.gpu_milli, shape.gpu_count, per_device
        )
        after = NodeStates(
            free_after,
            states.cpu_left[pos] - shape.cpu_milli,
            states.mem_left[pos] - shape.memory,
            states.model[pos],
        )
        stale_at = np.flatnonzero(self._before_version[rows] != version[rows])
        if len(stale_at):
            # One call for the stale "before" states and the "after" states: most calls
            # are a row or two, where numpy's per-call overhead is the cost.
            weighted = self.model.frag_weighted(states.take(stale_at).concat(after))
            stale = rows[stale_at]
            self._before[stale] = weighted[: len(stale_at)]
            self._before_version[stale] = version[stale]
            after_weighted = weighted[len(stale_at) :]
        else:
            after_weighted = self.model.frag_weighted(after)
        before = self._before[rows]
        gain = (before[pos] - after_weighted) / max(self.model.total_weight, 1)
        if per_device and self.share_loss is not None and len(pos):
            gain = gain - self.share_loss(states.free[pos, dev], shape.gpu_milli)
        return pos, dev, gain

    def score(
        self, rows: NDArray[np.intp], shape: TargetShape, per_device: bool
    ) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        """(score, device) per row; the device is -1 unless `per_device`."""
        self._check()
        key = (shape, per_device)
        entry = self._shapes.get(key)
        if entry is None:
            cap = self._cap
            entry = self._shapes[key] = _ShapeEntry(
                np.zeros(cap, dtype=np.int64),
                np.full(cap, -1, dtype=np.int64),
                np.full(cap, -1, dtype=np.int64),
            )
        version = self.devices.version
        stale = rows[entry.version[rows] != version[rows]]
        if len(stale):
            pos, dev, gain = self.gains(stale, shape, per_device)
            best, device = best_per_row(len(stale), pos, dev, self.score_of(gain))
            entry.score[stale] = best
            entry.device[stale] = device
            entry.version[stale] = version[stale]
        return entry.score[rows], entry.device[rows]
