"""GPUs published through Dynamic Resource Allocation, as the GPU policies see GPUs.

A DeviceClass whose `extendedResourceName` is `nvidia.com/gpu` stands for GPUs (tenant
queues charge its devices as GPUs too, `shoal.tenancy.devices`). Its devices on nodes
of the cache are GPUs here: per node row, the free milli-GPU of each (1000 when free,
0 when a claim holds it whole; a device allowing multiple allocations has the part of
its first capacity its shares leave), so FGD's and FragGuard's fragmentation measure
(`shoal.gpu.fragmentation`) applies to them as to the GPUs nodes list. A pod's claims
for such devices are its GPU request: `count` whole devices, or one share of a device
sized by its first capacity request.

Read-only over the `DeviceCatalog`; vectorised over devices, gathered once per catalog
version.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
from numpy.typing import NDArray

from shoal.api.dra import DeviceClass, DeviceSelector, ResourceClaim
from shoal.api.gpu import GPU_MILLI, NO_GPU, GpuRequest
from shoal.api.quantity import QuantityError, parse_quantity
from shoal.api.resources import GPU
from shoal.cache.dra import DeviceCatalog
from shoal.cache.dra_cel import SelectorError, compile_selector

__all__ = ["DraGpuView", "dra_gpu_request", "gpu_classes"]

_MODEL_ATTRIBUTES = ("productName", "model")


def gpu_classes(catalog: DeviceCatalog) -> dict[str, DeviceClass]:
    """The classes standing for `nvidia.com/gpu`."""
    return {name: c for name, c in catalog.classes.items() if c.spec.extended_resource_name == GPU}


@dataclass(frozen=True)
class DraGpuView:
    """The DRA GPUs of the cache's nodes (aligned per device): node row, model, and in
    milli-GPU what is held whole, what shares hold and what is free."""

    device: NDArray[np.intp]  # index in the catalog's device table
    row: NDArray[np.intp]
    model: list[str]
    whole: NDArray[np.int64]
    shared: NDArray[np.int64]
    free: NDArray[np.int64]
    # The devices ordered by row (stable), and their rows in that order: the matrices'
    # layout, kept with the static part.
    order: NDArray[np.intp]
    sorted_row: NDArray[np.intp]
    # Per device allowing multiple allocations: its first capacity's value (exact).
    capacity: dict[int, Fraction]
    largest: Fraction = Fraction(0)  # the largest of them (0: none)

    @classmethod
    def of(cls, catalog: DeviceCatalog) -> DraGpuView | None:
        """The view now: which devices are GPUs, their rows, models and capacities are
        gathered once per device table, classes and nodes; their use on every call."""
        static = _static(catalog)
        if static is None:
            return None
        picked, rows, model, capacity, largest, order, sorted_row = static
        state = catalog.state()
        whole = np.where(state.free[picked], 0, GPU_MILLI).astype(np.int64)
        shared = np.zeros(picked.size, dtype=np.int64)
        if (
            capacity
            and state.multi is not None
            and state.used is not None
            and state.cap is not None
        ):
            multi = state.multi[picked]
            cap = state.cap[picked][:, 0]
            used = state.used[picked][:, 0]
            fraction = np.where(cap > 0, used * GPU_MILLI // np.maximum(cap, 1), 0)
            shared = np.where(multi, fraction, 0).astype(np.int64)
            whole = np.where(multi, 0, whole)
        free = GPU_MILLI - whole - shared
        return cls(picked, rows, model, whole, shared, free, order, sorted_row, capacity, largest)

    def free_matrix(self, rows: NDArray[np.intp]) -> NDArray[np.int64]:
        """Free milli-GPU per device for each of `rows` ([len(rows), W]; devices in
        table order, 0 past a node's last)."""
        return self._matrix(rows, self.free, 0)

    def device_matrix(self, rows: NDArray[np.intp]) -> NDArray[np.int64]:
        """The device table index of each column of `free_matrix` (-1 past a node's
        last device)."""
        return self._matrix(rows, self.device.astype(np.int64), -1)

    def _matrix(
        self, rows: NDArray[np.intp], values: NDArray[np.int64], fill: int
    ) -> NDArray[np.int64]:
        if not self.row.size:
            return np.zeros((rows.size, 0), dtype=np.int64)
        order, sorted_rows = self.order, self.sorted_row
        starts = np.searchsorted(sorted_rows, rows, side="left")
        ends = np.searchsorted(sorted_rows, rows, side="right")
        counts = ends - starts
        width = int(counts.max(initial=0))
        out = np.full((rows.size, width), fill, dtype=np.int64)
        if width:
            offsets = np.arange(width)
            take = offsets[None, :] < counts[:, None]
            index = np.minimum(starts[:, None] + offsets[None, :], max(order.size - 1, 0))
            out[take] = values[order[index[take]]]
        return out


_Static = tuple[
    NDArray[np.intp],
    NDArray[np.intp],
    list[str],
    dict[int, Fraction],
    Fraction,
    NDArray[np.intp],
    NDArray[np.intp],
]
_STATIC: weakref.WeakKeyDictionary[
    DeviceCatalog, tuple[tuple[int, int, int, int], _Static | None]
] = weakref.WeakKeyDictionary()


def _static(catalog: DeviceCatalog) -> _Static | None:
    """(GPU devices, their node rows, models, first capacities of shared ones), kept
    per catalog while its device table, classes and nodes stay as they were."""
    table = catalog.table()
    node_table = catalog.cluster.table
    key = (catalog.table_version, catalog.classes_version, node_table.nodes_version, node_table.n)
    kept = _STATIC.get(catalog)
    if kept is not None and kept[0] == key:
        return kept[1]
    found: _Static | None = None
    classes = gpu_classes(catalog)
    if classes:
        mask = np.zeros(len(table.ids), dtype=bool)
        for device_class in classes.values():
            try:
                selectors = [
                    compile_selector(s.cel.expression)
                    for s in device_class.spec.selectors
                    if s.cel is not None
                ]
            except SelectorError:
                continue  # DynamicResources names the class's broken selector to its pods
            mask |= catalog.match(selectors)
        rows = catalog.rows()
        picked = np.flatnonzero(mask & (rows >= 0)).astype(np.intp)
        if picked.size:
            model: list[str] = []
            capacity: dict[int, Fraction] = {}
            columns = table.capacity
            for i in picked.tolist():
                device = table.devices[i]
                attributes = device.attributes
                value = next(
                    (attributes[a].value() for a in _MODEL_ATTRIBUTES if a in attributes), ""
                )
                model.append(str(value) if value is not None else "")
                if columns is not None and bool(columns.multi[i]):
                    capacity[i] = _first_capacity(device)
            largest = max(capacity.values(), default=Fraction(0))
            row = rows[picked]
            order = np.argsort(row, kind="stable").astype(np.intp)
            found = (picked, row, model, capacity, largest, order, row[order])
    _STATIC[catalog] = (key, found)
    return found


def _first_capacity(device: object) -> Fraction:
    capacity = getattr(device, "capacity", {}) or {}
    for value in capacity.values():
        try:
            return parse_quantity(value.value)
        except (QuantityError, AttributeError):
            return Fraction(0)
    return Fraction(0)


def dra_gpu_request(
    claims: list[ResourceClaim], catalog: DeviceCatalog, view: DraGpuView | None
) -> GpuRequest:
    """The GPU request the pod's unallocated claims make: whole GPUs of classes standing
    for `nvidia.com/gpu` (their counts summed), or one share of a device (its first
    capacity request, as a part of such a device's first capacity); NO_GPU when they
    ask for no such device, or for a mix the measure cannot express."""
    classes = gpu_classes(catalog)
    if not classes:
        return NO_GPU
    whole = 0
    shares: list[int] = []
    allowed: frozenset[str] | None = None
    for claim in claims:
        if catalog.allocated(claim.key) is not None:
            continue
        for request in claim.spec.devices.requests:
            exact = request.exactly
            if exact is None or exact.device_class_name not in classes or exact.admin_access:
                continue
            if exact.allocation_mode != "ExactCount":
                return NO_GPU
            if exact.selectors:
                models = _models_selected(exact.selectors, catalog, view)
                if models is not None:
                    allowed = models if allowed is None else allowed & models
            wanted = exact.capacity.requests if exact.capacity is not None else {}
            if not wanted:
                whole += exact.count
                continue
            milli = _share_milli(next(iter(wanted.values())), view)
            if milli is None:
                return NO_GPU
            if milli >= GPU_MILLI:
                whole += exact.count  # the whole of each device
                continue
            if exact.count != 1:
                return NO_GPU
            shares.append(milli)
    if shares:
        return NO_GPU if whole or len(shares) > 1 else GpuRequest(1, shares[0], allowed)
    return GpuRequest(whole, GPU_MILLI, allowed) if whole else NO_GPU


def _models_selected(
    selectors: list[DeviceSelector], catalog: DeviceCatalog, view: DraGpuView | None
) -> frozenset[str] | None:
    """The GPU models among the devices a request's own selectors pick, when they pick
    some models and not others (a model constraint, as a GPU share's annotation makes);
    None otherwise."""
    if view is None or not view.device.size:
        return None
    try:
        compiled = [compile_selector(s.cel.expression) for s in selectors if s.cel is not None]
    except SelectorError:
        return None
    picked = catalog.match(compiled)[view.device]
    models = np.array(view.model, dtype=object)
    chosen = frozenset(str(m) for m in models[picked].tolist() if m)
    every = frozenset(str(m) for m in view.model if m)
    return chosen if chosen and chosen != every else None


def _share_milli(amount: str | int, view: DraGpuView | None) -> int | None:
    """A capacity request as milli-GPU of the largest shared GPU's first capacity."""
    if view is None or not view.capacity:
        return None
    try:
        wanted = parse_quantity(amount)
    except QuantityError:
        return None
    largest = view.largest
    if largest <= 0:
        return None
    milli = int(wanted * GPU_MILLI / largest)
    return min(max(milli, 1), GPU_MILLI)
