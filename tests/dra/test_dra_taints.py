"""Device taints and tolerations (KEP-5055, beta and on by default in Kubernetes 1.36):
a device with a NoSchedule or NoExecute taint is allocated only to requests that
tolerate it (operator Exists or Equal, effect empty or the taint's)."""

from __future__ import annotations

from typing import Any

from shoal.testing import SchedulerHarness, make_node, make_pod
from shoal.testing.dra import DRIVER, device_class, gpu_slice, resource_claim, with_claims

NO_SCHEDULE = {"key": "example.com/maintenance", "value": "true", "effect": "NoSchedule"}
NO_EXECUTE = {"key": "example.com/broken", "value": "ecc", "effect": "NoExecute"}


def _run(*claims: Any, slices: Any) -> tuple[dict[str, str | None], dict[str, str], Any]:
    h = SchedulerHarness()
    h.add_nodes(*(make_node(n).capacity(cpu="16", memory="64Gi") for n in ("n1", "n2")))
    h.add_dra(device_class(), *slices, *claims)
    h.add_pods(*(with_claims(make_pod(c.metadata.name), gpu=c.metadata.name) for c in claims))
    placements, messages = h.run()
    return placements, messages, h.scheduler.handle.services["dra"]  # type: ignore[attr-defined]


def _devices(catalog: Any, claim: str) -> list[tuple[str, str]]:
    results = catalog.claims[f"default/{claim}"].status.allocation.devices.results
    return [(r.pool, r.device) for r in results]


def test_tainted_device_skipped_unless_tolerated() -> None:
    # n1's only GPU is tainted; n2's gpu-0 is tainted, gpu-1 is not.
    slices = [
        gpu_slice("n1", count=1, taints={0: [NO_SCHEDULE]}),
        gpu_slice("n2", count=2, taints={0: [NO_SCHEDULE]}),
    ]
    placements, _, catalog = _run(resource_claim("a"), slices=slices)
    assert placements == {"default/a": "n2"}
    assert _devices(catalog, "a") == [("n2", "gpu-1")]


def test_no_untainted_device_is_explained_with_the_taint() -> None:
    slices = [gpu_slice("n1", count=1, taints={0: [NO_SCHEDULE]})]
    placements, messages, _ = _run(resource_claim("a"), slices=slices)
    assert placements == {"default/a": None}
    assert messages["default/a"] == (
        f"0/2 nodes are available: 1 no device of class {DRIVER} for request a/gpu, "
        f"1 no device of class {DRIVER} for request a/gpu tolerates its taints (device "
        f"{DRIVER}/n1/gpu-0 has taint example.com/maintenance=true:NoSchedule)."
        " preemption: 0/2 nodes are available: 2 Preemption is not helpful for "
        "scheduling."
    )


def test_exists_tolerates_any_value_equal_only_its_value() -> None:
    slices = [gpu_slice("n1", count=1, taints={0: [NO_SCHEDULE]})]
    exists = [{"key": "example.com/maintenance", "operator": "Exists"}]
    placements, _, catalog = _run(resource_claim("a", tolerations=exists), slices=slices)
    assert placements == {"default/a": "n1"}
    assert _devices(catalog, "a") == [("n1", "gpu-0")]

    equal = [{"key": "example.com/maintenance", "operator": "Equal", "value": "true"}]
    assert _run(resource_claim("a", tolerations=equal), slices=slices)[0] == {"default/a": "n1"}
    wrong = [{"key": "example.com/maintenance", "operator": "Equal", "value": "false"}]
    assert _run(resource_claim("a", tolerations=wrong), slices=slices)[0] == {"default/a": None}
    # An empty key with Exists tolerates every taint.
    every = [{"operator": "Exists"}]
    assert _run(resource_claim("a", tolerations=every), slices=slices)[0] == {"default/a": "n1"}


def test_effect_must_match_when_given() -> None:
    slices = [gpu_slice("n1", count=1, taints={0: [NO_EXECUTE]})]
    no_schedule_only = [{"key": "example.com/broken", "operator": "Exists", "effect": "NoSchedule"}]
    placements, _, _ = _run(resource_claim("a", tolerations=no_schedule_only), slices=slices)
    assert placements == {"default/a": None}
    no_execute = [{"key": "example.com/broken", "operator": "Exists", "effect": "NoExecute"}]
    assert _run(resource_claim("a", tolerations=no_execute), slices=slices)[0] == {
        "default/a": "n1"
    }


def test_no_execute_taint_blocks_too_and_every_taint_must_be_tolerated() -> None:
    slices = [gpu_slice("n1", count=1, taints={0: [NO_SCHEDULE, NO_EXECUTE]})]
    assert _run(resource_claim("a"), slices=slices)[0] == {"default/a": None}
    one = [{"key": "example.com/maintenance", "operator": "Exists"}]
    assert _run(resource_claim("a", tolerations=one), slices=slices)[0] == {"default/a": None}
    both = [*one, {"key": "example.com/broken", "operator": "Exists"}]
    assert _run(resource_claim("a", tolerations=both), slices=slices)[0] == {"default/a": "n1"}


def test_a_taint_with_effect_none_does_not_block() -> None:
    info = {"key": "example.com/note", "value": "x", "effect": "None"}
    slices = [gpu_slice("n1", count=1, taints={0: [info]})]
    assert _run(resource_claim("a"), slices=slices)[0] == {"default/a": "n1"}


def test_all_mode_fails_on_a_node_with_an_untolerated_matching_device() -> None:
    # kube: allocationMode All must allocate every matching device, a tainted one too.
    slices = [gpu_slice("n1", count=2, taints={1: [NO_SCHEDULE]})]
    placements, messages, _ = _run(resource_claim("a", all_devices=True), slices=slices)
    assert placements == {"default/a": None}
    assert (
        "no device set for request a/gpu (allocationMode All): device "
        f"{DRIVER}/n1/gpu-1 has taint example.com/maintenance=true:NoSchedule, not tolerated"
    ) in messages["default/a"]
    exists = [{"key": "example.com/maintenance", "operator": "Exists"}]
    claim = resource_claim("a", all_devices=True, tolerations=exists)
    placements, _, catalog = _run(claim, slices=slices)
    assert placements == {"default/a": "n1"}
    assert _devices(catalog, "a") == [("n1", "gpu-0"), ("n1", "gpu-1")]
