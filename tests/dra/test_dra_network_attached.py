"""Network-attached pools: ResourceSlices that select their nodes (`spec.nodeSelector`).
Their devices are usable from the nodes the selector picks, as kube's allocator has
them; the allocation's node selector carries the slice's requirements."""

from __future__ import annotations

from typing import Any

import msgspec

from shoal.api.dra import ResourceSlice
from shoal.api.manifests import decode
from shoal.testing import SchedulerHarness, make_node, make_pod
from shoal.testing.dra import DRIVER, device_class, gpu_slice, resource_claim, with_claims


def _nodes(h: SchedulerHarness, **racks: str) -> None:
    h.add_nodes(
        *(
            make_node(name).capacity(cpu="16", memory="64Gi").label("rack", rack)
            for name, rack in racks.items()
        )
    )


def _rack_slice(
    rack: str, count: int, *, name: str = "", domains: list[int] | None = None
) -> ResourceSlice:
    """A pool of `count` devices reachable from the nodes labelled rack=`rack`."""
    devices: list[dict[str, Any]] = []
    for i in range(count):
        attributes: dict[str, Any] = {"index": {"int": i}}
        if domains is not None:
            attributes["domain"] = {"int": domains[i]}
        devices.append({"name": f"fpga-{i}", "attributes": attributes})
    return decode(
        {
            "metadata": {"name": name or f"{rack}-fpgas"},
            "spec": {
                "driver": DRIVER,
                "pool": {"name": f"{rack}-fpgas", "generation": 1, "resourceSliceCount": 1},
                "nodeSelector": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "rack", "operator": "In", "values": [rack]}]}
                    ]
                },
                "devices": devices,
            },
        },
        ResourceSlice,
    )


def _allocation(h: SchedulerHarness, claim: str) -> Any:
    claims = h.scheduler.handle.services["dra"].claims  # type: ignore[attr-defined]
    return claims[f"default/{claim}"].status.allocation


def test_a_device_of_a_rack_goes_to_a_node_of_that_rack_and_says_so() -> None:
    h = SchedulerHarness()
    _nodes(h, n1="r2", n2="r1", n3="r2")
    h.add_dra(device_class(), _rack_slice("r1", 1), resource_claim("a"), resource_claim("b"))
    h.add_pods(
        with_claims(make_pod("a").req(cpu="1"), dev="a"),
        with_claims(make_pod("b").req(cpu="1"), dev="b"),
    )
    placements, messages = h.run()
    assert placements == {"default/a": "n2", "default/b": None}
    assert messages["default/b"] == (
        "0/3 nodes are available: 1 only 0 of 1 requested devices free for b/gpu, "
        f"2 no device of class {DRIVER} for request b/gpu."
        " preemption: 0/3 nodes are available: 1 No preemption victims found for incoming"
        " pod, 2 Preemption is not helpful for scheduling."
    )
    allocation = _allocation(h, "a")
    assert [(r.pool, r.device) for r in allocation.devices.results] == [("r1-fpgas", "fpga-0")]
    term = msgspec.to_builtins(allocation.node_selector)
    assert term == {
        "nodeSelectorTerms": [
            {"matchExpressions": [{"key": "rack", "operator": "In", "values": ["r1"]}]}
        ]
    }


def test_a_pod_sharing_an_allocated_claim_goes_where_the_selector_reaches() -> None:
    h = SchedulerHarness()
    _nodes(h, n1="r1", n2="r2", n3="r1")
    h.add_dra(device_class(), _rack_slice("r1", 1), resource_claim("shared"))
    h.add_pods(with_claims(make_pod("a").req(cpu="10"), dev="shared"))
    first = h.run().placements["default/a"]
    assert first in ("n1", "n3")
    # b shares the claim and fits only beside a's node by cpu: it must stay in r1.
    h.add_pods(with_claims(make_pod("b").req(cpu="10"), dev="shared"))
    assert h.run().placements["default/b"] in ({"n1", "n3"} - {first})


def test_a_node_local_gpu_and_a_rack_device_together_pin_the_claim_to_the_node() -> None:
    h = SchedulerHarness()
    _nodes(h, n1="r1", n2="r2")
    h.add_dra(
        device_class(),
        gpu_slice("n1", count=1),
        gpu_slice("n2", count=1),
        _rack_slice("r1", 1),
        resource_claim("both", count=2),
    )
    h.add_pods(with_claims(make_pod("a").req(cpu="1"), dev="both"))
    assert h.run().placements == {"default/a": "n1"}
    allocation = _allocation(h, "both")
    assert sorted(r.device for r in allocation.devices.results) == ["fpga-0", "gpu-0"]
    term = allocation.node_selector.node_selector_terms[0]
    assert [f.values for f in term.match_fields] == [["n1"]]


def test_match_attribute_over_rack_devices() -> None:
    h = SchedulerHarness()
    _nodes(h, n1="r1", n2="r2")
    # r1's four devices are in domains 0, 1, 1, 2: two in one domain exist only as 1, 1.
    h.add_dra(
        device_class(),
        _rack_slice("r1", 4, domains=[0, 1, 1, 2]),
        resource_claim("pair", count=2, match_attribute=f"{DRIVER}/domain"),
        resource_claim("again", count=2, match_attribute=f"{DRIVER}/domain"),
    )
    h.add_pods(with_claims(make_pod("a").req(cpu="1"), dev="pair"))
    assert h.run().placements == {"default/a": "n1"}
    assert sorted(r.device for r in _allocation(h, "pair").devices.results) == [
        "fpga-1",
        "fpga-2",
    ]
    # Two devices are left, in domains 0 and 2: no pair any more.
    h.add_pods(with_claims(make_pod("b").req(cpu="1"), dev="again"))
    placements, messages = h.run()
    assert placements["default/b"] is None
    assert f"cannot satisfy matchAttribute {DRIVER}/domain" in messages["default/b"]


def test_relabelling_a_node_into_the_rack_lets_it_reach_the_devices() -> None:
    h = SchedulerHarness()
    _nodes(h, n1="r2")
    h.add_dra(device_class(), _rack_slice("r1", 1), resource_claim("a"))
    h.add_pods(with_claims(make_pod("a").req(cpu="1"), dev="a"))
    assert h.run().placements == {"default/a": None}
    h.update_node(make_node("n1").capacity(cpu="16", memory="64Gi").label("rack", "r1"))
    assert h.advance(10).placements == {"default/a": "n1"}


def test_a_rack_pool_still_being_published_is_not_used() -> None:
    h = SchedulerHarness()
    _nodes(h, n1="r1")
    partial = _rack_slice("r1", 1)
    pool = msgspec.structs.replace(partial.spec.pool, resource_slice_count=2)
    partial = msgspec.structs.replace(
        partial, spec=msgspec.structs.replace(partial.spec, pool=pool)
    )
    h.add_dra(device_class(), partial, resource_claim("a"))
    h.add_pods(with_claims(make_pod("a").req(cpu="1"), dev="a"))
    placements, messages = h.run()
    assert placements == {"default/a": None}
    assert f"resource pool {DRIVER}/r1-fpgas is being updated (1 of its 2" in messages["default/a"]


def test_a_rack_slice_with_two_selector_terms_is_refused_by_name() -> None:
    h = SchedulerHarness()
    _nodes(h, n1="r1")
    bad = _rack_slice("r1", 1)
    selector = bad.spec.node_selector
    assert selector is not None
    terms = [*selector.node_selector_terms, *selector.node_selector_terms]
    selector = msgspec.structs.replace(selector, node_selector_terms=terms)
    bad = msgspec.structs.replace(
        bad, spec=msgspec.structs.replace(bad.spec, node_selector=selector)
    )
    h.add_dra(device_class(), bad, resource_claim("a"))
    h.add_pods(with_claims(make_pod("a").req(cpu="1"), dev="a"))
    placements, messages = h.run()
    assert placements == {"default/a": None}
    assert (
        f"resource pool {DRIVER}/r1-fpgas is invalid (ResourceSlice r1-fpgas: "
        "spec.nodeSelector has 2 terms, exactly one is allowed)"
    ) in messages["default/a"]


def test_per_device_node_selection_places_each_device_where_it_says() -> None:
    """A slice with perDeviceNodeSelection (partitionable devices, KEP-4815): one device
    of node n1, one of every node, one of the nodes of rack r2."""
    h = SchedulerHarness()
    _nodes(h, n1="r1", n2="r2", n3="r3")
    rack = {
        "nodeSelectorTerms": [
            {"matchExpressions": [{"key": "rack", "operator": "In", "values": ["r2"]}]}
        ]
    }
    devices = [
        {"name": "local", "nodeName": "n1", "attributes": {"kind": {"string": "local"}}},
        {"name": "anywhere", "allNodes": True, "attributes": {"kind": {"string": "anywhere"}}},
        {"name": "rack", "nodeSelector": rack, "attributes": {"kind": {"string": "rack"}}},
    ]
    slice_ = decode(
        {
            "metadata": {"name": "mixed"},
            "spec": {
                "driver": DRIVER,
                "pool": {"name": "mixed", "generation": 1, "resourceSliceCount": 1},
                "perDeviceNodeSelection": True,
                "devices": devices,
            },
        },
        ResourceSlice,
    )
    h.add_dra(device_class(), slice_)
    for kind in ("local", "rack", "anywhere"):
        selector = f'device.attributes["{DRIVER}"].kind == "{kind}"'
        h.add_dra(resource_claim(kind, selectors=[selector]))
    h.add_pods(*(with_claims(make_pod(k).req(cpu="15"), dev=k) for k in ("local", "rack")))
    placements = h.run().placements
    assert placements == {"default/local": "n1", "default/rack": "n2"}
    h.add_pods(with_claims(make_pod("anywhere").req(cpu="15"), dev="anywhere"))
    assert h.run().placements["default/anywhere"] == "n3"  # the only node with room
    local = _allocation(h, "local").node_selector.node_selector_terms[0]
    assert [f.values for f in local.match_fields] == [["n1"]]
    term = msgspec.to_builtins(_allocation(h, "rack").node_selector)
    assert term["nodeSelectorTerms"][0]["matchExpressions"][0]["values"] == ["r2"]
    assert _allocation(h, "anywhere").node_selector is None
