"""Partitionable devices (KEP-4815): a pool publishes counter sets in a slice of their
own (as Kubernetes 1.36 requires) and its devices consume from them, so MIG-like
partitions of one GPU and the whole GPU exclude each other: partitions are allocated
until the counters are used up, the whole GPU is then unavailable (and the other way
round), freed counters are room again, preemption frees a victim's counters, and a
gang's members see each other's counters taken."""

from __future__ import annotations

from typing import Any

import msgspec

from shoal.api.dra import DeviceCounterConsumption, ResourceSlice
from shoal.cache.dra import DeviceCatalog
from shoal.testing import SchedulerHarness, make_node, make_pod
from shoal.testing.dra import (
    DRIVER,
    device_class,
    partitioned_slices,
    resource_claim,
    shared_slice,
    with_claims,
)

from .test_dra_preemption import _SlowEvictions


def _catalog(h: SchedulerHarness) -> DeviceCatalog:
    return DeviceCatalog.of(h.scheduler.handle)


def _setup(h: SchedulerHarness, *nodes: str, gpus: int = 1) -> None:
    h.add_nodes(*(make_node(n).capacity(cpu="64", memory="256Gi") for n in nodes))
    h.add_dra(device_class())
    for node in nodes:
        h.add_dra(*partitioned_slices(node, gpus))


def _claim(name: str, size: str, count: int = 1) -> Any:
    return resource_claim(
        name, selectors=[f'device.attributes["{DRIVER}"].size == "{size}"'], count=count
    )


def _pod(name: str, claim: str, priority: int = 0) -> Any:
    return with_claims(make_pod(name).priority(priority), gpu=claim)


def _devices(h: SchedulerHarness, claim: str) -> list[str]:
    status = _catalog(h).claims[f"default/{claim}"].status
    assert status.allocation is not None, f"{claim} is not allocated"
    return [f"{r.pool}/{r.device}" for r in status.allocation.devices.results]


def test_partitions_are_allocated_until_the_counters_are_used_up() -> None:
    h = SchedulerHarness()
    _setup(h, "n1")
    h.add_dra(*(_claim(f"q{i}", "quarter") for i in range(5)), _claim("whole", "whole"))
    h.add_pods(*(_pod(f"q{i}", f"q{i}") for i in range(5)))
    result = h.run()
    placed = [i for i in range(5) if result.placements[f"default/q{i}"] == "n1"]
    assert placed == [0, 1, 2, 3]  # 4 quarters of 20Gi use the 80Gi GPU up
    assert sorted(d for i in placed for d in _devices(h, f"q{i}")) == [
        f"n1/gpu-0-quarter-{j}" for j in range(4)
    ]
    assert "only 0 of 1 requested devices free for q4/gpu" in result.messages["default/q4"]
    # The whole GPU is a free device, but its counters are taken.
    h.add_pods(_pod("whole", "whole"))
    assert h.advance(5).placements["default/whole"] is None
    # Two quarters fewer (and the waiting one gone) leave 40Gi: room for one half.
    for i in (4, 0, 1):
        h.delete_pod(f"q{i}")
    h.add_dra(_claim("h0", "half"), _claim("h1", "half"))
    h.add_pods(_pod("h0", "h0"), _pod("h1", "h1"))
    result = h.advance(30)
    assert result.placements["default/whole"] is None
    assert sorted(p for p in ("h0", "h1") if result.placements[f"default/{p}"]) in (
        ["h0"],
        ["h1"],
    )


def test_the_whole_gpu_excludes_its_partitions_and_comes_back_when_freed() -> None:
    h = SchedulerHarness()
    _setup(h, "n1")
    h.add_dra(_claim("whole", "whole"), _claim("half", "half"), _claim("quarter", "quarter"))
    h.add_pods(_pod("whole", "whole"))
    assert h.run().placements["default/whole"] == "n1"
    assert _devices(h, "whole") == ["n1/gpu-0"]
    h.add_pods(_pod("half", "half"), _pod("quarter", "quarter"))
    result = h.advance(5)
    assert result.placements["default/half"] is None
    assert result.placements["default/quarter"] is None
    h.delete_pod("whole")
    result = h.advance(30)
    assert result.placements["default/half"] == "n1"
    assert result.placements["default/quarter"] == "n1"


def test_a_pod_asking_two_partitions_gets_two_that_fit_together() -> None:
    h = SchedulerHarness()
    _setup(h, "n1")
    # n1's GPU has a quarter taken: both halves are free devices, but 60Gi is left of
    # the counters, not the 80Gi two halves take.
    h.add_dra(_claim("taken", "quarter"), _claim("two", "half", count=2))
    h.add_pods(_pod("taken", "taken"))
    h.run()
    h.add_pods(_pod("two", "two"))
    result = h.advance(5)
    assert result.placements["default/two"] is None
    assert "do not fit together" in result.messages["default/two"]
    _setup(h, "n2")
    assert h.advance(30).placements["default/two"] == "n2"
    assert _devices(h, "two") == ["n2/gpu-0-half-0", "n2/gpu-0-half-1"]


def test_two_requests_of_one_claim_share_the_counters_of_one_gpu() -> None:
    h = SchedulerHarness()
    _setup(h, "n1")
    selector = f'device.attributes["{DRIVER}"].size == '
    requests = [
        {
            "name": "a",
            "exactly": {
                "deviceClassName": DRIVER,
                "selectors": [{"cel": {"expression": selector + '"half"'}}],
            },
        },
        {
            "name": "b",
            "exactly": {
                "deviceClassName": DRIVER,
                "selectors": [{"cel": {"expression": selector + '"quarter"'}}],
                "count": 3,
            },
        },
    ]
    # A half and three quarters: 100Gi of an 80Gi GPU.
    h.add_dra(resource_claim("mix", requests=requests))
    h.add_pods(_pod("mix", "mix"))
    result = h.run()
    assert result.placements["default/mix"] is None
    assert "do not fit together" in result.messages["default/mix"]
    # A half and two quarters fit exactly.
    requests[1]["exactly"]["count"] = 2
    h.delete_pod("mix")
    h.delete_dra("ResourceClaim", "mix")
    h.add_dra(resource_claim("mix2", requests=requests))
    h.add_pods(_pod("mix2", "mix2"))
    assert h.advance(30).placements["default/mix2"] == "n1"
    assert _devices(h, "mix2") == ["n1/gpu-0-half-0", "n1/gpu-0-quarter-0", "n1/gpu-0-quarter-1"]


def test_preemption_frees_the_victims_counters() -> None:
    h = SchedulerHarness()
    _setup(h, "n1")
    h.add_dra(_claim("low", "whole"), _claim("high", "half"))
    h.add_pods(_pod("low", "low"))
    assert h.run().placements["default/low"] == "n1"
    h.add_pods(_pod("high", "high", priority=1000))
    placements = h.advance(30).placements
    assert list(h.evicted) == ["default/low"]
    assert placements == {"default/high": "n1"}
    assert _devices(h, "high") == ["n1/gpu-0-half-0"]


def test_a_gang_takes_the_counters_in_one_transaction() -> None:
    h = SchedulerHarness()
    _setup(h, "n1")
    labels = {
        "pod-group.scheduling.sigs.k8s.io/name": "train",
        "pod-group.scheduling.sigs.k8s.io/min-available": "3",
    }
    h.add_dra(*(_claim(f"w{i}", "half") for i in range(3)))
    h.add_pods(*(with_claims(make_pod(f"w{i}").labels(labels), gpu=f"w{i}") for i in range(3)))
    result = h.advance(5)
    # Two halves per GPU: the gang of three does not fit, nothing is held.
    assert [result.placements[f"default/w{i}"] for i in range(3)] == [None] * 3
    assert all(_catalog(h).allocated(f"default/w{i}") is None for i in range(3))
    counters = _catalog(h).state().counters
    assert counters is not None and (counters.remaining == counters.remaining.max()).all()
    # A second GPU on the node: all three start, on distinct halves within the counters.
    h.add_dra(*partitioned_slices("n1", 2, generation=2))
    result = h.advance(30)
    assert [result.placements[f"default/w{i}"] for i in range(3)] == ["n1"] * 3
    used = sorted(d for i in range(3) for d in _devices(h, f"w{i}"))
    assert used == ["n1/gpu-0-half-0", "n1/gpu-0-half-1", "n1/gpu-1-half-0"]


def test_a_device_naming_an_unpublished_counter_set_is_never_allocated() -> None:
    h = SchedulerHarness()
    h.add_nodes(make_node("n1").capacity(cpu="64", memory="256Gi"))
    counters, devices = partitioned_slices("n1")
    # The counter slice has not arrived yet (or names other sets): nothing is allocated.
    h.add_dra(device_class(), devices, _claim("q", "quarter"))
    h.add_pods(_pod("q", "q"))
    assert h.run().placements["default/q"] is None
    h.add_dra(counters)
    assert h.advance(30).placements["default/q"] == "n1"


def test_a_shared_device_takes_its_counters_once() -> None:
    h = SchedulerHarness()
    h.add_nodes(make_node("n1").capacity(cpu="64", memory="256Gi"))
    counters = msgspec.convert(
        {
            "metadata": {"name": "n1-counters"},
            "spec": {
                "driver": DRIVER,
                "nodeName": "n1",
                "pool": {"name": "n1", "generation": 1, "resourceSliceCount": 2},
                "sharedCounters": [{"name": "port", "counters": {"lanes": {"value": "4"}}}],
            },
        },
        ResourceSlice,
    )
    nics = shared_slice("n1", 2, capacity={"bandwidth": "10G"}, name="n1-nics")
    spec = nics.spec
    pool = msgspec.structs.replace(spec.pool, resource_slice_count=2)
    devices = []
    for device in spec.devices:
        use = msgspec.convert(
            {"counterSet": "port", "counters": {"lanes": {"value": "3"}}},
            DeviceCounterConsumption,
        )
        devices.append(msgspec.structs.replace(device, consumes_counters=[use]))
    nics = msgspec.structs.replace(
        nics, spec=msgspec.structs.replace(spec, pool=pool, devices=devices)
    )
    h.add_dra(device_class(), counters, nics)
    h.add_dra(*(resource_claim(c, capacity={"bandwidth": "2G"}) for c in ("a", "b", "c")))
    h.add_pods(*(_pod(c, c) for c in ("a", "b", "c")))
    assert all(node == "n1" for node in h.run().placements.values())
    # nic-0 took 3 of the 4 lanes once, for all three shares.
    assert {d for c in "abc" for d in _devices(h, c)} == {"n1/nic-0"}
    # 5G: not left on nic-0 (4G), and nic-1 would need 3 more lanes.
    h.add_dra(resource_claim("d", capacity={"bandwidth": "5G"}))
    h.add_pods(_pod("d", "d"))
    assert h.advance(5).placements["default/d"] is None
    # nic-0's shares gone, its lanes are back: nic-1 could take them now (first fit:
    # nic-0 itself).
    for c in "abc":
        h.delete_pod(c)
    assert h.advance(30).placements["default/d"] == "n1"
    assert _devices(h, "d") == ["n1/nic-0"]


def test_a_preemptor_keeps_the_counters_its_victims_free_while_one_terminates() -> None:
    """The preemptor needs the whole GPU, held as two halves by two victims: one is gone,
    the other still terminating. The quarter a pod of the victims' priority asks for
    would take counters the preemptor needs: it waits, and the preemptor gets the GPU
    once the victim is gone (no third eviction)."""
    h = SchedulerHarness()
    _setup(h, "n1")
    h.add_dra(_claim("low-a", "half"), _claim("low-b", "half"))
    h.add_dra(_claim("high", "whole"), _claim("late", "quarter"))
    h.add_pods(_pod("low-a", "low-a"), _pod("low-b", "low-b"))
    h.run()
    slow = _SlowEvictions(h.effects, "low-b")
    h.effects.listeners.append(slow)
    h.add_pods(_pod("high", "high", priority=1000))
    h.advance(5)
    assert sorted(h.evicted) == ["default/low-a", "default/low-b"]
    h.add_pods(_pod("late", "late"))
    placements = h.advance(10).placements
    assert placements["default/late"] is None
    h.delete_pod("low-b")
    placements = h.advance(30).placements
    assert placements["default/high"] == "n1"
    assert placements["default/late"] is None
    assert sorted(h.evicted) == ["default/low-a", "default/low-b"]
    assert _devices(h, "high") == ["n1/gpu-0"]
