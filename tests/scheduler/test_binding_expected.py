"""kube's NominatedNodeNameForExpectation (on by default since 1.35): a pod whose bind
waits, on PreBind work (claims to provision, devices to allocate) or at Permit, says
where it is going meanwhile (`BindingExpected`, written by a cluster as
`status.nominatedNodeName`). A pod whose bind goes out at once does not."""

from __future__ import annotations

from typing import Any

from shoal.api.podinfo import PodInfo
from shoal.framework.cycle_state import CycleState
from shoal.framework.effects import BindingExpected
from shoal.framework.handle import Handle
from shoal.framework.status import Code, Status
from shoal.plugins import PluginSpec
from shoal.scheduler import default_registry
from shoal.testing import SchedulerHarness, make_node, make_pod
from shoal.testing.dra import device_class, gpu_slice, resource_claim, with_claims
from shoal.testing.volumes import make_pv, make_pvc, make_storage_class


def expected(h: SchedulerHarness) -> list[tuple[str, str]]:
    return [(e.pod.name, e.node) for e in h.effects.binding_expected]


def test_a_pod_whose_claim_is_provisioned_names_its_node_and_a_plain_pod_does_not() -> None:
    h = SchedulerHarness()
    h.add_nodes(make_node("n1").capacity(cpu="4").hostname_label())
    h.add_storage(
        make_storage_class("wffc").wait_for_first_consumer(),
        make_pvc("data").storage_class("wffc"),
        make_pv("bound-pv").claimed_by("ready"),
        make_pvc("ready").bound_to("bound-pv"),
    )
    h.add_pods(make_pod("db").pvc("data"), make_pod("plain"), make_pod("has-bound").pvc("ready"))
    seen: list[object] = []
    h.effects.listeners.append(seen.append)
    placements = h.run().placements
    assert set(placements.values()) == {"n1"}
    # Only the pod with PreBind work (a claim to provision) says where it goes.
    assert expected(h) == [("db", "n1")]
    order = [type(e).__name__ for e in seen if getattr(getattr(e, "pod", None), "name", "") == "db"]
    assert order.index("BindingExpected") < order.index("BindVolumes") < order.index("Bind")


def test_a_pod_with_devices_to_allocate_names_its_node() -> None:
    h = SchedulerHarness()
    h.add_nodes(make_node("n1").capacity(cpu="4"))
    h.add_dra(
        device_class("gpu.example.com"),
        gpu_slice("n1", count=1),
        resource_claim("one-gpu", "gpu.example.com"),
    )
    h.add_pods(with_claims(make_pod("a"), gpu="one-gpu"))
    assert h.run().placements == {"default/a": "n1"}
    assert expected(h) == [("a", "n1")]


class _HoldAtPermit:
    """Holds every pod at Permit (as a gang's members wait for each other)."""

    name = "HoldAtPermit"

    def permit(self, state: CycleState, pod: PodInfo, node: str) -> tuple[Status, float]:
        return Status(Code.WAIT), 5.0

    @classmethod
    def new(cls, args: Any, handle: Handle) -> _HoldAtPermit:
        return cls()


def test_a_pod_held_at_permit_names_its_node() -> None:
    registry = {**default_registry(), "HoldAtPermit": PluginSpec(_HoldAtPermit.new)}
    config = {"profiles": [{"plugins": {"permit": {"enabled": [{"name": "HoldAtPermit"}]}}}]}
    h = SchedulerHarness(config, registry=registry)
    h.add_nodes(make_node("n1").capacity(cpu="4"))
    h.add_pods(make_pod("held"))
    h.run()
    assert expected(h) == [("held", "n1")]
    assert isinstance(h.effects.binding_expected[0], BindingExpected)
