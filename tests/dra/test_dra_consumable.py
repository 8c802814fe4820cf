"""Consumable capacity (KEP-5075): devices with allowMultipleAllocations are shared by
several claims while their capacity lasts, requests are rounded by the capacity's
requestPolicy as kube-scheduler rounds them, the allocation records the share
(`shareID`) and what it consumes (`consumedCapacity`), and no device is ever given
more than its capacity: not by later pods, not by a gang, not in preemption."""

from __future__ import annotations

import uuid
from fractions import Fraction
from typing import Any

from shoal.api.dra import ResourceClaim, ResourceSlice
from shoal.api.manifests import decode
from shoal.api.quantity import parse_quantity
from shoal.cache.dra import DeviceCatalog
from shoal.testing import SchedulerHarness, make_node, make_pod
from shoal.testing.dra import device_class, resource_claim, shared_slice, with_claims

from .test_dra_preemption import _SlowEvictions

NIC = "nic.example.com"


def _catalog(h: SchedulerHarness) -> DeviceCatalog:
    return DeviceCatalog.of(h.scheduler.handle)


def _nodes(h: SchedulerHarness, *names: str) -> None:
    h.add_nodes(*(make_node(n).capacity(cpu="64", memory="256Gi") for n in names))


def _results(h: SchedulerHarness, claim: str) -> list[dict[str, Any]]:
    """The claim's written allocation results: device, shareID, consumedCapacity."""
    status = _catalog(h).claims[f"default/{claim}"].status
    assert status.allocation is not None, f"{claim} is not allocated"
    return [
        {
            "device": f"{r.pool}/{r.device}",
            "share": r.share_id,
            "consumed": {k: parse_quantity(v) for k, v in r.consumed_capacity.items()},
        }
        for r in status.allocation.devices.results
    ]


def _claim(name: str, **capacity: str) -> ResourceClaim:
    return resource_claim(name, NIC, capacity=capacity or None)


def _pod(name: str, claim: str, priority: int = 0) -> Any:
    return with_claims(make_pod(name).priority(priority), gpu=claim)


def _nics(node: str, count: int = 1, **capacity: Any) -> Any:
    return shared_slice(node, count, capacity=capacity or {"bandwidth": "10G"}, driver=NIC)


def test_two_claims_share_a_device_until_it_is_full_then_the_next_device_and_node() -> None:
    h = SchedulerHarness()
    _nodes(h, "n1")
    h.add_dra(device_class(NIC, driver=NIC), _nics("n1", 2))
    h.add_dra(
        *(_claim(c, bandwidth="5G") for c in ("a", "b", "c", "d")), _claim("e", bandwidth="6G")
    )
    h.add_pods(*(_pod(p, p) for p in ("a", "b", "c", "d")))
    assert h.run().placements == {f"default/{p}": "n1" for p in "abcd"}
    # First fit in table order, as kube's allocator: a and b fill nic-0, c and d nic-1.
    devices = {p: _results(h, p)[0]["device"] for p in "abcd"}
    assert devices == {"a": "n1/nic-0", "b": "n1/nic-0", "c": "n1/nic-1", "d": "n1/nic-1"}
    for p in "abcd":
        (result,) = _results(h, p)
        assert result["consumed"] == {"bandwidth": parse_quantity("5G")}
        uuid.UUID(result["share"])  # a UUID, as the API requires
    assert len({_results(h, p)[0]["share"] for p in "abcd"}) == 4
    # Both NICs are full: 6G fits nowhere on n1, the pod waits.
    h.add_pods(_pod("e", "e"))
    result = h.advance(5)
    assert result.placements["default/e"] is None
    assert "only 0 of 1 requested devices free for e/gpu" in result.messages["default/e"]
    # Another node with a NIC: the pod goes there.
    _nodes(h, "n2")
    h.add_dra(_nics("n2"))
    assert h.advance(30).placements["default/e"] == "n2"
    assert _results(h, "e")[0]["device"] == "n2/nic-0"


def test_a_freed_share_is_room_again_for_the_next_claim() -> None:
    h = SchedulerHarness()
    _nodes(h, "n1")
    h.add_dra(device_class(NIC, driver=NIC), _nics("n1"))
    h.add_dra(_claim("a", bandwidth="7G"), _claim("b", bandwidth="7G"))
    h.add_pods(_pod("a", "a"), _pod("b", "b"))
    assert h.run().placements == {"default/a": "n1", "default/b": None}
    h.delete_pod("a")
    assert h.advance(30).placements["default/b"] == "n1"
    assert _results(h, "b")[0]["consumed"] == {"bandwidth": parse_quantity("7G")}


def test_over_capacity_is_never_allocated_even_within_one_pod() -> None:
    h = SchedulerHarness()
    _nodes(h, "n1")
    h.add_dra(device_class(NIC, driver=NIC), _nics("n1"))
    # One pod, two claims of 6G each on one 10G NIC: they do not fit together.
    h.add_dra(_claim("x", bandwidth="6G"), _claim("y", bandwidth="6G"))
    h.add_pods(with_claims(make_pod("both"), x="x", y="y"))
    result = h.run()
    assert result.placements["default/both"] is None
    assert "do not fit together" in result.messages["default/both"]
    assert _catalog(h).allocated("default/x") is None
    # More than the device has at all: no device can serve it (not preemption either).
    h.add_dra(_claim("huge", bandwidth="11G"))
    h.add_pods(_pod("huge", "huge", priority=1000))
    result = h.advance(5)
    assert result.placements["default/huge"] is None
    message = result.messages["default/huge"]
    assert f"no device of class {NIC} and capacity requests for request huge/gpu" in message
    assert not h.evicted


def _policy(**policy: Any) -> dict[str, Any]:
    return {"value": "10G", "requestPolicy": policy}


def test_request_policy_rounds_up_as_kube_does() -> None:
    h = SchedulerHarness()
    _nodes(h, "n1")
    capacity = {
        "bandwidth": _policy(default="1G", validRange={"min": "1G", "max": "8G", "step": "1G"}),
        "queues": {
            "value": "16",
            "requestPolicy": {"default": "1", "validValues": ["1", "2", "4"]},
        },
    }
    h.add_dra(device_class(NIC, driver=NIC), _nics("n1", **capacity))
    h.add_dra(
        _claim("step", bandwidth="1500M"),  # rounded up to the next step: 2G
        _claim("low", bandwidth="200M"),  # below min: 1G
        _claim("values", queues="3"),  # the next valid value: 4
        _claim("defaults"),  # names nothing: the defaults
        _claim("qualified", **{f"{NIC}/queues": "2"}),  # the driver's domain: same capacity
    )
    h.add_pods(*(_pod(p, p) for p in ("step", "low", "values", "defaults", "qualified")))
    placements = h.run().placements
    assert all(node == "n1" for node in placements.values()), placements
    g = parse_quantity("1G")
    expected = {
        "step": {"bandwidth": 2 * g, "queues": Fraction(1)},
        "low": {"bandwidth": g, "queues": Fraction(1)},
        "values": {"bandwidth": g, "queues": Fraction(4)},
        "defaults": {"bandwidth": g, "queues": Fraction(1)},
        "qualified": {"bandwidth": g, "queues": Fraction(2)},
    }
    for claim, consumed in expected.items():
        assert _results(h, claim)[0]["consumed"] == consumed, claim
    # 6G of bandwidth taken: 3.2G rounds up to 4G and fills it, nothing is left after.
    h.add_dra(_claim("rest", bandwidth="3200M"), _claim("none-left", bandwidth="1"))
    h.add_pods(_pod("rest", "rest"))
    assert h.advance(5).placements["default/rest"] == "n1"
    assert _results(h, "rest")[0]["consumed"]["bandwidth"] == 4 * g
    h.add_pods(_pod("none-left", "none-left"))
    result = h.advance(5)
    assert result.placements["default/none-left"] is None


def test_requests_the_policy_refuses_match_no_device() -> None:
    h = SchedulerHarness()
    _nodes(h, "n1")
    capacity = {
        "bandwidth": _policy(default="1G", validRange={"min": "1G", "max": "8G", "step": "1G"}),
        "queues": {"value": "8", "requestPolicy": {"default": "1", "validValues": ["1", "2"]}},
    }
    h.add_dra(device_class(NIC, driver=NIC), _nics("n1", **capacity))
    h.add_dra(
        _claim("over-max", bandwidth="9G"),
        _claim("no-value", queues="3"),
        _claim("unknown", speed="1"),
    )
    h.add_pods(*(_pod(p, p) for p in ("over-max", "no-value", "unknown")))
    result = h.run()
    for p in ("over-max", "no-value", "unknown"):
        assert result.placements[f"default/{p}"] is None
        assert f"no device of class {NIC} and capacity requests" in result.messages[f"default/{p}"]


def test_a_capacity_the_request_does_not_name_is_taken_whole_without_a_policy() -> None:
    h = SchedulerHarness()
    _nodes(h, "n1")
    h.add_dra(device_class(NIC, driver=NIC), _nics("n1", bandwidth="10G", queues="8"))
    h.add_dra(_claim("a", bandwidth="1G"), _claim("b", bandwidth="1G"))
    h.add_pods(_pod("a", "a"), _pod("b", "b"))
    placements = h.run().placements
    # a takes all 8 queues (no policy, not requested): b finds none left.
    assert placements == {"default/a": "n1", "default/b": None}
    assert _results(h, "a")[0]["consumed"] == {
        "bandwidth": parse_quantity("1G"),
        "queues": Fraction(8),
    }


def test_devices_allocated_whole_must_have_the_capacity_asked() -> None:
    h = SchedulerHarness()
    _nodes(h, "n1", "n2")
    small = decode(
        {
            "metadata": {"name": "n1-gpus"},
            "spec": {
                "driver": NIC,
                "nodeName": "n1",
                "pool": {"name": "n1", "generation": 1, "resourceSliceCount": 1},
                "devices": [{"name": "d0", "capacity": {"bandwidth": {"value": "4G"}}}],
            },
        },
        ResourceSlice,
    )
    h.add_dra(device_class(NIC, driver=NIC), small, _nics("n2"))
    h.add_dra(_claim("a", bandwidth="6G"), _claim("b", bandwidth="3G"))
    h.add_pods(_pod("a", "a"))
    assert h.run().placements["default/a"] == "n2"  # d0 has only 4G
    h.delete_pod("a")
    h.advance(5)
    h.delete_dra("ResourceSlice", "n2-nic.example.com-nic")
    h.add_pods(_pod("b", "b"))
    assert h.advance(30).placements["default/b"] == "n1"
    # Allocated whole: no share, no consumed capacity recorded (as kube writes it).
    assert _results(h, "b") == [{"device": "n1/d0", "share": None, "consumed": {}}]


def test_shares_written_by_another_scheduler_count() -> None:
    h = SchedulerHarness()
    _nodes(h, "n1")
    h.add_dra(device_class(NIC, driver=NIC), _nics("n1"))
    other = decode(
        {
            "metadata": {"name": "other", "namespace": "default"},
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": "gpu",
                            "exactly": {
                                "deviceClassName": NIC,
                                "capacity": {"requests": {"bandwidth": "8G"}},
                            },
                        }
                    ]
                }
            },
            "status": {
                "allocation": {
                    "devices": {
                        "results": [
                            {
                                "request": "gpu",
                                "driver": NIC,
                                "pool": "n1",
                                "device": "nic-0",
                                "shareID": str(uuid.uuid4()),
                                "consumedCapacity": {"bandwidth": "8G"},
                            }
                        ]
                    }
                },
                "reservedFor": [{"resource": "pods", "name": "elsewhere", "uid": "u-1"}],
            },
        },
        ResourceClaim,
    )
    h.add_dra(other, _claim("a", bandwidth="3G"), _claim("b", bandwidth="2G"))
    h.add_pods(_pod("a", "a"), _pod("b", "b"))
    placements = h.run().placements
    assert placements == {"default/a": None, "default/b": "n1"}


def test_a_gang_of_shares_is_all_or_nothing() -> None:
    h = SchedulerHarness()
    _nodes(h, "n1")
    h.add_dra(device_class(NIC, driver=NIC), _nics("n1"))
    h.add_dra(*(_claim(f"w{i}", bandwidth="4G") for i in range(3)))
    labels = {
        "pod-group.scheduling.sigs.k8s.io/name": "train",
        "pod-group.scheduling.sigs.k8s.io/min-available": "3",
    }
    h.add_pods(*(with_claims(make_pod(f"w{i}").labels(labels), gpu=f"w{i}") for i in range(3)))
    result = h.advance(5)
    # Two shares of 4G fit on the 10G NIC, the gang needs three: nobody holds anything.
    assert [result.placements[f"default/w{i}"] for i in range(3)] == [None] * 3
    catalog = _catalog(h)
    assert all(catalog.allocated(f"default/w{i}") is None for i in range(3))
    state = catalog.state()
    assert state.shares is not None and int(state.shares.sum()) == 0
    # A second NIC: the gang is placed together, members share the NICs within capacity.
    h.add_dra(_nics("n1", 2))
    result = h.advance(30)
    assert [result.placements[f"default/w{i}"] for i in range(3)] == ["n1"] * 3
    used: dict[str, Fraction] = {}
    for i in range(3):
        (r,) = _results(h, f"w{i}")
        used[r["device"]] = used.get(r["device"], Fraction(0)) + r["consumed"]["bandwidth"]
    assert all(v <= parse_quantity("10G") for v in used.values()), used


def test_preemption_frees_the_capacity_of_the_victims_shares() -> None:
    h = SchedulerHarness()
    _nodes(h, "n1")
    h.add_dra(device_class(NIC, driver=NIC), _nics("n1"))
    h.add_dra(_claim("big", bandwidth="6G"), _claim("small", bandwidth="4G"))
    h.add_dra(_claim("high", bandwidth="5G"))
    h.add_pods(_pod("big", "big"), _pod("small", "small"))
    assert h.run().placements == {"default/big": "n1", "default/small": "n1"}
    h.add_pods(_pod("high", "high", priority=1000))
    placements = h.advance(30).placements
    # Evicting small (4G) leaves 4G: not enough; evicting big (6G) leaves 6G: enough.
    assert list(h.evicted) == ["default/big"]
    assert placements == {"default/small": "n1", "default/high": "n1"}
    assert _results(h, "high")[0]["consumed"] == {"bandwidth": parse_quantity("5G")}
    state = _catalog(h).state()
    assert state.used is not None and state.cap is not None
    assert (state.used <= state.cap).all()


def test_a_preemptor_keeps_the_capacity_its_victims_free_while_one_terminates() -> None:
    """The preemptor needs 8G of a 10G NIC shared by two 5G victims: one is gone, the
    other still terminating. The 5G already free is kept for the preemptor (counting
    what the terminating victim will free), not given to a pod of the victims' priority
    (which would make the preemptor evict it too); once the victim is gone the
    preemptor gets its share."""
    h = SchedulerHarness()
    _nodes(h, "n1")
    h.add_dra(device_class(NIC, driver=NIC), _nics("n1"))
    h.add_dra(_claim("low-a", bandwidth="5G"), _claim("low-b", bandwidth="5G"))
    h.add_dra(_claim("high", bandwidth="8G"), _claim("late", bandwidth="3G"))
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
    assert placements["default/high"] is None
    h.delete_pod("low-b")  # its kubelet is done
    placements = h.advance(30).placements
    assert placements["default/high"] == "n1"
    assert placements["default/late"] is None
    assert sorted(h.evicted) == ["default/low-a", "default/low-b"]
    assert _results(h, "high")[0]["consumed"] == {"bandwidth": parse_quantity("8G")}


def test_a_selector_can_ask_for_a_device_that_allows_multiple_allocations() -> None:
    h = SchedulerHarness()
    _nodes(h, "n1", "n2")
    whole = decode(
        {
            "metadata": {"name": "n1-nics"},
            "spec": {
                "driver": NIC,
                "nodeName": "n1",
                "pool": {"name": "n1", "generation": 1, "resourceSliceCount": 1},
                "devices": [{"name": "d0", "capacity": {"bandwidth": {"value": "10G"}}}],
            },
        },
        ResourceSlice,
    )
    h.add_dra(device_class(NIC, driver=NIC), whole, _nics("n2"))
    h.add_dra(
        resource_claim("shared", NIC, selectors=["device.allowMultipleAllocations"]),
        resource_claim("exclusive", NIC, selectors=["!device.allowMultipleAllocations"]),
    )
    h.add_pods(_pod("shared", "shared"), _pod("exclusive", "exclusive"))
    assert h.run().placements == {"default/shared": "n2", "default/exclusive": "n1"}
