"""`shoal_dra_devices{driver, state}`: the devices published in ResourceSlices, per
driver, allocated whole, shared or free, taken with the GPU census."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from shoal.testing import SchedulerHarness, make_node, make_pod
from shoal.testing.dra import (
    DRIVER,
    device_class,
    gpu_slice,
    resource_claim,
    shared_slice,
    with_claims,
)
from shoal.web.dra_census import MAX_DRIVERS, OTHER_DRIVERS, dra_census
from shoal.web.gpu_census import GpuCensus
from shoal.web.metrics import register_gpu_collector


def _series(census: GpuCensus) -> dict[tuple[str, str], float]:
    registry = CollectorRegistry()
    register_gpu_collector(registry, lambda: census)
    out: dict[tuple[str, str], float] = {}
    for family in registry.collect():
        for sample in family.samples:
            if sample.name == "shoal_dra_devices":
                out[(sample.labels["driver"], sample.labels["state"])] = sample.value
    return out


def test_devices_per_driver_by_state() -> None:
    h = SchedulerHarness()
    h.add_nodes(*(make_node(n).capacity(cpu="8", memory="32Gi") for n in ("n1", "n2")))
    nic = "nic.example.com"
    h.add_dra(
        device_class(),
        gpu_slice("n1", count=4),
        shared_slice("n2", capacity={"bandwidth": "10G"}, driver=nic),
        # A node not in the cache: its devices reach nobody and are not counted.
        gpu_slice("gone", count=8),
        resource_claim("two", count=2),
        resource_claim("half", nic, capacity={"bandwidth": "4G"}),
    )
    h.add_dra(device_class(nic, driver=nic))
    h.add_pods(with_claims(make_pod("a"), gpu="two"), with_claims(make_pod("b"), nic="half"))
    assert all(h.run().placements.values())
    census = GpuCensus(h.scheduler)
    census.maybe_sample(0.0)
    got = _series(census)
    assert got[(DRIVER, "allocated")] == 2 and got[(DRIVER, "free")] == 2
    assert got[(DRIVER, "shared")] == 0
    assert got[(nic, "shared")] == 1 and got[(nic, "allocated")] == 0


def test_drivers_beyond_the_limit_fold_into_one_label() -> None:
    h = SchedulerHarness()
    h.add_nodes(make_node("n1").capacity(cpu="8", memory="32Gi"))
    drivers = [f"d{i:03d}.example.com" for i in range(MAX_DRIVERS + 5)]
    h.add_dra(*(gpu_slice("n1", count=1, driver=d, name=f"s-{d}") for d in drivers))
    groups = dra_census(h.scheduler)
    assert len(groups) == MAX_DRIVERS + 1
    other = next(g for g in groups if g.driver == OTHER_DRIVERS)
    assert other.devices == 5 and other.free == 5
