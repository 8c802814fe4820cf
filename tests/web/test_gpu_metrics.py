"""`shoal_gpu_*` series (issue "GPU shares", item 5): the census, taken by the driver
loop, splits GPUs per node pool and model into whole, shared and unallocated, counts the
devices holding shares, and the fragmentation the dashboard shows."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from shoal.api.manifests import decode
from shoal.api.queue import NodePool, Queue
from shoal.testing import SchedulerHarness, make_node, make_pod
from shoal.testing.builders import NodeBuilder, PodBuilder
from shoal.web.dashboard.frame import DashboardSource
from shoal.web.gpu_census import GpuCensus
from shoal.web.metrics import register_gpu_collector

GPU = "nvidia.com/gpu"


def gpu_node(name: str, gpus: int, model: str) -> NodeBuilder:
    node = make_node(name).capacity({"cpu": "64", "memory": "256Gi", GPU: gpus})
    return node.label("alibabacloud.com/gpu-card-model", model)


def gpu_pod(name: str, milli: int, models: str) -> PodBuilder:
    return (
        make_pod(name)
        .uid(name)
        .req(cpu="1")
        .annotations(
            {"alibabacloud.com/gpu-milli": str(milli), "alibabacloud.com/gpu-card-model": models}
        )
    )


def pool(name: str, **selector: str) -> NodePool:
    return decode({"metadata": {"name": name}, "spec": {"nodeSelector": selector}}, NodePool)


def scrape(census: GpuCensus) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    registry = CollectorRegistry()
    register_gpu_collector(registry, lambda: census)
    out: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
    for family in registry.collect():
        for sample in family.samples:
            out[(sample.name, frozenset(sample.labels.items()))] = sample.value
    assert b"shoal_gpu_allocated" in generate_latest(registry)
    return out


def series(got: dict[Any, float], name: str, **labels: str) -> float:
    return got[(name, frozenset(labels.items()))]


@pytest.fixture(scope="module")
def run() -> tuple[SchedulerHarness, GpuCensus]:
    h = SchedulerHarness()
    h.add_nodes(
        gpu_node("v0", 2, model="V100").label("pool", "train"),
        gpu_node("v1", 2, model="V100").label("pool", "train"),
        gpu_node("t0", 4, model="T4"),
    )
    queues: list[Queue] = []
    assert h.scheduler.apply_queues(queues, pools=[pool("train", pool="train")]) == []
    census = GpuCensus(h.scheduler, interval=10)
    h.driver.samplers.append(census.maybe_sample)
    h.add_pods(
        make_pod("whole").uid("whole").req({GPU: 1}, cpu="1").node_selector(pool="train"),
        gpu_pod("a", milli=300, models="T4"),
        gpu_pod("b", milli=300, models="T4"),
        gpu_pod("c", milli=500, models="V100"),
    )
    h.run()
    h.advance(10)  # the next census after every pod was placed
    return h, census


def test_gpus_per_pool_and_model_split_into_whole_shared_and_free(
    run: tuple[SchedulerHarness, GpuCensus],
) -> None:
    h, census = run
    assert all(h.node_of(k) for k in ("whole", "a", "b", "c"))
    got = scrape(census)
    train = {"pool": "train", "model": "V100"}
    none = {"pool": "", "model": "T4"}
    assert series(got, "shoal_gpu_devices", **train) == 4
    assert series(got, "shoal_gpu_devices", **none) == 4
    assert series(got, "shoal_gpu_allocated", kind="whole", **train) == 1.0
    assert series(got, "shoal_gpu_allocated", kind="shared", **train) == 0.5
    assert series(got, "shoal_gpu_unallocated", **train) == 2.5
    # Two 300-milli shares on one T4 (tightest fit) or on two: devices with shares.
    shared_devices = series(got, "shoal_gpu_shared_devices", **none)
    assert series(got, "shoal_gpu_allocated", kind="shared", **none) == pytest.approx(0.6)
    assert shared_devices in (1, 2)
    assert series(got, "shoal_gpu_unallocated", **none) == pytest.approx(3.4)
    assert series(got, "shoal_gpu_shared_devices", **train) == 1


def test_fragmentation_is_the_dashboards(run: tuple[SchedulerHarness, GpuCensus]) -> None:
    h, census = run
    frame = DashboardSource(h.scheduler).build()
    got = scrape(census)
    total = sum(v for (name, _), v in got.items() if name == "shoal_gpu_fragmentation")
    assert total == pytest.approx(frame.node_summary["fragMilli"] / 1000, abs=0.01)


def test_a_cluster_without_gpus_exports_no_gpu_series() -> None:
    h = SchedulerHarness()
    census = GpuCensus(h.scheduler)
    h.driver.samplers.append(census.maybe_sample)
    h.run()
    assert census.latest == ()
    assert not [k for k in scrape(census) if k[0].startswith("shoal_gpu")]
