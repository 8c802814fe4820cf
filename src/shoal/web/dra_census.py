"""DRA device census: how the devices published in ResourceSlices are used, per driver,
for /metrics (`shoal_dra_devices{driver, state}`).

Per driver, the devices of the scheduler's device table that some node in the cache can
reach (node-local devices of nodes not in the cache are left out), as `allocated` (taken
whole by a claim, written or chosen by this scheduler), `shared` (allowing multiple
allocations and holding at least one share) or `free`. Taken where the scheduler runs,
with the GPU census (`GpuCensus.maybe_sample`): between decisions, never racing them.
Drivers are user input: past `MAX_DRIVERS` the rest are folded into one label value.

`dra_gpus` gives the GPU census (`shoal.web.gpu_census`) the GPUs published through DRA
(`shoal.gpu.dra_gpus`: the devices of classes standing for `nvidia.com/gpu`), so
`shoal_gpu_*` counts them with the GPUs nodes list in their allocatable.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from shoal.cache.dra import SERVICE_KEY, DeviceCatalog
from shoal.gpu.dra_gpus import DraGpuView
from shoal.scheduler import Scheduler

__all__ = ["MAX_DRIVERS", "OTHER_DRIVERS", "DraGroup", "dra_census", "dra_gpus"]

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


def dra_gpus(scheduler: Scheduler) -> DraGpuView | None:
    """The GPUs published through DRA on the cache's nodes (None: none)."""
    catalog = scheduler.handle.services.get(SERVICE_KEY)
    if not isinstance(catalog, DeviceCatalog):
        return None
    return DraGpuView.of(catalog)
