"""Binding conditions (KEP-5007, beta and on by default in Kubernetes 1.36): a device
may name conditions its driver must report True in the claim's `status.devices` before
the pod is bound (`bindingConditions`), conditions that fail the binding
(`bindingFailureConditions`), and `bindsToNode`. The allocation copies the conditions
into its results; the kube backend's ClaimWriter waits for them (kube's PreBind wait),
and on a failure condition or the binding timeout clears the allocations it wrote and
fails the binding. In the simulator no driver reports device status: the allocation is
written as in a cluster and the pod is bound at once."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest

from shoal.api.podinfo import PodInfo
from shoal.drivers.kube.dra import ClaimWriter, binding_verdict
from shoal.framework.effects import AllocateClaims, BindError, ClaimAllocation
from shoal.testing import SchedulerHarness, make_node, make_pod
from shoal.testing.dra import DRIVER, device_class, gpu_slice, resource_claim, with_claims

JSON = dict[str, Any]
RESULTS = (("gpu", DRIVER, "n1", "gpu-0"),)
WAIT = ((("example.com/attached",), ("example.com/failed",)),)


def _slice_with_conditions(binds_to_node: bool = False) -> Any:
    s = gpu_slice("n1", count=2, all_nodes=True)
    device = s.spec.devices[0]
    import msgspec

    device = msgspec.structs.replace(
        device,
        binding_conditions=["example.com/attached"],
        binding_failure_conditions=["example.com/failed"],
        binds_to_node=binds_to_node or None,
    )
    spec = msgspec.structs.replace(s.spec, devices=[device])
    return msgspec.structs.replace(s, spec=spec)


def test_the_allocation_copies_the_conditions_and_binds_to_node_pins_it() -> None:
    h = SchedulerHarness()
    h.add_nodes(make_node("n1").capacity(cpu="8", memory="32Gi"))
    h.add_dra(device_class(), _slice_with_conditions(binds_to_node=True), resource_claim("c"))
    h.add_pods(with_claims(make_pod("a"), gpu="c"))
    assert h.run()[0] == {"default/a": "n1"}  # no driver in the simulator: bound at once
    catalog: Any = h.scheduler.handle.services["dra"]
    allocation = catalog.claims["default/c"].status.allocation
    (result,) = allocation.devices.results
    assert result.binding_conditions == ["example.com/attached"]
    assert result.binding_failure_conditions == ["example.com/failed"]
    # An allNodes device, but bindsToNode: the allocation names the node.
    term = allocation.node_selector.node_selector_terms[0]
    assert term.match_fields[0].values == ["n1"]


class StubClient:
    """One claim: GET, merge PATCH (metadata and status), PUT; the test plays the
    driver by setting `status.devices`."""

    def __init__(self) -> None:
        self.claim: JSON = {
            "metadata": {"name": "c", "namespace": "default", "resourceVersion": "1"}
        }

    async def request(self, method: str, path: str, **kw: Any) -> JSON:
        await asyncio.sleep(0)
        meta = self.claim["metadata"]
        if method == "GET":
            return copy.deepcopy(self.claim)
        body = kw.get("body") or {}
        if method == "PUT":
            self.claim = copy.deepcopy(body)
        elif method == "PATCH" and isinstance(body, dict):
            for key, value in (body.get("metadata") or {}).items():
                if key != "resourceVersion":
                    meta[key] = value
            if "status" in body:
                status = self.claim.setdefault("status", {})
                for key, value in body["status"].items():
                    if value is None:
                        status.pop(key, None)
                    else:
                        status[key] = value
        meta = self.claim["metadata"]
        meta["resourceVersion"] = str(int(meta.get("resourceVersion", "1")) + 1)
        return copy.deepcopy(self.claim)

    def report(self, conditions: dict[str, str]) -> None:
        self.claim.setdefault("status", {})["devices"] = [
            {
                "driver": DRIVER,
                "pool": "n1",
                "device": "gpu-0",
                "conditions": [
                    {"type": t, "status": v, "reason": "Test", "message": "by the test"}
                    for t, v in conditions.items()
                ],
            }
        ]


def _effect(timeout: float = 30.0) -> AllocateClaims:
    pod = PodInfo(make_pod("a").uid("uid-a").obj())
    entry = ClaimAllocation("default/c", RESULTS, "n1", binding=WAIT)
    return AllocateClaims(pod, "n1", (entry,), timeout)


def test_the_binding_waits_until_the_driver_reports_the_conditions_true() -> None:
    client = StubClient()
    writer = ClaimWriter(client)  # type: ignore[arg-type]

    async def run() -> None:
        task = asyncio.ensure_future(writer.write(_effect()))
        await asyncio.sleep(1.5)
        assert not task.done()  # waiting for the driver
        client.report({"example.com/attached": "False"})
        await asyncio.sleep(1.5)
        assert not task.done()
        client.report({"example.com/attached": "True"})
        await asyncio.wait_for(task, 5)

    asyncio.run(run())
    (result,) = client.claim["status"]["allocation"]["devices"]["results"]
    assert result["bindingConditions"] == ["example.com/attached"]
    assert result["bindingFailureConditions"] == ["example.com/failed"]
    assert client.claim["status"]["allocation"]["allocationTimestamp"]


def test_a_failure_condition_fails_the_binding_and_clears_the_allocation() -> None:
    client = StubClient()
    writer = ClaimWriter(client)  # type: ignore[arg-type]

    async def run() -> None:
        task = asyncio.ensure_future(writer.write(_effect()))
        await asyncio.sleep(0.5)
        client.report({"example.com/attached": "False", "example.com/failed": "True"})
        with pytest.raises(
            BindError, match=r"binding failed: device gpu-0 reports example\.com/failed"
        ):
            await asyncio.wait_for(task, 5)

    asyncio.run(run())
    assert "allocation" not in client.claim["status"]
    assert "reservedFor" not in client.claim["status"]


def test_the_binding_timeout_fails_it_too() -> None:
    client = StubClient()
    writer = ClaimWriter(client)  # type: ignore[arg-type]
    with pytest.raises(BindError, match=r"binding conditions not met within 1\.5 s"):
        asyncio.run(writer.write(_effect(timeout=1.5)))
    assert "allocation" not in client.claim["status"]


def test_the_verdict_is_kubes() -> None:
    claim: JSON = {
        "metadata": {"name": "c"},
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {"driver": "d", "pool": "p", "device": "x"},
                        {"driver": "d", "pool": "p", "device": "y", "bindingConditions": ["ok"]},
                    ]
                }
            }
        },
    }
    assert binding_verdict(claim) is None  # y not reported yet
    claim["status"]["devices"] = [
        {
            "driver": "d",
            "pool": "p",
            "device": "y",
            "conditions": [{"type": "ok", "status": "True"}],
        }
    ]
    assert binding_verdict(claim) == ""
