"""DRA device census: how the devices published in ResourceSlices are used, per driver,
for /metrics (`shoal_dra_devices{driver, state}`).

Per driver, the devices of the scheduler's device table that some node in the cache can
reach (node-local devices of nodes not in the cache are left out), as `allocated` (taken
whole by a claim, written or chosen by this scheduler), `shared` (allowing multiple
allocations and holding at least one share) or `free`. Taken where the scheduler runs,
with the GPU census (`GpuCensus.maybe_sample`): between decisions, never racing them.
Drivers are user input: past `MAX_DRIVERS` the rest are folded into one label value.

`dra_gpus` gives the GPU census (`shoal.web.gpu_census`) the GPUs published through DRA:
the devices of classes standing for `nvidia.com/gpu`, so `shoal_gpu_*` counts them with
the GPUs nodes list in their allocatable.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from shoal.api.gpu import GPU_MILLI
from shoal.api.resources import GPU
from shoal.cache.dra import SERVICE_KEY, DeviceCatalog
from shoal.cache.dra_cel import SelectorError, compile_selector
from shoal.scheduler import Scheduler

__all__ = ["MAX_DRIVERS", "OTHER_DRIVERS", "DraGpus", "DraGroup", "dra_census", "dra_gpus"]

MAX_DRIVERS = 32
OTHER_DRIVERS = "(other)"


@dataclass(frozen=True, slots=True)
class DraGroup:
    driver: str
    devices: int
    allocated: int
    shared: int
    free: int


def dra_census(scheduler: Scheduler) -> tuple[DraGroup, ...]:
    catalog = scheduler.handle.services.get(SERVICE_KEY)
    if not isinstance(catalog, DeviceCatalog):
        return ()
    table = catalog.table()
    if not table.ids:
        return ()
    rows = catalog.rows()
    reachable = rows != -1
    state = catalog.state()
    shared = np.zeros(len(table.ids), dtype=bool)
    if state.multi is not None and state.shares is not None:
        shared = state.multi & (state.shares > 0)
    allocated = ~state.free & ~shared
    drivers = sorted({ident[0] for ident in table.ids})
    kept = drivers[:MAX_DRIVERS] if len(drivers) > MAX_DRIVERS else drivers
    label = {d: (d if d in kept else OTHER_DRIVERS) for d in drivers}
    names = sorted(set(label.values()))
    code = {name: i for i, name in enumerate(names)}
    of = np.fromiter((code[label[ident[0]]] for ident in table.ids), np.intp, len(table.ids))
    k = len(names)

    def count(mask: np.ndarray) -> list[int]:
        return np.bincount(of[mask & reachable], minlength=k).tolist()  # type: ignore[no-any-return]

    total, taken, holding = count(np.ones_like(reachable)), count(allocated), count(shared)
    return tuple(
        DraGroup(name, total[i], taken[i], holding[i], total[i] - taken[i] - holding[i])
        for i, name in enumerate(names)
    )


@dataclass(frozen=True, slots=True)
class DraGpus:
    """The GPUs published through DRA, per device (aligned arrays): the node row each
    is on, its model ("" unknown), and in milli-GPU what is allocated whole, what shares
    hold and what is free."""

    row: np.ndarray
    model: list[str]
    whole: np.ndarray
    shared: np.ndarray
    free: np.ndarray

    @property
    def size(self) -> int:
        return int(self.row.size)


_MODEL_ATTRIBUTES = ("productName", "model")


def dra_gpus(scheduler: Scheduler) -> DraGpus | None:
    """The devices of the DeviceClasses that stand for `nvidia.com/gpu` (their
    `extendedResourceName`: the classes tenant queues also charge as GPUs) on nodes of
    the cache; None when there are none. A device allowing multiple allocations counts
    as shared by the part of its first capacity its shares consume."""
    catalog = scheduler.handle.services.get(SERVICE_KEY)
    if not isinstance(catalog, DeviceCatalog) or not catalog.classes:
        return None
    gpu_classes = [c for c in catalog.classes.values() if c.spec.extended_resource_name == GPU]
    if not gpu_classes:
        return None
    table = catalog.table()
    mask = np.zeros(len(table.ids), dtype=bool)
    for device_class in gpu_classes:
        try:
            selectors = [
                compile_selector(s.cel.expression) for s in device_class.spec.selectors if s.cel
            ]
        except SelectorError:
            continue  # DynamicResources names the class's broken selector to its pods
        mask |= catalog.match(selectors)
    rows = catalog.rows()
    picked = np.flatnonzero(mask & (rows >= 0))
    if not picked.size:
        return None
    state = catalog.state()
    whole = np.where(state.free[picked], 0, GPU_MILLI).astype(np.int64)
    shared = np.zeros(picked.size, dtype=np.int64)
    if state.multi is not None and state.used is not None and state.cap is not None:
        multi = state.multi[picked]
        if multi.any():
            cap = state.cap[picked][:, 0] if state.cap.shape[1] else np.zeros(picked.size)
            used = state.used[picked][:, 0] if state.used.shape[1] else np.zeros(picked.size)
            fraction = np.where(cap > 0, used * GPU_MILLI // np.maximum(cap, 1), 0)
            shared = np.where(multi, fraction, 0).astype(np.int64)
            whole = np.where(multi, 0, whole)
    devices = table.devices
    model = []
    for i in picked.tolist():
        attributes = devices[i].attributes
        found = next((attributes[a].value() for a in _MODEL_ATTRIBUTES if a in attributes), "")
        model.append(str(found) if found is not None else "")
    return DraGpus(rows[picked], model, whole, shared, GPU_MILLI - whole - shared)
