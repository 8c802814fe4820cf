"""A selector that fails while being evaluated on a device (kube's "CEL runtime error")
refuses its pod with a message naming the claim, the selector, the device and the
error, instead of silently matching nothing; other pods are scheduled as usual."""

from __future__ import annotations

from shoal.testing import SchedulerHarness, make_node, make_pod
from shoal.testing.dra import DRIVER, device_class, gpu_slice, resource_claim, with_claims

MISSING = f'device.attributes["{DRIVER}"].nvlinkDomain == 0'


def _harness(*nodes: str) -> SchedulerHarness:
    h = SchedulerHarness()
    h.add_nodes(*(make_node(n).capacity(cpu="64", memory="256Gi") for n in nodes))
    return h


def test_the_message_names_the_claim_the_selector_and_the_error() -> None:
    h = _harness("n1")
    h.add_dra(device_class(), gpu_slice("n1", count=2))
    h.add_dra(resource_claim("bad", selectors=[MISSING]), resource_claim("good"))
    h.add_pods(
        with_claims(make_pod("bad"), gpu="bad"),
        with_claims(make_pod("good"), gpu="good"),
    )
    placements, messages = h.advance(30)
    assert placements == {"default/bad": None, "default/good": "n1"}
    message = messages["default/bad"]
    assert "resourceclaim default/bad" in message
    assert "spec.devices.requests[0].exactly.selectors[0].cel.expression" in message
    assert repr(MISSING) in message
    assert f"device {DRIVER}/n1/gpu-0" in message
    assert "CEL runtime error: no such member in mapping: 'nvlinkDomain'" in message
    assert "has(...)" in message


def test_an_error_in_the_class_selectors_names_the_class() -> None:
    h = _harness("n1")
    h.add_dra(device_class(DRIVER, MISSING), gpu_slice("n1", count=1), resource_claim("c"))
    h.add_pods(with_claims(make_pod("a"), gpu="c"))
    placements, messages = h.run()
    assert placements == {"default/a": None}
    assert f"deviceclass {DRIVER} spec.selectors[1].cel.expression" in messages["default/a"]
    assert "resourceclaim default/c" in messages["default/a"]


def test_a_result_that_is_not_a_bool_is_an_error() -> None:
    h = _harness("n1")
    h.add_dra(device_class(), gpu_slice("n1", count=1))
    h.add_dra(resource_claim("c", selectors=[f'device.attributes["{DRIVER}"].model']))
    h.add_pods(with_claims(make_pod("a"), gpu="c"))
    _, messages = h.run()
    assert "CEL runtime error: the result is string" in messages["default/a"]
    assert "not a bool" in messages["default/a"]


def test_guarded_selectors_and_devices_other_selectors_exclude_raise_nothing() -> None:
    """kube evaluates the class's selectors first and stops at the first that does not
    match: a request selector that would fail on another driver's devices is never
    evaluated on them. `has(...)` guards an attribute some devices lack."""
    h = _harness("n1", "n2")
    h.add_dra(device_class())
    h.add_dra(gpu_slice("n1", count=1, attributes={"nvlinkDomain": [0]}))
    h.add_dra(gpu_slice("n2", count=1, driver="nic.example.com", name="n2-nic"))
    h.add_dra(gpu_slice("n2", count=1, name="n2-gpu", model="L4"))  # no nvlinkDomain
    guarded = f'has(device.attributes["{DRIVER}"].nvlinkDomain) && {MISSING}'
    model = f'device.attributes["{DRIVER}"].model == "L4"'
    h.add_dra(resource_claim("guarded", selectors=[guarded]))
    h.add_dra(resource_claim("l4", selectors=[model]))
    h.add_pods(
        with_claims(make_pod("guarded"), gpu="guarded"),
        with_claims(make_pod("l4"), gpu="l4"),
    )
    placements, messages = h.run()
    assert placements == {"default/guarded": "n1", "default/l4": "n2"}, messages


def test_an_error_on_some_devices_refuses_the_pod_as_kube_does() -> None:
    """kube's allocator aborts on the first evaluation error, even where another node
    has devices the expression accepts."""
    h = _harness("n1", "n2")
    h.add_dra(device_class())
    h.add_dra(gpu_slice("n1", count=1, attributes={"nvlinkDomain": [0]}))
    h.add_dra(gpu_slice("n2", count=1))
    h.add_dra(resource_claim("c", selectors=[MISSING]))
    h.add_pods(with_claims(make_pod("a"), gpu="c"))
    placements, messages = h.run()
    assert placements == {"default/a": None}
    assert f"device {DRIVER}/n2/gpu-0" in messages["default/a"]


def test_the_pod_is_retried_when_the_devices_change() -> None:
    h = _harness("n1")
    h.add_dra(device_class(), gpu_slice("n1", count=1), resource_claim("c", selectors=[MISSING]))
    h.add_pods(with_claims(make_pod("a"), gpu="c"))
    assert h.run().placements == {"default/a": None}
    # The driver publishes the attribute (a new pool generation): the selector can be
    # evaluated, the device matches.
    h.add_dra(gpu_slice("n1", count=1, generation=2, attributes={"nvlinkDomain": [0]}))
    assert h.advance(30).placements == {"default/a": "n1"}


def test_an_unknown_function_is_reported_in_one_line() -> None:
    h = _harness("n1")
    h.add_dra(device_class(), gpu_slice("n1", count=1))
    h.add_dra(resource_claim("c", selectors=[f'device.capacity["{DRIVER}"].memory.frob()']))
    h.add_pods(with_claims(make_pod("a"), gpu="c"))
    message = h.run().messages["default/a"]
    assert "CEL runtime error: undeclared reference to 'frob'" in message
    assert "activation" not in message and len(message) < 600
