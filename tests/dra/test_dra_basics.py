"""DynamicResources on the harness: the issue's reproduction and the core subset."""

from __future__ import annotations

from shoal.testing import SchedulerHarness, make_node, make_pod
from shoal.testing.dra import (
    DRIVER,
    claim_template,
    device_class,
    gpu_slice,
    resource_claim,
    with_claims,
)


def _nodes(h: SchedulerHarness, *names: str) -> None:
    h.add_nodes(*(make_node(n).capacity(cpu="16", memory="64Gi") for n in names))


def test_two_pods_one_gpu_only_n2_publishes_it() -> None:
    h = SchedulerHarness()
    _nodes(h, "n1", "n2", "n3")
    h.add_dra(
        device_class(),
        gpu_slice("n2", count=1),
        resource_claim("a-gpu"),
        resource_claim("b-gpu"),
    )
    h.add_pods(
        with_claims(make_pod("a").req(cpu="1"), gpu="a-gpu"),
        with_claims(make_pod("b").req(cpu="1"), gpu="b-gpu"),
    )
    placements, messages = h.run()
    assert placements == {"default/a": "n2", "default/b": None}
    assert messages["default/b"] == (
        "0/3 nodes are available: 1 only 0 of 1 requested devices free for b-gpu/gpu, "
        f"2 no device of class {DRIVER} for request b-gpu/gpu."
        " preemption: 0/3 nodes are available: 1 No preemption victims found for incoming"
        " pod, 2 Preemption is not helpful for scheduling."
    )
    # The claim's status was written: the devices and the node, and the pod reserved.
    claims = h.scheduler.handle.services["dra"].claims  # type: ignore[attr-defined]
    status = claims["default/a-gpu"].status
    assert [(r.driver, r.pool, r.device) for r in status.allocation.devices.results] == [
        (DRIVER, "n2", "gpu-0")
    ]
    term = status.allocation.node_selector.node_selector_terms[0]
    assert term.match_fields[0].values == ["n2"]
    assert [r.name for r in status.reserved_for] == ["a"]
    assert claims["default/b-gpu"].status.allocation is None


def test_pod_waits_for_its_claim_then_runs() -> None:
    h = SchedulerHarness()
    _nodes(h, "n1")
    h.add_dra(device_class(), gpu_slice("n1", count=2))
    h.add_pods(with_claims(make_pod("a"), gpu="later"))
    placements, messages = h.run()
    assert placements == {"default/a": None}
    assert 'resourceclaim "later" not found' in messages["default/a"]
    h.add_dra(resource_claim("later"))
    assert h.run().placements == {"default/a": "n1"}


def test_template_claims_are_created_per_pod() -> None:
    h = SchedulerHarness()
    _nodes(h, "n1", "n2")
    h.add_dra(device_class(), gpu_slice("n1", count=2), claim_template("two", count=2))
    h.add_pods(
        with_claims(make_pod("a"), templates={"gpus": "two"}),
        with_claims(make_pod("b"), templates={"gpus": "two"}),
    )
    placements, messages = h.run()
    assert sorted(v or "-" for v in placements.values()) == ["-", "n1"]
    pending = next(k for k, v in placements.items() if v is None)
    assert "only 0 of 2 requested devices free" in messages[pending]


def test_exact_count_two() -> None:
    h = SchedulerHarness()
    _nodes(h, "n1", "n2")
    h.add_dra(
        device_class(),
        gpu_slice("n1", count=1),
        gpu_slice("n2", count=3),
        resource_claim("c1", count=2),
        resource_claim("c2", count=2),
    )
    h.add_pods(with_claims(make_pod("a"), gpu="c1"), with_claims(make_pod("b"), gpu="c2"))
    placements, messages = h.run()
    assert placements == {"default/a": "n2", "default/b": None}
    assert messages["default/b"] == (
        "0/2 nodes are available: 2 only 1 of 2 requested devices free for c2/gpu."
        " preemption: 0/2 nodes are available: 2 No preemption victims found for "
        "incoming pod."
    )


def test_allocation_mode_all_takes_every_device_of_the_node() -> None:
    h = SchedulerHarness()
    _nodes(h, "n1")
    h.add_dra(
        device_class(),
        gpu_slice("n1", count=4),
        resource_claim("all", all_devices=True),
        resource_claim("one"),
    )
    h.add_pods(with_claims(make_pod("a"), gpu="all"))
    assert h.run().placements == {"default/a": "n1"}
    claims = h.scheduler.handle.services["dra"].claims  # type: ignore[attr-defined]
    assert len(claims["default/all"].status.allocation.devices.results) == 4
    h.add_pods(with_claims(make_pod("b"), gpu="one"))
    placements, messages = h.run()
    assert placements["default/b"] is None
    assert "only 0 of 1 requested devices free for one/gpu" in messages["default/b"]


def test_cel_on_capacity_and_attribute() -> None:
    h = SchedulerHarness()
    _nodes(h, "small", "big", "other")
    h.add_dra(
        device_class(),
        gpu_slice("small", count=2, memory="24Gi", model="L4"),
        gpu_slice("big", count=2, memory="80Gi", model="H100"),
        gpu_slice("other", count=2, memory="80Gi", model="A100"),
        resource_claim(
            "mem",
            selectors=[f'device.capacity["{DRIVER}"].memory.compareTo(quantity("40Gi")) >= 0'],
        ),
        resource_claim("h100", selectors=[f'device.attributes["{DRIVER}"].model == "H100"']),
        resource_claim("l4", selectors=[f'device.attributes["{DRIVER}"].model == "L4"']),
    )
    h.add_pods(with_claims(make_pod("h"), gpu="h100"), with_claims(make_pod("l"), gpu="l4"))
    assert h.run().placements == {"default/h": "big", "default/l": "small"}
    h.add_pods(with_claims(make_pod("m"), gpu="mem"))
    assert h.run().placements["default/m"] in ("big", "other")


def test_unsupported_selector_is_refused_with_the_field() -> None:
    h = SchedulerHarness()
    _nodes(h, "n1")
    h.add_dra(device_class(), gpu_slice("n1"), resource_claim("bad", selectors=["device.(("]))
    h.add_pods(with_claims(make_pod("a"), gpu="bad"))
    placements, messages = h.run()
    assert placements == {"default/a": None}
    message = messages["default/a"]
    assert "resourceclaim default/bad" in message
    assert "spec.devices.requests[0].exactly.selectors[0].cel.expression" in message
    assert "fix the expression" in message


def test_match_attribute_keeps_devices_in_one_nvlink_domain() -> None:
    h = SchedulerHarness()
    _nodes(h, "split", "joined")
    h.add_dra(
        device_class(),
        gpu_slice("split", count=4, attributes={"nvlinkDomain": [0, 1, 2, 3]}),
        gpu_slice("joined", count=4, attributes={"nvlinkDomain": [0, 1, 1, 2]}),
        resource_claim("p1", count=2, match_attribute=f"{DRIVER}/nvlinkDomain"),
        resource_claim("p2", count=2, match_attribute=f"{DRIVER}/nvlinkDomain"),
    )
    h.add_pods(with_claims(make_pod("a"), gpu="p1"))
    assert h.run().placements == {"default/a": "joined"}
    claims = h.scheduler.handle.services["dra"].claims  # type: ignore[attr-defined]
    devices = [r.device for r in claims["default/p1"].status.allocation.devices.results]
    assert sorted(devices) == ["gpu-1", "gpu-2"]
    h.add_pods(with_claims(make_pod("b"), gpu="p2"))
    placements, messages = h.run()
    assert placements["default/b"] is None
    assert messages["default/b"] == (
        "0/2 nodes are available: 2 cannot satisfy matchAttribute "
        f"{DRIVER}/nvlinkDomain for claim p2."
        " preemption: 0/2 nodes are available: 2 No preemption victims found for "
        "incoming pod."
    )


def test_a_pod_waiting_for_devices_runs_when_a_driver_publishes_them() -> None:
    h = SchedulerHarness()
    _nodes(h, "n1")
    h.add_dra(device_class(), resource_claim("c"))
    h.add_pods(with_claims(make_pod("a"), gpu="c"))
    placements, messages = h.run()
    assert placements == {"default/a": None}
    assert f"no device of class {DRIVER}" in messages["default/a"]
    h.add_dra(gpu_slice("n1", count=1))
    assert h.advance(15).placements == {"default/a": "n1"}
