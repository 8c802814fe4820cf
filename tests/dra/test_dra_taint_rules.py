"""DeviceTaintRules (KEP-5055; resource.k8s.io/v1beta2 behind DRADeviceTaintRules in
Kubernetes 1.36): a rule puts one taint on the devices its selector picks, with the
same effect as the taint written in their ResourceSlice: a NoSchedule or NoExecute
taint keeps them from requests that do not tolerate it, `None` is informational. Every
field of the selector that is set must match (driver, pool, device); an empty selector
picks every device, a rule without one picks none."""

from __future__ import annotations

from typing import Any

import pytest

from shoal.sim import load_scenario, simulate
from shoal.testing import SchedulerHarness, make_node, make_pod
from shoal.testing.dra import (
    DRIVER,
    device_class,
    device_taint_rule,
    gpu_slice,
    resource_claim,
    with_claims,
)


def _harness(count: int = 2, gpu_nodes: tuple[str, ...] = ("n1", "n2")) -> SchedulerHarness:
    """Nodes n1 and n2; `count` GPUs on each of `gpu_nodes`."""
    h = SchedulerHarness()
    h.add_nodes(*(make_node(n).capacity(cpu="16", memory="64Gi") for n in ("n1", "n2")))
    h.add_dra(device_class(), *(gpu_slice(n, count=count) for n in gpu_nodes))
    return h


def _claim_pods(h: SchedulerHarness, *names: str, **kwargs: Any) -> None:
    h.add_dra(*(resource_claim(n, **kwargs) for n in names))
    h.add_pods(*(with_claims(make_pod(n), gpu=n) for n in names))


def _devices(h: SchedulerHarness, claim: str) -> list[tuple[str, str]]:
    catalog: Any = h.scheduler.handle.services["dra"]
    allocation = catalog.claims[f"default/{claim}"].status.allocation
    return [(r.pool, r.device) for r in allocation.devices.results]


def test_a_rule_naming_one_device_keeps_it_from_claims_that_do_not_tolerate_it() -> None:
    h = _harness(count=1)
    h.add_dra(
        device_taint_rule("n1-gpu0", selector={"driver": DRIVER, "pool": "n1", "device": "gpu-0"})
    )
    _claim_pods(h, "a")
    placements, _ = h.run()
    assert placements == {"default/a": "n2"}
    assert _devices(h, "a") == [("n2", "gpu-0")]


def test_every_set_field_of_the_selector_must_match() -> None:
    h = _harness()
    # Pool n1 of this driver: both of n1's GPUs; a rule for another driver picks nothing.
    h.add_dra(
        device_taint_rule("pool", selector={"driver": DRIVER, "pool": "n1"}),
        device_taint_rule("other-driver", selector={"driver": "nic.example.com"}),
        # device gpu-1 of every pool: n2's gpu-1 too.
        device_taint_rule("gpu1", key="example.com/ecc", selector={"device": "gpu-1"}),
    )
    _claim_pods(h, "a", "b")
    placements, messages = h.run()
    assert sorted(placements.values(), key=str) == [None, "n2"]
    waiting = next(k for k, v in placements.items() if v is None)
    assert "tolerates its taints" in messages[waiting]
    placed = next(k for k, v in placements.items() if v == "n2")
    assert _devices(h, placed.split("/")[1]) == [("n2", "gpu-0")]


def test_an_empty_selector_taints_every_device_and_no_selector_none() -> None:
    h = _harness(count=1, gpu_nodes=("n1",))
    h.add_dra(device_taint_rule("nothing"))  # no deviceSelector: no device
    _claim_pods(h, "a")
    assert h.run()[0] == {"default/a": "n1"}

    h = _harness(count=1)
    h.add_dra(device_taint_rule("everything", value="all", selector={}))
    _claim_pods(h, "a")
    placements, messages = h.run()
    assert placements == {"default/a": None}
    assert messages["default/a"] == (
        f"0/2 nodes are available: 2 no device of class {DRIVER} for request a/gpu "
        f"tolerates its taints (device {DRIVER}/n1/gpu-0 has taint "
        "example.com/maintenance=all:NoSchedule)."
        " preemption: 0/2 nodes are available: 2 Preemption is not helpful for "
        "scheduling."
    )


def test_a_tolerating_claim_gets_the_tainted_device_and_effect_none_blocks_nothing() -> None:
    h = _harness(count=1, gpu_nodes=("n1",))
    h.add_dra(
        device_taint_rule("all", selector={}),
        device_taint_rule("note", key="example.com/note", effect="None", selector={}),
    )
    tolerations = [{"key": "example.com/maintenance", "operator": "Exists"}]
    _claim_pods(h, "a", tolerations=tolerations)
    assert h.run()[0] == {"default/a": "n1"}
    assert _devices(h, "a") == [("n1", "gpu-0")]


def test_no_execute_rules_block_too_and_every_taint_must_be_tolerated() -> None:
    h = _harness(count=1)
    h.add_dra(
        device_taint_rule("maintenance", selector={"pool": "n1"}),
        device_taint_rule(
            "broken", key="example.com/broken", effect="NoExecute", selector={"pool": "n1"}
        ),
        device_taint_rule(
            "n2", key="example.com/broken", effect="NoExecute", selector={"pool": "n2"}
        ),
    )
    one = [{"key": "example.com/maintenance", "operator": "Exists"}]
    _claim_pods(h, "a", tolerations=one)
    assert h.run()[0] == {"default/a": None}
    both = [*one, {"key": "example.com/broken", "operator": "Exists"}]
    _claim_pods(h, "b", tolerations=both)
    placements, _ = h.run()
    assert placements["default/b"] in ("n1", "n2")


def test_deleting_a_rule_frees_its_devices_and_wakes_the_pods_it_kept_waiting() -> None:
    h = _harness(count=1, gpu_nodes=("n1",))
    h.add_dra(device_taint_rule("all", selector={}))
    _claim_pods(h, "a")
    assert h.run()[0] == {"default/a": None}
    h.delete_dra("DeviceTaintRule", "all")
    assert h.advance(2.0)[0] == {"default/a": "n1"}  # after its backoff


def test_a_rule_added_later_keeps_new_claims_off_its_devices_not_allocated_ones() -> None:
    h = _harness(count=1)
    h.add_dra(device_taint_rule("n2-first", selector={"pool": "n2"}))
    _claim_pods(h, "a")
    assert h.run()[0] == {"default/a": "n1"}
    h.delete_dra("DeviceTaintRule", "n2-first")
    h.add_dra(device_taint_rule("n1-later", selector={"pool": "n1"}))
    _claim_pods(h, "b")
    placements, _ = h.run()
    assert placements["default/a"] == "n1"  # already allocated: left alone (no eviction)
    assert placements["default/b"] == "n2"


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"taint": {"effect": "NoSchedule"}, "deviceSelector": {}}, "spec.taint.key"),
        (
            {"taint": {"key": "k", "effect": "PreferNoSchedule"}, "deviceSelector": {}},
            "spec.taint.effect",
        ),
        (
            {"taint": {"key": "k", "effect": "NoSchedule"}, "deviceSelector": {"pool": ""}},
            "spec.deviceSelector.pool",
        ),
    ],
)
def test_a_malformed_rule_is_refused_naming_the_field(spec: Any, field: str) -> None:
    from shoal.api.dra import DeviceTaintRule
    from shoal.api.manifests import decode

    h = _harness(count=1)
    rule = decode({"metadata": {"name": "bad"}, "spec": spec}, DeviceTaintRule)
    with pytest.raises(ValueError, match=f"DeviceTaintRule bad: {field}"):
        h.add_dra(rule)


def test_the_simulator_reads_device_taint_rules(tmp_path: Any) -> None:
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(
        """
apiVersion: v1
kind: Node
metadata: {name: n1}
status: {allocatable: {cpu: "8", memory: 32Gi, pods: "110"}}
---
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: gpu}
spec: {selectors: [{cel: {expression: 'device.driver == "gpu.example.com"'}}]}
---
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata: {name: n1-gpus}
spec:
  driver: gpu.example.com
  nodeName: n1
  pool: {name: n1, generation: 1, resourceSliceCount: 1}
  devices: [{name: gpu-0}, {name: gpu-1}]
---
apiVersion: resource.k8s.io/v1beta2
kind: DeviceTaintRule
metadata: {name: gpu-0-maintenance}
spec:
  deviceSelector: {driver: gpu.example.com, pool: n1, device: gpu-0}
  taint: {key: example.com/maintenance, effect: NoSchedule}
"""
    )
    workload = tmp_path / "workload.yaml"
    docs = []
    for name in ("a", "b"):
        docs.append(
            f"""
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {{name: {name}, namespace: default}}
spec: {{devices: {{requests: [{{name: gpu, exactly: {{deviceClassName: gpu}}}}]}}}}
---
apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: default}}
spec:
  resourceClaims: [{{name: gpu, resourceClaimName: {name}}}]
  containers: [{{name: c, resources: {{requests: {{cpu: 100m}}}}}}]
"""
        )
    workload.write_text("---".join(docs))
    result = simulate(load_scenario([cluster, workload]))
    placed = {r.name: r.node for r in result.records}
    assert sorted(placed.values()) == ["", "n1"]  # without the rule both would run
    assert not result.warnings
