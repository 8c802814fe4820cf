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


def test_gpus_published_through_dra_count_in_the_gpu_series() -> None:
    """A class standing for nvidia.com/gpu makes its devices GPUs of the census: whole,
    shared (by the part of the first capacity their shares take) and free, per model
    (the device's productName attribute), beside the GPUs nodes list."""
    import msgspec

    from shoal.api.dra import DeviceClass
    from shoal.api.manifests import decode

    h = SchedulerHarness()
    h.add_nodes(
        make_node("n1").capacity(cpu="8", memory="32Gi"),
        make_node("n2").capacity(cpu="8", memory="32Gi"),
        make_node("n3").capacity(cpu="8", memory="32Gi", **{"nvidia.com/gpu": "2"}),
    )
    gpu_class = device_class()
    gpu_class = msgspec.structs.replace(
        gpu_class,
        spec=msgspec.structs.replace(gpu_class.spec, extended_resource_name="nvidia.com/gpu"),
    )
    nic = "nic.example.com"
    other = decode(
        {
            "metadata": {"name": nic},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{nic}"'}}]},
        },
        DeviceClass,
    )
    h.add_dra(
        gpu_class,
        other,
        gpu_slice("n1", count=4, attributes={"productName": ["A100"] * 4}),
        shared_slice("n2", capacity={"memory": "80Gi"}, attributes={"productName": "H100"}),
        shared_slice("n1", capacity={"bandwidth": "10G"}, driver=nic, name="n1-nic"),
        resource_claim("two", count=2),
        resource_claim("quarter", capacity={"memory": "20Gi"}),
    )
    h.add_pods(with_claims(make_pod("a"), gpu="two"), with_claims(make_pod("b"), gpu="quarter"))
    assert all(h.run().placements.values())
    census = GpuCensus(h.scheduler)
    census.maybe_sample(0.0)
    groups = {(g.pool, g.model): g for g in census.latest}
    a100 = groups[("", "A100")]
    assert (a100.nodes, a100.devices) == (1, 4)
    assert (a100.whole_milli, a100.shared_milli, a100.free_milli) == (2000, 0, 2000)
    shared = groups[("", "H100")]
    assert shared.devices == 1 and shared.shared_devices == 1
    assert (shared.shared_milli, shared.free_milli) == (250, 750)
    # n3's GPUs from its allocatable are counted as before; the NIC is not a GPU.
    assert sum(g.devices for g in census.latest) == 4 + 1 + 2
