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
from functools import cache

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
    "StateClasses",
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
_EXACT_FLOAT = 2**53
"""Integers below this in magnitude are exact in float64, and so is floor(a / b)."""
_FLOAT_DIVIDE_MIN = 128
"""Batches of at least this many states divide in float64 (`_fill_copies`)."""
_SMALL_BATCH = 64
"""Batches of fewer states sum per-device quantities from the shapes' table."""


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
        self._per_copy_mix = self._per_copy * self.mix[1]
        self._cpu_div = np.maximum(self.cpu, 1)
        self._mem_div = np.maximum(self.memory, 1)
        self._count_div = np.maximum(self.count, 1)
        self._cpu_float = self._cpu_div.astype(np.float64)
        self._mem_float = self._mem_div.astype(np.float64)
        self._count_float = self._count_div.astype(np.float64)
        self._counts_above_one = bool((self.count > 1).any())
        self._memory_shapes = self.memory > 0
        self._no_memory_limit = np.where(self._memory_shapes, 0.0, np.inf)
        # For every free milli f a device can have: how many demands it meets
        # (`_per_demand`) and floor(f / d) per demand d (`_copies_per_demand`).
        values = np.arange(GPU_MILLI + 1, dtype=np.int64)
        self._met_table = np.searchsorted(self.demands, values, side="right")
        self._copies_table: NDArray[np.int64] | None = (
            values[:, None] // self.demands[None, :] if int(self.demands.min()) > 0 else None
        )
        self._shape_table = self._per_shape_table(values)
        self._models: list[str] | None = None
        self.allowed = np.zeros((len(shapes), 1), dtype=bool)
        self._allowed_by_model = self.allowed.T
        self.refresh_models(models)

    def _per_shape_table(self, values: NDArray[np.int64]) -> NDArray[np.int32]:
        """[T, f, M] for every free milli f a device can have and each shape m (the
        demand column it uses): [f >= d_m] and f [f >= d_m] (the "fgd" term), then
        floor(f / d_m) (the "fill" term), the quantities the measure sums over devices.
        Summed over a few states' devices in one gather (`frag_weighted`)."""
        demand = self.demands[self.demand_of][None, :]  # [1, M]
        met = values[:, None] >= demand
        parts: list[NDArray[np.int64]] = []
        if self.mix[0]:
            parts += [met.astype(np.int64), np.where(met, values[:, None], 0)]
        if self.mix[1]:
            parts.append(values[:, None] // np.maximum(demand, 1))
        table: NDArray[np.int32] = np.stack(parts).astype(np.int32)
        return table

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
        # Rows by model code (-1, no model, is the last row), contiguous.
        self._allowed_by_model = np.ascontiguousarray(self.allowed.T)

    def frag_weighted(self, states: NodeStates) -> NDArray[np.int64]:
        """sum_m w_m F_n(m) for each state; divide by `total_weight` for F_n(M) in
        milli-GPU."""
        free = states.free
        total = free.sum(axis=1)
        if not len(self.weight):
            return np.zeros(len(free), dtype=np.int64)
        allowed = self._allowed_by_model[states.model]  # model -1: the "no model" row
        small = len(free) < _SMALL_BATCH and int(free.min()) >= 0 and int(free.max()) <= GPU_MILLI
        if small:
            # Few states (most calls): numpy's per-call overhead is the cost, so every
            # per-device sum comes from one gather of the shapes' table.
            per_shape = self._shape_table[:, free].sum(axis=2)  # [T, B, M]
        # The share each state satisfies, per shape (both terms, weighed by the mix).
        satisfied: NDArray[np.int64] = np.zeros((len(free), len(self.weight)), dtype=np.int64)
        if self.mix[0]:
            if small:
                meets_m, usable_m = per_shape[0], per_shape[1]
            else:
                meets, usable = self._per_demand(free)  # [B, D] each
                meets_m, usable_m = meets[:, self.demand_of], usable[:, self.demand_of]
            fits = meets_m >= self.count
            fits &= states.cpu_left[:, None] >= self.cpu
            fits &= allowed
            satisfied = np.where(fits, usable_m, 0)
            if self.mix[0] != 1:
                satisfied *= self.mix[0]
        if self.mix[1]:
            if small:
                per_device = per_shape[-1]
            else:
                per_device = self._copies_per_demand(free)[:, self.demand_of]
            copies = self._fill_copies(states, per_device)
            copies *= allowed
            copies *= self._per_copy_mix
            satisfied += copies
        result: NDArray[np.int64] = total * self.total_weight - satisfied @ self.weight
        return result

    def _fill_copies(self, states: NodeStates, per_device: NDArray[np.int64]) -> NDArray[np.int64]:
        """[B, M]: copies of each shape that fit each state (whole devices: `per_device`
        is sum_g floor(R_g / d_m) per state and shape; cpu, memory),
        not below 0; the fill term's count before the model is checked.

        Floor divisions are taken in float64: floor(a / b) of integers is exact there
        while |a| < 2^53 (a / b is at least 1 / b away from the next integer, and the
        rounding error is below |a / b| 2^-53), and numpy divides int64 several times
        slower. A few states (fewer numpy calls) and states beyond that (never in
        practice) take the integer path."""
        cpu_left, mem_left = states.cpu_left, states.mem_left
        big = _EXACT_FLOAT
        if len(cpu_left) < _FLOAT_DIVIDE_MIN or (
            int(np.abs(cpu_left).max()) >= big or int(np.abs(mem_left).max()) >= big
        ):
            exact: NDArray[np.int64] = (
                per_device // self._count_div if self._counts_above_one else per_device.copy()
            )
            np.minimum(exact, cpu_left[:, None] // self._cpu_div, out=exact)
            if self._memory_shapes.any():
                by_memory = mem_left[:, None] // self._mem_div
                if not self._memory_shapes.all():
                    by_memory = np.where(self._memory_shapes, by_memory, exact)
                np.minimum(exact, by_memory, out=exact)
            np.maximum(exact, 0, out=exact)
            return exact
        copies = per_device.astype(np.float64)
        if self._counts_above_one:
            copies /= self._count_float
            np.floor(copies, out=copies)
        by_cpu = cpu_left.astype(np.float64)[:, None] / self._cpu_float
        np.minimum(copies, np.floor(by_cpu, out=by_cpu), out=copies)
        if self._memory_shapes.any():
            by_mem = mem_left.astype(np.float64)[:, None] / self._mem_float
            np.floor(by_mem, out=by_mem)
            if not self._memory_shapes.all():
                by_mem += self._no_memory_limit  # +inf where a shape has no memory
            np.minimum(copies, by_mem, out=copies)
        np.maximum(copies, 0.0, out=copies)
        result: NDArray[np.int64] = copies.astype(np.int64)
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
        if free.shape[0] < 64:
            # A few states (most calls): one gather of [B, W, D] beats W lookups.
            gathered: NDArray[np.int64] = table[free].sum(axis=1)
            return gathered
        out = table[free[:, 0]]
        for device in range(1, free.shape[1]):
            out += table[free[:, device]]
        return out

    def frag(self, states: NodeStates) -> NDArray[np.float64]:
        """F_n(M) in milli-GPU for each state."""
        weighted = self.frag_weighted(states)
        return weighted / max(self.total_weight, 1)


@cache
def _earlier(width: int) -> NDArray[np.bool_]:
    """[1, W, W]: device j comes before device i (a constant per width; `np.tri` costs
    microseconds a call)."""
    earlier: NDArray[np.bool_] = np.tri(width, width, -1, dtype=bool)[None, :, :]
    earlier.flags.writeable = False
    return earlier


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
        earlier = _earlier(width)
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


def _placed(
    states: NodeStates, shape: TargetShape, per_device: bool
) -> tuple[NDArray[np.intp], NDArray[np.intp], NodeStates]:
    """Every way of placing `shape` on the states: (position, device or -1, the states
    after it)."""
    pos, dev, free_after = after_states(states.free, shape.gpu_milli, shape.gpu_count, per_device)
    after = NodeStates(
        free_after,
        states.cpu_left[pos] - shape.cpu_milli,
        states.mem_left[pos] - shape.memory,
        states.model[pos],
    )
    return pos, dev, after


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


_DISTINCT_MIN = 64
"""Batches of stale rows at least this large are scored once per distinct node state."""


def distinct_rows(key: NDArray[np.int64]) -> tuple[NDArray[np.intp], NDArray[np.intp]]:
    """(first, inverse) for the distinct rows of `key` [B, C]: `key[first]` holds each
    distinct row once (the lowest index among equal rows) and `key[first][inverse]` is
    `key`. A sort of the rows (cheaper than `np.unique(axis=0)`)."""
    n = len(key)
    if n == 0:
        return np.zeros(0, dtype=np.intp), np.zeros(0, dtype=np.intp)
    order = np.lexsort(key.T[::-1])
    ordered = key[order]
    new = np.empty(n, dtype=bool)
    new[0] = True
    np.any(ordered[1:] != ordered[:-1], axis=1, out=new[1:])
    inverse = np.empty(n, dtype=np.intp)
    inverse[order] = np.cumsum(new) - 1
    first: NDArray[np.intp] = order[new].astype(np.intp)
    return first, inverse


class StateClasses:
    """Ids of node states per row, valid while the row's version holds: rows with one id
    have one state (free milli per device, cpu and memory left, model), so a batch of
    rows is scored once per id. Rows whose version moved get new ids (equal states among
    them share one); equal states given ids at different times keep two, which costs
    work, not exactness. One policy's scorers share theirs across refits of the target
    workload, so a refit's rescoring sorts only the rows that changed since."""

    def __init__(self) -> None:
        self._layout = (-1, -1, -1)
        self._ids = np.zeros(0, dtype=np.int64)
        self._version = np.zeros(0, dtype=np.int64)
        self._next = 0

    def of(self, scorer: FragScorer, rows: NDArray[np.intp]) -> NDArray[np.int64]:
        """The state id of each row (rows distinct)."""
        devices = scorer.devices
        layout = (len(devices.version), devices.width, len(devices.models))
        if layout != self._layout:
            self._layout = layout
            self._ids = np.zeros(layout[0], dtype=np.int64)
            self._version = np.full(layout[0], -1, dtype=np.int64)
        version = devices.version
        stale = rows[self._version[rows] != version[rows]]
        if len(stale):
            states = scorer.states(stale)
            first, inverse = distinct_rows(
                np.column_stack((states.free, states.cpu_left, states.mem_left, states.model))
            )
            self._ids[stale] = self._next + inverse
            self._next += len(first)
            self._version[stale] = version[stale]
        ids: NDArray[np.int64] = self._ids[rows]
        return ids


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
        classes: StateClasses | None = None,
    ) -> None:
        self.devices = devices
        self.snapshot = snapshot
        self.model = model
        self.score_of = score_of
        self.classes = classes or StateClasses()
        self._models_seen = -1
        self._cap = -1
        self._before = np.zeros(0, dtype=np.int64)
        self._before_version = np.zeros(0, dtype=np.int64)
        self._shapes: dict[tuple[TargetShape, bool], _ShapeEntry] = {}
        self.distinct_min = _DISTINCT_MIN
        """Batches of stale rows at least this large are scored per distinct state."""
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
        pos, dev, after = _placed(states, shape, per_device)
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
        gain = self._gain(before[pos], after_weighted, states, pos, dev, shape, per_device)
        return pos, dev, gain

    def _gain(
        self,
        before: NDArray[np.int64],
        after: NDArray[np.int64],
        states: NodeStates,
        pos: NDArray[np.intp],
        dev: NDArray[np.intp],
        shape: TargetShape,
        per_device: bool,
    ) -> NDArray[np.float64]:
        """The fragmentation decrease in milli-GPU (weighted sums before and after),
        less the share prices' loss for a share of one device."""
        gain: NDArray[np.float64] = (before - after) / max(self.model.total_weight, 1)
        if per_device and self.share_loss is not None and len(pos):
            gain = gain - self.share_loss(states.free[pos, dev], shape.gpu_milli)
        return gain

    def with_free(
        self, rows: NDArray[np.intp], free: NDArray[np.int64], model: NDArray[np.int64]
    ) -> NodeStates:
        """The rows' states with the given free milli per device and model codes (GPUs
        the device table does not hold: published through DRA)."""
        states = self.states(rows)
        return NodeStates(free.astype(np.int64), states.cpu_left, states.mem_left, model)

    def score_states(
        self, states: NodeStates, shape: TargetShape, per_device: bool
    ) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        """(score, device) per state, computed afresh (no cache): for node states the
        device table does not hold (`with_free`)."""
        self._check()
        pos, dev, after = _placed(states, shape, per_device)
        weighted = self.model.frag_weighted(states.concat(after))
        n = len(states.free)
        gain = self._gain(weighted[:n][pos], weighted[n:], states, pos, dev, shape, per_device)
        return best_per_row(n, pos, dev, self.score_of(gain))

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
            best, device = self._best(stale, shape, per_device)
            entry.score[stale] = best
            entry.device[stale] = device
            entry.version[stale] = version[stale]
        return entry.score[rows], entry.device[rows]

    def _best(
        self, rows: NDArray[np.intp], shape: TargetShape, per_device: bool
    ) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        """(score, device) of each row, computed once per distinct node state: a row's
        score and device are a function of its state (free milli per device, cpu and
        memory left, model), and many rows share one (nodes of a type still empty, or
        filled alike). A refit of the target workload empties the caches and rescores
        every node for every shape, about a tenth of them distinct on the openb trace."""
        if len(rows) < self.distinct_min:
            pos, dev, gain = self.gains(rows, shape, per_device)
            return best_per_row(len(rows), pos, dev, self.score_of(gain))
        ids = self.classes.of(self, rows)
        _, first, inverse = np.unique(ids, return_index=True, return_inverse=True)
        pos, dev, gain = self.gains(rows[first], shape, per_device)
        best, device = best_per_row(len(first), pos, dev, self.score_of(gain))
        # Their "before" fragmentation is the representative's (cached by `gains`).
        self._before[rows] = self._before[rows[first]][inverse]
        self._before_version[rows] = self.devices.version[rows]
        return best[inverse], device[inverse]
